"""``TxnCoordinator``: the asyncio shell around the transaction core on each broker.

What it owns: the ``__transaction_state`` partitions this broker leads, one
``TxnCoordinatorState`` (``broker.txn.state``) per loaded partition, the appends of the
transitions the core decides, the markers of every decided transaction, and the task that
aborts transactions past their timeout. What it must not do: decide anything about a
transaction; every rule lives in the pure core (docs/transactions.md, "The coordinator").

Theory of operation
-------------------
* **Where a transactional id lives.** Id ``t`` belongs to partition
  ``kafka_abs(java_string_hash(t)) % partitions`` of ``__transaction_state`` (Kafka's
  ``partitionFor``, as ``__consumer_offsets`` places groups); its coordinator is that
  partition's leader. ``find_coordinator`` creates the topic (compacted) on first use.
* **Shards and loading** mirror ``broker.group_coordinator``: on every metadata update (and
  every ``RECONCILE_INTERVAL_S``) the partitions led here are compared with the shards; a
  new leadership loads (read the local log to its end ``E``, wait for the high watermark to
  reach ``E``, replay), a lost or changed one is dropped. Meanwhile requests get
  COORDINATOR_LOAD_IN_PROGRESS. Once loaded, every transaction found prepared gets its
  markers written again and is completed: the previous coordinator may have died between
  PrepareCommit and CompleteCommit (markers are idempotent on the partition side).
* **Writes.** A request runs the core; a target it returns is appended (acks=all) and takes
  effect only once committed (``on_written``), and only then is the caller answered. The
  core allows one pending transition per id, so writes of one id never overlap, with one
  exception: the next transaction's first add_partitions, which waited for the previous
  transaction's markers, is appended right behind its COMPLETE_* (chained) instead of once
  that is committed, so the two replicate in one round. This relies on ``OffsetsLog.append``
  placing its records in the log before it first suspends (``ReplicaOffsetsLog`` does), so
  the log holds them in the order they were decided. A failed append drops the shard
  (NOT_COORDINATOR if leadership is gone, else COORDINATOR_NOT_AVAILABLE and a reload,
  which realigns the core with what was written).
* **Markers.** After a PREPARE_* is committed a task writes a marker to every partition of
  the transaction (``MarkerWriter``: the partition leaders append control batches and wait
  for their high watermarks), retrying the failures with back-off while this leadership
  lasts; then it writes COMPLETE_*. A partition whose topic is gone is skipped, as Kafka
  does.
* **Announcements.** Once an ONGOING record is committed, the leaders of the partitions it
  added are told (``announce``, ``RoutedMarkerWriter.announce_added``), so the transaction's
  first batch there needs no KIP-890 verification round trip; only for ids whose last end
  here bumped the epoch (``_Shard.bumping`` says why).
* **Timeouts.** Every ``abort_timed_out_interval_ms`` each loaded shard's ONGOING
  transactions past their timeout are aborted (epoch bumped: the producer is fenced).
* **Expiration.** Every ``remove_expired_interval_ms`` each loaded shard's ids idle past
  ``transactional_id_expiration_ms`` (the core decides which) get their tombstone written.

The clock is injected (wall-clock milliseconds by default) and the log, the markers and the
producer ids are ports, so the unit tests run this shell against fakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import msgpack

from broker.endpoints import endpoint_url
from broker.group_coordinator import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    OFFSETS_TOPIC,
    CoordinatorError,
    CoordinatorInfo,
    Leadership,
    LoggedMarker,
    OffsetsLog,
    TxnKeyValue,
    partition_for,
    wall_clock_ms,
)
from broker.groups.types import TopicPartition
from broker.router import INTERNAL_PREFIX, MSGPACK
from broker.txn.records import (
    COMPLETED,
    PREPARED,
    TRANSACTION_STATE_TOPIC,
    TxnMetadata,
    TxnState,
    decode_txn,
    encode_txn,
)
from broker.txn.state import (
    CONCURRENT_TRANSACTIONS,
    NONE,
    Step,
    TxnConfig,
    TxnCoordinatorState,
)
from broker.txn_markers import TxnMarker, encode_markers
from common import netbind
from common.invariant import invariant
from common.waits import wait_event
from metalog.client import ControllerUnavailableError
from metalog.commands import CreateTopic
from metalog.errors import MetadataError, TopicExistsError
from metalog.image import MetadataImage
from metalog.records import BrokerId

log = logging.getLogger(__name__)

RECONCILE_INTERVAL_S = 0.5
FIND_COORDINATOR_WAIT_S = 5.0
LOAD_RETRY_S = 1.0
MARKER_BACKOFF_S_MIN = 0.05
MARKER_BACKOFF_S_MAX = 2.0
CONCURRENT_WAIT_S = 2.0
"""How long a request for an id that is busy (a write or its markers under way) waits for it
before answering CONCURRENT_TRANSACTIONS."""
TXN_STATE_SEGMENT_BYTES = 100 * 1024 * 1024
"""Kafka's ``transaction.state.log.segment.bytes``."""


