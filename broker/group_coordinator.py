"""``GroupCoordinator``: the asyncio shell around the consumer-group core on each broker.

What it owns: the ``__consumer_offsets`` partitions this broker leads, one
``GroupCoordinatorState`` (``broker.groups.group``) per loaded partition, the appends of the
records the core asks for, the answers held back until those records are committed, the
joins parked until their join phase completes, and one timer per partition. What it must
not do: decide anything about groups. Every rule lives in the pure core; this module moves
requests in and records and answers out (docs/consumer-groups.md, "The coordinator on a
broker").

Theory of operation
-------------------
* **Where a group lives.** Group ``g`` belongs to partition
  ``kafka_abs(java_string_hash(g)) % partitions`` of ``__consumer_offsets`` (Kafka's
  ``partitionFor``); its coordinator is that partition's leader. ``find_coordinator`` creates
  the topic through the active controller on first use.
* **Shards.** A *shard* is one offsets partition led here, identified by its
  ``Leadership`` (topic id, leader epoch). ``_reconcile`` (on every metadata update, and
  every ``RECONCILE_INTERVAL_S`` because the replica manager may apply an image later than it
  is published) compares the partitions the replica manager leads with the shards: a new
  leadership starts a load, a lost or changed one (new epoch: we may have missed appends by
  another leader in between) drops the shard.
* **Loading.** Read the partition's local log from its start to its end offset ``E``, wait
  until the high watermark reaches ``E`` (so nothing we answer from can be truncated away by
  a follower that becomes leader), replay every record into a fresh core, ``on_loaded(now)``.
  Meanwhile requests for the shard's groups get COORDINATOR_LOAD_IN_PROGRESS.
* **Appends.** Every ``Outcome`` becomes a ``_Pending`` in the shard's queue, in the order
  the core produced them. One writer task per shard appends the queued records (several
  outcomes per batch) with acks=all and, once the append is committed, delivers the
  outcomes in order: it resolves parked joins (``joins_completed``), registers the caller's
  own parked join, and wakes the caller. An outcome without records waits for those queued
  before it, so no answer ever reflects state that is not durable yet (etcd's ``Ready``
  rule). A failed append drops the shard: every waiting caller and parked join is answered
  NOT_COORDINATOR (leadership lost) or COORDINATOR_NOT_AVAILABLE (still leader; the shard
  is reloaded from the log, which realigns the core with what was really written).
* **Timers.** One ``call_later`` per shard at the earliest deadline any outcome reported;
  when it fires, ``poll(now)`` returns the next one.
* **Topics.** When the partition counts in the metadata image change, every loaded core
  gets ``update_topics``.
* **Metrics.** ``lag_snapshot`` reads every loaded core at once (no append, no wait for
  commits: a scrape must not queue behind group traffic) and asks each partition's end
  offset once, however many groups read it, within a time bound.
* **Transactions.** A TxnOffsetCommit's records are appended alone, as one transactional
  batch of the producer (its id and epoch, the next sequence of that producer here), and
  stay pending in the core. When a transaction marker is appended to one of this broker's
  offsets partitions (``on_txn_marker``, called by the replica manager once the marker is
  committed) the core completes that producer's pending offsets: committed or dropped.
  Loading replays the same from the log: transactional batches as pending, markers as
  completions.

The clock is injected (wall-clock milliseconds by default) and the log is reached through
the ``OffsetsLog`` port, so the unit tests run this shell against a fake log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar

from broker.endpoints import endpoint_url
from broker.errors import BrokerError
from broker.groups.group import (
    CommittedOffset,
    GroupConfig,
    GroupCoordinatorState,
    GroupDescription,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    OffsetCommitRequest,
    Outcome,
    PartitionLag,
    SyncRequest,
    SyncResponse,
    TxnOffsetCommitRequest,
)
from broker.groups.records import decode_record, encode_record
from broker.groups.types import ErrorCode, GroupState, TopicPartition
from broker.replica_manager import ReplicaManager, error_code
from broker.replica_state import ACKS_ALL
from broker.router import STORAGE_CODES
from common.waits import wait_event
from metalog.client import ControllerUnavailableError
from metalog.commands import CreateTopic
from metalog.errors import MetadataError, TopicExistsError
from metalog.image import MetadataImage
from metalog.records import BrokerId
from storage.batch import decode_records, encode_batch, iter_batches
from storage.errors import CorruptRecordError, StorageError
from storage.log import PartitionLog
from storage.txn import decode_marker

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_SEGMENT_BYTES = 100 * 1024 * 1024
"""Kafka's ``offsets.topic.segment.bytes``: smaller than a data topic's 1 GiB so the cleaner
(which never touches the active segment) gets to compact it."""
APPEND_BYTES_MAX = 512 * 1024
"""Records of several outcomes share one batch up to about this size (``max.message.bytes``
is 1 MiB)."""
RECONCILE_INTERVAL_S = 0.5
FIND_COORDINATOR_WAIT_S = 5.0
"""How long ``find_coordinator`` waits for a topic it created to show up with leaders."""
LIST_WAIT_S = 5.0
"""How long ``list_groups`` waits for shards that are loading."""
LOAD_RETRY_S = 1.0
END_OFFSETS_CONCURRENCY = 32
"""End offsets ``lag_snapshot`` asks at once (each a ListOffsets to the partition's leader,
local ones answered in place)."""
POLL_FLOOR_MS = 10
"""A deadline at or before ``now`` right after ``poll`` would spin; retry this much later."""

NOT_COORDINATOR = "NOT_COORDINATOR"
COORDINATOR_LOAD_IN_PROGRESS = "COORDINATOR_LOAD_IN_PROGRESS"
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE.value
UNSTABLE_OFFSET_COMMIT = "UNSTABLE_OFFSET_COMMIT"

R = TypeVar("R")


# ---------------------------------------------------------------- group -> partition


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    in 32-bit signed arithmetic."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that ``Integer.MIN_VALUE`` maps to 0
    (``Math.abs`` would return it unchanged, negative)."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group``: Kafka's ``partitionFor``, so a group
    lands on the partition number it would in Kafka."""
    return kafka_abs(java_string_hash(group)) % partitions


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------- errors, config, ports


