"""The follower's fetchers: one per source broker, each fetching every partition this broker
follows from that leader in one long-polling request (Kafka's ``ReplicaFetcherThread``, with
``num.replica.fetchers`` = ``FETCHERS_PER_SOURCE``, default 1).

``ReplicaManager`` adds a partition (``ReplicaFetchers.add``) when the image names another
broker leader, and removes it (``remove``) when that changes; a partition is then fetched by
the fetcher of its leader. It follows docs/replication.md, "Becoming follower", per partition:

1. apply ``FollowerState.first_step``; while a step asks, send OffsetsForLeaderEpoch to the
   leader's internal route and feed the answer to ``on_epoch_end_offset`` (KIP-101, KIP-279),
   truncating the log and the producer state as each step says. This runs in a task of its
   own per partition; the partition is left out of the fetches meanwhile, the others go on;
2. be asked for in the fetcher's next ``/internal/broker/v1/replica_fetch`` (the partitions
   of one source in one body, from each log end with its last fetched epoch); the leader
   answers as soon as any of them has data or a newer HW. Each partition's entry is handled
   on its own (``broker.fetch_plan.entry_outcome``): data is appended with
   ``append_as_follower`` and the HW moved; a diverging epoch goes back to step 1's rule; an
   offset out of range restarts the log at the leader's start if it is below it; any other
   error (not leader, fenced or unknown epoch, a storage error) backs that partition off
   for ``RETRY_BACKOFF_S`` while the rest keep fetching.

What to ask and what each answer means is decided by the pure ``broker.fetch_plan``; this
module does the I/O. A request that fails as a whole (the leader unreachable) is retried
after the same back-off. A leader that does not know ``replica_fetch`` (HTTP 404: an older
broker during a rolling upgrade) is fetched from through the single-partition ``fetch``
route, several partitions concurrently, until it is asked again ``LEGACY_RECHECK_S`` later.

The replication throttle (``broker.throttle``) holds for the adding replicas of a
reassignment: they are left out of a fetch while the shared bucket is overdrawn, asked for
at most a bucket's request size between them, and what they receive is taken from it.

The fetcher does not import ``broker.replica_manager``: it states what it needs of its host
as ``FetcherHost`` and of a replica as ``FetchedReplica`` (``typing.Protocol``), which the
replica manager and its ``Replica`` satisfy, so the import runs one way only (an
import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import aiohttp
import msgpack

from broker.fetch_plan import (
    RECORDS_APART,
    Append,
    Diverge,
    MalformedAnswerError,
    Outcome,
    OutOfRange,
    PartitionFetch,
    PartitionKey,
    Retry,
    Slot,
    answer_outcomes,
    decode_records_apart,
    entry_outcome,
    plan_fetch,
)
from broker.fetch_session import (
    FetchSessionIdNotFoundError,
    FollowerSession,
    InvalidFetchSessionEpochError,
)
from broker.replica_state import FollowerState, TruncationStep
from broker.throttle import TokenBucket
from common import netbind
from common.essential import Essentials
from common.waits import wait_event
from storage.group_commit import GroupCommitter
from storage.log import PartitionLog

log = logging.getLogger(__name__)

MSGPACK = "application/msgpack"
FETCH_MAX_WAIT_MS = 500
"""Kafka's ``replica.fetch.wait.max.ms``."""
FETCH_MAX_BYTES = 1 << 20
"""Per partition: Kafka's ``replica.fetch.max.bytes``."""
FETCH_RESPONSE_BYTES_MAX = 10 << 20
"""Per request: Kafka's ``replica.fetch.response.max.bytes``."""
FETCHERS_PER_SOURCE = 1
"""Kafka's ``num.replica.fetchers``: partitions of one source are spread over this many
fetchers (by a hash of the partition), each with its own request in flight."""
RETRY_BACKOFF_S = 0.2
"""Kafka's ``replica.fetch.backoff.ms`` is 1 s; a shorter one lets a partition whose leader
just moved catch up sooner (the metadata log moves it to the new leader's fetcher)."""
LEGACY_RECHECK_S = 60.0
LEGACY_IDLE_S = 0.05
SIDE_REQUESTS_MAX = 8
"""OffsetsForLeaderEpoch and ListOffsets requests in flight per fetcher: after a leader
change hundreds of partitions truncate at once, and unbounded they fill the HTTP pool and
time each other out."""


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling it again every second: on
    Python 3.11 a cancellation that meets aiohttp's request timeout can come out as a
    ``TimeoutError``, which a retry loop then survives (a broker's metadata handling once
    waited forever on such a fetcher). A cancellation of the caller still propagates."""
    while not task.done():
        task.cancel()
        await asyncio.wait((task,), timeout=1.0)


class FetchedReplica(Protocol):
    """What the fetcher reads of a replica (``broker.replica_manager.Replica``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def log(self) -> PartitionLog: ...


ReplicaT = TypeVar("ReplicaT", bound=FetchedReplica)
ReplicaT_contra = TypeVar("ReplicaT_contra", bound=FetchedReplica, contravariant=True)


class FetcherHost(Protocol[ReplicaT_contra]):
    """What the fetcher needs of the broker that runs it (``ReplicaManager``). The methods
    that change a replica take it as the host's own replica type (``ReplicaT_contra``): the
    fetcher only hands back the replica it was given."""

    @property
    def broker_id(self) -> int: ...
    @property
    def acks_require_fsync(self) -> bool: ...
    @property
    def committer(self) -> GroupCommitter: ...

    fetch_session: aiohttp.ClientSession | None
    """Shared by every fetcher of the host; the fetcher opens it when missing or closed."""
    essentials: Essentials | None
    """Fail-stop: a fetcher task that dies on an exception stops the node."""

    def broker_epoch(self) -> int | None: ...
    def leader_url(self, broker_id: int) -> str | None: ...
    def truncate(self, rep: ReplicaT_contra, offset: int, *, below_hw: bool) -> None: ...
    def truncate_fully(self, rep: ReplicaT_contra, offset: int) -> None: ...
    def append_as_follower(
        self, rep: ReplicaT_contra, fs: FollowerState, data: bytes | memoryview, leader_hw: int
    ) -> None: ...
    def follow_log_start(self, rep: ReplicaT_contra, leader_log_start: int) -> None: ...
    def throttle_for(self, rep: ReplicaT_contra) -> TokenBucket | None: ...


class FetchError(Exception):
    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
SESSION_ERRORS = (FetchSessionIdNotFoundError.code, InvalidFetchSessionEpochError.code)


async def call(
    session: aiohttp.ClientSession, url: str, route: str, body: dict[str, Any]
) -> dict[str, Any]:
    """POST a msgpack body to an internal broker route; the answer (a msgpack map, or a
    ``RECORDS_APART`` body, its records then views into it), or ``FetchError``
    (``UNSUPPORTED_VERSION`` for a route the broker does not have)."""
    async with session.post(
        f"{url}/internal/broker/v1/{route}",
        data=msgpack.packb(body, use_bin_type=True),
        headers={"Content-Type": MSGPACK},
    ) as resp:
        payload = await resp.read()
    if resp.status == 404:
        raise FetchError("UNSUPPORTED_VERSION", f"{url} has no route {route!r}")
    if resp.status == 200 and resp.content_type == RECORDS_APART:
        try:
            return decode_records_apart(payload)
        except MalformedAnswerError as e:
            raise FetchError("UNKNOWN_SERVER_ERROR", f"{route} from {url}: {e}") from None
    try:
        out = msgpack.unpackb(payload, raw=False)
    except Exception:  # msgpack raises several types
        out = None
    if not isinstance(out, dict):
        raise FetchError("UNKNOWN_SERVER_ERROR", f"HTTP {resp.status}: {payload[:200]!r}")
    if out.get("error"):
        raise FetchError(str(out["error"]), str(out.get("message", "")))
    return out


def _session(mgr: FetcherHost[Any]) -> aiohttp.ClientSession:
    s = mgr.fetch_session
    if s is None or s.closed:
        s = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=FETCH_MAX_WAIT_MS / 1000 + 5),
            connector=netbind.connector(),
            read_bufsize=netbind.READ_BUFSIZE,
        )
        mgr.fetch_session = s
    assert isinstance(s, aiohttp.ClientSession)
    return s


