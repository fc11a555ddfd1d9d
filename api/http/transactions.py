"""HTTP transactional produce: ``POST /v3/clusters/{cluster_id}/transactions``.

One request writes records to several topics and partitions in one Kafka transaction: a
``read_committed`` reader sees all of them or none (docs/transactions.md, "Over HTTP"). The
REST Proxy has no such route; the body follows its v3 record shape::

    {"transactional_id"?: str, "request_id"?: str, "transaction_timeout_ms"?: int,
     "records": [{"topic", "partition_id"?, "key"?, "value"?, "headers"?, "timestamp"?}, ...]}

answered, once the commit is complete, with each record's partition and offset in request
order, or with an error and nothing visible.

Who owns what:

* the whole body is checked first (``plan_request``: shape, every record parsed with
  ``api.http.records`` after its schema-typed key or value is encoded by
  ``api.http.embedded``, every topic writable, every partition existing, every record within
  its topic's ``max.message.bytes``): any refusal fails the request before anything is sent.
* the broker then acts as a transactional producer of the public client library
  (``api.client.AsyncProducer``, bootstrapped from this broker), one per transactional id,
  kept in a bounded cache (``TxnProducers``) so a request is not an InitProducerId. A request
  without an id borrows a producer of an internal id (``__longboat-http.<broker>.<slot>``)
  from a small pool: the slots are reused, so a slot's next InitProducerId aborts whatever a
  failed request left open there.
* retries: a request that carries a ``request_id`` (with a ``transactional_id``) commits, in
  the same transaction, the offset of a bookkeeping consumer group
  ``__longboat-http-txn.<transactional_id>`` whose offset metadata holds the request id and
  the answer's offsets. Before writing, the producer (its id's current owner: any other
  producer of the id that could still commit is fenced) reads that group's stable offsets
  (KIP-447 ``require_stable``): a request id already committed is answered from there with
  ``"duplicate": true`` and writes nothing. So a retry after a lost answer cannot commit
  twice, on this broker or another.

Identity (issue 18): the producers dial this broker's client listener with the node's own
certificate (``common.netbind``) and name the calling user in ``Longboat-Principal``, which a
broker believes from a node only, so what Kafka would check as the user is checked as the
user, on whichever broker answers: WRITE on each topic at its leader, WRITE on a named
transactional id at its coordinator (``acting_principal``). The pool's ids and the
bookkeeping group are the broker's own: a request without an id needs the user's
IDEMPOTENT_WRITE instead (``authorize_topics_or_raise``, before anything is sent). A kept
producer serves many users in turn; each call names the request holding it, never the one
that made it. The client listener must ask for client certificates
(``ssl_client_auth = "requested"``, as ``dev up --secure`` configures it).

Fencing: a producer fenced by a newer one of the same id (another broker or a Kafka client
took the id) answers 409 and is closed; the next request makes a new one, whose
InitProducerId takes the id back (fencing the other in turn). A cached producer keeps the
``transaction_timeout_ms`` of the request that made it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from api.client import AsyncProducer
from api.client.coordinator import CoordinatorClient
from api.client.errors import ClientError, ProducerFencedError
from api.client.partitioner import partition_for_key
from api.client.transactions import TXN_OUTCOMES, TXN_ROUTE
from api.http.auth import PRINCIPAL
from api.http.authz import AUTHORIZER_KEY
from api.http.context import HttpContext, ctx_of, json_body, json_response
from api.http.errors import (
    HttpError,
    kafka_error,
    partition_not_found,
    topic_not_found,
    unprocessable,
)
from api.http.produce import max_message_bytes, now_ms, writable_topic_or_404
from api.http.records import BATCH_OVERHEAD_BYTES, ParsedRecord, parse_all
from broker.txn.records import PREPARED, TRANSACTION_STATE_TOPIC
from metalog.security import CLUSTER_NAME, Operation, ResourceType

log = logging.getLogger(__name__)

TXN_PRODUCERS_MAX = 64
"""Producers of client-named transactional ids kept between requests (least recently used
goes first, once idle)."""
INTERNAL_SLOTS_MAX = 8
"""Internal ids: at most this many requests without an id run at once; more wait."""
RECORDS_MAX = 10_000
TRANSACTIONAL_ID_CHARS_MAX = 249
REQUEST_ID_CHARS_MAX = 200
TXN_TIMEOUT_MS_DEFAULT = 60_000
REQUEST_TIMEOUT_S = 30.0
"""A request's whole transaction, from the first send to the commit's answer."""
DEDUP_GROUP_PREFIX = "__longboat-http-txn."
OFFSET_METADATA_CHARS_MAX = 4096
"""The group coordinator's ``offset.metadata.max.bytes``."""