class MarkerWriter(Protocol):
    async def write_txn_markers(
        self, markers: Sequence[TxnMarker]
    ) -> dict[tuple[str, int], str | None]:
        """Write each marker on its partition's leader, wherever it is; per partition None
        (written and committed) or the error name."""
        ...


AddedAnnouncer = Callable[[int, int, Sequence[TopicPartition]], Coroutine[Any, Any, None]]
"""``(producer_id, producer_epoch, partitions)``: the transaction of that pair holds these
partitions now (its ONGOING is committed). Best effort: never raises."""


@dataclass(frozen=True)
class TxnCoordinatorConfig:
    """Broker configs; Kafka's names beside each."""

    num_partitions: int = 50  # transaction.state.log.num.partitions
    replication_factor: int = 3  # transaction.state.log.replication.factor
    append_timeout_ms: int = 5_000  # (offsets.commit.timeout.ms's counterpart)
    abort_timed_out_interval_ms: int = 10_000
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    core: TxnConfig = field(default_factory=TxnConfig)


@dataclass
class _Shard:
    """One ``__transaction_state`` partition this broker leads."""

    partition: int
    lead: Leadership
    state: TxnCoordinatorState | None = None
    """None while loading. Invariant: only ever the state replayed in ``lead``."""
    loaded: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    """The load and every marker task: cancelled when the shard is dropped."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set (and replaced) whenever a transition of the shard takes effect, a completion
    starts being written (a next transaction may chain behind it), or a write fails."""
    bumping: set[str] = field(default_factory=set)
    """The ids whose last end, decided in this leadership, bumped the epoch (KIP-890 part
    2; not Kafka's first transaction protocol) and that have not been re-initialised since:
    only their transactions are announced to the partition leaders. With the bump, a
    transaction's epoch is newer than any earlier transaction's marker, so a leader can tell
    a late announcement from a current one (``ReplicaManager.note_txn_partitions``);
    without it, the transaction after a late announcement would share its epoch."""


@dataclass(frozen=True)
class InitResult:
    producer_id: int
    producer_epoch: int


