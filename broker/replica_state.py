"""Replication state of one partition on one broker: the leader's view and a follower's.

Longboat replicates as Kafka does: followers *pull* with the fetch path consumers use, the
leader learns each follower's log end offset (LEO) from the offset it fetches at, and the high
watermark (HW) is the smallest LEO over the in-sync replicas. This module is the pure core of
that; the broker's asyncio shell moves fetches, produce requests, AlterPartition requests and
metadata images in and out (docs/replication.md says what the shell must do and in what
order).

``LeaderState`` (Kafka's ``Partition`` + ``Replica`` while leader)
    * the registration from the metadata image: replicas, ISR, leader epoch, partition epoch;
    * per follower a ``FollowerProgress``: LEO, last-caught-up time (``Replica.updateFetchState``);
    * the HW: min LEO over the *maximal* ISR (committed ISR plus any member an in-flight
      AlterPartition adds, KIP-497), never past the leader's LEO, never backwards, and not at
      all while the ISR is below ``min.insync.replicas`` (KIP-966, Kafka 4.x);
    * at most one ISR change in flight (``pending``): ``maybe_shrink_isr``/``maybe_expand_isr``
      return the ``PartitionStateChange`` to send; ``on_alter_partition_result`` applies the
      controller's answer or error; a newer registration from the metadata log overrides it;
    * acks=all: ``check_append_or_raise`` refuses below ``min.insync.replicas`` before the
      append; ``add_waiter(last_offset)`` completes once HW > last_offset (with
      ``NotEnoughReplicasAfterAppendError`` if the ISR shrank below the minimum meanwhile),
      times out through ``poll(now_ms)``, and fails with ``NotLeaderOrFollowerError`` when
      leadership is lost. Results come out of ``drain_acks()``.

``FollowerState`` (Kafka's fetcher thread, per partition)
    TRUNCATING --answer with final offset--> FETCHING --diverging epoch--> TRUNCATING.
    On becoming follower it asks the leader for the end offset of its latest epoch
    (OffsetsForLeaderEpoch) and truncates to where both logs agree, repeating with an older
    epoch when the leader answers with an epoch the follower does not have (KIP-101, KIP-279).
    Its HW is min(leader's HW, own LEO), never moved backwards except by truncation.

Leader state transitions::

    become leader (registration names us) --> leading
    leading --maybe_shrink/expand--> leading + pending --answer / newer registration--> leading
    leading --registration names another leader, or resign()--> resigned (terminal;
                                                               every waiter failed)

Time arrives as ``now_ms`` arguments; nothing here reads a clock.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from broker.errors import (
    BrokerError,
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from common.invariant import invariant
from metalog.commands import IsrMember, PartitionStateChange
from metalog.image import PartitionRegistration
from metalog.records import BrokerEpoch, BrokerId, LeaderRecoveryState, TopicId
from metalog.responses import AlterPartitionResult

UNKNOWN_OFFSET = -1
"""LEO of a follower the leader has not heard from in this epoch (Kafka's UnknownOffset)."""
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
ACKS_ALL = -1
_ACKS = (0, 1, ACKS_ALL)


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """The knobs of ISR replication, Kafka's names in the comments."""

    replica_lag_time_ms_max: int = 30_000
    """``replica.lag.time.max.ms``: a follower not caught up for longer leaves the ISR."""
    min_insync_replicas: int = 1
    """``min.insync.replicas`` (topic config): acks=all needs an ISR at least this big."""
    hw_requires_min_isr: bool = True
    """KIP-966 (Kafka 4.x ``maybeIncrementLeaderHW``): the HW stands still while the ISR is
    below the effective ``min.insync.replicas``, so every committed offset is on at least
    that many replicas even for acks=1 writes. False gives Kafka 3.x behaviour."""
    hw_requires_leader_flush: bool = False
    """The HW never passes what the leader has fsynced (``on_local_flush``), as a KIP-595
    leader flushes before advancing its HW. With followers that flush before each fetch, an
    acks=all write then survives a power cut of every replica. False: Kafka's behaviour
    (durability by replication alone)."""

    @staticmethod
    def from_kafka(configs: Mapping[str, str]) -> ReplicationConfig:
        """From Kafka-named configs (missing keys keep their defaults)."""
        d = ReplicationConfig()
        return ReplicationConfig(
            replica_lag_time_ms_max=int(
                configs.get("replica.lag.time.max.ms", d.replica_lag_time_ms_max)
            ),
            min_insync_replicas=int(configs.get("min.insync.replicas", d.min_insync_replicas)),
        )


# --------------------------------------------------------------------------- leader side


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower (Kafka's ``ReplicaState``)."""

    broker_id: BrokerId
    log_end_offset: int = UNKNOWN_OFFSET
    """The offset of its latest fetch in this leader epoch: it holds every offset below."""
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    """The leader's LEO when that follower fetched last."""
    last_fetch_time_ms: int | None = None
    last_caught_up_time_ms: int | None = None
    """The latest time t such that the follower's latest fetch offset >= the leader's LEO at t;
    None: never, in this leader's term. (Kafka uses 0, which simulated clocks starting at 0
    would mistake for "recently".)"""
    broker_epoch: int = -1
    """The broker epoch its fetches carry (KIP-903), sent with it in an ISR proposal."""

    def on_fetch(self, fetch_offset: int, leader_log_end_offset: int, now_ms: int) -> None:
        """Kafka's ``Replica.updateFetchState``: a fetch at or past the leader's current LEO
        catches the follower up now; a fetch at or past the leader's LEO at the *previous*
        fetch catches it up as of that previous fetch. So a follower that keeps up with a
        steady stream of small produces stays in sync although it never reads the very end."""
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = _max_opt(self.last_caught_up_time_ms, now_ms)
        elif (
            fetch_offset >= self.last_fetch_leader_log_end_offset
            and self.last_fetch_time_ms is not None
        ):
            self.last_caught_up_time_ms = _max_opt(
                self.last_caught_up_time_ms, self.last_fetch_time_ms
            )
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(
            leader_log_end_offset, self.last_fetch_leader_log_end_offset
        )
        self.last_fetch_time_ms = now_ms

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, lag_ms_max: int) -> bool:
        """Kafka's ``ReplicaState.isCaughtUp``: at the leader's LEO, or caught up recently."""
        if self.log_end_offset == leader_log_end_offset:
            return True
        t = self.last_caught_up_time_ms
        return t is not None and now_ms - t <= lag_ms_max


def _max_opt(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)


class IsrChangeKind(enum.Enum):
    EXPAND = "expand"
    SHRINK = "shrink"
    RECOVER = "recover"


@dataclass(frozen=True, slots=True)
class PendingIsrChange:
    """An AlterPartition sent and not yet answered (Kafka's ``PendingPartitionChange``)."""

    kind: IsrChangeKind
    request: PartitionStateChange
    maximal_isr: frozenset[BrokerId]
    """Committed ISR union proposed ISR: the HW counts all of them until the answer comes, which
    is safe whichever way the controller decides (KIP-497)."""


class AlterOutcome(enum.Enum):
    """What ``on_alter_partition_result`` did, and what the shell should do next."""

    APPLIED = "applied"
    """The controller committed the change (or found it already true); the ISR is updated."""
    IGNORED = "ignored"
    """Not an answer to the change in flight (a stale response); nothing changed."""
    REVERTED = "reverted"
    """The controller says it did not apply the change and our partition epoch is current
    (INELIGIBLE_REPLICA, OPERATION_NOT_ATTEMPTED): back to the committed state; a later
    ``maybe_*`` may propose again."""
    AWAIT_METADATA = "await_metadata"
    """Our view is stale (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, ...): keep the change
    pending, propose nothing, until a newer registration arrives through the metadata log."""
    RETRY = "retry"
    """A transient error (NOT_CONTROLLER, timeouts, unknown): resend ``pending.request``."""


# Kafka's Partition.handleAlterPartitionError, by error code.
_REVERT_CODES = frozenset({"INELIGIBLE_REPLICA", "OPERATION_NOT_ATTEMPTED"})
_AWAIT_METADATA_CODES = frozenset(
    {
        "UNKNOWN_TOPIC_OR_PARTITION",
        "UNKNOWN_TOPIC_ID",
        "FENCED_LEADER_EPOCH",
        "INVALID_UPDATE_VERSION",
        "INVALID_REQUEST",
        "NEW_LEADER_ELECTED",
        # Not in Kafka's list (it retries), but our controller answers it only when another broker
        # leads: retrying cannot succeed before the metadata log tells us so.
        "NOT_LEADER_OR_FOLLOWER",
    }
)


@dataclass(frozen=True, slots=True)
class AckResult:
    """The outcome of one acks=all waiter: ``error`` None means acknowledged."""

    waiter_id: int
    last_offset: int
    error: BrokerError | None


class LeaderState:
    """The leader's replication state of one partition. See the module docstring."""

    def __init__(
        self,
        *,
        topic_id: TopicId,
        partition: int,
        local_broker_id: BrokerId,
        registration: PartitionRegistration,
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
        config: ReplicationConfig | None = None,
        local_broker_epoch: int = -1,
        ineligible_replicas: Iterable[BrokerId] = (),
        flushed_offset: int | None = None,
    ) -> None:
        """Become leader (Kafka's ``Partition.makeLeader``).

        ``log_end_offset`` is the local log's LEO, and becomes the start offset of this leader
        epoch: the shell must record ``(registration.leader_epoch, log_end_offset)`` in the
        log's leader epoch cache before serving OffsetsForLeaderEpoch, so that a follower
        asking about any epoch this leader never wrote gets an answer (KIP-101).
        ``high_watermark`` is the local HW (the checkpoint, or the HW it had as follower).
        ``flushed_offset`` (default ``log_end_offset``) is the log's recovery point, which
        matters with ``hw_requires_leader_flush`` only.
        """
        invariant(
            registration.leader == local_broker_id,
            "broker %s becoming leader of a partition led by %s",
            local_broker_id,
            registration.leader,
        )
        invariant(log_end_offset >= 0, "negative log end offset %d", log_end_offset)
        self.topic_id = topic_id
        self.partition = partition
        self.local_broker_id = local_broker_id
        self.local_broker_epoch = local_broker_epoch
        self.config = config if config is not None else ReplicationConfig()
        self._registration = registration
        self._leo = log_end_offset
        self._flushed = log_end_offset if flushed_offset is None else flushed_offset
        self.epoch_start_offset = log_end_offset
        """Kafka's ``leaderEpochStartOffsetOpt``: a follower joins the ISR only once it has
        fetched this far, i.e. it agrees with this leader's log about every earlier epoch."""
        self._hw = min(high_watermark, log_end_offset)
        """Invariant: never decreases while leading; <= ``_leo``; every advance is to a value
        <= the LEO of each member of the maximal ISR."""
        self._leading = True
        self._pending: PendingIsrChange | None = None
        self._ineligible = frozenset(ineligible_replicas)
        self._followers: dict[BrokerId, FollowerProgress] = {}
        self._sync_followers(now_ms, reset=True)
        # acks=all waiters: id -> (last_offset, deadline_ms); two heaps with lazy deletion.
        self._waiters: dict[int, tuple[int, int]] = {}
        self._by_offset: list[tuple[int, int]] = []
        self._by_deadline: list[tuple[int, int]] = []
        self._next_waiter_id = 0
        self._acks: list[AckResult] = []
        # The ISR may be just us: the HW may move at once.
        self._maybe_advance_hw(now_ms)

    # ------------------------------------------------------------------ queries

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def registration(self) -> PartitionRegistration:
        return self._registration

    @property
    def leader_epoch(self) -> int:
        return self._registration.leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self._registration.partition_epoch

    @property
    def replicas(self) -> tuple[BrokerId, ...]:
        return self._registration.replicas

    @property
    def isr(self) -> tuple[BrokerId, ...]:
        """The committed ISR (the metadata log's)."""
        return self._registration.isr

    @property
    def maximal_isr(self) -> frozenset[BrokerId]:
        if self._pending is not None:
            return self._pending.maximal_isr
        return frozenset(self._registration.isr)

    @property
    def pending(self) -> PendingIsrChange | None:
        return self._pending

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def effective_min_isr(self) -> int:
        """``min.insync.replicas`` capped by the replication factor (Kafka's
        ``effectiveMinIsr``): a topic asking for more copies than it has is not wedged."""
        return max(1, min(self.config.min_insync_replicas, len(self._registration.replicas)))

    @property
    def is_under_min_isr(self) -> bool:
        return len(self._registration.isr) < self.effective_min_isr

    @property
    def is_under_replicated(self) -> bool:
        return len(self._registration.isr) < len(self._registration.replicas)

    @property
    def high_watermark_lagging(self) -> bool:
        """True while the HW is below this epoch's start offset: a new leader has not yet
        learnt how far the previous one had committed. ListOffsets(latest) is answered with
        ``OffsetNotAvailableError`` meanwhile (Kafka's ``fetchOffsetForTimestamp``)."""
        return self._hw < self.epoch_start_offset

    def latest_offset_or_raise(self) -> int:
        """The offset a consumer's "latest" means: the HW, unless it still lags."""
        self._check_leading()
        if self.high_watermark_lagging:
            raise OffsetNotAvailableError(
                f"high watermark {self._hw} lags the start of leader epoch "
                f"{self.leader_epoch} at {self.epoch_start_offset}"
            )
        return self._hw

    def follower(self, broker_id: BrokerId) -> FollowerProgress | None:
        """The leader's view of one follower (read it, don't change it)."""
        return self._followers.get(broker_id)

    @property
    def followers(self) -> Mapping[BrokerId, FollowerProgress]:
        return dict(self._followers)

    @property
    def waiter_count(self) -> int:
        return len(self._waiters)

    # ------------------------------------------------------------------ produce

    def check_append_or_raise(self, required_acks: int) -> None:
        """Refuse a produce before anything is appended (Kafka's ``appendRecordsToLeader``).

        acks=all with an ISR below the effective ``min.insync.replicas`` is refused with
        ``NotEnoughReplicasError``: nothing is written, so the producer can retry safely.
        The ISR counted is the committed one, as Kafka does.
        """
        if required_acks not in _ACKS:
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1, not {required_acks}")
        self._check_leading()
        if required_acks == ACKS_ALL and self.is_under_min_isr:
            raise NotEnoughReplicasError(
                f"ISR {list(self.isr)} is smaller than min.insync.replicas="
                f"{self.effective_min_isr} for partition {self.topic_id}-{self.partition}"
            )

    def on_local_append(self, log_end_offset: int, now_ms: int) -> bool:
        """The leader's log grew to ``log_end_offset``; True if the HW advanced (an ISR of
        just the leader commits at once)."""
        self._check_leading()
        invariant(
            log_end_offset >= self._leo,
            "leader log end offset went back: %d -> %d",
            self._leo,
            log_end_offset,
        )
        self._leo = log_end_offset
        return self._maybe_advance_hw(now_ms)

    def on_local_flush(self, flushed_offset: int, now_ms: int) -> bool:
        """Every offset below ``flushed_offset`` is fsynced on the leader; True if the HW
        advanced (only with ``hw_requires_leader_flush``)."""
        self._check_leading()
        self._flushed = max(self._flushed, flushed_offset)
        return self._maybe_advance_hw(now_ms)

    def add_waiter(self, last_offset: int, deadline_ms: int) -> int:
        """Wait for HW > ``last_offset`` (an acks=all produce); the id comes back in an
        ``AckResult`` from ``drain_acks``: on commit, on ``poll`` past ``deadline_ms``
        (``RequestTimedOutError``), or when leadership is lost."""
        self._check_leading()
        invariant(
            last_offset < self._leo,
            "waiting for offset %d beyond the log end %d",
            last_offset,
            self._leo,
        )
        wid = self._next_waiter_id
        self._next_waiter_id += 1
        if last_offset < self._hw:
            self._acks.append(AckResult(wid, last_offset, self._after_append_error()))
            return wid
        self._waiters[wid] = (last_offset, deadline_ms)
        heapq.heappush(self._by_offset, (last_offset, wid))
        heapq.heappush(self._by_deadline, (deadline_ms, wid))
        return wid

    def cancel_waiter(self, waiter_id: int) -> bool:
        """Forget a waiter whose request went away; True if it was still waiting."""
        return self._waiters.pop(waiter_id, None) is not None

    def drain_acks(self) -> list[AckResult]:
        """Waiters completed since the last call, in completion order."""
        out, self._acks = self._acks, []
        return out

    def poll(self, now_ms: int) -> int | None:
        """Time out waiters whose deadline passed; the next deadline, if any waiter is left."""
        while self._by_deadline:
            deadline, wid = self._by_deadline[0]
            if wid not in self._waiters:
                heapq.heappop(self._by_deadline)
                continue
            if deadline > now_ms:
                return deadline
            heapq.heappop(self._by_deadline)
            last_offset, _ = self._waiters.pop(wid)
            self._acks.append(
                AckResult(
                    wid,
                    last_offset,
                    RequestTimedOutError(
                        f"high watermark {self._hw} did not pass offset {last_offset} in time"
                    ),
                )
            )
        return None

    def _after_append_error(self) -> BrokerError | None:
        # Kafka's checkEnoughReplicasReachOffset: committed, but by fewer replicas than the
        # topic asks for, because the ISR shrank after the append was let in.
        if len(self.maximal_isr) < self.effective_min_isr:
            return NotEnoughReplicasAfterAppendError(
                f"ISR {sorted(self.maximal_isr)} shrank below min.insync.replicas="
                f"{self.effective_min_isr} after the append"
            )
        return None

    def _complete_waiters(self) -> None:
        error: BrokerError | None = None
        first = True
        while self._by_offset and self._by_offset[0][0] < self._hw:
            last_offset, wid = heapq.heappop(self._by_offset)
            if self._waiters.pop(wid, None) is None:
                continue
            if first:
                error, first = self._after_append_error(), False
            self._acks.append(AckResult(wid, last_offset, error))

    # ------------------------------------------------------------------ followers

    def on_follower_fetch(
        self,
        follower_id: BrokerId,
        fetch_offset: int,
        *,
        leader_epoch: int,
        now_ms: int,
        log_start_offset: int = UNKNOWN_OFFSET,
        broker_epoch: int = -1,
    ) -> bool:
        """A follower fetched at ``fetch_offset``; True if the HW advanced.

        Call it only for a fetch that was served without a diverging epoch (the shell checks
        the fetch's last fetched epoch against the log's epoch cache first, as Kafka's
        ``Partition.fetchRecords`` does): only then does the follower's log agree with ours
        below ``fetch_offset``, which is what makes its LEO count towards the HW.
        Raises ``FencedLeaderEpochError``/``UnknownLeaderEpochError`` if the fetch names
        another leader epoch, ``UnknownLeaderEpochError`` if the sender is not a replica
        (Kafka's answer while a reassignment propagates), ``NotLeaderOrFollowerError`` after
        resigning.
        """
        self._check_leading()
        if leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"fetch in leader epoch {leader_epoch}, current is {self.leader_epoch}"
            )
        if leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"fetch in leader epoch {leader_epoch}, this leader knows {self.leader_epoch}"
            )
        progress = self._followers.get(follower_id)
        if progress is None:
            raise UnknownLeaderEpochError(
                f"broker {follower_id} is not a replica of {self.topic_id}-{self.partition} "
                f"in leader epoch {self.leader_epoch}, partition epoch {self.partition_epoch}"
            )
        invariant(
            0 <= fetch_offset <= self._leo,
            "follower %s fetched at %d, log end is %d",
            follower_id,
            fetch_offset,
            self._leo,
        )
        progress.on_fetch(fetch_offset, self._leo, now_ms)
        progress.log_start_offset = log_start_offset
        if broker_epoch != -1:
            progress.broker_epoch = broker_epoch
        return self._maybe_advance_hw(now_ms)

    def set_ineligible_replicas(self, broker_ids: Iterable[BrokerId], now_ms: int) -> bool:
        """Brokers that may not join the ISR: fenced, in controlled shutdown, or unknown in
        the metadata image (Kafka's ``isReplicaIsrEligible``). True if the HW advanced (a
        caught-up replica that became ineligible no longer holds it back)."""
        self._ineligible = frozenset(broker_ids)
        return self._maybe_advance_hw(now_ms) if self._leading else False

    def maybe_expand_isr(self, follower_id: BrokerId) -> PartitionStateChange | None:
        """Propose adding ``follower_id`` to the ISR (Kafka's ``maybeExpandIsr``).

        Conditions: no ISR change in flight; the follower is a replica, not in the ISR, and
        eligible; its LEO is >= the HW (it holds everything committed) and >= this epoch's
        start offset (its log agrees with this leader's about older epochs: without that, a
        replica could join, be elected, and lose committed offsets between our HW and LEO).
        The lag time is not checked, as in Kafka: reaching the HW is what counts.
        While the leader is RECOVERING (after an unclean election, KIP-704) nobody joins;
        ``maybe_mark_recovered`` comes first.
        Returns the change to send in an AlterPartition, or None.
        """
        if not self._leading or self._pending is not None:
            return None
        reg = self._registration
        if reg.leader_recovery_state == LeaderRecoveryState.RECOVERING:
            return None
        progress = self._followers.get(follower_id)
        if progress is None or follower_id in reg.isr or follower_id in self._ineligible:
            return None
        leo = progress.log_end_offset
        if leo < self._hw or leo < self.epoch_start_offset:
            return None
        new_isr = (*reg.isr, follower_id)
        return self._propose(IsrChangeKind.EXPAND, new_isr, frozenset(new_isr))

    def maybe_shrink_isr(self, now_ms: int) -> PartitionStateChange | None:
        """Propose removing the followers that have not caught up within
        ``replica.lag.time.max.ms`` (Kafka's ``maybeShrinkIsr``/``getOutOfSyncReplicas``):
        stuck ones (no fetch) and slow ones (fetching, never reaching the LEO) alike.
        Nothing while a change is in flight. The maximal ISR of a shrink is the current ISR:
        the HW must not count on the shrink before the controller commits it."""
        if not self._leading or self._pending is not None:
            return None
        reg = self._registration
        lag = self.config.replica_lag_time_ms_max
        out = {
            b for b in reg.isr if b != self.local_broker_id and not self._caught_up(b, now_ms, lag)
        }
        if not out:
            return None
        new_isr = tuple(b for b in reg.isr if b not in out)
        return self._propose(IsrChangeKind.SHRINK, new_isr, frozenset(reg.isr))

    def maybe_mark_recovered(self) -> PartitionStateChange | None:
        """After an unclean election the registration says RECOVERING (KIP-704); the leader
        has no transactional state to rebuild, so it tells the controller at once that it is
        RECOVERED, which lets followers join again."""
        if not self._leading or self._pending is not None:
            return None
        if self._registration.leader_recovery_state != LeaderRecoveryState.RECOVERING:
            return None
        return self._propose(
            IsrChangeKind.RECOVER,
            self._registration.isr,
            frozenset(self._registration.isr),
            recovery_state=LeaderRecoveryState.RECOVERED,
        )

    def _caught_up(self, broker_id: BrokerId, now_ms: int, lag_ms_max: int) -> bool:
        p = self._followers.get(broker_id)
        return p is not None and p.is_caught_up(self._leo, now_ms, lag_ms_max)

    def _propose(
        self,
        kind: IsrChangeKind,
        new_isr: tuple[BrokerId, ...],
        maximal: frozenset[BrokerId],
        *,
        recovery_state: int | None = None,
    ) -> PartitionStateChange:
        reg = self._registration
        invariant(self.local_broker_id in new_isr, "proposed ISR %s lacks the leader", new_isr)
        request = PartitionStateChange(
            topic_id=self.topic_id,
            partition=self.partition,
            leader_epoch=reg.leader_epoch,
            partition_epoch=reg.partition_epoch,
            new_isr=tuple(IsrMember(b, self._broker_epoch_of(b)) for b in new_isr),
            leader_recovery_state=(
                reg.leader_recovery_state if recovery_state is None else recovery_state
            ),
        )
        self._pending = PendingIsrChange(kind, request, maximal | frozenset(reg.isr))
        return request

    def _broker_epoch_of(self, broker_id: BrokerId) -> BrokerEpoch:
        # -1 is "unchecked" for the controller: safe for members whose fetch we have not seen,
        # since a broker that restarted is fenced and the partition epoch moves (Kafka's
        # addBrokerEpochToIsr).
        if broker_id == self.local_broker_id:
            return BrokerEpoch(self.local_broker_epoch)
        p = self._followers.get(broker_id)
        return BrokerEpoch(p.broker_epoch if p is not None else -1)

    # ------------------------------------------------------------------ controller

    def on_alter_partition_result(
        self, sent: PartitionStateChange, result: AlterPartitionResult, now_ms: int
    ) -> AlterOutcome:
        """Apply the controller's answer to the AlterPartition carrying ``sent``.

        An answer to anything but the change in flight is ignored (Kafka compares the pending
        state object). Success is applied if it is for our leader epoch and not older than
        our partition epoch; errors follow Kafka's ``handleAlterPartitionError``.
        """
        pending = self._pending
        if not self._leading or pending is None or pending.request != sent:
            return AlterOutcome.IGNORED
        if result.error is not None:
            code = getattr(result.error, "code", "UNKNOWN_SERVER_ERROR")
            if code in _REVERT_CODES:
                self._pending = None
                return AlterOutcome.REVERTED
            if code in _AWAIT_METADATA_CODES:
                return AlterOutcome.AWAIT_METADATA
            return AlterOutcome.RETRY
        reg = result.registration
        invariant(reg is not None, "AlterPartition result with neither error nor registration")
        assert reg is not None  # for mypy
        if reg.leader_epoch != self.leader_epoch or reg.partition_epoch < self.partition_epoch:
            # Stale by our newer state: the change stays pending until the metadata log
            # settles it (Kafka's handleAlterPartitionUpdate).
            return AlterOutcome.IGNORED
        self._adopt(reg, now_ms)
        return AlterOutcome.APPLIED

    def on_registration(self, registration: PartitionRegistration, now_ms: int) -> bool:
        """A registration of this partition from the metadata image; True if it changed our
        state. A registration naming another leader resigns (fails every waiter); one of an
        older leader epoch or a partition epoch we have seen is stale and ignored; a newer one
        replaces the committed state and clears any change in flight (Kafka's ``makeLeader``)."""
        if not self._leading:
            return False
        if registration.leader != self.local_broker_id:
            self.resign()
            return True
        if registration.leader_epoch < self.leader_epoch:
            return False
        if (
            registration.leader_epoch == self.leader_epoch
            and registration.partition_epoch <= self.partition_epoch
        ):
            return False
        new_epoch = registration.leader_epoch > self.leader_epoch
        if new_epoch:
            # Re-elected in a new epoch: it starts at our LEO (the shell records it in the
            # epoch cache), and the followers must prove themselves again in it.
            self.epoch_start_offset = self._leo
        self._adopt(registration, now_ms, reset_followers=new_epoch)
        return True

    def _adopt(
        self, registration: PartitionRegistration, now_ms: int, *, reset_followers: bool = False
    ) -> None:
        registration.check(f"{self.topic_id}-{self.partition}")
        self._registration = registration
        self._pending = None
        self._sync_followers(now_ms, reset=reset_followers)
        self._maybe_advance_hw(now_ms)

    def _sync_followers(self, now_ms: int, *, reset: bool) -> None:
        """Track exactly the replicas other than us. On a new leader epoch (``reset``) every
        follower restarts as Kafka's ``resetReplicaState``: ISR members count as caught up
        now, the others as never. A follower's LEO is unknown until its first fetch to this
        leader; a re-elected leader keeps the LEOs it had."""
        reg = self._registration
        wanted = [b for b in reg.replicas if b != self.local_broker_id]
        kept: dict[BrokerId, FollowerProgress] = {}
        for b in wanted:
            p = self._followers.get(b)
            in_sync = b in reg.isr
            if p is None:
                p = FollowerProgress(b, last_caught_up_time_ms=now_ms if in_sync else None)
            elif reset:
                p.last_fetch_leader_log_end_offset = self._leo
                p.last_fetch_time_ms = now_ms if in_sync else None
                p.last_caught_up_time_ms = now_ms if in_sync else None
            kept[b] = p
        self._followers = kept

    def resign(self) -> None:
        """Stop leading: every acks=all waiter fails with ``NotLeaderOrFollowerError``
        (the producer retries against the new leader; an idempotent one is deduplicated)."""
        if not self._leading:
            return
        self._leading = False
        self._pending = None
        for wid, (last_offset, _) in sorted(self._waiters.items()):
            self._acks.append(
                AckResult(
                    wid,
                    last_offset,
                    NotLeaderOrFollowerError(
                        f"leadership of {self.topic_id}-{self.partition} lost before offset "
                        f"{last_offset} was committed"
                    ),
                )
            )
        self._waiters.clear()
        self._by_offset.clear()
        self._by_deadline.clear()

    def _check_leading(self) -> None:
        if not self._leading:
            raise NotLeaderOrFollowerError(
                f"not the leader of {self.topic_id}-{self.partition} any more"
            )

    # ------------------------------------------------------------------ high watermark

    def _maybe_advance_hw(self, now_ms: int) -> bool:
        """Kafka's ``maybeIncrementLeaderHW``: the new HW is the smallest LEO among the
        leader, every member of the maximal ISR, and every eligible replica that is caught up
        (by lag time) but not in the ISR yet. Counting the latter only ever lowers the HW,
        and lets a follower chasing a fast-moving leader reach the HW and join.

        Why the HW may pass offsets of an older leader epoch before any offset of the current
        epoch is replicated (the rule KIP-595 needs and KAFKA-12619 fixed in Kafka's Raft):
        in Raft an entry of an old term on a majority can still be overwritten, because a
        candidate lacking it can win the votes of another majority (Raft §5.4.2, Figure 8).
        Here nobody votes: the controller elects a leader only from the ISR (unless the topic
        allows unclean election, which promises nothing), and the HW counts *every* member of
        the maximal ISR, each of which fetched up to its LEO in this leader epoch, so its log
        agrees with ours below it. A replica joins the ISR only with LEO >= HW and >= this
        epoch's start. So every possible next leader holds every offset below the HW, whatever
        epoch wrote it. Holding the HW back instead would hide already committed offsets from
        consumers after every failover until a producer writes (partitions have no
        LeaderChangeMessage to commit), so we follow Kafka's partition leaders here.
        What a new leader does not know yet is how far the old one had committed:
        ``high_watermark_lagging`` covers that window.
        """
        if not self._leading or self._leo <= self._hw:
            # Nothing above the HW to commit (an idle partition, fetched every round of a
            # fetch session): the minimum below can only be <= the log end.
            return False
        if self.config.hw_requires_min_isr and self.is_under_min_isr:
            return False
        maximal = self.maximal_isr
        lag = self.config.replica_lag_time_ms_max
        new_hw = self._leo
        if self.config.hw_requires_leader_flush:
            new_hw = min(new_hw, self._flushed)
        for b, p in self._followers.items():
            if p.log_end_offset >= new_hw:
                continue
            if b in maximal or (
                b not in self._ineligible and p.is_caught_up(self._leo, now_ms, lag)
            ):
                new_hw = p.log_end_offset
        if new_hw <= self._hw:
            return False
        self._hw = new_hw
        self._complete_waiters()
        return True