async def _truncate(
    mgr: FetcherHost[ReplicaT], rep: ReplicaT, fs: FollowerState, step: TruncationStep, url: str
) -> None:
    """Apply ``step`` and every step after it until the follower may fetch."""
    while True:
        if step.truncate_to is not None:
            mgr.truncate(rep, step.truncate_to, below_hw=step.below_high_watermark)
        if step.query_epoch is None:
            return
        ans = await call(
            _session(mgr),
            url,
            "offsets_for_leader_epoch",
            {
                "topic": rep.topic,
                "partition": rep.partition,
                "current_leader_epoch": fs.leader_epoch,
                "epoch": step.query_epoch,
            },
        )
        step = fs.on_epoch_end_offset(int(ans["leader_epoch"]), int(ans["end_offset"]), rep.log)


async def _restart_below_leader_start(mgr: FetcherHost[ReplicaT], rep: ReplicaT, url: str) -> bool:
    """OFFSET_OUT_OF_RANGE: if our log ends below the leader's log start, restart it there.
    True if it did (fetch again at once)."""
    try:
        ans = await call(
            _session(mgr),
            url,
            "list_offsets",
            {"topic": rep.topic, "partition": rep.partition, "timestamp": -2, "forwarded": True},
        )
    except (FetchError, *TRANSPORT_ERRORS):
        return False
    start = int(ans["offset"])
    if rep.log.log_end_offset < start:
        mgr.truncate_fully(rep, start)
        return True
    return False