class CoordinatorError(Exception):
    """A refusal of a whole request: ``code`` is Kafka's error name; ``coordinator_id`` goes
    with NOT_COORDINATOR (the coordinator this broker knows, -1 if none)."""

    def __init__(self, code: str, message: str = "", *, coordinator_id: int = -1) -> None:
        super().__init__(message or code)
        self.code = code
        self.coordinator_id = coordinator_id


@dataclass(frozen=True)
class CoordinatorConfig:
    """The broker configs of the coordinator; Kafka's name beside each."""

    offsets_topic_num_partitions: int = 10  # offsets.topic.num.partitions (Kafka: 50)
    offsets_topic_replication_factor: int = 3  # offsets.topic.replication.factor
    offsets_commit_timeout_ms: int = 5_000  # offsets.commit.timeout.ms
    group: GroupConfig = field(default_factory=GroupConfig)


@dataclass(frozen=True)
class CoordinatorInfo:
    coordinator_id: int
    url: str
    partition: int


@dataclass(frozen=True)
class GroupListing:
    group: str
    state: GroupState
    is_simple: bool


@dataclass(frozen=True)
class GroupLagSnapshot:
    """One group as a metrics scrape sees it (``GroupCoordinator.lag_snapshot``)."""

    group: str
    state: GroupState
    members: int
    lags: Mapping[TopicPartition, PartitionLag]
    """Partitions with a commit or an owner whose end offset could be read."""
    unknown: int
    """Partitions of the group whose end offset could not be read in time."""


class Leadership(NamedTuple):
    """One leadership of an offsets partition. A new topic id (the topic was recreated) or a
    new leader epoch is a new leadership: the shard is reloaded."""

    topic_id: str
    leader_epoch: int


KeyValue = tuple[bytes | None, bytes | None]


class TxnKeyValue(NamedTuple):
    """A record of a transactional batch (a TxnOffsetCommit), as the log holds it."""

    key: bytes | None
    value: bytes | None
    producer_id: int
    producer_epoch: int
    last_sequence: int


class LoggedMarker(NamedTuple):
    """A transaction marker (control batch) in the log."""

    producer_id: int
    producer_epoch: int
    commit: bool


LogEntry = KeyValue | TxnKeyValue | LoggedMarker


class TxnAppend(NamedTuple):
    """How to write a TxnOffsetCommit's records: one transactional batch of this producer."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional_id: str


class OffsetsLog(Protocol):
    """The local replicas of ``__consumer_offsets``, as the coordinator needs them."""

    def leadership(self, partition: int) -> Leadership | None:
        """This broker's leadership of the partition now; None if it does not lead it."""
        ...

    async def read(self, partition: int, lead: Leadership) -> tuple[list[LogEntry], int]:
        """Every record from the log start to the log end, and that end: ``(key, value)``,
        or ``TxnKeyValue`` in a transactional batch, or a ``LoggedMarker``."""
        ...

    async def wait_high_watermark(self, partition: int, lead: Leadership, offset: int) -> None:
        """Return once the high watermark is at least ``offset``; ``CoordinatorError`` if
        ``lead`` ends first."""
        ...

    async def append(
        self,
        partition: int,
        lead: Leadership,
        records: list[KeyValue],
        timestamp_ms: int,
        timeout_ms: int,
        txn: TxnAppend | None = None,
    ) -> None:
        """Append in ``lead`` with acks=all; return once committed, else ``CoordinatorError``.
        With ``txn``, as that producer's transactional batch."""
        ...


# ---------------------------------------------------------------- shards


@dataclass
class _Pending:
    """One outcome waiting for its records (and every earlier outcome's) to be committed."""

    records: list[KeyValue]
    size: int
    joins_completed: Mapping[tuple[str, str], JoinResponse]
    done: asyncio.Future[CoordinatorError | None]
    park: tuple[tuple[str, str], asyncio.Future[JoinResponse | CoordinatorError]] | None = None
    txn: tuple[int, int, str] | None = None
    """A TxnOffsetCommit's: (producer id, epoch, transactional id); appended alone."""