COORDINATOR_DOWN = frozenset(
    {
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "CONCURRENT_TRANSACTIONS",
        "CONNECTION_ERROR",
        "NOT_ENOUGH_REPLICAS",
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "UNSTABLE_OFFSET_COMMIT",
    }
)


# --------------------------------------------------------------------------- the body


@dataclass(slots=True)
class TxnRecord:
    topic: str
    partition: int
    record: ParsedRecord


@dataclass(slots=True)
class TxnRequest:
    transactional_id: str | None
    request_id: str | None
    timeout_ms: int
    records: list[TxnRecord]


def _opt_str(body: dict[str, Any], name: str, chars_max: int) -> str | None:
    v = body.get(name)
    if v is None:
        return None
    if type(v) is not str or not v or len(v) > chars_max:
        raise unprocessable(
            f"'{name}' must be a non-empty string of at most {chars_max} characters."
        )
    return v


async def plan_request(ctx: HttpContext, body: Any) -> TxnRequest:
    """The whole request checked and every record placed, or the ``HttpError`` that refuses
    it (naming the record, ``records[i]``). Nothing is sent here."""
    if type(body) is not dict:
        raise unprocessable("The body must be a JSON object with 'records'.")
    unknown = set(body) - {"transactional_id", "request_id", "transaction_timeout_ms", "records"}
    if unknown:
        raise unprocessable(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    tid = _opt_str(body, "transactional_id", TRANSACTIONAL_ID_CHARS_MAX)
    rid = _opt_str(body, "request_id", REQUEST_ID_CHARS_MAX)
    if rid is not None and tid is None:
        raise unprocessable("'request_id' needs a 'transactional_id' (retries are kept per id).")
    timeout_ms = body.get("transaction_timeout_ms", TXN_TIMEOUT_MS_DEFAULT)
    if type(timeout_ms) is not int or not 1_000 <= timeout_ms <= 900_000:
        raise unprocessable("'transaction_timeout_ms' must be an integer from 1000 to 900000.")
    objs = body.get("records")
    if type(objs) is not list or not objs:
        raise unprocessable("'records' must be a non-empty array.", 42206)
    if len(objs) > RECORDS_MAX:
        raise unprocessable(f"At most {RECORDS_MAX} records per transaction, got {len(objs)}.")
    topics: list[str] = []
    for i, o in enumerate(objs):
        t = o.get("topic") if type(o) is dict else None
        if type(t) is not str or not t:
            raise unprocessable(f"records[{i}]: 'topic' must be a non-empty string.")
        topics.append(t)
    # Topics first (404 before any schema lookup), then each topic's records parsed.
    counts: dict[str, int] = {}
    limits: dict[str, int] = {}
    for t in dict.fromkeys(topics):
        try:
            if t == TRANSACTION_STATE_TOPIC:
                raise kafka_error(
                    "INVALID_TOPIC_EXCEPTION", f"Cannot append to internal topic {t}."
                )
            counts[t] = len(writable_topic_or_404(ctx, t).partitions)
        except HttpError as e:
            raise HttpError(
                e.status, f"records[{topics.index(t)}]: {e.message}", e.error_code
            ) from None
        limits[t] = max_message_bytes(ctx, t)
    ts = now_ms()
    parsed: list[ParsedRecord | HttpError | None] = [None] * len(objs)
    for t in counts:
        idxs = [i for i, x in enumerate(topics) if x == t]
        mine = [objs[i] for i in idxs]
        if ctx.embedded is not None:
            mine = await ctx.embedded.prepare_v3(t, mine)
        for i, one in zip(idxs, parse_all(mine, ts), strict=True):
            parsed[i] = one
    out: list[TxnRecord] = []
    sticky: dict[str, int] = {}
    for i, r in enumerate(parsed):
        if isinstance(r, HttpError):
            raise HttpError(r.status, f"records[{i}]: {r.message}", r.error_code)
        assert r is not None
        t, count = topics[i], counts[topics[i]]
        p = r.partition
        if p is None:
            if r.key is not None:
                p = partition_for_key(r.key, count)
            else:
                if t not in sticky:
                    sticky[t] = ctx.next_sticky_partition(t, count)
                p = sticky[t]
        elif p >= count:
            nf = partition_not_found(t, p)
            raise HttpError(nf.status, f"records[{i}]: {nf.message}", nf.error_code)
        if r.size + BATCH_OVERHEAD_BYTES > limits[t]:
            raise HttpError(
                413,
                f"records[{i}]: MESSAGE_TOO_LARGE: the record is {r.size} bytes, more than "
                f"the topic's max.message.bytes ({limits[t]}).",
                413,
            )
        out.append(TxnRecord(t, p, r))
    return TxnRequest(tid, rid, timeout_ms, out)


# --------------------------------------------------------------------------- answers kept


def runs_of(placed: Sequence[tuple[str, int, int]]) -> list[list[Any]]:
    """``(topic, partition, offset)`` per record, in request order, as runs
    ``[topic, partition, first_offset, count]`` of consecutive offsets: a request's answer
    small enough for the offset metadata (one run per partition and batch, usually)."""
    runs: list[list[Any]] = []
    for t, p, o in placed:
        last = runs[-1] if runs else None
        if last is not None and last[0] == t and last[1] == p and last[2] + last[3] == o:
            last[3] += 1
        else:
            runs.append([t, p, o, 1])
    return runs


def placed_of(runs: Sequence[Sequence[Any]]) -> list[tuple[str, int, int]]:
    return [(str(t), int(p), int(o) + k) for t, p, o, n in runs for k in range(int(n))]


def answer_body(
    cluster_id: str,
    tid: str | None,
    rid: str | None,
    placed: Sequence[tuple[str, int, int]] | None,
    *,
    duplicate: bool,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cluster_id": cluster_id,
        "transactional_id": tid,
        "request_id": rid,
        "duplicate": duplicate,
    }
    if placed is not None:
        out["records"] = [{"topic_name": t, "partition_id": p, "offset": o} for t, p, o in placed]
    return out


# --------------------------------------------------------------------------- producers


@dataclass
class _Entry:
    """One id's slot in the cache. Its lock outlives its producer: a producer that failed
    is closed and replaced under the lock, so requests queued behind it get the new one."""

    producer: AsyncProducer | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ready: bool = False
    users: int = 0
    coordinator: CoordinatorClient | None = None
    """The id's transaction coordinator, asked whether the commit's markers are written."""
    internal: bool = False
    """An id of the broker's pool (a request without ``transactional_id``)."""
    principal: str | None = None
    """Who the request holding the producer is (issue 18): the producer's calls are made
    for them (``acting_principal``). Between requests it stays the last one's: never the
    node's own, whatever a background task of the producer still sends."""


def acting_principal(route: str | None, principal: str | None, internal: bool) -> str | None:
    """Whom a call of the broker's transactional producer acts for (issue 18): the calling
    user for what Kafka would check as the user, the node itself (None: no
    ``Longboat-Principal``, the node's certificate) for the broker's own bookkeeping.

    * produce: the user (WRITE on each topic, checked by the partition's leader);
    * the transaction coordinator (``txn/*``): the user when the request named the
      transactional id (WRITE on the TRANSACTIONAL_ID, as Kafka's InitProducerId,
      AddPartitionsToTxn, AddOffsetsToTxn, EndTxn), the node for an id of the broker's pool,
      which no user holds ACLs on (the route asked the user's IDEMPOTENT_WRITE instead);
    * the request-id bookkeeping group (``group/*``) and metadata reads: the node.
    """
    if principal is None or route is None or route.startswith("group/"):
        return None
    if route.startswith("txn/") and internal:
        return None
    return principal


class TxnProducers:
    """The broker's transactional producers: one per client-named id (a bounded LRU cache),
    and a pool of internal ids for requests without one."""

    def __init__(self, bootstrap: list[str], broker_id: int) -> None:
        self.bootstrap = list(bootstrap)
        self.broker_id = broker_id
        self._named: OrderedDict[str, _Entry] = OrderedDict()
        self._free_slots: list[int] = list(range(INTERNAL_SLOTS_MAX))
        self._slot_free = asyncio.Condition()
        self._internal = {f"__longboat-http.{broker_id}.{n}" for n in range(INTERNAL_SLOTS_MAX)}
        self._closed = False
        self.created = 0

    def _new(self, tid: str, timeout_ms: int, e: _Entry) -> AsyncProducer:
        self.created += 1
        p = AsyncProducer(
            self.bootstrap,
            transactional_id=tid,
            transaction_timeout_ms=timeout_ms,
            linger_ms=0,
            # Inside the request's own deadline, so a coordinator that stays away ends
            # as a ClientError (503) with the transaction aborted.
            request_timeout_ms=10_000,
            delivery_timeout_ms=20_000,
        )
        # Through the node's own TLS certificate (``common.netbind``), naming the user each
        # call acts for: the receiving broker believes the name from a node only.
        p.transport.acting_as = lambda route: acting_principal(route, e.principal, e.internal)
        return p

    @contextlib.asynccontextmanager
    async def use(
        self, tid: str | None, timeout_ms: int, principal: str | None = None
    ) -> AsyncIterator[tuple[str, _Entry]]:
        """The id's producer, initialised, held alone for one request of ``principal``. A
        producer that did not end its transaction cleanly is closed and replaced
        (``reset``)."""
        if self._closed:
            raise HttpError(503, "The broker is shutting down.", 50302)
        slot: int | None = None
        if tid is None:
            async with self._slot_free:
                await self._slot_free.wait_for(lambda: bool(self._free_slots))
                slot = self._free_slots.pop()
            name = f"__longboat-http.{self.broker_id}.{slot}"  # one of self._internal
        else:
            name = tid
        try:
            e = self._named.get(name)
            if e is None:
                e = self._named[name] = _Entry()
            self._named.move_to_end(name)
            e.users += 1
            try:
                async with e.lock:
                    e.principal, e.internal = principal, tid is None
                    if e.producer is None:
                        e.producer = self._new(name, timeout_ms, e)
                    if not e.ready:
                        try:
                            await e.producer.init_transactions()
                        except ClientError as err:
                            await self.reset(e)
                            raise _http_error_of(err, False) from None
                        e.ready = True
                    yield name, e
            finally:
                e.users -= 1
                await self._trim()
        finally:
            if slot is not None:
                async with self._slot_free:
                    self._free_slots.append(slot)
                    self._slot_free.notify()

    async def reset(self, e: _Entry) -> None:
        """Close the entry's producer (the next request makes a new one, whose
        InitProducerId completes or aborts whatever this one left)."""
        p, e.producer, e.ready, e.coordinator = e.producer, None, False, None
        if p is not None:
            with contextlib.suppress(Exception):
                await p.close()

    async def _trim(self) -> None:
        idle = [n for n, e in self._named.items() if e.users == 0 and n not in self._internal]
        while len(self._named) > TXN_PRODUCERS_MAX + INTERNAL_SLOTS_MAX and idle:
            await self.reset(self._named.pop(idle.pop(0)))

    async def close(self) -> None:
        self._closed = True
        for e in list(self._named.values()):
            await self.reset(e)
        self._named.clear()


TXN_PRODUCERS_KEY: web.AppKey[TxnProducers] = web.AppKey("txn_producers", TxnProducers)


async def _last_committed(p: AsyncProducer, tid: str) -> tuple[int, dict[str, Any] | None]:
    """The bookkeeping group's last request (its sequence number and its metadata)."""
    group = CoordinatorClient(p.transport, p.metadata, DEDUP_GROUP_PREFIX + tid)
    delay_s = 0.01
    while True:
        try:
            ans = await group.call("fetch_offsets", {"require_stable": True})
            err = str(ans.get("error") or "NONE")
        except ClientError as e:
            err, ans = e.code, {"message": e.message}
        if err == "NONE":
            break
        if err != "UNSTABLE_OFFSET_COMMIT":
            raise ClientError(err, str(ans.get("message") or ""))
        # A transaction of the id still holds offsets of the group (its markers are on
        # their way, or an older producer's transaction is being aborted): wait for it, as
        # Kafka's consumer does with require_stable (KIP-447); the request's deadline
        # bounds this.
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 0.2)
    best: tuple[int, dict[str, Any] | None] = (0, None)
    for _t, _p, _o, meta, _ts in ans.get("offsets") or []:
        try:
            m = orjson.loads(meta)
        except orjson.JSONDecodeError:
            continue
        if type(m) is dict and int(m.get("seq", 0)) > best[0]:
            best = (int(m["seq"]), m)
    return best


