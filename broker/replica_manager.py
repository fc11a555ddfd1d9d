"""``ReplicaManager``: the broker's asyncio shell around the replication cores.

It hosts the partition replicas this broker holds and follows docs/replication.md, "What the
asyncio shell must do":

* subscribes to the ``MetadataFollower``; on every ``MetadataUpdate`` it reconciles against
  the whole image (so snapshots and deltas are handled alike): opens or creates the
  ``PartitionLog`` of each partition with a replica here under ``DATA_DIR/<topic>-<partition>``
  (``LogConfig`` from the topic's configs), becomes leader (the new epoch is assigned in the
  log's epoch cache first, then ``LeaderState``) or follower (``FollowerState``, fetched by
  the fetcher of its leader, ``broker.fetcher``), and deletes the logs of replicas that went
  away;
* serves produce, fetch (a follower's of many partitions at once too, ``fetch_for_follower``),
  OffsetsForLeaderEpoch and ListOffsets for ``broker.data_routes``;
* runs one timer task (acks=all deadlines through ``LeaderState.poll``, ISR shrink every
  ``replica.lag.time.max.ms / 2``) and one sender task that sends the leaders' ISR changes to
  the controller, all pending ones in one ``AlterPartition`` request at a time
  (``broker.alter_partition_manager``, Kafka's ``AlterPartitionManager``);
* one ``GroupCommitter`` for every log (acks=1 waits for the fsync).

Everything runs on one event loop. The sequences the spec asks to hold a partition lock
around contain no ``await``, so they cannot interleave.

The HW of every replica is checkpointed (``high-watermark-checkpoint`` in the partition's
directory) every second when it moved and at shutdown, and read back, capped by the log end,
when the log is opened.

Producer state is snapshotted at a clean shutdown (``producer-state.snapshot``, read and
deleted at the next open, the headers after it replayed); without one it is rebuilt from
every batch header of the log.

Transactions, the partition side (KIP-98, docs/transactions.md): transactional produce
(with the KIP-890 part 1 verification through ``txn_verifier`` before a batch opens a
transaction), ``write_txn_markers`` (the leader appends a control batch and answers once
the HW passes it, as Kafka's WriteTxnMarkers), the last stable offset of each replica
(``Replica.last_stable_offset``), and reads at ``isolation_level`` read_committed (up to the
LSO, with the aborted transactions of the range). Producer state (open transactions)
follows every batch a follower or recovery applies, markers included; the entry of each
abort marker a leader or follower appends goes to the log's per-segment aborted-transaction
index (``PartitionLog.append_aborted_txn``, Kafka's ``.txnindex``), which read_committed
reads collect from (``PartitionLog.aborted_txns_in``).

Traffic per topic (bytes and records in and out, for ``/metrics``) is counted in plain
integers on ``TopicTraffic`` objects as produce and fetch run; everything else the metrics
show (offsets, ISR, flags) is read from the replicas when scraped (``describe``).

Not built yet: snapshots at segment rolls (a crash means a full rebuild), reading from
followers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.alter_partition_manager import AlterItem, AlterPartitionQueue
from broker.endpoints import endpoint_url
from broker.errors import BrokerError, InvalidTxnStateError
from broker.fetch_plan import PartitionFetch
from broker.fetch_session import FetchSessionCache
from broker.fetcher import ReplicaFetchers
from broker.metadata_follower import MetadataUpdate
from broker.producer_state import Duplicate, ProducerState, ProducerStateConfig
from broker.replica_state import (
    ACKS_ALL,
    AlterOutcome,
    FollowerState,
    LeaderState,
    ReplicationConfig,
)
from broker.throttle import THROTTLE_RATE_CONFIG, TokenBucket
from broker.txn_markers import TxnMarker, TxnVerifier
from common.essential import Essentials
from common.invariant import invariant
from common.waits import join_task, wait_event
from metalog.client import ControllerClient, ControllerUnavailableError
from metalog.commands import AlterPartition, PartitionStateChange, ReplicaLogInfo
from metalog.errors import MetadataError
from metalog.image import MetadataImage, PartitionRegistration
from metalog.records import (
    NO_LEADER,
    BrokerEpoch,
    BrokerId,
    ConfigResourceType,
    LeaderEpoch,
    LeaderRecoveryState,
    PartitionEpoch,
    TopicId,
)
from metalog.responses import AlterPartitionResponse, AlterPartitionResult
from storage import checkpoint
from storage.batch import (
    HEADER_SIZE,
    BatchHeader,
    iter_batches,
    parse_header,
    peek_prefix,
    verify_batch,
)
from storage.config import LogConfig
from storage.errors import (
    CorruptCheckpointError,
    CorruptSegmentError,
    KafkaStorageError,
    StorageError,
)
from storage.group_commit import GroupCommitter
from storage.log import FileRange, LogTruncatedError, PartitionLog
from storage.logdir import NO_SPACE_ERRNOS, LogDirectory
from storage.page_cache import PageCacheTrimmer
from storage.txn import ControlMarker, decode_marker, encode_marker_batch, read_committed_view

log = logging.getLogger(__name__)

TICK_S = 0.1
HW_CHECKPOINT_INTERVAL_S = 1.0
RECOVERY_POINT_CHECKPOINT_INTERVAL_S = 60.0
"""Kafka's ``log.flush.offset.checkpoint.interval.ms``: how often each log's recovery point
(what it has fsynced) is written, so recovery tells damage in fsynced data (corruption)
from a torn tail as closely as this (``PartitionLog.checkpoint_recovery_point``)."""
PRODUCER_EXPIRATION_CHECK_INTERVAL_S = 600.0
"""Kafka's ``producer.id.expiration.check.interval.ms`` (10 minutes)."""
HW_CHECKPOINT_NAME = "high-watermark-checkpoint"
PRODUCER_SNAPSHOT_NAME = "producer-state.snapshot"
"""In each partition's directory: the replica's HW (Kafka keeps one
``replication-offset-checkpoint`` per log dir)."""
DEBUG_REPLICA_ID = -2
"""Kafka's ``FetchRequest.DEBUGGING_CONSUMER_ID``: reads any replica's local log."""
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)
"""Kafka's ``isolation.level`` values (``IsolationLevel`` 0 and 1 on the wire)."""
MARKER_TIMEOUT_MS = 30_000
"""How long ``write_txn_markers`` waits for the HW to pass a marker (Kafka's coordinator
uses ``request.timeout.ms``)."""
RECONCILE_SLICE = 50
"""Partitions a reconcile applies between two turns of the event loop."""
FOLLOWER_HW_DELAY_MS = 10
"""How long a follower's fetch that has only a newer HW to bring back waits for data to bring
it with (``fetch_for_follower``): the HW a follower holds lags the leader's by up to this
much, and a replicated write costs each follower one exchange instead of two."""


RECORD_COUNT_OFFSET = HEADER_SIZE - 4
"""Where a batch header keeps its record count (its last int32)."""


def now_ms() -> int:
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    """The AlterPartition queue's clock: its back-offs are intervals, which a step of the
    wall clock must not stretch."""
    return int(time.monotonic() * 1000)


_AlterOwner = tuple["Replica", LeaderState]
"""Who proposed a queued ISR change: the replica, and the leader state (of one leader epoch)
whose ``pending`` it is; an answer is applied only while that leader still leads it."""


class ReplicaError(BrokerError):
    """A data-path answer with a Kafka error code that is not one of ``broker.errors``."""

    def __init__(self, code: str, message: str = "", *, leader_id: int = -1) -> None:
        super().__init__(message or code)
        self._code = code
        self.leader_id = leader_id

    @property
    def error_code(self) -> str:
        return self._code


def error_code(e: BaseException) -> str:
    if isinstance(e, ReplicaError):
        return e.error_code
    return str(getattr(e, "code", "UNKNOWN_SERVER_ERROR"))


@dataclass
class TopicTraffic:
    """What one topic moved through this broker since it started: monotonic counts, read
    as Prometheus counters (``api.http.metrics``). Counted where the bytes move (the
    leader's produce and fetch, a follower's appends), in plain ints: nothing on the hot
    path but an addition."""

    bytes_in: int = 0
    """Batch bytes appended by producers (leader side; duplicates not counted)."""
    records_in: int = 0
    bytes_out: int = 0
    """Batch bytes returned to consumers (followers' fetches are replication)."""
    records_out: int = 0
    produce_requests: int = 0
    fetch_requests: int = 0
    """Consumer fetches answered by the leader."""
    replication_bytes_in: int = 0
    """Bytes this broker appended as a follower."""
    replication_bytes_out: int = 0
    """Bytes this broker's leaders returned to followers."""


def count_records(data: bytes | memoryview) -> int:
    """Records in the whole batches of ``data`` (a fetch answer): each header's count, read
    without parsing the rest of the header."""
    n = pos = 0
    end = len(data)
    while end - pos >= HEADER_SIZE:
        _, size = peek_prefix(data, pos)
        if size < HEADER_SIZE or pos + size > end:
            break
        n += int.from_bytes(data[pos + RECORD_COUNT_OFFSET : pos + HEADER_SIZE], "big")
        pos += size
    return n