# --------------------------------------------------------------------------- follower side


class EpochSource(Protocol):
    """The read-only view of the local log that truncation needs; ``storage.log.PartitionLog``
    provides it."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def latest_epoch(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(largest known epoch <= epoch, its end offset)``, as
        ``storage.epoch_cache.LeaderEpochCache.end_offset_for_epoch``; ``(-1, -1)`` if none."""
        ...


class FollowerPhase(enum.Enum):
    TRUNCATING = "truncating"
    """Waiting for the leader's answer to OffsetsForLeaderEpoch(``query_epoch``)."""
    FETCHING = "fetching"
    """The log agrees with the leader's below its end: fetch from ``log_end_offset``."""


@dataclass(frozen=True, slots=True)
class TruncationStep:
    """What the shell does next, in this order."""

    truncate_to: int | None
    """Truncate the local log (and producer state) to this offset first; None: keep it."""
    query_epoch: int | None
    """Then send OffsetsForLeaderEpoch(``query_epoch``) to the leader; None: start fetching
    at the (possibly truncated) log end."""
    below_high_watermark: bool = False
    """The truncation removes offsets below the follower's HW: committed data is lost, which
    a clean election never causes (KIP-101: never truncate below the HW). Log it loudly."""


class FollowerState:
    """A follower's replication state of one partition (KIP-101, KIP-279)."""

    def __init__(
        self, *, leader_id: BrokerId, leader_epoch: int, high_watermark: int, log: EpochSource
    ) -> None:
        """Become follower of ``leader_id`` in ``leader_epoch``; then do ``first_step``."""
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self._hw = min(high_watermark, log.log_end_offset)
        """Invariant: <= the log's LEO; moves back only when truncation forces it."""
        self.phase = FollowerPhase.TRUNCATING
        self.query_epoch: int | None = None
        latest = log.latest_epoch
        if latest == UNDEFINED_EPOCH:
            # No epoch history (an empty log, or batches from before epochs): KIP-101's
            # fallback is the high watermark, below which every replica agrees.
            self.first_step = self._finish(self._hw, log)
        else:
            self.query_epoch = latest
            self.first_step = TruncationStep(truncate_to=None, query_epoch=latest)

    @property
    def high_watermark(self) -> int:
        return self._hw

    def on_epoch_end_offset(self, epoch: int, end_offset: int, log: EpochSource) -> TruncationStep:
        """The leader's answer ``(epoch, end_offset)`` to OffsetsForLeaderEpoch, or the
        DivergingEpoch of a fetch response (the same rule: Kafka's
        ``AbstractFetcherThread.getOffsetTruncationState``). ``log`` is the local log with
        every earlier step applied.

        * The leader knows no epoch <= ours (``end_offset`` -1): truncate to our HW.
        * Otherwise find our own largest epoch <= the leader's ``epoch``:
          - the same epoch: both logs agree up to min(our end of it, the leader's end of it);
            truncate there; done;
          - an older one (we never saw the leader's epoch): truncate to our end of that older
            epoch, and ask again about it (KIP-279; each round asks about an older epoch, so
            it ends);
          - none: truncate to the leader's end offset; done.
        Never beyond our own LEO.
        """
        leo = log.log_end_offset
        if end_offset == UNDEFINED_EPOCH_OFFSET:
            return self._finish(self._hw, log)
        if epoch == UNDEFINED_EPOCH:
            return self._finish(min(end_offset, leo), log)
        local_epoch, local_end = log.end_offset_for_epoch(epoch)
        if local_epoch == UNDEFINED_EPOCH or local_end == UNDEFINED_EPOCH_OFFSET:
            return self._finish(min(end_offset, leo), log)
        if local_epoch != epoch:
            invariant(local_epoch < epoch, "epoch cache answered %d for %d", local_epoch, epoch)
            target = min(local_end, leo)
            self.phase = FollowerPhase.TRUNCATING
            self.query_epoch = local_epoch
            return TruncationStep(
                truncate_to=target if target < leo else None,
                query_epoch=local_epoch,
                below_high_watermark=self._lower_hw(target),
            )
        return self._finish(min(local_end, end_offset, leo), log)

    def _finish(self, target: int, log: EpochSource) -> TruncationStep:
        leo = log.log_end_offset
        target = min(target, leo)
        self.phase = FollowerPhase.FETCHING
        self.query_epoch = None
        return TruncationStep(
            truncate_to=target if target < leo else None,
            query_epoch=None,
            below_high_watermark=self._lower_hw(target),
        )

    def _lower_hw(self, target: int) -> bool:
        if target < self._hw:
            self._hw = target
            return True
        return False

    def on_fetch_response(self, leader_high_watermark: int, log_end_offset: int) -> bool:
        """After appending a fetch response's batches: HW = min(leader's HW, own LEO), never
        backwards (a new leader's HW may briefly lag ours; what we had was committed).
        True if it moved."""
        invariant(self.phase is FollowerPhase.FETCHING, "fetch response while %s", self.phase)
        new_hw = min(leader_high_watermark, log_end_offset)
        if new_hw > self._hw:
            self._hw = new_hw
            return True
        return False