@dataclass
class _Shard:
    """One ``__consumer_offsets`` partition this broker leads."""

    partition: int
    lead: Leadership
    state: GroupCoordinatorState | None = None
    """None while loading. Invariant: only ever the state replayed in ``lead``."""
    loaded: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    load_task: asyncio.Task[None] | None = None
    writer: asyncio.Task[None] | None = None
    queue: deque[_Pending] = field(default_factory=deque)
    writing: list[_Pending] = field(default_factory=list)
    """Taken by the writer, appended but not yet known committed."""
    parked: dict[tuple[str, str], list[asyncio.Future[JoinResponse | CoordinatorError]]] = field(
        default_factory=dict
    )
    timer: asyncio.TimerHandle | None = None
    timer_deadline_ms: int | None = None
    txn_sequences: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Producer id -> (epoch, next sequence) of its transactional batches here: only this
    coordinator writes them, so it numbers them (the partition checks the order)."""
    early_markers: list[LoggedMarker] = field(default_factory=list)
    """Markers appended while the shard was loading: applied after the replay."""


# ---------------------------------------------------------------- the coordinator


class GroupCoordinator:
    """See the module docstring. ``start()``, the request methods, ``stop()``."""

    def __init__(
        self,
        *,
        broker_id: int,
        offsets_log: OffsetsLog,
        image: Callable[[], MetadataImage],
        create_topic: Callable[[CreateTopic], Awaitable[Any]],
        end_offset: Callable[[str, int], Awaitable[int | None]],
        config: CoordinatorConfig | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        new_member_id: Callable[[str], str] | None = None,
    ) -> None:
        """``end_offset(topic, partition)`` is the partition's high watermark wherever it is
        led (None: no such partition); ``create_topic`` runs a command on the controller."""
        self.broker_id = broker_id
        self.log = offsets_log
        self.image = image
        self._create_topic = create_topic
        self._end_offset = end_offset
        self.config = config or CoordinatorConfig()
        self.clock = clock
        self._new_member_id = new_member_id or (lambda client_id: f"{client_id}-{uuid.uuid4()}")
        self.shards: dict[int, _Shard] = {}
        self._topic_counts: dict[str, int] = {}
        self._counted_image: MetadataImage | None = None
        self._image_counts: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._image_changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._creating: asyncio.Task[None] | None = None
        self._stopped = False

    # ------------------------------------------------------------ lifecycle

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The coordinator's loop, once started (watched: ``common.essential``)."""
        return self._task

    async def start(self) -> None:
        self._wake.set()  # reconcile at once: the image may already name leaderships
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group-coordinator")

    async def stop(self) -> None:
        self._stopped = True
        for task in (self._task, self._creating):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        for shard in list(self.shards.values()):
            await self._drop(shard, CoordinatorError(NOT_COORDINATOR, "the broker is stopping"))

    async def on_metadata(self, update: object) -> None:
        """A ``MetadataFollower`` listener: reconcile soon (not inline: the follower awaits
        its listeners before it applies the next image)."""
        self._wake.set()
        ev, self._image_changed = self._image_changed, asyncio.Event()
        ev.set()

    async def _run(self) -> None:
        while True:
            await wait_event(self._wake, RECONCILE_INTERVAL_S)
            self._wake.clear()
            try:
                await self._reconcile()
            except Exception:
                log.exception("broker %d: group coordinator reconcile failed", self.broker_id)

    async def _reconcile(self) -> None:
        image = self.image()
        # Images are immutable values: the timer's reconciles between metadata updates see
        # the same one and need not count every topic's partitions again.
        if image is not self._counted_image:
            self._counted_image = image
            self._image_counts = {t.name: len(t.partitions) for t in image.topics.by_id.values()}
        counts = self._image_counts
        topic = image.topics.get(OFFSETS_TOPIC)
        led: dict[int, Leadership] = {}
        if topic is not None:
            for p in topic.partitions:
                lead = self.log.leadership(p)
                if lead is not None:
                    led[p] = lead
        for p, shard in list(self.shards.items()):
            if led.get(p) != shard.lead:
                log.info(
                    "broker %d: no longer coordinator for %s-%d (%s)",
                    self.broker_id,
                    OFFSETS_TOPIC,
                    p,
                    "leadership changed" if p in led else "not leader",
                )
                await self._drop(
                    shard,
                    CoordinatorError(
                        NOT_COORDINATOR,
                        f"broker {self.broker_id} no longer leads {OFFSETS_TOPIC}-{p}",
                        coordinator_id=self._leader_in(image, p),
                    ),
                )
        if counts != self._topic_counts:
            self._topic_counts = counts
            now = self.clock()
            for shard in list(self.shards.values()):
                if shard.state is None:
                    continue  # a load in progress builds its core with the new counts
                with contextlib.suppress(Exception):  # _core logged it and reloads the shard
                    self._submit(shard, self._core(shard, lambda st: st.update_topics(counts, now)))
        for p, lead in sorted(led.items()):
            if p not in self.shards and not self._stopped:
                self._load(p, lead)

    # ------------------------------------------------------------ loading

    def _load(self, partition: int, lead: Leadership) -> None:
        shard = _Shard(partition, lead)
        self.shards[partition] = shard
        shard.load_task = asyncio.get_running_loop().create_task(
            self._run_load(shard), name=f"group-load-{partition}"
        )

    async def _run_load(self, shard: _Shard) -> None:
        started = time.monotonic()
        p = shard.partition
        try:
            pairs, end = await self.log.read(p, shard.lead)
            # Everything we answer from must be committed: a follower that becomes leader
            # truncates what is above the high watermark.
            await self.log.wait_high_watermark(p, shard.lead, end)
        except Exception as e:  # whatever it is, a shard must not stay "loading" for ever
            log.warning(
                "broker %d: loading %s-%d failed: %r; retrying", self.broker_id, OFFSETS_TOPIC, p, e
            )
            await asyncio.sleep(LOAD_RETRY_S)
            if not shard.closed:
                await self._drop(shard, CoordinatorError(COORDINATOR_NOT_AVAILABLE, str(e)))
                self._wake.set()
            return
        if shard.closed:
            return
        state = GroupCoordinatorState(
            self.config.group,
            new_member_id=self._new_member_id,
            partitions_per_topic=self._topic_counts,
        )
        skipped = 0
        for entry in pairs:
            try:
                if isinstance(entry, LoggedMarker):
                    state.complete_txn(entry.producer_id, entry.commit, self.clock())
                    continue
                if entry[0] is None:
                    skipped += 1
                    continue
                record = decode_record(entry[0], entry[1])
                if isinstance(entry, TxnKeyValue):
                    state.replay_txn(record, entry.producer_id)
                    shard.txn_sequences[entry.producer_id] = (
                        entry.producer_epoch,
                        entry.last_sequence + 1,
                    )
                else:
                    state.replay(record)
            except Exception as e:  # a foreign or corrupt record must not wedge the partition
                skipped += 1
                if skipped <= 3:
                    log.warning(
                        "broker %d: %s-%d: skipping a record that does not replay: %s",
                        self.broker_id,
                        OFFSETS_TOPIC,
                        p,
                        e,
                    )
        shard.state = state
        shard.loaded.set()
        self._submit(shard, self._core(shard, lambda st: st.on_loaded(self.clock())))
        early, shard.early_markers = shard.early_markers, []
        for m in early:
            self._complete_txn(shard, m)
        log.info(
            "broker %d: coordinator for %s-%d (epoch %d): loaded %d records (%d skipped), "
            "%d groups, in %.0f ms",
            self.broker_id,
            OFFSETS_TOPIC,
            p,
            shard.lead.leader_epoch,
            len(pairs),
            skipped,
            len(state.groups),
            (time.monotonic() - started) * 1000,
        )

    async def _drop(self, shard: _Shard, err: CoordinatorError) -> None:
        """Forget the shard; answer everything waiting on it with ``err``."""
        if shard.closed:
            return
        shard.closed = True
        shard.state = None
        if self.shards.get(shard.partition) is shard:
            del self.shards[shard.partition]
        if shard.timer is not None:
            shard.timer.cancel()
        for p in [*shard.writing, *shard.queue]:
            if not p.done.done():
                p.done.set_result(err)
        shard.writing.clear()
        shard.queue.clear()
        for futs in shard.parked.values():
            for f in futs:
                if not f.done():
                    f.set_result(err)
        shard.parked.clear()
        shard.loaded.set()  # wake list_groups; it sees the shard closed
        me = asyncio.current_task()
        for task in (shard.load_task, shard.writer):
            if task is not None and task is not me and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    # ------------------------------------------------------------ outcomes

    def _core(
        self, shard: _Shard, call: Callable[[GroupCoordinatorState], Outcome[R]]
    ) -> Outcome[R]:
        """Run one core call. If it raises (a broken invariant), its half-done changes are
        not trusted: the shard is reloaded from the log."""
        assert shard.state is not None
        try:
            return call(shard.state)
        except Exception:
            log.exception(
                "broker %d: group core of %s-%d raised; reloading the partition",
                self.broker_id,
                OFFSETS_TOPIC,
                shard.partition,
            )
            asyncio.get_running_loop().create_task(
                self._drop(
                    shard,
                    CoordinatorError(COORDINATOR_NOT_AVAILABLE, "coordinator error; reloading"),
                )
            )
            self._wake.set()
            raise

    def _submit(
        self,
        shard: _Shard,
        outcome: Outcome[Any],
        park: asyncio.Future[JoinResponse | CoordinatorError] | None = None,
        transactional_id: str = "",
    ) -> asyncio.Future[CoordinatorError | None]:
        """Queue ``outcome``: its answers are released once its records and every earlier
        outcome's are committed. Must be called right after the core call, with no ``await``
        in between, so the queue order is the order the core changed state in."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[CoordinatorError | None] = loop.create_future()
        if shard.closed:
            done.set_result(CoordinatorError(NOT_COORDINATOR, "coordinator moved"))
            return done
        records: list[KeyValue] = [encode_record(r) for r in outcome.records]
        size = sum(len(k or b"") + len(v or b"") + 16 for k, v in records)
        pending = _Pending(
            records,
            size,
            outcome.joins_completed,
            done,
            None if park is None or outcome.parked is None else (outcome.parked, park),
            None if outcome.txn is None or not records else (*outcome.txn, transactional_id),
        )
        self._note_deadline(shard, outcome.deadline_ms)
        if not records and not shard.queue and not shard.writing:
            self._deliver(shard, pending)  # nothing to wait for
            return done
        shard.queue.append(pending)
        if shard.writer is None or shard.writer.done():
            shard.writer = loop.create_task(
                self._write(shard), name=f"group-append-{shard.partition}"
            )
        return done

    async def _write(self, shard: _Shard) -> None:
        while shard.queue and not shard.closed:
            taken: list[_Pending] = []
            size = 0
            while shard.queue and (not taken or size + shard.queue[0].size <= APPEND_BYTES_MAX):
                # A transactional batch belongs to one producer: it goes alone.
                if taken and (taken[0].txn is not None or shard.queue[0].txn is not None):
                    break
                p = shard.queue.popleft()
                taken.append(p)
                size += p.size
            shard.writing = taken
            records = [kv for p in taken for kv in p.records]
            txn = self._txn_append(shard, taken[0], len(records))
            if records:
                try:
                    await self.log.append(
                        shard.partition,
                        shard.lead,
                        records,
                        self.clock(),
                        self.config.offsets_commit_timeout_ms,
                        txn,
                    )
                    if txn is not None:
                        shard.txn_sequences[txn.producer_id] = (
                            txn.producer_epoch,
                            txn.base_sequence + len(records),
                        )
                except Exception as e:  # never leave the callers in ``writing`` waiting
                    if txn is not None and isinstance(e, CoordinatorError):
                        # The partition refused the producer (fenced, not in the transaction,
                        # ...): its caller hears why. The core already holds the offsets as
                        # pending, so the shard is still reloaded below.
                        for p in taken:
                            if not p.done.done():
                                p.done.set_result(CoordinatorError(e.code, str(e)))
                    await self._append_failed(shard, e)
                    return
            shard.writing = []
            for p in taken:
                self._deliver(shard, p)

    @staticmethod
    def _txn_append(shard: _Shard, p: _Pending, count: int) -> TxnAppend | None:
        if p.txn is None:
            return None
        pid, epoch, tid = p.txn
        last_epoch, next_seq = shard.txn_sequences.get(pid, (-1, 0))
        # A new epoch (every transaction's end bumps it) starts again at sequence 0.
        return TxnAppend(pid, epoch, next_seq if last_epoch == epoch else 0, tid)

    def on_txn_marker(self, partition: int, producer_id: int, epoch: int, commit: bool) -> None:
        """A transaction marker is committed in offsets partition ``partition`` here: the
        producer's pending offsets are committed or dropped."""
        shard = self.shards.get(partition)
        if shard is None or shard.closed:
            return  # whoever loads the partition reads the marker
        marker = LoggedMarker(producer_id, epoch, commit)
        if shard.state is None:
            shard.early_markers.append(marker)
            return
        self._complete_txn(shard, marker)

    def _complete_txn(self, shard: _Shard, m: LoggedMarker) -> None:
        def call(st: GroupCoordinatorState) -> Outcome[None]:
            return st.complete_txn(m.producer_id, m.commit, self.clock())

        with contextlib.suppress(Exception):  # _core logged it and reloads the shard
            self._submit(shard, self._core(shard, call))

    async def _append_failed(self, shard: _Shard, e: Exception) -> None:
        still_leader = self.log.leadership(shard.partition) == shard.lead
        code = COORDINATOR_NOT_AVAILABLE if still_leader else NOT_COORDINATOR
        log.warning(
            "broker %d: append to %s-%d failed (%s); %s",
            self.broker_id,
            OFFSETS_TOPIC,
            shard.partition,
            e,
            "reloading it" if still_leader else "dropping it",
        )
        await self._drop(
            shard,
            CoordinatorError(
                code,
                f"appending to {OFFSETS_TOPIC}-{shard.partition} failed: {e}",
                coordinator_id=self._leader_in(self.image(), shard.partition),
            ),
        )
        # Still leader: the core may hold changes the log does not; reload it from the log.
        self._wake.set()

    def _deliver(self, shard: _Shard, p: _Pending) -> None:
        for key, response in p.joins_completed.items():
            for f in shard.parked.pop(key, []):
                if not f.done():
                    f.set_result(response)
        if p.park is not None:
            # Registered only now, after the answers of earlier outcomes went out: one of
            # those may complete an earlier join of the same member, which is not this one.
            key, fut = p.park
            shard.parked.setdefault(key, []).append(fut)
        if not p.done.done():
            p.done.set_result(None)

    # ------------------------------------------------------------ timers

    def _note_deadline(self, shard: _Shard, deadline_ms: int | None) -> None:
        if deadline_ms is None or shard.closed:
            return
        if shard.timer_deadline_ms is not None and shard.timer_deadline_ms <= deadline_ms:
            return
        if shard.timer is not None:
            shard.timer.cancel()
        shard.timer_deadline_ms = deadline_ms
        delay_s = max(0, deadline_ms - self.clock()) / 1000
        shard.timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer, shard)

    def _on_timer(self, shard: _Shard) -> None:
        shard.timer = None
        shard.timer_deadline_ms = None
        if shard.closed or shard.state is None:
            return
        now = self.clock()
        try:
            outcome = self._core(shard, lambda st: st.poll(now))
        except Exception:
            return
        if outcome.deadline_ms is not None and outcome.deadline_ms <= now:
            outcome = Outcome(
                None, outcome.records, outcome.joins_completed, now + POLL_FLOOR_MS, None
            )
        self._submit(shard, outcome)

    # ------------------------------------------------------------ routing

    @staticmethod
    def _leader_in(image: MetadataImage, partition: int) -> int:
        t = image.topics.get(OFFSETS_TOPIC)
        reg = None if t is None else t.partitions.get(partition)
        return -1 if reg is None else int(reg.leader)

    def _shard_or_raise(self, group: str) -> _Shard:
        image = self.image()
        t = image.topics.get(OFFSETS_TOPIC)
        if t is None or len(t.partitions) == 0:
            raise CoordinatorError(
                NOT_COORDINATOR, f"{OFFSETS_TOPIC} does not exist yet (find_coordinator creates it)"
            )
        p = partition_for(group, len(t.partitions))
        shard = self.shards.get(p)
        leader = self._leader_in(image, p)
        if shard is None or self.log.leadership(p) != shard.lead:
            if leader == self.broker_id or self.log.leadership(p) is not None:
                # The image names this broker (the replica takes over in a moment) or the
                # replica leads and the shard is not there yet: either way, it is coming.
                self._wake.set()
                raise CoordinatorError(
                    COORDINATOR_LOAD_IN_PROGRESS, f"{OFFSETS_TOPIC}-{p} is being loaded"
                )
            raise CoordinatorError(
                NOT_COORDINATOR,
                f"broker {self.broker_id} does not coordinate group "
                f"{group!r} ({OFFSETS_TOPIC}-{p}, leader {leader})",
                coordinator_id=leader,
            )
        if shard.state is None:
            raise CoordinatorError(
                COORDINATOR_LOAD_IN_PROGRESS, f"{OFFSETS_TOPIC}-{p} is being loaded"
            )
        return shard

    async def _call(
        self, group: str, call: Callable[[GroupCoordinatorState, int], Outcome[R]]
    ) -> R:
        """One request: the core call, then its answer once what it wrote is committed."""
        shard = self._shard_or_raise(group)
        outcome = self._core(shard, lambda st: call(st, self.clock()))
        err = await self._submit(shard, outcome)
        if err is not None:
            raise err
        assert outcome.response is not None
        return outcome.response

    async def _read(self, group: str, read: Callable[[GroupCoordinatorState], R]) -> R:
        """A read of the core, answered once every earlier change is committed."""
        return await self._call(group, lambda st, _now: Outcome(read(st)))

    # ------------------------------------------------------------ requests

    async def find_coordinator(self, group: str) -> CoordinatorInfo:
        image = self.image()
        if image.topics.get(OFFSETS_TOPIC) is None:
            if self._creating is None or self._creating.done():
                self._creating = asyncio.get_running_loop().create_task(
                    self._create_offsets_topic(), name="create-offsets-topic"
                )
                # Callers that went away leave its failure unread: read it here.
                self._creating.add_done_callback(lambda t: None if t.cancelled() else t.exception())
            await asyncio.shield(self._creating)

        def located(im: MetadataImage) -> bool:
            t = im.topics.get(OFFSETS_TOPIC)
            if t is None or len(t.partitions) == 0:
                return False
            return self._leader_in(im, partition_for(group, len(t.partitions))) >= 0

        await self._wait_image(located, FIND_COORDINATOR_WAIT_S)
        image = self.image()
        t = image.topics.get(OFFSETS_TOPIC)
        if t is None or len(t.partitions) == 0:
            raise CoordinatorError(
                COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} is not in this broker's metadata yet"
            )
        p = partition_for(group, len(t.partitions))
        leader = self._leader_in(image, p)
        br = image.brokers.get(BrokerId(leader)) if leader >= 0 else None
        if br is None or not br.endpoints:
            raise CoordinatorError(
                COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC}-{p} has no leader now"
            )
        url = endpoint_url(br.endpoints, None)  # clients dial it: the first endpoint
        assert url is not None
        return CoordinatorInfo(leader, url, p)

    async def _create_offsets_topic(self) -> None:
        image = self.image()
        usable = len(image.brokers.usable())
        rf = min(self.config.offsets_topic_replication_factor, usable)
        if rf < 1:
            raise CoordinatorError(COORDINATOR_NOT_AVAILABLE, "no usable broker registered yet")
        cmd = CreateTopic(
            name=OFFSETS_TOPIC,
            num_partitions=self.config.offsets_topic_num_partitions,
            replication_factor=rf,
            configs={"cleanup.policy": "compact", "segment.bytes": str(OFFSETS_SEGMENT_BYTES)},
        )
        try:
            await self._create_topic(cmd)
            log.info(
                "broker %d: created %s (%d partitions, replication factor %d)",
                self.broker_id,
                OFFSETS_TOPIC,
                cmd.num_partitions,
                rf,
            )
        except TopicExistsError:
            pass  # another broker's find_coordinator was first
        except (MetadataError, ControllerUnavailableError) as e:
            raise CoordinatorError(
                COORDINATOR_NOT_AVAILABLE, f"creating {OFFSETS_TOPIC}: {e}"
            ) from None

    async def _wait_image(self, cond: Callable[[MetadataImage], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond(self.image()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await wait_event(self._image_changed, left)

    async def join(self, req: JoinRequest) -> JoinResponse:
        """Long-polls until the join phase completes (or the coordinator moves)."""
        shard = self._shard_or_raise(req.group)
        outcome = self._core(shard, lambda st: st.handle_join(req, self.clock()))
        fut: asyncio.Future[JoinResponse | CoordinatorError] | None = None
        if outcome.parked is not None:
            fut = asyncio.get_running_loop().create_future()
        err = await self._submit(shard, outcome, fut)
        if err is not None:
            raise err
        if fut is None:
            assert outcome.response is not None
            return outcome.response
        try:
            answer = await fut
        finally:
            assert outcome.parked is not None
            waiting = shard.parked.get(outcome.parked)
            if waiting is not None and fut in waiting:  # the caller went away
                waiting.remove(fut)
                if not waiting:
                    del shard.parked[outcome.parked]
        if isinstance(answer, CoordinatorError):
            raise answer
        return answer

    async def sync(self, req: SyncRequest) -> SyncResponse:
        return await self._call(req.group, lambda st, now: st.handle_sync(req, now))

    async def heartbeat(self, req: HeartbeatRequest) -> ErrorCode:
        return await self._call(req.group, lambda st, now: st.handle_heartbeat(req, now))

    async def leave(self, req: LeaveRequest) -> ErrorCode:
        return await self._call(req.group, lambda st, now: st.handle_leave(req, now))

    async def commit(self, req: OffsetCommitRequest) -> ErrorCode:
        return await self._call(req.group, lambda st, now: st.handle_offset_commit(req, now))

    async def txn_commit(self, req: TxnOffsetCommitRequest, transactional_id: str) -> ErrorCode:
        """TxnOffsetCommit: answered once the transactional batch is committed; the offsets
        count once the transaction's commit marker is in the partition."""
        shard = self._shard_or_raise(req.group)
        outcome = self._core(shard, lambda st: st.handle_txn_offset_commit(req, self.clock()))
        err = await self._submit(shard, outcome, transactional_id=transactional_id)
        if err is not None:
            raise err
        assert outcome.response is not None
        return outcome.response

    async def reset_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> ErrorCode:
        return await self._call(group, lambda st, now: st.handle_offset_reset(group, offsets, now))

    async def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> ErrorCode:
        wanted = list(partitions)
        return await self._call(group, lambda st, now: st.handle_offset_delete(group, wanted, now))

    async def delete_group(self, group: str) -> ErrorCode:
        return await self._call(group, lambda st, now: st.handle_delete_group(group, now))

    async def fetch_offsets(
        self,
        group: str,
        partitions: Iterable[TopicPartition] | None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, CommittedOffset]:
        """With ``require_stable`` (KIP-447), UNSTABLE_OFFSET_COMMIT while a transaction
        holds offsets of these partitions (the caller retries)."""
        wanted = None if partitions is None else list(partitions)

        def read(st: GroupCoordinatorState) -> tuple[bool, dict[TopicPartition, CommittedOffset]]:
            if require_stable and st.unstable(group, wanted):
                return False, {}
            return True, st.fetch_offsets(group, wanted)

        stable, got = await self._read(group, read)
        if not stable:
            raise CoordinatorError(
                UNSTABLE_OFFSET_COMMIT,
                f"group {group!r}: a transaction holds offsets not yet committed or aborted",
            )
        return got

    async def describe(self, group: str) -> GroupDescription:
        return await self._read(group, lambda st: st.describe(group))

    async def lag(self, group: str) -> dict[TopicPartition, PartitionLag]:
        """Over every partition the group has an offset for or is assigned, with the high
        watermark (what a consumer can read, as Kafka's lag) as the log end offset.
        Partitions of topics that no longer exist are left out."""
        shard = self._shard_or_raise(group)
        assert shard.state is not None
        tps = set(shard.state.fetch_offsets(group))
        for m in shard.state.describe(group).members:
            tps |= m.assignment
        ordered = sorted(tps)
        ends = await asyncio.gather(*(self._end_offset(tp.topic, tp.partition) for tp in ordered))
        known = {tp: e for tp, e in zip(ordered, ends, strict=True) if e is not None}
        return await self._read(group, lambda st: st.lag(group, known))

    async def lag_snapshot(self, timeout_s: float) -> list[GroupLagSnapshot]:
        """Every group of the loaded shards with its lag per partition, as ``lag`` computes
        it, for ``/metrics``. The cores are read as they stand (a commit being appended may
        already count); each partition's end offset is asked once, and those not answered
        within ``timeout_s`` are left out (counted in ``unknown``)."""
        seen: list[tuple[GroupCoordinatorState, str, GroupDescription, set[TopicPartition]]] = []
        wanted: set[TopicPartition] = set()
        for shard in list(self.shards.values()):
            st = shard.state
            if st is None or shard.closed:
                continue
            for gid in sorted(st.groups):
                d = st.describe(gid)
                tps = set(st.fetch_offsets(gid))
                for m in d.members:
                    tps |= m.assignment
                seen.append((st, gid, d, tps))
                wanted |= tps
        ends = await self._end_offsets(sorted(wanted), timeout_s)
        out = []
        for st, gid, d, tps in seen:
            known = {tp: ends[tp] for tp in tps if tp in ends}
            out.append(
                GroupLagSnapshot(
                    gid, d.state, len(d.members), st.lag(gid, known), len(tps) - len(known)
                )
            )
        return out

    async def _end_offsets(
        self, tps: list[TopicPartition], timeout_s: float
    ) -> dict[TopicPartition, int]:
        """The end offset of each of ``tps`` that answered within ``timeout_s`` (a partition
        that no longer exists, or whose leader did not answer, is left out)."""
        if not tps:
            return {}
        gate = asyncio.Semaphore(END_OFFSETS_CONCURRENCY)

        async def one(tp: TopicPartition) -> int | None:
            async with gate:
                try:
                    return await self._end_offset(tp.topic, tp.partition)
                except Exception as e:  # a leader away: this scrape goes without it
                    log.debug("broker %d: end offset of %s: %s", self.broker_id, tp, e)
                    return None

        tasks = {asyncio.ensure_future(one(tp)): tp for tp in tps}
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        out = {}
        for t in done:
            end = t.result()
            if end is not None:
                out[tasks[t]] = end
        return out

    async def list_groups(self) -> list[GroupListing]:
        """The groups of every partition this broker coordinates."""
        loading = [s for s in self.shards.values() if s.state is None and not s.closed]
        if loading:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LIST_WAIT_S):
                    await asyncio.gather(*(s.loaded.wait() for s in loading))
            if any(s.state is None and not s.closed for s in self.shards.values()):
                raise CoordinatorError(
                    COORDINATOR_LOAD_IN_PROGRESS, "an offsets partition is still loading"
                )
        out: list[GroupListing] = []
        waits = []
        for shard in list(self.shards.values()):
            st = shard.state
            if st is None:
                continue
            for gid in sorted(st.groups):
                d = st.describe(gid)
                out.append(GroupListing(gid, d.state, d.is_simple))
            waits.append(self._submit(shard, Outcome(None)))
        for err in await asyncio.gather(*waits):
            if err is not None:
                raise err
        return sorted(out, key=lambda g: g.group)


# ---------------------------------------------------------------- the ports, over a broker


def _replica_error_code(e: Exception) -> str:
    if isinstance(e, BrokerError):
        return error_code(e)
    if isinstance(e, StorageError):
        return STORAGE_CODES.get(type(e).__name__, "KAFKA_STORAGE_ERROR")
    return "UNKNOWN_SERVER_ERROR"


def read_key_values(plog: PartitionLog, end: int) -> list[LogEntry]:
    """Every record from the log start to ``end``, in offset order: ``(key, value)``, a
    ``TxnKeyValue`` for a record of a transactional batch, a ``LoggedMarker`` for a
    transaction marker (other control batches left out). Runs in a worker thread: the log
    has its own lock."""
    out: list[LogEntry] = []
    offset = plog.log_start_offset
    while offset < end:
        data = plog.read(offset, 1 << 20).data
        if not data:
            break
        before = offset
        for pos, h in iter_batches(data):
            if h.base_offset >= end:
                return out
            if h.is_control:
                if h.producer_id >= 0:
                    try:
                        m = decode_marker(data[pos : pos + h.size], verify=False)
                    except StorageError:
                        pass  # a control batch that is not a marker ends nothing
                    else:
                        out.append(LoggedMarker(h.producer_id, h.producer_epoch, m.commit))
            elif h.is_transactional:
                records = decode_records(data[pos : pos + h.size], verify=False)
                last_seq = h.base_sequence + len(records) - 1
                for r in records:
                    if r.offset < end:
                        out.append(
                            TxnKeyValue(r.key, r.value, h.producer_id, h.producer_epoch, last_seq)
                        )
            else:
                for r in decode_records(data[pos : pos + h.size], verify=False):
                    if r.offset < end:
                        out.append((r.key, r.value))
            offset = h.next_offset
        if offset == before:
            raise CorruptRecordError(f"no whole batch at offset {offset} of {plog.dir_path}")
    return out


class ReplicaOffsetsLog:
    """``OffsetsLog`` over this broker's ``ReplicaManager``: reads the local log, appends
    through the leader's produce path (acks=all), as a producer's batch. ``topic``: the
    transaction coordinator uses it over ``__transaction_state``."""

    def __init__(self, replicas: ReplicaManager, topic: str = OFFSETS_TOPIC) -> None:
        self.replicas = replicas
        self.topic = topic

    def leadership(self, partition: int) -> Leadership | None:
        rep = self.replicas.by_name.get((self.topic, partition))
        leader = None if rep is None else rep.leader
        if rep is None or leader is None or not leader.is_leader:
            return None
        return Leadership(str(rep.topic_id), leader.leader_epoch)

    def _check(self, partition: int, lead: Leadership) -> None:
        if self.leadership(partition) != lead:
            raise CoordinatorError(
                NOT_COORDINATOR, f"leadership of {self.topic}-{partition} changed"
            )

    async def read(self, partition: int, lead: Leadership) -> tuple[list[LogEntry], int]:
        self._check(partition, lead)
        plog = self.replicas.by_name[(self.topic, partition)].log
        end = plog.log_end_offset
        return await asyncio.to_thread(read_key_values, plog, end), end

    async def wait_high_watermark(self, partition: int, lead: Leadership, offset: int) -> None:
        while True:
            self._check(partition, lead)
            rep = self.replicas.by_name[(self.topic, partition)]
            if rep.high_watermark >= offset:
                return
            await wait_event(rep.changed, RECONCILE_INTERVAL_S)

    async def append(
        self,
        partition: int,
        lead: Leadership,
        records: list[KeyValue],
        timestamp_ms: int,
        timeout_ms: int,
        txn: TxnAppend | None = None,
    ) -> None:
        # Checked with no await before the produce's own (synchronous) append: a batch is
        # never written in a leadership other than the one its records were decided in.
        self._check(partition, lead)
        kvs = [(k, v, timestamp_ms, ()) for k, v in records]
        if txn is None:
            batch = encode_batch(kvs)
        else:
            batch = encode_batch(
                kvs,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                base_sequence=txn.base_sequence,
                transactional=True,
            )
        try:
            await self.replicas.produce(
                self.topic,
                partition,
                ACKS_ALL,
                timeout_ms,
                batch,
                transactional_id=None if txn is None else txn.transactional_id,
            )
        except (BrokerError, StorageError) as e:
            raise CoordinatorError(_replica_error_code(e), str(e)) from None


def router_end_offset(
    list_offsets: Callable[..., Awaitable[dict[str, Any]]],
) -> Callable[[str, int], Awaitable[int | None]]:
    """``end_offset`` for the coordinator from ``PartitionRouter.list_offsets``: the high
    watermark of a partition led anywhere; None if the partition does not exist."""

    async def end_offset(topic: str, partition: int) -> int | None:
        try:
            out = await list_offsets(topic, partition, -1, timeout_ms=10_000)
        except BrokerError as e:
            code = error_code(e)
            if code == "UNKNOWN_TOPIC_OR_PARTITION":
                return None
            raise CoordinatorError(code, f"log end offset of {topic}-{partition}: {e}") from None
        return int(out["offset"])

    return end_offset
