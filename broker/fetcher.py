"""The follower's fetcher: one task per (partition, leader, leader epoch).

Started by ``ReplicaManager`` when the image names another broker leader, cancelled when that
changes. It follows docs/replication.md, "Becoming follower":

1. apply ``FollowerState.first_step``; while a step asks, send OffsetsForLeaderEpoch to the
   leader's internal route and feed the answer to ``on_epoch_end_offset`` (KIP-101, KIP-279),
   truncating the log and the producer state as each step says;
2. long-poll ``/internal/broker/v1/fetch`` from the log end with the last fetched epoch;
   append what comes with ``append_as_follower``, move the HW from the answer; a diverging
   epoch in an answer goes back to step 1's rule.

Errors (the leader not there yet, not leading yet, an epoch the leader does not know yet) are
retried after a short back-off: the metadata log will restart the task if leadership moved.

The fetcher does not import ``broker.replica_manager``: it states what it needs of its host
as ``FetcherHost`` and of a replica as ``FetchedReplica`` (``typing.Protocol``), which the
replica manager and its ``Replica`` satisfy, so the import runs one way only (an
import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol, TypeVar

import aiohttp
import msgpack

from broker.replica_state import FollowerState, TruncationStep
from broker.throttle import TokenBucket
from common import netbind
from storage.group_commit import GroupCommitter
from storage.log import PartitionLog

log = logging.getLogger(__name__)

MSGPACK = "application/msgpack"
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 1 << 20
RETRY_BACKOFF_S = 0.2


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
    fetcher only hands back the replica it was started with."""

    @property
    def broker_id(self) -> int: ...
    @property
    def acks_require_fsync(self) -> bool: ...
    @property
    def committer(self) -> GroupCommitter: ...

    fetch_session: aiohttp.ClientSession | None
    """Shared by every fetcher of the host; the fetcher opens it when missing or closed."""

    def broker_epoch(self) -> int | None: ...
    def leader_url(self, broker_id: int) -> str | None: ...
    def truncate(self, rep: ReplicaT_contra, offset: int, *, below_hw: bool) -> None: ...
    def truncate_fully(self, rep: ReplicaT_contra, offset: int) -> None: ...
    def append_as_follower(
        self, rep: ReplicaT_contra, fs: FollowerState, data: bytes, leader_hw: int
    ) -> None: ...
    def follow_log_start(self, rep: ReplicaT_contra, leader_log_start: int) -> None: ...
    def throttle_for(self, rep: ReplicaT_contra) -> TokenBucket | None: ...


class FetchError(Exception):
    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


async def call(
    session: aiohttp.ClientSession, url: str, route: str, body: dict[str, Any]
) -> dict[str, Any]:
    """POST a msgpack body to an internal broker route; the answer, or ``FetchError``."""
    async with session.post(
        f"{url}/internal/broker/v1/{route}",
        data=msgpack.packb(body, use_bin_type=True),
        headers={"Content-Type": MSGPACK},
    ) as resp:
        payload = await resp.read()
    out = msgpack.unpackb(payload, raw=False)
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
    except (FetchError, aiohttp.ClientError, OSError, TimeoutError):
        return False
    start = int(ans["offset"])
    if rep.log.log_end_offset < start:
        mgr.truncate_fully(rep, start)
        return True
    return False


async def run_fetcher(mgr: FetcherHost[ReplicaT], rep: ReplicaT, fs: FollowerState) -> None:
    step: TruncationStep | None = fs.first_step
    errors = 0
    while True:
        url = mgr.leader_url(fs.leader_id)
        try:
            if url is None:
                raise FetchError("LEADER_NOT_AVAILABLE", f"no endpoint for {fs.leader_id}")
            if step is not None:
                await _truncate(mgr, rep, fs, step, url)
                step = None
            if mgr.acks_require_fsync and rep.log.flushed_offset < rep.log.log_end_offset:
                # The fetch offset tells the leader what we hold; with durable acks it must
                # mean what we hold on disk (group-committed with the other partitions).
                await mgr.committer.durable(rep.log, rep.log.log_end_offset)
            epoch = mgr.broker_epoch()
            bucket = mgr.throttle_for(rep)
            fetch_bytes_max = FETCH_MAX_BYTES
            if bucket is not None:
                # An adding replica of a reassignment: at most the throttled rate.
                wait_s = bucket.delay_s(time.monotonic())
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                fetch_bytes_max = min(fetch_bytes_max, bucket.request_bytes_max())
            ans = await call(
                _session(mgr),
                url,
                "fetch",
                {
                    "topic": rep.topic,
                    "partition": rep.partition,
                    "replica_id": int(mgr.broker_id),
                    "broker_epoch": -1 if epoch is None else epoch,
                    "fetch_offset": rep.log.log_end_offset,
                    "leader_epoch": fs.leader_epoch,
                    "last_fetched_epoch": rep.log.latest_epoch,
                    "high_watermark": fs.high_watermark,
                    "log_start_offset": rep.log.log_start_offset,
                    "max_bytes": fetch_bytes_max,
                    "max_wait_ms": FETCH_MAX_WAIT_MS,
                    "min_bytes": 1,
                },
            )
            div = ans.get("diverging_epoch")
            if div is not None:
                log.info(
                    "broker %d: %s diverging epoch %s from leader %d",
                    mgr.broker_id,
                    rep.name,
                    div,
                    fs.leader_id,
                )
                step = fs.on_epoch_end_offset(int(div[0]), int(div[1]), rep.log)
                continue
            records = bytes(ans["records"])
            mgr.append_as_follower(rep, fs, records, int(ans["high_watermark"]))
            if bucket is not None:
                bucket.take(len(records), time.monotonic())
            if "log_start_offset" in ans:
                mgr.follow_log_start(rep, int(ans["log_start_offset"]))
            errors = 0
        except asyncio.CancelledError:
            raise
        except FetchError as e:
            if (
                e.code == "OFFSET_OUT_OF_RANGE"
                and url is not None
                and await _restart_below_leader_start(mgr, rep, url)
            ):
                continue
            errors += 1
            if errors == 1 or errors % 50 == 0:
                log.info(
                    "broker %d: fetching %s from %d: %s", mgr.broker_id, rep.name, fs.leader_id, e
                )
            await asyncio.sleep(RETRY_BACKOFF_S)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            errors += 1
            if errors == 1 and isinstance(
                e, aiohttp.ClientOSError | aiohttp.ServerDisconnectedError
            ):
                # A pooled keep-alive connection the leader had closed: retry at once.
                log.debug(
                    "broker %d: %s: retrying on a new connection: %r (cause %r)",
                    mgr.broker_id,
                    rep.name,
                    e,
                    e.__cause__ or e.__context__,
                )
                continue
            if errors == 1 or errors % 50 == 0:
                log.info(
                    "broker %d: fetching %s from %d: %s", mgr.broker_id, rep.name, fs.leader_id, e
                )
            await asyncio.sleep(RETRY_BACKOFF_S)
        except Exception:
            log.exception("broker %d: fetcher of %s failed", mgr.broker_id, rep.name)
            await asyncio.sleep(1.0)