class TxnCoordinator:
    """See the module docstring. ``start()``, the request methods, ``stop()``."""

    def __init__(
        self,
        *,
        broker_id: int,
        txn_log: OffsetsLog,
        image: Callable[[], MetadataImage],
        create_topic: Callable[[CreateTopic], Awaitable[Any]],
        next_producer_id: Callable[[], Awaitable[int]],
        markers: MarkerWriter,
        config: TxnCoordinatorConfig | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        session: netbind.LazySession | None = None,
        announce: AddedAnnouncer | None = None,
    ) -> None:
        """``session``: the HTTP session its markers and verifications to other brokers go
        through; closed by ``stop``. ``announce``: tells the partitions' leaders what each
        committed ONGOING added (``RoutedMarkerWriter.announce_added``); None: the leaders
        verify each transaction's first batch by asking."""
        self.broker_id = broker_id
        self.session = session or netbind.LazySession(limit=64, connect_timeout_s=5.0)
        self.log = txn_log
        self.image = image
        self._create_topic = create_topic
        self._next_producer_id = next_producer_id
        self.markers = markers
        self.config = config or TxnCoordinatorConfig()
        self.clock = clock
        self.announce = announce
        self.shards: dict[int, _Shard] = {}
        self._wake = asyncio.Event()
        self._image_changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._creating: asyncio.Task[None] | None = None
        self._stopped = False
        self._next_timeout_scan_ms = 0
        self._next_expiry_scan_ms = 0

    # ------------------------------------------------------------ lifecycle

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def start(self) -> None:
        self._wake.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="txn-coordinator")

    async def stop(self) -> None:
        self._stopped = True
        for task in (self._task, self._creating):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        for shard in list(self.shards.values()):
            await self._drop(shard)
        await self.session.close()

    async def on_metadata(self, update: object) -> None:
        """A ``MetadataFollower`` listener: reconcile soon, not inline."""
        self._wake.set()
        ev, self._image_changed = self._image_changed, asyncio.Event()
        ev.set()

    async def _run(self) -> None:
        while True:
            await wait_event(self._wake, RECONCILE_INTERVAL_S)
            self._wake.clear()
            try:
                await self._reconcile()
                now = self.clock()
                if now >= self._next_timeout_scan_ms:
                    self._next_timeout_scan_ms = now + self.config.abort_timed_out_interval_ms
                    self.abort_timed_out()
                if now >= self._next_expiry_scan_ms:
                    self._next_expiry_scan_ms = now + self.config.remove_expired_interval_ms
                    self.remove_expired()
            except Exception:
                log.exception("broker %d: txn coordinator reconcile failed", self.broker_id)

    async def _reconcile(self) -> None:
        image = self.image()
        topic = image.topics.get(TRANSACTION_STATE_TOPIC)
        led: dict[int, Leadership] = {}
        if topic is not None:
            for p in topic.partitions:
                lead = self.log.leadership(p)
                if lead is not None:
                    led[p] = lead
        for p, shard in list(self.shards.items()):
            if led.get(p) != shard.lead:
                log.info(
                    "broker %d: no longer transaction coordinator for %s-%d",
                    self.broker_id,
                    TRANSACTION_STATE_TOPIC,
                    p,
                )
                await self._drop(shard)
        for p, lead in sorted(led.items()):
            if p not in self.shards and not self._stopped:
                shard = _Shard(p, lead)
                self.shards[p] = shard
                self._spawn(shard, self._run_load(shard), f"txn-load-{p}")

    def _spawn(self, shard: _Shard, coro: Coroutine[Any, Any, Any], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        shard.tasks.add(task)
        task.add_done_callback(shard.tasks.discard)

    async def _drop(self, shard: _Shard) -> None:
        if shard.closed:
            return
        shard.closed = True
        shard.state = None
        shard.loaded.set()
        if self.shards.get(shard.partition) is shard:
            del self.shards[shard.partition]
        me = asyncio.current_task()
        for task in list(shard.tasks):
            if task is not me and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    # ------------------------------------------------------------ loading

    async def _run_load(self, shard: _Shard) -> None:
        started = time.monotonic()
        p = shard.partition
        try:
            pairs, end = await self.log.read(p, shard.lead)
            await self.log.wait_high_watermark(p, shard.lead, end)
        except Exception as e:
            log.warning(
                "broker %d: loading %s-%d failed: %r; retrying",
                self.broker_id,
                TRANSACTION_STATE_TOPIC,
                p,
                e,
            )
            await asyncio.sleep(LOAD_RETRY_S)
            if not shard.closed:
                await self._drop(shard)
                self._wake.set()
            return
        if shard.closed:
            return
        state = TxnCoordinatorState(self.config.core)
        skipped = 0
        for entry in pairs:
            try:
                if isinstance(entry, TxnKeyValue | LoggedMarker) or entry[0] is None:
                    raise ValueError("not a keyed record of a plain batch")
                state.replay(decode_txn(entry[0], entry[1]))
            except Exception as e:  # a foreign or corrupt record must not wedge the partition
                skipped += 1
                if skipped <= 3:
                    log.warning(
                        "broker %d: %s-%d: skipping a record that does not replay: %s",
                        self.broker_id,
                        TRANSACTION_STATE_TOPIC,
                        p,
                        e,
                    )
        shard.state = state
        shard.loaded.set()
        prepared = state.prepared()
        for meta in prepared:
            self._spawn(shard, self._complete(shard, meta), f"txn-markers-{meta.transactional_id}")
        log.info(
            "broker %d: transaction coordinator for %s-%d (epoch %d): loaded %d records "
            "(%d skipped), %d transactional ids, %d to complete, in %.0f ms",
            self.broker_id,
            TRANSACTION_STATE_TOPIC,
            p,
            shard.lead.leader_epoch,
            len(pairs),
            skipped,
            len(state.txns),
            len(prepared),
            (time.monotonic() - started) * 1000,
        )

    # ------------------------------------------------------------ writes

    async def _write(self, shard: _Shard, target: TxnMetadata) -> None:
        """Append ``target``; once committed it is the id's state. Raises ``CoordinatorError``
        if it could not be written (the shard is then dropped, and reloaded if still ours)."""
        tid = target.transactional_id
        if target.state in COMPLETED:
            # Requests waiting for the id may chain the next transaction's first
            # add_partitions behind this record (``TxnCoordinatorState.chained``): they run
            # only once this task suspends, which ``append`` does after placing the record.
            self._changed(shard)
        try:
            await self.log.append(
                shard.partition,
                shard.lead,
                [encode_txn(target)],
                self.clock(),
                self.config.append_timeout_ms,
            )
        except Exception as e:
            if shard.state is not None:
                shard.state.on_write_failed(tid)
            self._changed(shard)  # a write chained behind this one learns it failed
            still_leader = self.log.leadership(shard.partition) == shard.lead
            log.warning(
                "broker %d: append to %s-%d failed (%s); %s",
                self.broker_id,
                TRANSACTION_STATE_TOPIC,
                shard.partition,
                e,
                "reloading it" if still_leader else "dropping it",
            )
            # The record may still become committed (a timeout): only a reload from the
            # log tells, so the core is not trusted past a failed append.
            asyncio.get_running_loop().create_task(self._drop(shard))
            self._wake.set()
            raise CoordinatorError(
                COORDINATOR_NOT_AVAILABLE if still_leader else NOT_COORDINATOR,
                f"appending to {TRANSACTION_STATE_TOPIC}-{shard.partition} failed: {e}",
                coordinator_id=self._leader_in(self.image(), shard.partition),
            ) from None
        while True:
            if shard.closed or shard.state is None:
                raise CoordinatorError(NOT_COORDINATOR, "the coordinator moved during the write")
            if shard.state.pending.get(tid) is target:
                break
            if shard.state.chained.get(tid) is not target:
                # The completion it was chained behind failed: the shard reloads.
                raise CoordinatorError(
                    COORDINATOR_NOT_AVAILABLE, "the write this one followed failed; retry"
                )
            # Chained: committed, but the completion before it in the log is taken first.
            await wait_event(shard.changed, self.config.append_timeout_ms / 1000)
        prev = shard.state.txns.get(tid)
        shard.state.on_written(target)
        self._changed(shard)
        if target.state is TxnState.ONGOING and self.announce is not None and tid in shard.bumping:
            added = target.partitions
            if prev is not None and prev.state is TxnState.ONGOING:
                added = added - prev.partitions
            if added:
                # Now, not before the commit: the leaders take it as the verification's answer.
                self._spawn(
                    shard,
                    self.announce(target.producer_id, target.producer_epoch, sorted(added)),
                    f"txn-added-{tid}",
                )
        if target.state in PREPARED:
            self._spawn(shard, self._complete(shard, target), f"txn-markers-{tid}")

    @staticmethod
    def _changed(shard: _Shard) -> None:
        changed, shard.changed = shard.changed, asyncio.Event()
        changed.set()

    async def _complete(self, shard: _Shard, prepared: TxnMetadata) -> None:
        """Write the markers of a decided transaction, then its COMPLETE_* record."""
        tid = prepared.transactional_id
        commit = prepared.state is TxnState.PREPARE_COMMIT
        pid, epoch = prepared.marker_pair()
        left = set(prepared.partitions)
        attempt = 0
        while left:
            if shard.closed:
                return
            markers = [
                TxnMarker(tp.topic, tp.partition, pid, epoch, commit, shard.lead.leader_epoch)
                for tp in sorted(left)
            ]
            try:
                results = await self.markers.write_txn_markers(markers)
            except Exception as e:  # never give up while we coordinate: retry
                log.warning("broker %d: markers of %r: %r", self.broker_id, tid, e)
                results = {}
            image = self.image()
            for tp in sorted(left):
                key = (tp.topic, tp.partition)
                if key in results and results[key] is None:
                    left.discard(tp)
                elif image.topics.get(tp.topic) is None:
                    # Deleted: no reader can see its records any more (Kafka drops these).
                    log.info("broker %d: %r: %s is gone; no marker", self.broker_id, tid, tp)
                    left.discard(tp)
            if left:
                attempt += 1
                if attempt == 1 or attempt % 20 == 0:
                    log.info(
                        "broker %d: markers of %r not yet written to %s: %s",
                        self.broker_id,
                        tid,
                        sorted(map(str, left)),
                        {f"{t}-{p}": results.get((t, p), "no answer") for t, p in sorted(left)},
                    )
                await asyncio.sleep(
                    min(MARKER_BACKOFF_S_MIN * 2 ** min(attempt - 1, 6), MARKER_BACKOFF_S_MAX)
                )
        if shard.closed or shard.state is None:
            return
        step = shard.state.on_markers_written(tid, prepared, self.clock())
        if step.target is None:
            return  # moved on (a reload started its own completion)
        with contextlib.suppress(CoordinatorError):  # dropped and reloaded: it completes it
            await self._write(shard, step.target)

    # ------------------------------------------------------------ routing

    @staticmethod
    def _leader_in(image: MetadataImage, partition: int) -> int:
        t = image.topics.get(TRANSACTION_STATE_TOPIC)
        reg = None if t is None else t.partitions.get(partition)
        return -1 if reg is None else int(reg.leader)

    def partition_of(self, tid: str) -> int | None:
        t = self.image().topics.get(TRANSACTION_STATE_TOPIC)
        if t is None or len(t.partitions) == 0:
            return None
        return partition_for(tid, len(t.partitions))

    def coordinator_of(self, tid: str) -> int:
        """The broker the image names as ``tid``'s coordinator; -1 if none."""
        p = self.partition_of(tid)
        return -1 if p is None else self._leader_in(self.image(), p)

    def _shard_or_raise(self, tid: str) -> tuple[_Shard, TxnCoordinatorState]:
        p = self.partition_of(tid)
        if p is None:
            raise CoordinatorError(
                NOT_COORDINATOR,
                f"{TRANSACTION_STATE_TOPIC} does not exist yet (find_coordinator creates it)",
            )
        shard = self.shards.get(p)
        leader = self._leader_in(self.image(), p)
        if shard is None or self.log.leadership(p) != shard.lead:
            if leader == self.broker_id or self.log.leadership(p) is not None:
                self._wake.set()
                raise CoordinatorError(
                    COORDINATOR_LOAD_IN_PROGRESS, f"{TRANSACTION_STATE_TOPIC}-{p} is being loaded"
                )
            raise CoordinatorError(
                NOT_COORDINATOR,
                f"broker {self.broker_id} does not coordinate transactional id {tid!r} "
                f"({TRANSACTION_STATE_TOPIC}-{p}, leader {leader})",
                coordinator_id=leader,
            )
        if shard.state is None:
            raise CoordinatorError(
                COORDINATOR_LOAD_IN_PROGRESS, f"{TRANSACTION_STATE_TOPIC}-{p} is being loaded"
            )
        return shard, shard.state

    async def _run_step(
        self, tid: str, call: Callable[[TxnCoordinatorState, int, int | None], Step]
    ) -> Step:
        """One request: the core call (with a new producer id if it asks for one), then the
        write of its target."""
        deadline = time.monotonic() + CONCURRENT_WAIT_S
        while True:
            shard, state = self._shard_or_raise(tid)
            step = call(state, self.clock(), None)
            left = deadline - time.monotonic()
            if step.error != CONCURRENT_TRANSACTIONS or step.target is not None or left <= 0:
                break
            # The id's previous transition (or its markers) is under way: wait for it here
            # rather than have the client poll, which costs it a back-off per transaction.
            await wait_event(shard.changed, left)
        if step.need_producer_id:
            try:
                pid = await self._next_producer_id()
            except Exception as e:
                raise CoordinatorError(
                    COORDINATOR_NOT_AVAILABLE, f"no producer id to give: {e}"
                ) from None
            # The shard may have moved or changed while we waited: look again.
            shard, state = self._shard_or_raise(tid)
            step = call(state, self.clock(), pid)
            invariant(not step.need_producer_id, "the core asked twice for a producer id")
        if step.target is not None:
            # The core now holds the target as pending: the write must run to its end (and
            # settle the pending transition) even if the request is cancelled meanwhile.
            write = asyncio.ensure_future(self._write(shard, step.target))
            write.add_done_callback(lambda t: None if t.cancelled() else t.exception())
            await asyncio.shield(write)
        return step

    # ------------------------------------------------------------ requests

    async def find_coordinator(self, tid: str) -> CoordinatorInfo:
        if self.image().topics.get(TRANSACTION_STATE_TOPIC) is None:
            if self._creating is None or self._creating.done():
                self._creating = asyncio.get_running_loop().create_task(
                    self._create_state_topic(), name="create-txn-state-topic"
                )
                self._creating.add_done_callback(lambda t: None if t.cancelled() else t.exception())
            await asyncio.shield(self._creating)
        deadline = time.monotonic() + FIND_COORDINATOR_WAIT_S
        while self.coordinator_of(tid) < 0 and time.monotonic() < deadline:
            await wait_event(self._image_changed, deadline - time.monotonic())
        p = self.partition_of(tid)
        leader = self.coordinator_of(tid)
        br = self.image().brokers.get(BrokerId(leader)) if leader >= 0 else None
        if p is None or br is None or not br.endpoints:
            raise CoordinatorError(
                COORDINATOR_NOT_AVAILABLE, f"no coordinator for transactional id {tid!r} now"
            )
        # Clients dial the first endpoint, with its scheme (https on a TLS client listener;
        # issue 18), as the group coordinator answers.
        url = endpoint_url(br.endpoints, None)
        assert url is not None
        return CoordinatorInfo(leader, url, p)

    async def _create_state_topic(self) -> None:
        usable = len(self.image().brokers.usable())
        rf = min(self.config.replication_factor, usable)
        if rf < 1:
            raise CoordinatorError(COORDINATOR_NOT_AVAILABLE, "no usable broker registered yet")
        cmd = CreateTopic(
            name=TRANSACTION_STATE_TOPIC,
            num_partitions=self.config.num_partitions,
            replication_factor=rf,
            configs={
                "cleanup.policy": "compact",
                "segment.bytes": str(TXN_STATE_SEGMENT_BYTES),
                # Kafka's transaction.state.log.min.isr default: a decision must survive
                # the loss of a broker.
                "min.insync.replicas": str(min(2, rf)),
            },
        )
        try:
            await self._create_topic(cmd)
            log.info(
                "broker %d: created %s (%d partitions, replication factor %d)",
                self.broker_id,
                TRANSACTION_STATE_TOPIC,
                cmd.num_partitions,
                rf,
            )
        except TopicExistsError:
            pass
        except (MetadataError, ControllerUnavailableError) as e:
            raise CoordinatorError(
                COORDINATOR_NOT_AVAILABLE, f"creating {TRANSACTION_STATE_TOPIC}: {e}"
            ) from None

    async def init_producer_id(self, tid: str, timeout_ms: int) -> InitResult:
        """The next (producer id, epoch) for ``tid``; every earlier pair is fenced. An open
        transaction of the id is aborted first (answered CONCURRENT_TRANSACTIONS meanwhile:
        retry)."""
        self._forget_bumps(tid)
        step = await self._run_step(
            tid, lambda st, now, pid: st.handle_init_producer_id(tid, timeout_ms, now, pid)
        )
        self._forget_bumps(tid)
        _raise_for(step)
        meta = step.result
        assert meta is not None
        return InitResult(meta.producer_id, meta.producer_epoch)

    async def add_partitions(
        self, tid: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> None:
        parts = frozenset(partitions)
        step = await self._run_step(
            tid,
            lambda st, now, _pid: st.handle_add_partitions(
                tid, producer_id, producer_epoch, parts, now
            ),
        )
        _raise_for(step)

    def verify(
        self, tid: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> str | None:
        """KIP-890 part 1: may the producer write its first transactional batch to ``tp``?
        None if so, else the error name; ``CoordinatorError`` if not coordinator here."""
        _shard, state = self._shard_or_raise(tid)
        code = state.verify_partition(tid, producer_id, producer_epoch, tp)
        return None if code == NONE else code

    def offsets_partition(self, group: str) -> TopicPartition:
        t = self.image().topics.get(OFFSETS_TOPIC)
        if t is None or len(t.partitions) == 0:
            # The group coordinator creates it on its find_coordinator: the client looks
            # its group's coordinator up first, so this is a moment's race.
            raise CoordinatorError(COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} does not exist yet")
        return TopicPartition(OFFSETS_TOPIC, partition_for(group, len(t.partitions)))

    async def add_offsets(
        self, tid: str, producer_id: int, producer_epoch: int, group: str
    ) -> None:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        transaction, so its offsets commit or abort with it."""
        await self.add_partitions(tid, producer_id, producer_epoch, [self.offsets_partition(group)])

    async def end_txn(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        bump_epoch: bool = True,
    ) -> InitResult:
        """EndTxn: the outcome is durable when this returns; the markers follow. Returns the
        pair for the next transaction (the epoch is bumped on every end, KIP-890 part 2)."""
        step = await self._run_step(
            tid,
            lambda st, now, pid: st.handle_end_txn(
                tid, producer_id, producer_epoch, commit, now, pid, bump_epoch
            ),
        )
        if not bump_epoch:
            self._forget_bumps(tid)
        _raise_for(step)
        p = self.partition_of(tid)
        shard = None if p is None else self.shards.get(p)
        if bump_epoch and shard is not None and step.target is not None:
            shard.bumping.add(tid)  # decided here, in this leadership
        meta = step.result
        assert meta is not None
        return InitResult(meta.producer_id, meta.producer_epoch)

    def _forget_bumps(self, tid: str) -> None:
        for shard in self.shards.values():
            shard.bumping.discard(tid)

    def describe(self, tid: str) -> TxnMetadata | None:
        _shard, state = self._shard_or_raise(tid)
        return state.describe(tid)

    def abort_timed_out(self) -> int:
        """Start aborting every transaction past its timeout; returns how many."""
        started = 0
        now = self.clock()
        for shard in list(self.shards.values()):
            if shard.state is None or shard.closed:
                continue
            for tid in shard.state.timed_out(now):
                log.info(
                    "broker %d: transaction of %r is past its timeout: aborting it",
                    self.broker_id,
                    tid,
                )
                self._spawn(shard, self._abort_timed_out(tid), f"txn-timeout-{tid}")
                started += 1
        return started

    async def _abort_timed_out(self, tid: str) -> None:
        with contextlib.suppress(CoordinatorError):
            await self._run_step(tid, lambda st, now, pid: st.abort_timed_out(tid, now, pid))

    def remove_expired(self) -> int:
        """Start writing the tombstone of every expired transactional id; returns how many."""
        started = 0
        now = self.clock()
        for shard in list(self.shards.values()):
            if shard.state is None or shard.closed:
                continue
            for tid in shard.state.expired(now):
                self._spawn(shard, self._expire(tid), f"txn-expire-{tid}")
                started += 1
        if started:
            log.info("broker %d: removing %d expired transactional ids", self.broker_id, started)
        return started

    async def _expire(self, tid: str) -> None:
        # INVALID_TXN_STATE (a request came in meanwhile) and a lost leadership both leave
        # the id as it is: the next scan, here or on the next coordinator, looks again.
        with contextlib.suppress(CoordinatorError):
            await self._run_step(tid, lambda st, now, pid: st.expire(tid, now))


class TxnRequestError(CoordinatorError):
    """A refusal by the transaction core (PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, ...)."""


def _raise_for(step: Step) -> None:
    if step.error != NONE:
        raise TxnRequestError(step.error, _MESSAGES.get(step.error, step.error))


_MESSAGES = {
    "PRODUCER_FENCED": "a newer producer with the same transactional id exists, or the "
    "transaction was aborted (timeout) and the epoch bumped",
    "INVALID_PRODUCER_EPOCH": "the epoch is newer than the coordinator's",
    "INVALID_PRODUCER_ID_MAPPING": "the producer id is not the transactional id's",
    "CONCURRENT_TRANSACTIONS": "the transactional id's previous transaction is still being "
    "completed; retry",
    "INVALID_TXN_STATE": "not allowed in the transaction's state",
    "INVALID_TRANSACTION_TIMEOUT": "transaction_timeout_ms must be in (0, "
    "transaction.max.timeout.ms]",
}


# ---------------------------------------------------------------- markers, over the brokers

LocalMarkers = Callable[[Sequence[TxnMarker]], Awaitable[dict[tuple[str, int], str | None]]]
LocalAdded = Callable[[int, int, Sequence[tuple[str, int]]], None]
"""``ReplicaManager.note_txn_partitions``."""
ANNOUNCE_TIMEOUT_S = 5.0


class RoutedMarkerWriter:
    """``MarkerWriter`` over the cluster: each marker goes to its partition's leader as the
    image names it; this broker's own partitions through ``local``
    (``ReplicaManager.write_txn_markers``), the others' through their
    ``write_txn_markers`` route (never forwarded further: a leader that moved answers
    NOT_LEADER_OR_FOLLOWER and the coordinator retries with a newer image)."""

    def __init__(
        self,
        *,
        broker_id: int,
        leader_of: Callable[[str, int], int | None],
        broker_url: Callable[[int], str | None],
        local: LocalMarkers,
        session: Callable[[], aiohttp.ClientSession],
        timeout_ms: int = 30_000,
        local_added: LocalAdded | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.leader_of = leader_of
        self.broker_url = broker_url
        self.local = local
        self.session = session
        self.timeout_ms = timeout_ms
        self.local_added = local_added

    async def announce_added(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> None:
        """``AddedAnnouncer``: one ``txn_partitions_added`` to each leader of ``partitions``
        (this broker's through ``local_added``), all at once. A leader that misses it (moved,
        slow, unreachable) verifies by asking, as without it: nothing is retried."""
        by_leader: dict[int, list[list[Any]]] = {}
        for tp in partitions:
            leader = self.leader_of(tp.topic, tp.partition)
            if leader is not None and leader >= 0:
                by_leader.setdefault(leader, []).append([tp.topic, tp.partition])

        async def to(leader: int, parts: list[list[Any]]) -> None:
            if leader == self.broker_id:
                if self.local_added is not None:
                    self.local_added(producer_id, producer_epoch, [(t, p) for t, p in parts])
                return
            url = self.broker_url(leader)
            if url is None:
                return
            body = {"producer_id": producer_id, "producer_epoch": producer_epoch}
            try:
                async with self.session().post(
                    f"{url}{INTERNAL_PREFIX}/txn_partitions_added",
                    data=msgpack.packb({**body, "partitions": parts}, use_bin_type=True),
                    headers={"Content-Type": MSGPACK},
                    timeout=aiohttp.ClientTimeout(total=ANNOUNCE_TIMEOUT_S),
                ) as resp:
                    await resp.read()
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                log.debug("broker %d: announcing to broker %d: %s", self.broker_id, leader, e)

        await asyncio.gather(*(to(leader, parts) for leader, parts in by_leader.items()))

    async def write_txn_markers(
        self, markers: Sequence[TxnMarker]
    ) -> dict[tuple[str, int], str | None]:
        out: dict[tuple[str, int], str | None] = {}
        by_leader: dict[int, list[TxnMarker]] = {}
        for m in markers:
            leader = self.leader_of(m.topic, m.partition)
            if leader is None:
                out[(m.topic, m.partition)] = "UNKNOWN_TOPIC_OR_PARTITION"
            elif leader < 0:
                out[(m.topic, m.partition)] = "LEADER_NOT_AVAILABLE"
            else:
                by_leader.setdefault(leader, []).append(m)
        answers = await asyncio.gather(*(self._to(leader, ms) for leader, ms in by_leader.items()))
        for part in answers:
            out.update(part)
        return out

    async def _to(self, leader: int, markers: list[TxnMarker]) -> dict[tuple[str, int], str | None]:
        if leader == self.broker_id:
            return await self.local(markers)
        failed: dict[tuple[str, int], str | None] = dict.fromkeys(
            ((m.topic, m.partition) for m in markers), "NETWORK_EXCEPTION"
        )
        url = self.broker_url(leader)
        if url is None:
            return dict.fromkeys(failed, "LEADER_NOT_AVAILABLE")
        body = {
            "markers": encode_markers(markers),
            "timeout_ms": self.timeout_ms,
        }
        try:
            async with self.session().post(
                f"{url}{INTERNAL_PREFIX}/write_txn_markers",
                data=msgpack.packb(body, use_bin_type=True),
                headers={"Content-Type": MSGPACK},
                timeout=aiohttp.ClientTimeout(total=self.timeout_ms / 1000 + 2.0),
            ) as resp:
                answer = msgpack.unpackb(await resp.read(), raw=False)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
            log.info("broker %d: markers to broker %d: %s", self.broker_id, leader, e)
            return failed
        if not isinstance(answer, dict) or answer.get("error"):
            err = "UNKNOWN_SERVER_ERROR" if not isinstance(answer, dict) else answer["error"]
            return dict.fromkeys(failed, str(err))
        out: dict[tuple[str, int], str | None] = {}
        for r in answer.get("results") or []:
            if isinstance(r, dict):
                err = r.get("error")
                out[(str(r.get("topic")), int(r.get("partition", -1)))] = (
                    None if err in (None, "NONE") else str(err)
                )
        return {k: out.get(k, "UNKNOWN_SERVER_ERROR") for k in failed}