async def _markers_written(e: _Entry, tid: str) -> None:
    """Wait until the coordinator has written the commit's markers (its state leaves
    PrepareCommit). EndTxn is answered once the decision is durable, before the markers
    (Kafka's too); waiting here means a client that reads after the answer, at
    read_committed, sees every record of it."""
    p = e.producer
    assert p is not None
    if e.coordinator is None:
        e.coordinator = CoordinatorClient(
            p.transport,
            p.metadata,
            tid,
            retry_timeout_s=10.0,
            route=TXN_ROUTE,
            key="transactional_id",
            outcomes=TXN_OUTCOMES,
        )
    delay_s = 0.002
    while True:
        ans = await e.coordinator.call("describe", {})
        if str(ans.get("error") or "NONE") != "NONE" or ans.get("state") not in PREPARED:
            return
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 0.1)


async def run_transaction(
    producers: TxnProducers, cluster_id: str, req: TxnRequest, principal: str | None = None
) -> dict[str, Any]:
    """Write ``req``'s records in one transaction and commit it, for ``principal``: the
    answer body. Raises ``HttpError`` (the transaction aborted, nothing visible) except
    where it says the outcome is unknown (a commit that did not answer)."""
    async with producers.use(req.transactional_id, req.timeout_ms, principal) as (name, e):
        p = e.producer
        assert p is not None
        committing = False
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                seq = 0
                if req.request_id is not None:
                    assert req.transactional_id is not None
                    seq, last = await _last_committed(p, req.transactional_id)
                    if last is not None and last.get("request_id") == req.request_id:
                        runs = last.get("runs")
                        return answer_body(
                            cluster_id,
                            req.transactional_id,
                            req.request_id,
                            None if runs is None else placed_of(runs),
                            duplicate=True,
                        )
                p.begin_transaction()
                futures = []
                for r in req.records:
                    rec = r.record
                    futures.append(
                        await p.send(
                            r.topic,
                            rec.value,
                            key=rec.key,
                            headers=rec.headers,
                            partition=r.partition,
                            timestamp_ms=rec.timestamp_ms,
                        )
                    )
                delivered = await asyncio.gather(*futures)
                placed = [(m.topic, m.partition, m.offset) for m in delivered]
                if req.request_id is not None:
                    assert req.transactional_id is not None
                    first = req.records[0]
                    meta = {"request_id": req.request_id, "seq": seq + 1, "runs": runs_of(placed)}
                    text = orjson.dumps(meta).decode()
                    if len(text) > OFFSET_METADATA_CHARS_MAX:
                        # Too many runs to keep: a duplicate is still recognised, and answered
                        # without offsets.
                        text = orjson.dumps({**meta, "runs": None}).decode()
                    tp = (first.topic, first.partition)
                    await p.send_offsets_to_transaction(
                        {tp: 0}, DEDUP_GROUP_PREFIX + req.transactional_id, metadata={tp: text}
                    )
                committing = True
                await p.commit_transaction()
                await _markers_written(e, name)
            return answer_body(
                cluster_id, req.transactional_id, req.request_id, placed, duplicate=False
            )
        except ProducerFencedError as err:
            await producers.reset(e)
            raise HttpError(
                409,
                f"PRODUCER_FENCED: transactional id {name!r} was taken over by a newer "
                f"producer; nothing of this request is visible. ({err.message})",
                40901,
            ) from None
        except BaseException as err:
            # The producer's transaction may be open or half ended: abort what can be
            # aborted, then forget the producer (the id's next InitProducerId aborts what
            # is left, and restarts its sequences).
            with contextlib.suppress(BaseException):
                async with asyncio.timeout(5):
                    if not committing:
                        await p.abort_transaction()
            await producers.reset(e)
            if isinstance(err, asyncio.CancelledError):
                raise
            raise _http_error_of(err, committing) from None