@dataclass
class Replica:
    """One partition replica on this broker."""

    topic: str
    topic_id: TopicId
    partition: int
    log: PartitionLog
    producers: ProducerState
    registration: PartitionRegistration
    leader: LeaderState | None = None
    follower: FollowerState | None = None
    ack_futures: dict[int, asyncio.Future[BrokerError | None]] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set (then replaced) whenever the LEO or the HW moves: wakes long-polling fetches."""
    hw_floor: int = 0
    """The HW this replica last had in a role it left (a resigned leader's): where its next
    role starts from."""
    last_shrink_check_ms: int = 0
    hw_checkpointed: int = -1
    txn_verifications: dict[int, set[object]] = field(default_factory=dict)
    """producer id -> the guards of its KIP-890 verifications in flight (one per batch: a
    producer may have several batches in flight): a marker for that producer removes them,
    so a batch verified before the marker cannot open a transaction after it (Kafka's
    ``VerificationGuard``)."""
    txn_added: dict[int, int] = field(default_factory=dict)
    """producer id -> the epoch whose transaction the coordinator announced holds this
    partition (``note_txn_partitions``: sent once its ONGOING record is committed), so that
    epoch's first batch here needs no verification round trip. A marker for the producer
    removes it; a stale entry opens nothing, since the producer state refuses an epoch
    older than the last marker's before the entry is looked at."""
    txn_added_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    """Verifications in flight that an announcement may answer first (``_verify_txn``): set
    by ``note_txn_partitions``."""
    traffic: TopicTraffic = field(default_factory=TopicTraffic)
    """Its topic's counters, shared by every replica of the topic here."""
    fetch_waiters: set[asyncio.Event] = field(default_factory=set)
    """Set by ``notify`` too: each is a multi-partition follower fetch long-polling this
    replica among others (``fetch_for_follower``), which cannot wait on every ``changed``."""

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def high_watermark(self) -> int:
        if self.leader is not None and self.leader.is_leader:
            return self.leader.high_watermark
        if self.follower is not None:
            return self.follower.high_watermark
        return self.hw_floor

    @property
    def last_stable_offset(self) -> int:
        """min(first offset of the oldest open transaction, HW) (KIP-98)."""
        return self.producers.last_stable_offset(self.high_watermark)

    def notify(self) -> None:
        ev, self.changed = self.changed, asyncio.Event()
        ev.set()
        for w in self.fetch_waiters:
            w.set()


def log_config_for(configs: dict[str, str]) -> LogConfig:
    known = set(LogConfig().to_kafka())
    return LogConfig.from_kafka({k: v for k, v in configs.items() if k in known})


def read_headers(
    plog: PartitionLog, start: int | None = None
) -> tuple[list[BatchHeader], dict[int, ControlMarker]]:
    """Every batch header of the log from ``start`` (default: the log start), oldest first,
    and the marker of each control batch by base offset (for rebuilding producer state:
    only control batches' bodies are decoded)."""
    out: list[BatchHeader] = []
    markers: dict[int, ControlMarker] = {}
    offset = plog.log_start_offset if start is None else max(start, plog.log_start_offset)
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).data
        if not data:
            break
        for pos, h in iter_batches(data, verify=False):
            out.append(h)
            offset = h.next_offset
            if h.is_control:
                markers.update(control_markers(memoryview(data)[pos : pos + h.size]))
    return out, markers


def control_markers(data: bytes | memoryview) -> dict[int, ControlMarker]:
    """The transaction markers among ``data``'s batches, by base offset. A control batch
    that is not a transaction marker is skipped (logged): it ends no transaction."""
    out: dict[int, ControlMarker] = {}
    mv = memoryview(data)
    for pos, h in iter_batches(mv, verify=False):
        if h.is_control and h.producer_id >= 0:
            try:
                out[h.base_offset] = decode_marker(mv[pos : pos + h.size], verify=False)
            except StorageError as e:
                log.warning("control batch at offset %d is not a marker: %s", h.base_offset, e)
    return out


def load_producer_state(plog: PartitionLog, config: ProducerStateConfig) -> ProducerState:
    """The producer state of an opened log: the snapshot a clean shutdown wrote plus the
    headers after it, else rebuilt from every header. The snapshot is deleted once read: it
    only describes the log as it was at that shutdown."""
    path = os.path.join(plog.dir_path, PRODUCER_SNAPSHOT_NAME)
    state: ProducerState | None = None
    if plog.files.exists(path):
        try:
            state = ProducerState.from_snapshot(plog.files.read_file(path), config)
            if not plog.log_start_offset <= state.end_offset <= plog.log_end_offset:
                state = None
        except (BrokerError, OSError) as e:
            log.warning("%s: producer snapshot dropped: %s", plog.dir_path, e)
        with contextlib.suppress(OSError):
            plog.files.unlink(path)
    if state is not None:
        state.replay(*read_headers(plog, state.end_offset))
        return state
    headers, markers = read_headers(plog)
    return ProducerState.rebuild(
        headers,
        markers=markers,
        config=config,
        log_start_offset=plog.log_start_offset,
        high_watermark=0,
    )


def save_producer_state(plog: PartitionLog, state: ProducerState) -> None:
    if state.end_offset != plog.log_end_offset:
        return
    plog.files.write_file_atomic(
        os.path.join(plog.dir_path, PRODUCER_SNAPSHOT_NAME), state.encode_snapshot()
    )