@dataclass(eq=False)
class _Entry(Generic[ReplicaT]):
    """One followed partition in a fetcher. Replaced (never reused) when the partition is
    followed again, so an answer to a request sent for an older entry is recognised and
    dropped."""

    rep: ReplicaT
    fs: FollowerState
    step: TruncationStep | None
    """The truncation still to apply before fetching (None: fetching)."""
    side: asyncio.Task[None] | None = None
    """Truncating or restarting the log; the partition is not fetched meanwhile."""
    ready_at_s: float = 0.0
    errors: int = 0

    @property
    def key(self) -> PartitionKey:
        return (self.rep.topic, self.rep.partition)


def _no_op(step: TruncationStep) -> bool:
    return step.truncate_to is None and step.query_epoch is None


class SourceFetcher(Generic[ReplicaT]):
    """Fetches the partitions this broker follows from broker ``source_id`` (those of them
    that hash to ``index``), one request at a time."""

    def __init__(self, host: FetcherHost[ReplicaT], source_id: int, index: int) -> None:
        self.host = host
        self.source_id = source_id
        self.name = f"replica fetcher {index} from broker {source_id}"
        self.entries: dict[PartitionKey, _Entry[ReplicaT]] = {}
        self.wake = asyncio.Event()
        """Set when a partition is added or finishes truncating: an idle fetcher looks again."""
        self.rounds = 0
        self.errors = 0
        self.legacy_until_s = 0.0
        self.session = FollowerSession()
        """This fetcher's fetch session with its source (KIP-227, ``broker.fetch_session``)."""
        self.closing = False
        self.side_requests = asyncio.Semaphore(SIDE_REQUESTS_MAX)
        self.task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    def add(self, rep: ReplicaT, fs: FollowerState) -> None:
        step = fs.first_step
        e = _Entry(rep, fs, None if _no_op(step) else step)
        old = self.entries.get(e.key)
        if old is not None and old.side is not None:
            old.side.cancel()  # the caller removes first; never leave a truncation behind
        self.entries[e.key] = e
        self.wake.set()

    async def remove(self, key: PartitionKey) -> None:
        e = self.entries.pop(key, None)
        if e is not None and e.side is not None:
            # Awaited: a truncation must not touch the log once the caller changes its role.
            await stop_task(e.side)

    def following(self, key: PartitionKey, fs: FollowerState) -> bool:
        e = self.entries.get(key)
        return e is not None and e.fs is fs and not self.task.done()

    async def close(self) -> None:
        self.closing = True
        for key in list(self.entries):
            await self.remove(key)
        await stop_task(self.task)

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while not self.closing:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug in one round must not end replication from this source.
                log.exception("broker %d: %s failed a round", self.host.broker_id, self.name)
                await asyncio.sleep(1.0)

    def _log_error(self, e: _Entry[ReplicaT], what: object) -> None:
        e.errors += 1
        if e.errors == 1 or e.errors % 50 == 0:
            log.info(
                "broker %d: fetching %s from %d: %s",
                self.host.broker_id,
                e.rep.name,
                self.source_id,
                what,
            )

    def _start_side(self, e: _Entry[ReplicaT], coro: Coroutine[Any, Any, None]) -> None:
        e.side = asyncio.get_running_loop().create_task(coro, name=f"truncating-{e.rep.name}")

    async def _round(self) -> None:
        host = self.host
        now = time.monotonic()
        for e in self.entries.values():
            if e.step is not None and e.side is None and e.ready_at_s <= now:
                self._start_side(e, self._truncating(e, e.step))
        bucket: TokenBucket | None = None
        throttled: set[PartitionKey] = set()
        for key, e in self.entries.items():
            b = host.throttle_for(e.rep)
            if b is not None:
                bucket = b
                throttled.add(key)
        slots = [
            Slot(
                key,
                busy=e.side is not None,
                ready_at_s=e.ready_at_s,
                throttled=key in throttled,
            )
            for key, e in self.entries.items()
        ]
        plan = plan_fetch(
            slots,
            now_s=now,
            rotation=self.rounds,
            throttle_delay_s=0.0 if bucket is None else bucket.delay_s(now),
            max_wait_ms=FETCH_MAX_WAIT_MS,
        )
        self.rounds += 1
        if not plan.keys:
            self.wake.clear()
            await wait_event(self.wake, plan.sleep_s)
            return
        sent = [self.entries[k] for k in plan.keys]
        url = host.leader_url(self.source_id)
        if url is None:
            for e in sent:
                self._log_error(e, f"LEADER_NOT_AVAILABLE: no endpoint for {self.source_id}")
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        if host.acks_require_fsync:
            await self._flush(sent)
        # Awaited above: a partition removed, re-added or backed off meanwhile is not sent.
        sent = [e for e in sent if self.entries.get(e.key) is e and e.ready_at_s <= now]
        if not sent:
            return
        n_throttled = sum(1 for e in sent if e.key in throttled)
        requests = [
            self._request(e, bucket if e.key in throttled else None, n_throttled) for e in sent
        ]
        try:
            outcomes = await self._fetch(url, requests, plan.max_wait_ms)
        except (FetchError, *TRANSPORT_ERRORS) as err:
            self.errors += 1
            if self.errors == 1 and isinstance(
                err, aiohttp.ClientOSError | aiohttp.ServerDisconnectedError
            ):
                # A pooled keep-alive connection the leader had closed: retry at once.
                log.debug(
                    "broker %d: %s: retrying on a new connection: %r",
                    host.broker_id,
                    self.name,
                    err,
                )
                return
            if self.errors == 1 or self.errors % 50 == 0:
                log.info("broker %d: %s: %r", host.broker_id, self.name, err)
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        self.errors = 0
        now = time.monotonic()
        throttled_bytes = 0
        for e in sent:
            out = outcomes.get(e.key)
            if out is None or self.entries.get(e.key) is not e:
                continue  # nothing new, or no longer followed here as it was when asked
            n = self._apply(e, out, now)
            if e.key in throttled:
                throttled_bytes += n
        if bucket is not None and throttled_bytes:
            bucket.take(throttled_bytes, now)

    def _request(
        self, e: _Entry[ReplicaT], bucket: TokenBucket | None, n_throttled: int
    ) -> PartitionFetch:
        plog = e.rep.log
        max_bytes = FETCH_MAX_BYTES
        if bucket is not None:
            # The throttled partitions of one request share one request's worth of the bucket.
            max_bytes = min(max_bytes, max(1024, bucket.request_bytes_max() // n_throttled))
        return PartitionFetch(
            topic=e.rep.topic,
            partition=e.rep.partition,
            fetch_offset=plog.log_end_offset,
            leader_epoch=e.fs.leader_epoch,
            last_fetched_epoch=plog.latest_epoch,
            high_watermark=e.fs.high_watermark,
            log_start_offset=plog.log_start_offset,
            max_bytes=max_bytes,
        )

    async def _flush(self, sent: Sequence[_Entry[ReplicaT]]) -> None:
        """With durable acks the fetch offset tells the leader what we hold on disk: fsync
        what we appended since the last fetch (group-committed with every other log). A
        partition whose fsync fails backs off; the others are sent."""
        need = [e for e in sent if e.rep.log.flushed_offset < e.rep.log.log_end_offset]
        if not need:
            return
        results = await asyncio.gather(
            *(self.host.committer.durable(e.rep.log, e.rep.log.log_end_offset) for e in need),
            return_exceptions=True,
        )
        for e, r in zip(need, results, strict=True):
            if isinstance(r, BaseException):
                self._log_error(e, f"flush before fetching: {r!r}")
                e.ready_at_s = time.monotonic() + RETRY_BACKOFF_S

    async def _fetch(
        self, url: str, requests: Sequence[PartitionFetch], max_wait_ms: int
    ) -> dict[PartitionKey, Outcome]:
        host = self.host
        epoch = host.broker_epoch()
        if time.monotonic() >= self.legacy_until_s:
            try:
                return answer_outcomes(await self._replica_fetch(url, requests, max_wait_ms))
            except FetchError as err:
                if err.code != "UNSUPPORTED_VERSION":
                    raise
                log.info(
                    "broker %d: broker %d has no replica_fetch route (an older version): "
                    "fetching one partition per request from it",
                    host.broker_id,
                    self.source_id,
                )
                self.legacy_until_s = time.monotonic() + LEGACY_RECHECK_S
        return await self._fetch_each(url, requests, -1 if epoch is None else epoch)

    async def _replica_fetch(
        self, url: str, requests: Sequence[PartitionFetch], max_wait_ms: int
    ) -> dict[str, Any]:
        """One ``replica_fetch`` asking for ``requests``, within the session: only what
        changed since the last answer goes on the wire. A request refused for its session
        (the leader restarted, or lost the last answer's epoch) is sent again at once,
        whole."""
        try:
            return await self._replica_fetch_once(url, requests, max_wait_ms)
        except FetchError as err:
            if err.code not in SESSION_ERRORS:
                raise
            log.debug("broker %d: %s: %s", self.host.broker_id, self.name, err)
        return await self._replica_fetch_once(url, requests, max_wait_ms)

    async def _replica_fetch_once(
        self, url: str, requests: Sequence[PartitionFetch], max_wait_ms: int
    ) -> dict[str, Any]:
        host = self.host
        epoch = host.broker_epoch()
        req = self.session.request(requests)
        try:
            ans = await call(
                _session(host),
                url,
                "replica_fetch",
                {
                    "replica_id": int(host.broker_id),
                    "broker_epoch": -1 if epoch is None else epoch,
                    "max_wait_ms": max_wait_ms,
                    "max_bytes": FETCH_RESPONSE_BYTES_MAX,
                    "session_id": req.session_id,
                    "session_epoch": req.session_epoch,
                    "partitions": [r.to_wire() for r in req.partitions],
                    "forgotten": [{"topic": t, "partition": p} for t, p in req.forgotten],
                    # The records after the map, not in it (broker.fetch_plan): a leader of
                    # an older version ignores this and answers a plain map.
                    "records_apart": True,
                },
            )
        except BaseException:
            # The leader may or may not have taken it: the next request is whole.
            self.session.reset()
            raise
        sid = ans.get("session_id", 0)
        self.session.answered(req, requests, sid if type(sid) is int else 0)
        return ans

    async def _fetch_each(
        self, url: str, requests: Sequence[PartitionFetch], broker_epoch: int
    ) -> dict[PartitionKey, Outcome]:
        """The single-partition ``fetch`` route, every partition at once without waiting
        (one long poll per partition is what this module replaced), idling briefly when
        nothing came."""

        async def one(r: PartitionFetch) -> Outcome:
            body = r.to_wire()
            body.update(
                replica_id=int(self.host.broker_id),
                broker_epoch=broker_epoch,
                max_wait_ms=0,
                min_bytes=1,
            )
            try:
                return entry_outcome(await call(_session(self.host), url, "fetch", body))
            except FetchError as err:
                return entry_outcome({"error": err.code, "message": str(err)})

        results = await asyncio.gather(*(one(r) for r in requests))
        out = {r.key: o for r, o in zip(requests, results, strict=True)}
        news = any(
            not isinstance(o, Append) or o.records or o.high_watermark > r.high_watermark
            for r, o in zip(requests, results, strict=True)
        )
        if not news:
            await asyncio.sleep(LEGACY_IDLE_S)
        return out

    def _apply(self, e: _Entry[ReplicaT], out: Outcome, now_s: float) -> int:
        """Act on one partition's answer; the bytes appended."""
        host, rep = self.host, e.rep
        match out:
            case Append(records, hw, log_start):
                try:
                    host.append_as_follower(rep, e.fs, records, hw)
                    if log_start is not None:
                        host.follow_log_start(rep, log_start)
                except Exception:
                    log.exception(
                        "broker %d: appending %s fetched from %d failed",
                        host.broker_id,
                        rep.name,
                        self.source_id,
                    )
                    e.ready_at_s = now_s + 1.0
                    return 0
                e.errors = 0
                return len(records)
            case Diverge(epoch, end_offset):
                log.info(
                    "broker %d: %s diverging epoch %s from leader %d",
                    host.broker_id,
                    rep.name,
                    [epoch, end_offset],
                    self.source_id,
                )
                e.step = e.fs.on_epoch_end_offset(epoch, end_offset, rep.log)
                if _no_op(e.step):
                    e.step = None
            case OutOfRange(message):
                self._start_side(e, self._restarting(e, message))
            case Retry(code, message):
                self._log_error(e, f"{code}: {message}")
                e.ready_at_s = now_s + RETRY_BACKOFF_S
        return 0

    async def _truncating(self, e: _Entry[ReplicaT], step: TruncationStep) -> None:
        try:
            url = self.host.leader_url(self.source_id)
            if url is None:
                raise FetchError("LEADER_NOT_AVAILABLE", f"no endpoint for {self.source_id}")
            async with self.side_requests:
                await _truncate(self.host, e.rep, e.fs, step, url)
            e.step = None
            e.errors = 0
        except asyncio.CancelledError:
            raise
        except (FetchError, *TRANSPORT_ERRORS) as err:
            self._log_error(e, repr(err))
            e.ready_at_s = time.monotonic() + RETRY_BACKOFF_S
        except Exception:
            log.exception("broker %d: truncating %s failed", self.host.broker_id, e.rep.name)
            e.ready_at_s = time.monotonic() + 1.0
        finally:
            e.side = None
            self.wake.set()

    async def _restarting(self, e: _Entry[ReplicaT], message: str) -> None:
        try:
            url = self.host.leader_url(self.source_id)
            if url is not None:
                async with self.side_requests:
                    restarted = await _restart_below_leader_start(self.host, e.rep, url)
                if restarted:
                    return
            self._log_error(e, f"OFFSET_OUT_OF_RANGE: {message}")
            e.ready_at_s = time.monotonic() + RETRY_BACKOFF_S
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("broker %d: restarting %s failed", self.host.broker_id, e.rep.name)
            e.ready_at_s = time.monotonic() + 1.0
        finally:
            e.side = None
            self.wake.set()


class ReplicaFetchers(Generic[ReplicaT]):
    """Every fetcher of one broker, by source broker: where each followed partition is
    fetched. A fetcher starts with its first partition and stops with its last."""

    def __init__(
        self, host: FetcherHost[ReplicaT], fetchers_per_source: int = FETCHERS_PER_SOURCE
    ) -> None:
        self.host = host
        self.fetchers_per_source = max(1, fetchers_per_source)
        self._fetchers: dict[tuple[int, int], SourceFetcher[ReplicaT]] = {}
        self._where: dict[PartitionKey, tuple[int, int]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def add(self, rep: ReplicaT, fs: FollowerState) -> None:
        """Fetch ``rep`` from ``fs.leader_id`` in ``fs.leader_epoch`` (the caller removed it
        from wherever it was fetched before)."""
        key = (rep.topic, rep.partition)
        index = zlib.crc32(f"{rep.topic}\0{rep.partition}".encode()) % self.fetchers_per_source
        fid = (int(fs.leader_id), index)
        f = self._fetchers.get(fid)
        if f is None or f.task.done():
            f = SourceFetcher(self.host, fid[0], index)
            self._fetchers[fid] = f
            if self.host.essentials is not None:
                # Cancelled when its last partition goes; only an exception is a death.
                self.host.essentials.watch(f.task, f.name, only_errors=True)
        f.add(rep, fs)
        self._where[key] = fid

    async def remove(self, rep: ReplicaT) -> None:
        """Stop fetching ``rep``: once this returns, nothing fetched for it is applied."""
        fid = self._where.pop((rep.topic, rep.partition), None)
        if fid is None or (f := self._fetchers.get(fid)) is None:
            return
        await f.remove((rep.topic, rep.partition))
        if not f.entries and self._fetchers.get(fid) is f:
            del self._fetchers[fid]
            # In the background: nothing it fetches now is applied (it follows nothing), and
            # the caller (the metadata handling) need not wait for its request to end.
            closing = asyncio.get_running_loop().create_task(f.close(), name=f"closing {f.name}")
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    def following(self, rep: ReplicaT, fs: FollowerState) -> bool:
        """Whether ``rep`` is being fetched with ``fs``."""
        key = (rep.topic, rep.partition)
        fid = self._where.get(key)
        f = None if fid is None else self._fetchers.get(fid)
        return f is not None and f.following(key, fs)

    async def close(self) -> None:
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        self._where.clear()
        for f in fetchers:
            await f.close()
        for task in list(self._closing):
            await stop_task(task)
