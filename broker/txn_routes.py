"""The transaction coordinator's internal routes (msgpack bodies), served by ``TxnCoordinator``.

``POST /internal/broker/v1/txn/<op>``, body and answer msgpack maps, HTTP 200 unless the
body is malformed (HTTP 400 ``INVALID_REQUEST``, nothing done). docs/transactions.md ("The
coordinator: wire protocol") is the contract:

==========================  ===========================================  =====================
op                          body                                         answer
==========================  ===========================================  =====================
``find_coordinator``        ``transactional_id``                         ``coordinator_id``,
                                                                         ``url``, ``partition``
``init_producer_id``        ``transactional_id``,                        ``producer_id``,
                            ``transaction_timeout_ms``                   ``producer_epoch``
``add_partitions``          ``transactional_id``, ``producer_id``,       ``{}``
                            ``producer_epoch``, ``partitions``
                            (``[[topic, partition], ...]``),
                            ``verify_only`` (default false)
``add_offsets``             ``transactional_id``, ``producer_id``,       ``{}``
                            ``producer_epoch``, ``group``
``end_txn``                 ``transactional_id``, ``producer_id``,       ``producer_id``,
                            ``producer_epoch``, ``commit`` (bool)        ``producer_epoch``
                                                                         (the next pair)
``describe``                ``transactional_id``                         ``state``, ...
==========================  ===========================================  =====================

Every answer carries ``"error"``: ``"NONE"`` or Kafka's name (``PRODUCER_FENCED``,
``CONCURRENT_TRANSACTIONS``, ``NOT_COORDINATOR`` with ``coordinator_id``, ...) and a
``message``. ``add_partitions`` with ``verify_only`` writes nothing and answers per
partition ``"results": [[topic, partition, error], ...]`` (KIP-890 part 1's verification,
Kafka's AddPartitionsToTxn ``VerifyOnly``).

``txn_verifier`` builds the partition leader's hook for that check: it asks the local
coordinator, or the coordinator broker over this route.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import msgpack
from aiohttp import web

from broker.group_coordinator import CoordinatorError
from broker.group_routes import coordinator_handler
from broker.groups.types import TopicPartition
from broker.request_fields import (
    INT32_MAX,
    INT64_MAX,
    InvalidRequestError,
    bool_field,
    int_field,
    list_field,
    partition_value,
    str_field,
    topic_value,
)
from broker.router import INTERNAL_PREFIX, MSGPACK, PUBLIC_PREFIX
from broker.txn.records import EPOCH_MAX, TRANSACTIONAL_ID_CHARS_MAX
from broker.txn_coordinator import TxnCoordinator
from broker.txn_markers import TxnVerifier

log = logging.getLogger(__name__)

TXN_KEY: web.AppKey[TxnCoordinator] = web.AppKey("txn_coordinator", TxnCoordinator)
TXN_ROUTE = "txn"

Body = dict[str, Any]


def _handler(
    fn: Callable[[TxnCoordinator, Body], Awaitable[Body]],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    return coordinator_handler(TXN_KEY, "txn", fn)


def _tid(b: Body) -> str:
    tid = str_field(b, "transactional_id", max_chars=TRANSACTIONAL_ID_CHARS_MAX)
    if not tid:
        raise InvalidRequestError("'transactional_id' must not be empty")
    return tid


def _pair(b: Body) -> tuple[int, int]:
    return (
        int_field(b, "producer_id", 0, INT64_MAX),
        int_field(b, "producer_epoch", 0, EPOCH_MAX),
    )


def _partitions(b: Body) -> list[TopicPartition]:
    out = []
    for i, e in enumerate(list_field(b, "partitions")):
        where = f"partitions[{i}]"
        if type(e) is not list or len(e) != 2:
            raise InvalidRequestError(f"{where!r} must be [topic, partition], got {e!r:.60}")
        out.append(
            TopicPartition(topic_value(f"{where}[0]", e[0]), partition_value(f"{where}[1]", e[1]))
        )
    if not out:
        raise InvalidRequestError("'partitions' must not be empty")
    return out


async def _find_coordinator(c: TxnCoordinator, b: Body) -> Body:
    info = await c.find_coordinator(_tid(b))
    return {"coordinator_id": info.coordinator_id, "url": info.url, "partition": info.partition}


async def _init_producer_id(c: TxnCoordinator, b: Body) -> Body:
    tid = _tid(b)
    timeout_ms = int_field(b, "transaction_timeout_ms", 1, INT32_MAX, default=60_000)
    r = await c.init_producer_id(tid, timeout_ms)
    return {"producer_id": r.producer_id, "producer_epoch": r.producer_epoch}


async def _add_partitions(c: TxnCoordinator, b: Body) -> Body:
    tid = _tid(b)
    pid, epoch = _pair(b)
    parts = _partitions(b)
    if bool_field(b, "verify_only", default=False):
        return {
            "results": [
                [tp.topic, tp.partition, c.verify(tid, pid, epoch, tp) or "NONE"]
                for tp in sorted(set(parts))
            ]
        }
    await c.add_partitions(tid, pid, epoch, parts)
    return {}


async def _add_offsets(c: TxnCoordinator, b: Body) -> Body:
    tid = _tid(b)
    pid, epoch = _pair(b)
    group = str_field(b, "group")
    if not group:
        raise InvalidRequestError("'group' must not be empty")
    await c.add_offsets(tid, pid, epoch, group)
    return {}


async def _end_txn(c: TxnCoordinator, b: Body) -> Body:
    tid = _tid(b)
    pid, epoch = _pair(b)
    commit = bool_field(b, "commit")
    r = await c.end_txn(tid, pid, epoch, commit)
    return {"producer_id": r.producer_id, "producer_epoch": r.producer_epoch}


async def _describe(c: TxnCoordinator, b: Body) -> Body:
    tid = _tid(b)
    m = c.describe(tid)
    if m is None:
        return {"state": None}
    return {
        "state": m.state.value,
        "producer_id": m.producer_id,
        "producer_epoch": m.producer_epoch,
        "timeout_ms": m.timeout_ms,
        "partitions": [[tp.topic, tp.partition] for tp in sorted(m.partitions)],
        "txn_start_ms": m.txn_start_ms,
    }


OPS: dict[str, Callable[[TxnCoordinator, Body], Awaitable[Body]]] = {
    "find_coordinator": _find_coordinator,
    "init_producer_id": _init_producer_id,
    "add_partitions": _add_partitions,
    "add_offsets": _add_offsets,
    "end_txn": _end_txn,
    "describe": _describe,
}


def add_txn_routes(app: web.Application, coordinator: TxnCoordinator) -> None:
    app[TXN_KEY] = coordinator
    for op, fn in OPS.items():
        app.router.add_post(f"{INTERNAL_PREFIX}/{TXN_ROUTE}/{op}", _handler(fn))
        # The client library's public twin (issue 18: on a client listener, authenticated).
        app.router.add_post(f"{PUBLIC_PREFIX}/{TXN_ROUTE}/{op}", _handler(fn))


# ---------------------------------------------------------------- the partition leader's hook

VERIFY_TIMEOUT_S = 5.0


def txn_verifier(
    coordinator: TxnCoordinator,
    broker_url: Callable[[int], str | None],
    session: Callable[[], aiohttp.ClientSession],
) -> TxnVerifier:
    """The hook a partition leader calls on the first transactional batch of a producer
    epoch in a partition (KIP-890 part 1): None if the partition is in the producer's
    ongoing transaction, else the error name to refuse the batch with. Any failure to reach
    the coordinator is ``COORDINATOR_NOT_AVAILABLE`` (the producer retries)."""

    async def verify(
        tid: str, producer_id: int, producer_epoch: int, topic: str, p: int
    ) -> str | None:
        tp = TopicPartition(topic, p)
        leader = coordinator.coordinator_of(tid)
        if leader == coordinator.broker_id:
            try:
                return coordinator.verify(tid, producer_id, producer_epoch, tp)
            except CoordinatorError as e:
                return _retriable(e.code)
        url = None if leader < 0 else broker_url(leader)
        if url is None:
            return "COORDINATOR_NOT_AVAILABLE"
        body = {
            "transactional_id": tid,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "partitions": [[topic, p]],
            "verify_only": True,
        }
        try:
            async with session().post(
                f"{url}{INTERNAL_PREFIX}/{TXN_ROUTE}/add_partitions",
                data=msgpack.packb(body, use_bin_type=True),
                headers={"Content-Type": MSGPACK},
                timeout=aiohttp.ClientTimeout(total=VERIFY_TIMEOUT_S),
            ) as resp:
                out = msgpack.unpackb(await resp.read(), raw=False)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
            log.info("verifying %r at broker %d: %s", tid, leader, e)
            return "COORDINATOR_NOT_AVAILABLE"
        if not isinstance(out, dict):
            return "COORDINATOR_NOT_AVAILABLE"
        err = out.get("error")
        if err not in (None, "NONE"):
            return _retriable(str(err))
        for t, q, code in out.get("results") or []:
            if (t, q) == (topic, p):
                return None if code == "NONE" else str(code)
        return "COORDINATOR_NOT_AVAILABLE"

    return verify


def _retriable(code: str) -> str:
    """A coordinator that moved or is loading is, to the producer, a coordinator not
    available now: its batch is refused retriably (KIP-890 part 1)."""
    if code in ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS"):
        return "COORDINATOR_NOT_AVAILABLE"
    return code