def _http_error_of(err: BaseException, committing: bool) -> HttpError:
    unknown = (
        " The commit was sent and its outcome is unknown: retry with the same request_id, "
        "or read at read_committed to find out."
        if committing
        else " The transaction was aborted: nothing of this request is visible."
    )
    if isinstance(err, TimeoutError):
        return HttpError(
            504,
            f"REQUEST_TIMED_OUT: the transaction did not finish within "
            f"{REQUEST_TIMEOUT_S:g} s.{unknown}",
            504,
        )
    if isinstance(err, ClientError):
        if err.code in COORDINATOR_DOWN:
            return HttpError(503, f"{err.code}: {err.message}.{unknown}", 50302)
        if err.code == "REQUEST_TIMED_OUT":
            return HttpError(504, f"{err.code}: {err.message}.{unknown}", 504)
        e = kafka_error(err.code, err.message)
        return HttpError(e.status, f"{e.message}.{unknown}", e.error_code)
    log.exception("transactional produce failed", exc_info=err)
    return HttpError(500, f"Internal server error.{unknown}", 50001)


# --------------------------------------------------------------------------- route


def authorize_topics_or_raise(
    request: web.Request, topics: Sequence[str], *, transactional: bool = True
) -> None:
    """WRITE on every topic of the request, when the node authorizes (issue 18): the route's
    rule checked the transactional id only. A topic the principal may not even DESCRIBE is
    answered as missing, as everywhere. Without a transactional id (``transactional``
    False) the broker's own id writes, so the user needs what an idempotent producer
    needs: IDEMPOTENT_WRITE on the CLUSTER, or WRITE on some topic (KIP-679). Checked
    here, before anything is sent, so a refusal changes nothing; the leaders check WRITE
    again, as the user, when the records arrive."""
    az = request.app.get(AUTHORIZER_KEY)
    principal = request.get(PRINCIPAL)
    if az is None or principal is None:
        return
    peer = request.transport.get_extra_info("peername") if request.transport else None
    host = str(peer[0]) if peer else "*"
    for t in dict.fromkeys(topics):
        if az.allows(principal, host, Operation.WRITE, ResourceType.TOPIC, t):
            continue
        if not az.allows(principal, host, Operation.DESCRIBE, ResourceType.TOPIC, t):
            raise topic_not_found(t)
        raise HttpError(403, f"{principal} is not authorized to WRITE on TOPIC {t}", 40301)
    if not transactional and not (
        az.allows(principal, host, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
        or az.writes_some_topic(principal, host)
    ):
        raise HttpError(
            403, f"{principal} is not authorized to IDEMPOTENT_WRITE on the CLUSTER", 40301
        )


async def produce_transaction(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    body = await json_body(request)
    if type(body) is dict and type(body.get("records")) is list:
        authorize_topics_or_raise(
            request,
            [
                r["topic"]
                for r in body["records"]
                if type(r) is dict and type(r.get("topic")) is str
            ],
            transactional=body.get("transactional_id") is not None,
        )
    req = await plan_request(ctx, body)
    answer = await run_transaction(
        request.app[TXN_PRODUCERS_KEY], ctx.cluster_id, req, request.get(PRINCIPAL)
    )
    return json_response(answer)


def add_transaction_routes(app: web.Application, bootstrap: list[str], broker_id: int) -> None:
    """``POST /v3/clusters/{cluster_id}/transactions``; the producers close with the app."""
    producers = TxnProducers(bootstrap, broker_id)
    app[TXN_PRODUCERS_KEY] = producers
    app.router.add_post("/v3/clusters/{cluster_id}/transactions", produce_transaction)

    async def close(app: web.Application) -> None:
        await producers.close()

    app.on_cleanup.append(close)