class ReplicaManager:
    """See the module docstring."""

    def __init__(
        self,
        *,
        broker_id: int,
        data_dir: Path,
        controller_urls: list[str],
        broker_epoch: Callable[[], int | None],
        committer: GroupCommitter | None = None,
        replica_lag_time_max_ms: int = 30_000,
        retention_check_interval_ms: int = 300_000,
        cleaner_backoff_ms: int = 15_000,
        acks_require_fsync: bool = False,
        page_cache: PageCacheTrimmer | None = None,
    ) -> None:
        self.broker_id = BrokerId(broker_id)
        self.data_dir = Path(data_dir)
        self.broker_epoch = broker_epoch
        self.committer = committer or GroupCommitter()
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.acks_require_fsync = acks_require_fsync
        """Every replica fsyncs before it counts: the leader's HW never passes what it has
        fsynced, and followers fsync what they appended before their next fetch (whose
        offset counts towards the HW). An acknowledged write then survives a power cut of
        every replica at once; off (Kafka's default), durability is by replication."""
        self.page_cache = page_cache
        """Keeps each log's page-cache footprint bounded (``storage.page_cache``); None
        leaves the page cache to the kernel, as Kafka does."""
        self.retention_check_interval_s = retention_check_interval_ms / 1000
        self.cleaner_backoff_s = max(cleaner_backoff_ms, retention_check_interval_ms) / 1000
        self.controller = ControllerClient(controller_urls, timeout_s=10)
        self.replicas: dict[tuple[TopicId, int], Replica] = {}
        self.by_name: dict[tuple[str, int], Replica] = {}
        self.traffic: dict[str, TopicTraffic] = {}
        """Per topic name, while the topic is in the image (a deleted topic's go with it)."""
        self.image: MetadataImage | None = None
        self.damaged: dict[tuple[TopicId, int], CorruptSegmentError] = {}
        """Replicas whose log refused to open for damage below its recovery point, with no
        leader to fetch the rest from: the error names where the valid data ends, which an
        unclean recovery is told (``replica_log_reports``) so that it need not wait for
        this replica (finding 17). Opened again at every metadata update."""
        self._timer: asyncio.Task[None] | None = None
        self.alter_queue: AlterPartitionQueue[_AlterOwner] = AlterPartitionQueue()
        """Every leader's ISR change waiting for the controller; one request in flight."""
        self._alter_wake = asyncio.Event()
        self._alter_sender: asyncio.Task[None] | None = None
        # Set by the broker process before start(): fail-stop for the timer and fetchers.
        self.essentials: Essentials | None = None
        self.inter_broker_listener: tuple[str, str] | None = None
        """(name, scheme) of the listener brokers dial each other on (issue 18); None: the
        first endpoint each broker registered (``broker.endpoints``)."""
        self._lock = asyncio.Lock()
        self._stopped = False
        self._deferred = False
        self._maintenance: asyncio.Task[None] | None = None
        self.fetch_session: Any = None  # aiohttp session of the fetchers (broker.fetcher)
        self.fetchers: ReplicaFetchers[Replica] = ReplicaFetchers(self)
        self._reconciled: MetadataImage | None = None
        """The image the replicas last fully matched (``on_metadata`` skips updates that
        change nothing they follow from)."""
        self.fetch_sessions = FetchSessionCache()
        """Followers' fetch sessions on this leader (KIP-227, ``broker.fetch_session``)."""
        """One fetcher per source broker, each fetching all the partitions this broker
        follows from it in one request (``broker.fetcher``)."""
        self._flush_tasks: set[asyncio.Task[None]] = set()
        self.log_dir = LogDirectory(str(self.data_dir))
        """The health of the data directory, shared by every log in it: an I/O error in one
        takes them all offline (``storage.logdir``); the broker process stops on it."""
        self.replication_throttle: TokenBucket | None = None
        """Shared by the fetchers of this broker's adding replicas (KIP-455) while
        ``follower.replication.throttled.rate`` is set for it (``broker.throttle``)."""
        self.closed_cleanly: bool | None = None
        """After ``stop``: whether every log was flushed and closed without an error (the
        broker's clean-shutdown marker may then be written, ``broker.clean_shutdown``)."""
        self.txn_verifier: TxnVerifier | None = None
        self.follower_hw_delay_s = FOLLOWER_HW_DELAY_MS / 1000
        self.txn_marker_listeners: list[Callable[[TxnMarker], None]] = []
        """Told of every marker this leader appended, once it is committed (the group
        coordinator completes the offsets a transaction committed in ``__consumer_offsets``,
        as Kafka's ``onTransactionCompleted``)."""
        """KIP-890 part 1: asked before a transactional batch opens a transaction in a
        partition (set by the transaction coordinator's wiring); None accepts every batch."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.create_task(self._tick(), name="replica-timer")
        self._alter_sender = loop.create_task(self._send_alters(), name="alter-partition")
        if self.essentials is not None:
            self.essentials.watch(self._timer, "replica timer")
            # Without it no ISR changes, and acks=all stops once a follower falls behind.
            self.essentials.watch(self._alter_sender, "AlterPartition sender")

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._timer is not None:
            await join_task(self._timer, cancel=True)
        if self._alter_sender is not None:
            await join_task(self._alter_sender, cancel=True)
        if self._maintenance is not None:
            # Not cancelled: its worker thread would go on beside the logs being closed.
            await self._maintenance
        for rep in list(self.replicas.values()):
            await self._stop_tasks(rep)
            self._resign(rep)
        await self.committer.close()
        if self.page_cache is not None:
            await self.page_cache.close()
        self._checkpoint_hws(self._dirty_hws())
        # An offline log directory (an I/O error, storage.logdir) may have lost written
        # bytes: never a clean shutdown, whatever the closes below say.
        clean = self.log_dir.online
        for rep in self.replicas.values():
            try:
                save_producer_state(rep.log, rep.producers)
            except OSError as e:
                log.warning("broker %d: producer snapshot of %s: %s", self.broker_id, rep.name, e)
            try:
                rep.log.close()
            except Exception as e:
                clean = False
                log.warning("broker %d: closing %s: %r", self.broker_id, rep.name, e)
        self.closed_cleanly = clean and self.log_dir.online
        self.replicas.clear()
        self.by_name.clear()
        await self.controller.close()
        await self.fetchers.close()
        if self.fetch_session is not None:
            await self.fetch_session.close()

    # ------------------------------------------------------------------ metadata

    def _registered_in(self, image: MetadataImage) -> bool:
        """Whether ``image`` holds this incarnation's own registration.

        Replicas follow the metadata only from there on, as Kafka's ``BrokerServer`` installs
        its metadata publishers only once the broker is registered and caught up. Before,
        a restarted broker's image still shows its *previous* incarnation leading
        partitions; acting on that, a broker that lost unsynced writes in a crash would lead
        again in the same epoch with a shorter log, and its followers would truncate
        acknowledged records to match. The controller takes a re-registering broker out of
        every ISR and leadership in the same batch as the registration (KIP-966), so the
        first image this broker applies already makes it a follower.
        """
        epoch = self.broker_epoch()
        if epoch is None or image.offset < epoch:
            return False
        reg = image.brokers.brokers.get(self.broker_id)
        return reg is not None and reg.broker_epoch == epoch

    async def on_metadata(self, update: MetadataUpdate) -> None:
        async with self._lock:
            self.image = update.image
            if not self._registered_in(update.image):
                if not self._deferred:
                    log.info(
                        "broker %d: replicas wait for this incarnation's registration "
                        "in the metadata (image at offset %d)",
                        self.broker_id,
                        update.image.offset,
                    )
                self._deferred = True
                return
            self._deferred = False
            prev, image = self._reconciled, update.image
            if (
                prev is not None
                and prev.topics is image.topics
                and prev.brokers is image.brokers
                and prev.configs is image.configs
                and prev.features is image.features
            ):
                # What replicas follow from is unchanged (images share what a delta left
                # alone): the controller's periodic NoOpRecords, an ACL, a producer id
                # block. Reconciling walks every partition; at a few NoOps a second beside
                # hundreds of partitions that was a fifth of a produce's broker CPU.
                return
            self._reconciled = None
            try:
                if await self._reconcile(image):
                    self._reconciled = image
            except Exception:
                log.exception(
                    "broker %d: applying metadata offset %d failed",
                    self.broker_id,
                    update.image.offset,
                )

    async def _apply_deferred(self) -> None:
        """The registration landed in an image we skipped: apply the latest one now."""
        if self._deferred and self.image is not None and self._registered_in(self.image):
            await self.on_metadata(MetadataUpdate(None, self.image))

    def replica_log_reports(self) -> tuple[ReplicaLogInfo, ...]:
        """Where the logs of this broker's replicas of partitions awaiting an unclean
        recovery end (no leader, no ISR, no ELR: KIP-966), for the next heartbeat.

        Only replicas whose registration this incarnation has applied: a report describes
        the log as it is while the partition has no leader (nothing appends to it then), for
        the partition epoch it names.
        """
        if self._deferred:
            return ()
        out = []
        for rep in self.replicas.values():
            reg = rep.registration
            if reg.leader != NO_LEADER or reg.isr or reg.elr or rep.log.closed:
                continue
            out.append(
                ReplicaLogInfo(
                    topic_id=rep.topic_id,
                    partition=rep.partition,
                    partition_epoch=PartitionEpoch(reg.partition_epoch),
                    last_leader_epoch=LeaderEpoch(rep.log.latest_epoch),
                    log_end_offset=rep.log.log_end_offset,
                )
            )
        for (topic_id, partition), damage in self.damaged.items():
            dreg = self.image.topics.partition(topic_id, partition) if self.image else None
            if (
                (topic_id, partition) in self.replicas
                or dreg is None
                or dreg.leader != NO_LEADER
                or dreg.isr
                or dreg.elr
            ):
                continue
            # A damaged log ranks below every whole one (epoch -1), and among damaged ones
            # by where its valid data ends: elected, it cuts the rest (``_open``).
            out.append(
                ReplicaLogInfo(
                    topic_id=topic_id,
                    partition=partition,
                    partition_epoch=PartitionEpoch(dreg.partition_epoch),
                    last_leader_epoch=LeaderEpoch(-1),
                    log_end_offset=max(0, damage.offset),
                )
            )
        return tuple(out)

    def _ineligible(self, image: MetadataImage, reg: PartitionRegistration) -> list[BrokerId]:
        out = []
        for b in reg.replicas:
            br = image.brokers.get(b)
            if br is None or br.fenced:
                out.append(b)
        return out

    async def _reconcile(self, image: MetadataImage) -> bool:
        """Make the replicas what ``image`` says; whether every partition was applied (a
        partition that failed, or is damaged, is tried again at the next metadata update)."""
        clean = True
        self._update_throttle(image)
        wanted: dict[tuple[TopicId, int], tuple[str, PartitionRegistration]] = {}
        for t, p, reg in image.topics.partitions():
            if self.broker_id in reg.replicas:
                wanted[(t.topic_id, p)] = (t.name, reg)
        for key in [k for k in self.replicas if k not in wanted]:
            await self._delete(self.replicas[key])
        for key in [k for k in self.damaged if k not in wanted]:
            del self.damaged[key]
        for name in [n for n in self.traffic if image.topics.get(n) is None]:
            del self.traffic[name]
        for i, (key, (topic, reg)) in enumerate(sorted(wanted.items())):
            if i % RECONCILE_SLICE == RECONCILE_SLICE - 1:
                # Opening a log costs milliseconds (recovery, indexes): at 10,000 partitions a
                # start held the loop for 26-29 s, its controller heartbeats with it, and the
                # controller fenced the broker mid-start (finding 13). Let the loop run.
                await asyncio.sleep(0)
            try:
                rep = self.replicas.get(key)
                if rep is None:
                    try:
                        rep = self._open(topic, key[0], key[1], reg, image)
                    except CorruptSegmentError as e:
                        if key not in self.damaged:
                            log.error(
                                "broker %d: %s-%d cannot open: %s; no leader to fetch the rest "
                                "from, so it waits for one, and tells an unclean recovery that "
                                "its valid data ends at offset %d",
                                self.broker_id,
                                topic,
                                key[1],
                                e,
                                e.offset,
                            )
                        self.damaged[key] = e
                        clean = False
                        continue
                    self.damaged.pop(key, None)
                await self._apply_registration(rep, reg, image)
            except Exception:  # one bad partition (a disk error) must not stall the others
                clean = False
                log.exception(
                    "broker %d: applying %s-%d at metadata offset %d failed",
                    self.broker_id,
                    topic,
                    key[1],
                    image.offset,
                )
        return clean

    def _open(
        self,
        topic: str,
        topic_id: TopicId,
        partition: int,
        reg: PartitionRegistration,
        image: MetadataImage,
    ) -> Replica:
        configs = image.configs.topic_configs(topic)
        path = self.data_dir / f"{topic}-{partition}"
        # A follower may cut a log at a corrupt batch below its recovery point and fetch the
        # rest again from the leader; a leader (or a lone replica) has no one to fetch from,
        # so its open refuses with the segment named (CorruptSegmentError), never serving it.
        # A damaged replica that an unclean recovery elected knowing its valid data ends early
        # (``replica_log_reports``) cuts the rest too: nothing else holds more.
        refetch = (reg.leader != self.broker_id and reg.leader >= 0) or (
            reg.leader == self.broker_id
            and reg.leader_recovery_state == LeaderRecoveryState.RECOVERING
            and (topic_id, partition) in self.damaged
        )
        plog = PartitionLog.open(
            str(path), log_config_for(configs), log_dir=self.log_dir, allow_truncate_corrupt=refetch
        )
        if plog.recovery.corruption is not None:
            log.error(
                "broker %d: %s-%d was cut at a corrupt batch below its recovery point (%s); %s",
                self.broker_id,
                topic,
                partition,
                plog.recovery.corruption,
                f"it fetches the rest again from leader {reg.leader}"
                if reg.leader != self.broker_id
                else "it leads from there, elected by an unclean recovery that knew it",
            )
        producers = load_producer_state(plog, ProducerStateConfig.from_kafka(configs))
        rep = Replica(topic, topic_id, partition, plog, producers, reg)
        rep.traffic = self.traffic.setdefault(topic, TopicTraffic())
        try:
            saved = checkpoint.read_offset(plog.files, plog.dir_path, HW_CHECKPOINT_NAME)
        except CorruptCheckpointError as e:
            # The safe choice: no high watermark known; the leader's fetch answers bring it.
            log.warning(
                "broker %d: %s: %s; starting from HW 0", self.broker_id, f"{topic}-{partition}", e
            )
            saved = None
        if saved is not None:
            rep.hw_floor = rep.hw_checkpointed = min(saved, plog.log_end_offset)
        self.replicas[(topic_id, partition)] = rep
        self.by_name[(topic, partition)] = rep
        log.info(
            "broker %d: opened %s at %s (log end %d, epoch %d, HW %d)",
            self.broker_id,
            rep.name,
            path,
            plog.log_end_offset,
            plog.latest_epoch,
            rep.hw_floor,
        )
        return rep

    async def _delete(self, rep: Replica) -> None:
        await self._stop_tasks(rep)
        self._resign(rep)
        self.replicas.pop((rep.topic_id, rep.partition), None)
        self.by_name.pop((rep.topic, rep.partition), None)
        rep.log.close()
        shutil.rmtree(rep.log.dir_path, ignore_errors=True)
        log.info("broker %d: deleted replica %s", self.broker_id, rep.name)

    async def _stop_tasks(self, rep: Replica) -> None:
        await self.fetchers.remove(rep)
        # One in flight is answered and dropped: its leader has resigned by then.
        self.alter_queue.discard((rep.topic_id, rep.partition))

    def _resign(self, rep: Replica) -> None:
        if rep.leader is not None:
            rep.hw_floor = rep.leader.high_watermark
            rep.leader.resign()
            self._resolve_acks(rep)
            rep.leader = None
        rep.notify()

    async def _apply_registration(
        self, rep: Replica, reg: PartitionRegistration, image: MetadataImage
    ) -> None:
        prev = rep.registration
        rep.registration = reg
        t = now_ms()
        if reg.leader == self.broker_id:
            if rep.leader is not None and rep.leader.is_leader:
                if reg.leader_epoch > rep.leader.leader_epoch:
                    rep.log.leader_epoch_cache.assign(reg.leader_epoch, rep.log.log_end_offset)
                rep.leader.on_registration(reg, t)
                rep.leader.set_ineligible_replicas(self._ineligible(image, reg), t)
                self._after_hw_change(rep)
                return
            await self._become_leader(rep, reg, image)
            return
        # follower (or a replica without a leader)
        if rep.leader is not None:
            rep.leader.on_registration(reg, t)
            self._resign(rep)
        if reg.leader < 0:
            await self._stop_tasks(rep)
            rep.hw_floor = rep.high_watermark
            rep.follower = None
            return
        fs = rep.follower
        if (
            fs is not None
            and self.fetchers.following(rep, fs)
            and fs.leader_id == reg.leader
            and fs.leader_epoch == reg.leader_epoch
            and prev.leader_epoch == reg.leader_epoch
        ):
            return
        await self._become_follower(rep, reg)

    async def _become_leader(
        self, rep: Replica, reg: PartitionRegistration, image: MetadataImage
    ) -> None:
        await self._stop_tasks(rep)
        hw = rep.high_watermark
        rep.follower = None
        rep.hw_floor = hw
        rep.txn_added.clear()  # announced to an earlier leadership: verify afresh
        plog = rep.log
        # KIP-101: the new epoch starts at our LEO before any OffsetsForLeaderEpoch is served.
        plog.leader_epoch_cache.assign(reg.leader_epoch, plog.log_end_offset)
        t = now_ms()
        configs = image.configs.topic_configs(rep.topic)
        epoch = self.broker_epoch()
        rep.leader = LeaderState(
            topic_id=rep.topic_id,
            partition=rep.partition,
            local_broker_id=self.broker_id,
            local_broker_epoch=epoch if epoch is not None else -1,
            registration=reg,
            log_end_offset=plog.log_end_offset,
            high_watermark=hw,
            flushed_offset=plog.flushed_offset,
            now_ms=t,
            config=dataclasses.replace(
                ReplicationConfig.from_kafka(
                    {"replica.lag.time.max.ms": str(self.replica_lag_time_max_ms), **configs}
                ),
                hw_requires_leader_flush=self.acks_require_fsync,
            ),
            ineligible_replicas=self._ineligible(image, reg),
        )
        rep.last_shrink_check_ms = t
        log.info(
            "broker %d: leader of %s in epoch %d from offset %d (HW %d, ISR %s%s)",
            self.broker_id,
            rep.name,
            reg.leader_epoch,
            plog.log_end_offset,
            rep.leader.high_watermark,
            list(reg.isr),
            ", RECOVERING: elected by unclean recovery or election"
            if reg.leader_recovery_state == LeaderRecoveryState.RECOVERING
            else "",
        )
        change = rep.leader.maybe_mark_recovered()
        if change is not None:
            self._send_change(rep, change)
        if self.acks_require_fsync and plog.flushed_offset < plog.log_end_offset:
            # What we appended as a follower after our last fetch is not fsynced yet; the HW
            # must not wait for the next produce to flush it.
            self._flush_leader(rep, plog.log_end_offset)
        self._after_hw_change(rep)

    async def _become_follower(self, rep: Replica, reg: PartitionRegistration) -> None:
        await self._stop_tasks(rep)
        hw = rep.high_watermark
        rep.hw_floor = hw
        rep.follower = FollowerState(
            leader_id=reg.leader, leader_epoch=reg.leader_epoch, high_watermark=hw, log=rep.log
        )
        log.info(
            "broker %d: follower of %s, leader %d epoch %d (log end %d, HW %d)",
            self.broker_id,
            rep.name,
            reg.leader,
            reg.leader_epoch,
            rep.log.log_end_offset,
            hw,
        )
        self.fetchers.add(rep, rep.follower)

    def leader_url(self, broker_id: int) -> str | None:
        if self.image is None:
            return None
        br = self.image.brokers.get(BrokerId(broker_id))
        if br is None or not br.endpoints:
            return None
        return endpoint_url(br.endpoints, self.inter_broker_listener)

    # ------------------------------------------------------------------ follower side

    def truncate(self, rep: Replica, offset: int, *, below_hw: bool) -> None:
        """Cut the log (and the producer state with it) to ``offset``."""
        plog = rep.log
        if below_hw:
            log.warning(
                "broker %d: %s truncating to %d, BELOW its high watermark",
                self.broker_id,
                rep.name,
                offset,
            )
        plog.truncate_to(offset)
        leo = plog.log_end_offset
        if rep.producers.can_truncate_to(leo):
            rep.producers.truncate_to(leo)
        else:
            headers, markers = read_headers(plog)
            rep.producers = ProducerState.rebuild(
                headers,
                markers=markers,
                config=rep.producers.config,
                log_start_offset=plog.log_start_offset,
                high_watermark=leo,
            )
        log.info("broker %d: %s truncated to %d", self.broker_id, rep.name, leo)

    def truncate_fully(self, rep: Replica, offset: int) -> None:
        """The leader's log starts past our end (retention or DeleteRecords removed what we
        never fetched): empty the log and restart it at ``offset``, as Kafka's fetcher does
        (``truncateFullyAndStartAt``) on OFFSET_OUT_OF_RANGE below the leader's start."""
        log.warning(
            "broker %d: %s log end %d is below the leader's log start %d: restarting the log there",
            self.broker_id,
            rep.name,
            rep.log.log_end_offset,
            offset,
        )
        rep.log.truncate_fully_and_start_at(offset)
        rep.producers = ProducerState(rep.producers.config, start_offset=offset)

    # ------------------------------------------------------------------ reassignment, DeleteRecords

    def _update_throttle(self, image: MetadataImage) -> None:
        """The replication throttle from the broker's dynamic config (its own id, else the
        cluster-wide default ``''``), as Kafka reads ``follower.replication.throttled.rate``."""
        value = None
        for name in (str(int(self.broker_id)), ""):
            value = image.configs.get(ConfigResourceType.BROKER, name).get(THROTTLE_RATE_CONFIG)
            if value is not None:
                break
        try:
            rate = int(value) if value is not None else 0
        except ValueError:
            rate = 0
        if rate <= 0:
            self.replication_throttle = None
        elif self.replication_throttle is None:
            self.replication_throttle = TokenBucket(rate, time.monotonic())
        elif self.replication_throttle.rate_bytes_per_s != rate:
            self.replication_throttle.set_rate(rate, time.monotonic())

    def throttle_for(self, rep: Replica) -> TokenBucket | None:
        """The bucket ``rep``'s fetcher must respect: only a replica this broker is being
        added as (KIP-455; Kafka throttles the replicas ``--throttle`` lists, which are the
        moving ones), so the ISR's own replication is never slowed."""
        if self.broker_id in rep.registration.adding:
            return self.replication_throttle
        return None

    def follow_log_start(self, rep: Replica, leader_log_start: int) -> None:
        """A follower moves its log start up to the leader's (DeleteRecords and retention on
        the leader), as Kafka's fetcher does with the fetch answer's log start offset. Never
        past its own log end: what it lacks there it fetches, or restarts at the leader's
        start on OFFSET_OUT_OF_RANGE."""
        target = min(leader_log_start, rep.log.log_end_offset)
        if target > rep.log.log_start_offset:
            rep.log.delete_records_before(target)
            log.info(
                "broker %d: %s log start now %d (the leader's)", self.broker_id, rep.name, target
            )

    async def delete_records(
        self, topic: str, partition: int, offset: int, timeout_ms: int
    ) -> dict[str, Any]:
        """Kafka's DeleteRecords on the leader: the log start moves to ``offset`` (-1: the
        high watermark); beyond the HW is OFFSET_OUT_OF_RANGE and changes nothing. Answers
        once every ISR member's log starts there too (the low watermark; followers follow
        with their next fetch), so a failover cannot bring the deleted records back;
        REQUEST_TIMED_OUT if that takes longer than ``timeout_ms``."""
        rep, leader = self._leading(topic, partition)
        hw = leader.high_watermark
        target = hw if offset == -1 else offset
        if not 0 <= target <= hw:
            raise ReplicaError(
                "OFFSET_OUT_OF_RANGE",
                f"cannot delete {rep.name} records before {offset}: the offset must be in "
                f"[{rep.log.log_start_offset}, {hw}] (the high watermark), or -1 for it",
            )
        start = await asyncio.to_thread(rep.log.delete_records_before, target)
        log.info("broker %d: %s records deleted before %d", self.broker_id, rep.name, start)
        rep.notify()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            low = self._low_watermark(rep)
            if low >= target:
                return {"low_watermark": low}
            if rep.leader is not leader or not leader.is_leader:
                raise ReplicaError(
                    "NOT_LEADER_OR_FOLLOWER",
                    "leadership moved",
                    leader_id=rep.registration.leader,
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReplicaError(
                    "REQUEST_TIMED_OUT",
                    f"{rep.name}: the log start moved to {start} on the leader, but the ISR's "
                    f"low watermark is {low} after {timeout_ms} ms",
                )
            await wait_event(rep.changed, min(left, 0.1))

    def _low_watermark(self, rep: Replica) -> int:
        """The smallest log start over the leader and its ISR followers (Kafka's
        ``lowWatermarkIfLeader``)."""
        low = rep.log.log_start_offset
        if rep.leader is None:
            return low
        for b in rep.leader.isr:
            if b == self.broker_id:
                continue
            f = rep.leader.follower(b)
            if f is None or f.log_start_offset < 0:
                return -1
            low = min(low, f.log_start_offset)
        return low

    async def _log_maintenance(self, *, cleaner: bool) -> None:
        """Segment rolls by ``segment.ms``, retention (``retention.ms``/``retention.bytes``)
        and, with ``cleaner``, compaction, for every local replica, in a worker thread (the
        log's own lock keeps appends and reads safe meanwhile)."""
        t = now_ms()
        for rep in list(self.replicas.values()):
            plog = rep.log
            if plog.closed:
                continue
            try:
                plog.maybe_roll(t)
                if await asyncio.to_thread(plog.maybe_apply_retention, t, rep.high_watermark):
                    # (The aborted-transaction index of each deleted segment went with it.)
                    log.info(
                        "broker %d: %s retention: log start now %d",
                        self.broker_id,
                        rep.name,
                        plog.log_start_offset,
                    )
                if cleaner and plog.config.compact:
                    # Never past the LSO: an open transaction may still abort (KIP-98).
                    await asyncio.to_thread(plog.maybe_compact, t, rep.last_stable_offset)
            except Exception:
                log.exception("broker %d: log maintenance of %s failed", self.broker_id, rep.name)

    def append_as_follower(
        self, rep: Replica, fs: FollowerState, data: bytes | memoryview, leader_hw: int
    ) -> None:
        if data:
            markers = control_markers(data)
            if not markers:
                rep.log.append_as_follower(data, now_ms=now_ms())
                for _, h in iter_batches(data, verify=False):
                    rep.producers.on_append(h, None)
            else:
                # Up to each marker at a time: an abort marker's entry must reach the log's
                # aborted-transaction index before the log can roll past the marker.
                mv = memoryview(data)
                start = 0
                chunk: list[BatchHeader] = []
                for pos, h in iter_batches(data, verify=False):
                    chunk.append(h)
                    end = pos + h.size
                    if h.base_offset not in markers and end < len(data):
                        continue
                    rep.log.append_as_follower(bytes(mv[start:end]), now_ms=now_ms())
                    for c in chunk:
                        aborted = rep.producers.on_append(c, None, markers.get(c.base_offset))
                        if aborted is not None:
                            rep.log.append_aborted_txn(aborted)
                    start, chunk = end, []
            self.committer.note_append(rep.log, len(data))
            if self.page_cache is not None:
                self.page_cache.note_append(rep.log)
            rep.traffic.replication_bytes_in += len(data)
        if fs.on_fetch_response(leader_hw, rep.log.log_end_offset):
            rep.producers.on_high_watermark(fs.high_watermark)
        rep.notify()

    # ------------------------------------------------------------------ leader side

    def _leading(self, topic: str, partition: int) -> tuple[Replica, LeaderState]:
        rep = self.by_name.get((topic, partition))
        if rep is None:
            raise ReplicaError(
                "UNKNOWN_TOPIC_OR_PARTITION",
                f"{topic}-{partition} has no replica on broker {self.broker_id}",
                leader_id=self._leader_in_image(topic, partition),
            )
        if rep.leader is None or not rep.leader.is_leader:
            raise ReplicaError(
                "NOT_LEADER_OR_FOLLOWER",
                f"broker {self.broker_id} does not lead {rep.name}",
                leader_id=rep.registration.leader,
            )
        return rep, rep.leader

    def _leader_in_image(self, topic: str, partition: int) -> int:
        if self.image is None:
            return -1
        t = self.image.topics.get(topic)
        reg = None if t is None else t.partitions.get(partition)
        return -1 if reg is None else int(reg.leader)

    async def produce(
        self,
        topic: str,
        partition: int,
        acks: int,
        timeout_ms: int,
        batch: bytes,
        *,
        transactional_id: str | None = None,
        appended: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Append one batch as leader and answer per ``acks``. A transactional batch that
        would open a transaction here is first verified with the coordinator
        (``txn_verifier``, KIP-890 part 1), naming ``transactional_id``. ``appended`` is
        called once the batch is in the log (or known for a duplicate), before the wait for
        ``acks``: a caller may then append the producer's next batch (the Kafka listener
        pipelines a connection's produce requests that way)."""
        rep, leader = self._leading(topic, partition)
        leader.check_append_or_raise(acks)
        header = parse_header(batch)
        if header.size != len(batch):
            raise ReplicaError("CORRUPT_MESSAGE", "one whole batch per produce request")
        plan = rep.producers.check_and_plan(header)
        if (
            self.txn_verifier is not None
            and rep.producers.needs_txn_verification(header)
            and rep.txn_added.get(header.producer_id) != header.producer_epoch
        ):
            await self._verify_txn(rep, header, transactional_id)
            # The state may have moved while we waited: decide again, and only a batch whose
            # verification no marker cancelled may open the transaction.
            rep, leader = self._leading(topic, partition)
            leader.check_append_or_raise(acks)
            plan = rep.producers.check_and_plan(header)
        t = now_ms()
        rep.traffic.produce_requests += 1
        if isinstance(plan, Duplicate):
            verify_batch(batch)  # log.append checks the CRC of what it writes
            base, last = plan.base_offset, plan.last_offset
            duplicate = True
        else:
            base, last = rep.log.append(batch, leader_epoch=leader.leader_epoch, now_ms=t)
            rep.producers.on_append(header, base)
            if self.page_cache is not None:
                self.page_cache.note_append(rep.log)
            leader.on_local_append(rep.log.log_end_offset, t)
            duplicate = False
            rep.traffic.bytes_in += len(batch)
            rep.traffic.records_in += header.record_count
            self._after_hw_change(rep)
        out = {
            "base_offset": base,
            "last_offset": last,
            "log_append_time": -1,
            "duplicate": duplicate,
        }
        if appended is not None:
            appended()
        await self._await_acks(rep, leader, acks, last, t + timeout_ms, duplicate=duplicate)
        return out

    async def _verify_txn(
        self, rep: Replica, header: BatchHeader, transactional_id: str | None
    ) -> None:
        """KIP-890 part 1: ask the coordinator whether this producer's transaction holds the
        partition; raise unless it does and no marker for the producer came meanwhile."""
        assert self.txn_verifier is not None
        if not transactional_id:
            raise InvalidTxnStateError(
                f"a transactional batch of producer {header.producer_id} to {rep.name} "
                "names no transactional_id"
            )
        pid = header.producer_id
        guard = object()
        guards = rep.txn_verifications.setdefault(pid, set())
        guards.add(guard)
        try:
            code = await self._ask_or_hear(rep, header, transactional_id)
            if code is not None:
                raise ReplicaError(
                    code, f"the coordinator refused {rep.name} to producer {pid}: {code}"
                )
            if guard not in rep.txn_verifications.get(pid, ()):
                raise InvalidTxnStateError(
                    f"the transaction of producer {pid} in {rep.name} ended while its first "
                    "batch was verified"
                )
        finally:
            left = rep.txn_verifications.get(pid)
            if left is not None:
                left.discard(guard)
                if not left:
                    del rep.txn_verifications[pid]

    async def _ask_or_hear(
        self, rep: Replica, header: BatchHeader, transactional_id: str
    ) -> str | None:
        """The verifier's answer, or None as soon as the coordinator's announcement for this
        producer epoch arrives (``note_txn_partitions``): it is sent at the same moment as
        the answer to the producer's add and often arrives just behind its first batch. The
        question then runs on in the background (its answer is dropped)."""
        assert self.txn_verifier is not None
        pid, epoch = header.producer_id, header.producer_epoch
        ask = asyncio.ensure_future(
            self.txn_verifier(transactional_id, pid, epoch, rep.topic, rep.partition)
        )
        ask.add_done_callback(lambda t: None if t.cancelled() else t.exception())
        loop = asyncio.get_running_loop()
        try:
            while True:
                if rep.txn_added.get(pid) == epoch:
                    return None
                if ask.done():
                    return ask.result()
                heard: asyncio.Future[None] = loop.create_future()
                rep.txn_added_waiters.add(heard)
                try:
                    waits: set[asyncio.Future[Any]] = {ask, heard}
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    rep.txn_added_waiters.discard(heard)
                    heard.cancel()
        except asyncio.CancelledError:
            ask.cancel()
            raise

    async def _await_acks(
        self,
        rep: Replica,
        leader: LeaderState,
        acks: int,
        last: int,
        deadline_ms: int,
        *,
        duplicate: bool = False,
    ) -> None:
        """Wait as ``acks`` asks for the append that ended at ``last``."""
        if self.acks_require_fsync:
            # The HW waits for our fsync (hw_requires_leader_flush): ask for it and tell the
            # leader state when it is done. acks=0 does not wait, but its records must still
            # become durable and committed, so the flush runs on its own.
            flushed = self._flush_leader(rep, last + 1)
            if acks != 0:
                await flushed
        elif acks == 1 and not duplicate:
            await self.committer.durable(rep.log, last + 1)
        if acks == ACKS_ALL:
            fut: asyncio.Future[BrokerError | None] = asyncio.get_running_loop().create_future()
            wid = leader.add_waiter(last, deadline_ms)
            rep.ack_futures[wid] = fut
            self._resolve_acks(rep)
            try:
                err = await fut
            finally:
                rep.ack_futures.pop(wid, None)
                if not fut.done():
                    leader.cancel_waiter(wid)
            if err is not None:
                raise err

    def note_txn_partitions(
        self, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> None:
        """The transaction coordinator's word that ``producer_id``'s transaction in
        ``producer_epoch`` holds ``partitions`` (its ONGOING record is committed): the first
        batch of that epoch to one of them that this broker leads opens the transaction
        without asking the coordinator again (KIP-890 part 1, answered ahead). Partitions
        led elsewhere, and an epoch older than the producer's last here, are ignored: the
        batch is then verified as usual, or fenced."""
        for topic, partition in partitions:
            rep = self.by_name.get((topic, partition))
            if rep is None or rep.leader is None or not rep.leader.is_leader:
                continue
            entry = rep.producers.get(producer_id)
            if entry is not None and entry.producer_epoch > producer_epoch:
                continue
            rep.txn_added[producer_id] = producer_epoch
            for heard in rep.txn_added_waiters:
                if not heard.done():
                    heard.set_result(None)

    async def write_txn_markers(
        self, markers: Sequence[TxnMarker], *, timeout_ms: int = MARKER_TIMEOUT_MS
    ) -> dict[tuple[str, int], str | None]:
        """``write_txn_markers_each`` by partition (the first refusal of a partition's
        markers stands)."""
        results = await self.write_txn_markers_each(markers, timeout_ms=timeout_ms)
        out: dict[tuple[str, int], str | None] = {}
        for m, r in zip(markers, results, strict=True):
            if out.get((m.topic, m.partition)) is None:
                out[(m.topic, m.partition)] = r
        return out

    async def write_txn_markers_each(
        self, markers: Sequence[TxnMarker], *, timeout_ms: int = MARKER_TIMEOUT_MS
    ) -> list[str | None]:
        """Kafka's WriteTxnMarkers for the partitions this broker leads: each marker is one
        control batch appended as leader, answered once the HW passes it (acks=all). The
        answer per marker, in order: None, or the Kafka error code (NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH for a marker older than the
        producer's epoch, TRANSACTION_COORDINATOR_FENCED for a stale coordinator epoch,
        NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, ...). A refused marker changed nothing."""

        async def one(m: TxnMarker) -> str | None:
            try:
                await self._write_marker(m, timeout_ms)
                return None
            except (BrokerError, StorageError) as e:
                return error_code(e) if isinstance(e, BrokerError) else "KAFKA_STORAGE_ERROR"

        return list(await asyncio.gather(*(one(m) for m in markers)))

    async def _write_marker(self, m: TxnMarker, timeout_ms: int) -> None:
        rep, leader = self._leading(m.topic, m.partition)
        leader.check_append_or_raise(ACKS_ALL)
        rep.producers.check_marker(m.producer_id, m.producer_epoch, m.coordinator_epoch)
        t = now_ms()
        marker = ControlMarker(m.commit, m.coordinator_epoch)
        batch = encode_marker_batch(m.producer_id, m.producer_epoch, marker, timestamp_ms=t)
        base, last = rep.log.append(batch, leader_epoch=leader.leader_epoch, now_ms=t)
        aborted = rep.producers.on_append(parse_header(batch), base, marker)
        if aborted is not None:
            rep.log.append_aborted_txn(aborted)
        rep.txn_verifications.pop(m.producer_id, None)
        rep.txn_added.pop(m.producer_id, None)
        if self.page_cache is not None:
            self.page_cache.note_append(rep.log)
        leader.on_local_append(rep.log.log_end_offset, t)
        self._after_hw_change(rep)
        await self._await_acks(rep, leader, ACKS_ALL, last, t + timeout_ms)
        for listener in self.txn_marker_listeners:
            listener(m)

    def _flush_leader(self, rep: Replica, offset: int) -> asyncio.Task[None]:
        """fsync ``rep``'s log below ``offset`` (group-committed with every other log), then
        let its leader state count it towards the HW."""

        async def flush() -> None:
            await self.committer.durable(rep.log, offset)
            leader = rep.leader
            if (
                leader is not None
                and leader.is_leader
                and leader.on_local_flush(rep.log.flushed_offset, now_ms())
            ):
                self._after_hw_change(rep)

        task = asyncio.get_running_loop().create_task(flush())
        self._flush_tasks.add(task)  # the loop holds tasks weakly
        task.add_done_callback(self._flush_done)
        return task

    def _flush_done(self, task: asyncio.Task[None]) -> None:
        self._flush_tasks.discard(task)
        # Retrieved here so an acks=0 flush nobody awaits does not log "never retrieved";
        # an awaiting produce gets the error itself. Truncated offsets need no flush.
        e = None if task.cancelled() else task.exception()
        if e is not None and not isinstance(e, LogTruncatedError):
            log.warning("broker %d: flush failed: %r", self.broker_id, e)

    def _resolve_acks(self, rep: Replica) -> None:
        if rep.leader is None:
            return
        for ack in rep.leader.drain_acks():
            fut = rep.ack_futures.pop(ack.waiter_id, None)
            if fut is not None and not fut.done():
                fut.set_result(ack.error)

    def _after_hw_change(self, rep: Replica) -> None:
        self._resolve_acks(rep)
        if rep.leader is not None and rep.leader.is_leader:
            rep.producers.on_high_watermark(rep.leader.high_watermark)
        rep.notify()

    def _check_diverging(
        self, rep: Replica, fetch_offset: int, last_fetched_epoch: int
    ) -> tuple[int, int] | None:
        if last_fetched_epoch < 0:
            return None
        epoch, end = rep.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    async def fetch(
        self,
        *,
        topic: str,
        partition: int,
        replica_id: int,
        fetch_offset: int,
        leader_epoch: int,
        last_fetched_epoch: int,
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int,
        high_watermark: int,
        broker_epoch: int,
        isolation_level: str = READ_UNCOMMITTED,
        filter_aborted: bool = True,
        log_start_offset: int = -1,
        file_range: bool = False,
    ) -> dict[str, Any]:
        """A follower's (``replica_id`` >= 0) or a consumer's (-1) fetch, long-polling up to
        ``max_wait_ms`` for ``min_bytes`` (followers also return early when the HW passes
        the ``high_watermark`` they sent). ``replica_id`` -2 is Kafka's debugging consumer:
        any replica, leader or not, answers from its local log up to its log end, at once.

        A consumer at ``read_committed`` reads up to the last stable offset, and the answer
        carries ``aborted_transactions`` ([producer_id, first_offset] of each aborted
        transaction with data in the range read, as Kafka's FetchResponse); with
        ``filter_aborted`` (all but the Kafka listener, whose clients filter themselves) the
        batches of those transactions are emptied (``storage.txn.read_committed_view``).

        ``file_range`` (a consumer's fetch without ``filter_aborted``: the Kafka listener's
        zero-copy path): ``records`` is a ``storage.log.FileRange`` where the log allows one
        (``PartitionLog.read_range``: Kafka batches as stored), which the caller must
        close; otherwise the bytes, as without it."""
        if replica_id == DEBUG_REPLICA_ID:
            return self._debug_fetch(topic, partition, fetch_offset, max_bytes)
        rep, leader = self._leading(topic, partition)
        _check_leader_epoch(leader_epoch, leader.leader_epoch, "fetch")
        is_follower = replica_id >= 0
        if is_follower:
            div = self._follower_position(
                rep,
                leader,
                replica_id,
                fetch_offset,
                last_fetched_epoch,
                broker_epoch,
                log_start_offset,
            )
            if div is not None:
                return self._fetch_answer(rep, b"", diverging=div)
        deadline = time.monotonic() + max_wait_ms / 1000
        while True:
            if rep.leader is not leader or not leader.is_leader:
                raise ReplicaError(
                    "NOT_LEADER_OR_FOLLOWER", "leadership moved", leader_id=rep.registration.leader
                )
            hw = leader.high_watermark
            if isolation_level == READ_COMMITTED and not is_follower:
                hw = rep.producers.last_stable_offset(hw)
            data: bytes | FileRange | None = None
            if file_range and not is_follower and not filter_aborted:
                data = rep.log.read_range(fetch_offset, max_bytes, max_offset=hw)
            if data is None:
                data = rep.log.read(
                    fetch_offset, max_bytes, max_offset=None if is_follower else hw
                ).data
            if len(data) >= max(min_bytes, 1) or (is_follower and hw > high_watermark):
                break
            if isinstance(data, FileRange):
                data.close()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ev = rep.changed
            await wait_event(ev, left)
        if is_follower:
            rep.traffic.replication_bytes_out += len(data)
        else:
            rep.traffic.fetch_requests += 1
            rep.traffic.bytes_out += len(data)
            rep.traffic.records_out += (
                data.records if isinstance(data, FileRange) else count_records(data)
            )
        if isolation_level == READ_COMMITTED and not is_follower:
            return self._committed_answer(rep, fetch_offset, data, filter_aborted)
        return self._fetch_answer(rep, data)

    def _follower_position(
        self,
        rep: Replica,
        leader: LeaderState,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        broker_epoch: int,
        log_start_offset: int,
    ) -> tuple[int, int] | None:
        """A follower's fetch before any wait: the diverging epoch to answer (nothing
        counted), or None once its position counts (``on_follower_fetch``, ISR expansion)."""
        div = self._check_diverging(rep, fetch_offset, last_fetched_epoch)
        if div is not None:
            return div
        if fetch_offset > rep.log.log_end_offset:
            raise ReplicaError(
                "OFFSET_OUT_OF_RANGE",
                f"fetch at {fetch_offset}, log end {rep.log.log_end_offset}",
            )
        follower = leader.follower(BrokerId(replica_id))
        start_before = None if follower is None else follower.log_start_offset
        advanced = leader.on_follower_fetch(
            BrokerId(replica_id),
            fetch_offset,
            leader_epoch=leader.leader_epoch,
            now_ms=now_ms(),
            broker_epoch=broker_epoch,
            log_start_offset=log_start_offset,
        )
        change = leader.maybe_expand_isr(BrokerId(replica_id))
        if change is not None:
            self._send_change(rep, change)
        # A fetch that moved nothing wakes nobody: an idle partition of a fetch session is in
        # every round's fetch, and waking each of its waiters every time (the other
        # follower's long poll, consumers) cost about a third of the leader's per-partition
        # work of a fetch, plus the woken ones' own. Waiters watch the HW (acks, consumers,
        # followers) and, for DeleteRecords, the followers' log starts; the timer's poll
        # resolves everything each tick besides.
        if advanced or follower is None or follower.log_start_offset != start_before:
            self._after_hw_change(rep)
        return None

    async def fetch_for_follower(
        self,
        *,
        replica_id: int,
        broker_epoch: int,
        partitions: Sequence[PartitionFetch],
        max_wait_ms: int,
        response_bytes_max: int,
    ) -> list[tuple[PartitionFetch, dict[str, Any] | BrokerError | StorageError]]:
        """A follower's fetch of many partitions at once (``replica_fetch``, Kafka's
        FetchRequest from a replica fetcher). Each partition is checked and counted as
        ``fetch`` does for one, on its own: one partition's error is that partition's
        answer. The answer comes as soon as any partition has data, an HW past the one the
        follower sent, a log start past the one it sent, or an error (Kafka's follower
        ``fetch.min.bytes`` of 1), else after ``max_wait_ms``. Data is read in the order
        asked (the follower rotates it) up to ``response_bytes_max`` in all, the first
        partition with data getting at least one batch. A partition with nothing new is left
        out of the answer; an entry is ``fetch``'s answer, or the partition's error."""
        out: list[tuple[PartitionFetch, dict[str, Any] | BrokerError | StorageError]] = []
        live: list[tuple[PartitionFetch, Replica, LeaderState]] = []
        for p in partitions:
            try:
                rep, leader = self._leading(p.topic, p.partition)
                _check_leader_epoch(p.leader_epoch, leader.leader_epoch, "fetch")
                div = self._follower_position(
                    rep,
                    leader,
                    replica_id,
                    p.fetch_offset,
                    p.last_fetched_epoch,
                    broker_epoch,
                    p.log_start_offset,
                )
                if div is not None:
                    out.append((p, self._fetch_answer(rep, b"", diverging=div)))
                    continue
            except (BrokerError, StorageError) as e:
                out.append((p, e))
                continue
            live.append((p, rep, leader))

        def news() -> bool:
            for p, rep, leader in live:
                if (
                    rep.leader is not leader
                    or not leader.is_leader
                    or rep.log.log_end_offset > p.fetch_offset
                    or rep.log.log_start_offset > p.log_start_offset
                ):
                    return True
            return False

        def hw_news() -> bool:
            return any(leader.high_watermark > p.high_watermark for p, _, leader in live)

        # One event for every partition asked: each replica's notify sets it.
        wake = asyncio.Event()
        for _, rep, _ in live:
            rep.fetch_waiters.add(wake)
        try:
            deadline = time.monotonic() + max_wait_ms / 1000
            while not out:
                wake.clear()  # before looking: a notify from here on is not missed
                if news():
                    break
                if hw_news():
                    # The follower's own fetch has just moved the HW (its LEO): the news can
                    # ride on the next data, which in a busy partition comes within the
                    # delay, instead of costing an exchange of its own per replicated write.
                    # The HW on the leader, and so every ack, moved already.
                    deadline = min(deadline, time.monotonic() + self.follower_hw_delay_s)
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                await wait_event(wake, left)
        finally:
            for _, rep, _ in live:
                rep.fetch_waiters.discard(wake)
        budget = response_bytes_max
        for p, rep, leader in live:
            try:
                if rep.leader is not leader or not leader.is_leader:
                    raise ReplicaError(
                        "NOT_LEADER_OR_FOLLOWER",
                        "leadership moved",
                        leader_id=rep.registration.leader,
                    )
                data = b""
                if budget > 0 and rep.log.log_end_offset > p.fetch_offset:
                    data = rep.log.read(p.fetch_offset, min(p.max_bytes, budget)).data
            except (BrokerError, StorageError) as e:
                out.append((p, e))
                continue
            if (
                data
                or leader.high_watermark > p.high_watermark
                or rep.log.log_start_offset > p.log_start_offset
            ):
                budget -= len(data)
                rep.traffic.replication_bytes_out += len(data)
                out.append((p, self._fetch_answer(rep, data)))
        return out

    def _committed_answer(
        self, rep: Replica, fetch_offset: int, data: bytes | FileRange, filter_aborted: bool
    ) -> dict[str, Any]:
        if isinstance(data, FileRange):
            end = data.next_offset
        else:
            end = fetch_offset
            for _, h in iter_batches(data, verify=False):
                end = h.next_offset
        aborted = rep.log.aborted_txns_in(fetch_offset, end)
        if filter_aborted:
            assert not isinstance(data, FileRange)
            data = read_committed_view(data, aborted)
        out = self._fetch_answer(rep, data)
        out["aborted_transactions"] = [[a.producer_id, a.first_offset] for a in aborted]
        return out

    def _debug_fetch(
        self, topic: str, partition: int, fetch_offset: int, max_bytes: int
    ) -> dict[str, Any]:
        rep = self.by_name.get((topic, partition))
        if rep is None:
            raise ReplicaError(
                "UNKNOWN_TOPIC_OR_PARTITION",
                f"{topic}-{partition} has no replica on broker {self.broker_id}",
            )
        data = rep.log.read(fetch_offset, max_bytes).data
        return {
            "records": data,
            "high_watermark": rep.high_watermark,
            "log_start_offset": rep.log.log_start_offset,
            "log_end_offset": rep.log.log_end_offset,
            "leader_epoch": rep.registration.leader_epoch,
            "diverging_epoch": None,
        }

    def _fetch_answer(
        self, rep: Replica, data: bytes | FileRange, diverging: tuple[int, int] | None = None
    ) -> dict[str, Any]:
        assert rep.leader is not None
        return {
            "records": data,
            "high_watermark": rep.leader.high_watermark,
            "last_stable_offset": rep.last_stable_offset,
            "log_start_offset": rep.log.log_start_offset,
            "log_end_offset": rep.log.log_end_offset,
            "leader_epoch": rep.leader.leader_epoch,
            "diverging_epoch": None if diverging is None else list(diverging),
        }

    def offsets_for_leader_epoch(
        self, topic: str, partition: int, current_leader_epoch: int, epoch: int
    ) -> dict[str, Any]:
        rep, leader = self._leading(topic, partition)
        _check_leader_epoch(current_leader_epoch, leader.leader_epoch, "offsets_for_leader_epoch")
        e, end = rep.log.end_offset_for_epoch(epoch)
        return {"leader_epoch": e, "end_offset": end}

    def list_offsets(
        self, topic: str, partition: int, timestamp: int, isolation_level: str = READ_UNCOMMITTED
    ) -> dict[str, Any]:
        """-2 earliest, -1 latest (the HW; the LSO at ``read_committed``, as Kafka's
        ListOffsets), else the first offset with a timestamp >= it (below that end; -1 if
        none)."""
        rep, leader = self._leading(topic, partition)
        if timestamp == -2:
            return {"offset": rep.log.log_start_offset}
        committed = isolation_level == READ_COMMITTED
        if timestamp == -1:
            hw = leader.latest_offset_or_raise()
            return {"offset": rep.producers.last_stable_offset(hw) if committed else hw}
        end = rep.last_stable_offset if committed else leader.high_watermark
        off = rep.log.offset_for_timestamp(timestamp)
        if off is None or off >= end:
            return {"offset": -1}
        return {"offset": off}

    def describe(self) -> list[dict[str, Any]]:
        out = []
        for rep in sorted(self.replicas.values(), key=lambda r: r.name):
            d: dict[str, Any] = {
                "topic": rep.topic,
                "partition": rep.partition,
                "log_start_offset": rep.log.log_start_offset,
                "log_end_offset": rep.log.log_end_offset,
                "high_watermark": rep.high_watermark,
                "last_stable_offset": rep.last_stable_offset,
                "leader": int(rep.registration.leader),
                "leader_epoch": rep.registration.leader_epoch,
                "isr": [int(b) for b in rep.registration.isr],
                "eligible_leader_replicas": [int(b) for b in rep.registration.elr],
                "last_known_elr": [int(b) for b in rep.registration.last_known_elr],
                "role": (
                    "leader"
                    if rep.leader is not None and rep.leader.is_leader
                    else "follower"
                    if rep.follower is not None
                    else "none"
                ),
            }
            if rep.leader is not None and rep.leader.is_leader:
                d["maximal_isr"] = sorted(int(b) for b in rep.leader.maximal_isr)
                d["pending_isr_change"] = rep.leader.pending is not None
            out.append(d)
        return out

    # ------------------------------------------------------------------ timers, ISR

    def _checkpoint_hws(self, items: list[tuple[Replica, int]]) -> None:
        """Write each ``(replica, hw)`` (HWs read on the loop; this may run in a thread)."""
        for rep, hw in items:
            if rep.log.closed:
                continue
            try:
                checkpoint.write_offset(rep.log.files, rep.log.dir_path, HW_CHECKPOINT_NAME, hw)
                rep.hw_checkpointed = hw
            except FileNotFoundError as e:  # the log was deleted under us: nothing to keep
                log.info("broker %d: HW checkpoint of %s: %s", self.broker_id, rep.name, e)
            except OSError as e:
                if e.errno in NO_SPACE_ERRNOS:  # full: the next round retries
                    log.warning("broker %d: HW checkpoint of %s: %s", self.broker_id, rep.name, e)
                else:  # an I/O error on the data directory takes it offline, as in Kafka
                    self.log_dir.fail(e, operation="HW checkpoint", path=rep.log.dir_path)

    def _checkpoint_recovery_points(self, reps: list[Replica]) -> None:
        """Write each log's recovery point (may run in a thread). A failing disk takes the
        directory offline inside the log (``KafkaStorageError``), which fail-stop handles."""
        for rep in reps:
            if rep.log.closed:
                continue
            try:
                rep.log.checkpoint_recovery_point()
            except KafkaStorageError as e:
                log.warning("broker %d: recovery point of %s: %s", self.broker_id, rep.name, e)

    def _dirty_hws(self) -> list[tuple[Replica, int]]:
        return [
            (r, r.high_watermark)
            for r in self.replicas.values()
            if r.high_watermark != r.hw_checkpointed
        ]

    async def _tick(self) -> None:
        last_checkpoint = last_expiry = last_retention = last_cleaner = time.monotonic()
        last_rp_checkpoint = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            mono = time.monotonic()
            if mono - last_retention >= self.retention_check_interval_s and (
                self._maintenance is None or self._maintenance.done()
            ):
                cleaner = mono - last_cleaner >= self.cleaner_backoff_s
                last_retention = mono
                if cleaner:
                    last_cleaner = mono
                # A task of its own: compaction can take seconds, and this timer drives the
                # acks=all deadlines and ISR shrinks.
                self._maintenance = asyncio.get_running_loop().create_task(
                    self._log_maintenance(cleaner=cleaner), name="log-maintenance"
                )
            if self._deferred:
                await self._apply_deferred()
            if time.monotonic() - last_expiry >= PRODUCER_EXPIRATION_CHECK_INTERVAL_S:
                last_expiry = time.monotonic()
                for rep in list(self.replicas.values()):
                    rep.producers.maybe_expire_producers(now_ms())
            if time.monotonic() - last_checkpoint >= HW_CHECKPOINT_INTERVAL_S:
                last_checkpoint = time.monotonic()
                dirty = self._dirty_hws()
                if dirty:
                    await asyncio.to_thread(self._checkpoint_hws, dirty)
            if time.monotonic() - last_rp_checkpoint >= RECOVERY_POINT_CHECKPOINT_INTERVAL_S:
                last_rp_checkpoint = time.monotonic()
                await asyncio.to_thread(
                    self._checkpoint_recovery_points, list(self.replicas.values())
                )
            t = now_ms()
            for rep in list(self.replicas.values()):
                leader = rep.leader
                if leader is None or not leader.is_leader:
                    continue
                try:
                    leader.poll(t)
                    if t - rep.last_shrink_check_ms >= leader.config.replica_lag_time_ms_max // 2:
                        rep.last_shrink_check_ms = t
                        change = leader.maybe_shrink_isr(t)
                        if change is not None:
                            log.info(
                                "broker %d: %s shrinking ISR to %s",
                                self.broker_id,
                                rep.name,
                                [m.broker_id for m in change.new_isr],
                            )
                            self._send_change(rep, change)
                    self._after_hw_change(rep)
                except Exception:
                    log.exception("broker %d: timer of %s failed", self.broker_id, rep.name)

    def _send_change(self, rep: Replica, change: PartitionStateChange) -> None:
        """Queue the ISR change ``rep``'s leader just proposed (it replaces any older one
        still queued for the partition); the sender sends it with every other pending one."""
        leader = rep.leader
        invariant(leader is not None, "an ISR change of %s without a leader", rep.name)
        assert leader is not None  # for mypy
        self.alter_queue.submit((rep, leader), change, monotonic_ms())
        self._alter_wake.set()

    async def _send_alters(self) -> None:
        """The AlterPartition sender: one request at a time, carrying every change that is
        due (Kafka's ``AlterPartitionManager``); runs until the broker stops."""
        queue = self.alter_queue
        while True:
            self._alter_wake.clear()
            t = monotonic_ms()
            items = queue.take(t, keep=_still_pending)
            if not items:
                due = queue.next_due_ms()
                await wait_event(self._alter_wake, None if due is None else (due - t) / 1000)
                continue
            await self._alter(items)

    async def _alter(self, items: Sequence[AlterItem[_AlterOwner]]) -> None:
        """Send one AlterPartition of ``items`` and hand each partition's answer to the
        leader that proposed it."""
        queue = self.alter_queue
        epoch = self.broker_epoch()
        answers: list[tuple[AlterItem[_AlterOwner], AlterPartitionResult | None]]
        try:
            resp = await self.controller.execute(
                AlterPartition(
                    broker_id=self.broker_id,
                    broker_epoch=BrokerEpoch(epoch if epoch is not None else -1),
                    partitions=tuple(i.change for i in items),
                )
            )
        except MetadataError as e:
            # Refused whole (a stale broker epoch, not the controller): the same answer for each.
            answers = [
                (item, AlterPartitionResult(item.change.topic_id, item.change.partition, error=e))
                for item, _ in queue.fail()
            ]
        except (ControllerUnavailableError, OSError) as e:
            log.warning(
                "broker %d: AlterPartition of %d partitions: %s", self.broker_id, len(items), e
            )
            answers = queue.fail()
        except BaseException:
            queue.fail()  # cancelled (stopping): nothing will answer
            raise
        else:
            # A partition the controller left out of its answer gets None: sent again.
            results = resp.results if isinstance(resp, AlterPartitionResponse) else ()
            answers = queue.complete(results)
        outcomes: Counter[str] = Counter()
        t = now_ms()
        for item, result in answers:
            rep, leader = item.owner
            if not _still_leads(item.owner):
                outcomes["leader moved on"] += 1
                continue  # a newer state (or none) owns the partition
            try:
                outcome = (
                    AlterOutcome.RETRY
                    if result is None
                    else leader.on_alter_partition_result(item.change, result, t)
                )
                what = outcome.value
                if outcome is AlterOutcome.RETRY:
                    pending = leader.pending
                    if pending is not None and pending.request == item.change:
                        queue.retry(item.owner, item.change, monotonic_ms())
                        what = "sent again"
                    else:
                        # The metadata log settled it meanwhile (a request that timed out
                        # may still have committed), or a newer change is queued.
                        what = "no longer pending"
                elif (
                    outcome is AlterOutcome.IGNORED
                    and result is not None
                    and result.registration is not None
                    and leader.partition_epoch >= result.registration.partition_epoch
                ):
                    # The metadata log brought the committed change before this answer did.
                    what = "applied from the metadata log"
                outcomes[what] += 1
                if outcome is not AlterOutcome.RETRY:
                    log.info(
                        "broker %d: AlterPartition %s ISR %s: %s%s",
                        self.broker_id,
                        rep.name,
                        [m.broker_id for m in item.change.new_isr],
                        what,
                        f" ({result.error})" if result is not None and result.error else "",
                    )
                self._after_hw_change(rep)
            except Exception:
                # As the timer does: one partition's failure must not stop the others' ISRs.
                log.exception("broker %d: AlterPartition answer of %s", self.broker_id, rep.name)
        log.info(
            "broker %d: AlterPartition of %d partitions: %s",
            self.broker_id,
            len(items),
            ", ".join(f"{n} {what}" for what, n in sorted(outcomes.items())) or "nothing",
        )


def _still_leads(owner: _AlterOwner) -> bool:
    rep, leader = owner
    return rep.leader is leader and leader.is_leader


def _still_pending(item: AlterItem[_AlterOwner]) -> bool:
    """Whether the leader that proposed ``item`` still leads and waits for exactly that
    change (a newer registration from the metadata log clears what it was waiting for)."""
    pending = item.owner[1].pending
    return _still_leads(item.owner) and pending is not None and pending.request == item.change


def _check_leader_epoch(asked: int, current: int, what: str) -> None:
    """KIP-320: a request naming a leader epoch (>= 0) must name the current one; an older
    one is FENCED_LEADER_EPOCH (the caller's metadata is stale), a newer one
    UNKNOWN_LEADER_EPOCH (this broker's is)."""
    if asked >= 0 and asked != current:
        code = "FENCED_LEADER_EPOCH" if asked < current else "UNKNOWN_LEADER_EPOCH"
        raise ReplicaError(code, f"{what} in epoch {asked}, leader is in {current}")
