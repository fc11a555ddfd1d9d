"""The transaction coordinator's core: every transactional id of one ``__transaction_state``
partition, and the rules of its transitions (Kafka's ``TransactionCoordinator`` and
``TransactionMetadata``, with KIP-890's server-side defences).

Pure: no I/O, no clock (time arrives as ``now_ms``), no global random; new producer ids are
passed in by the caller (``need_producer_id`` asks for one).

Theory of operation
-------------------
Every request is a ``handle_*`` call that returns a ``Step``: an error (Kafka's name), or a
*target* ``TxnMetadata`` to write, or neither (answer at once). A target becomes the id's
*pending* transition (``pending``): the shell appends ``encode_txn(target)`` to the
partition and, once committed, calls ``on_written(target)`` (the transition takes effect);
if the append fails, ``on_write_failed(tid)`` (nothing changed). While a transition is
pending every request for that id is answered ``CONCURRENT_TRANSACTIONS`` (retriable), as
in Kafka, so the log order of an id's records is the order of its transitions. Answers
never reflect state that is not durable yet.

One exception keeps a write off a transaction's critical path: while a COMPLETE_* is
pending (every marker of the ended transaction is written), the next transaction's first
``add_partitions`` is decided against it and *chained* behind it (``chained``): the shell
appends it after the COMPLETE_* (the log keeps their order, and a record is committed only
with every record before it), so both replicate together instead of one after the other,
and ``on_written`` takes them in that order. Its answer still waits for its own record.

A transaction's life (the pair is (producer id, epoch); ``e`` the client's epoch):

==================  ===================================  ==============================
state               event                                next state
==================  ===================================  ==============================
(none)              init_producer_id: new id, epoch 0    EMPTY
EMPTY, COMPLETE_*   init_producer_id: epoch e+1          EMPTY
EMPTY, COMPLETE_*   add_partitions / add_offsets         ONGOING
ONGOING             add_partitions (new ones)            ONGOING
ONGOING             end_txn(commit|abort): epoch e+1     PREPARE_COMMIT / PREPARE_ABORT
ONGOING             init_producer_id (fence): e+1        PREPARE_ABORT
ONGOING             timeout passed: epoch e+1            PREPARE_ABORT
PREPARE_X           every marker written                 COMPLETE_X
==================  ===================================  ==============================

``PREPARE_EPOCH_FENCE`` is never stored, as in Kafka: fencing an ongoing transaction is
written directly as a PREPARE_ABORT with the bumped epoch, and the request that fenced it
is answered CONCURRENT_TRANSACTIONS so it comes back once the abort completed.

Expiration (Kafka's ``transactional.id.expiration.ms``): an id with no transaction (EMPTY or
COMPLETE_*) whose last transition is older than ``transactional_id_expiration_ms`` goes to
``DEAD``, written as a tombstone so compaction drops its key; once written the id is
forgotten, and its next InitProducerId starts afresh with a new producer id. An id with a
transaction (ONGOING, PREPARE_*) never expires, nor one with a transition pending.

==================  ===================================  ==============================
EMPTY, COMPLETE_*   idle past the expiration             DEAD (tombstone; forgotten)
==================  ===================================  ==============================

Fencing (KIP-98, KIP-890 part 2): every transaction ends with an epoch bump, and the markers
carry the bumped epoch, so a late write of the ended transaction is refused by the partition
and cannot join the next one. A request with an older epoch than the id's is
``PRODUCER_FENCED``; with a newer one ``INVALID_PRODUCER_EPOCH``; with a producer id the
id rotated away from, ``PRODUCER_FENCED``; with another producer id,
``INVALID_PRODUCER_ID_MAPPING``. An ``end_txn`` retried with the epoch before the bump
(the client never saw the answer) is answered with the outcome already decided.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker.groups.types import TopicPartition
from broker.txn.records import (
    COMPLETED,
    EPOCH_MAX,
    PREPARED,
    TxnMetadata,
    TxnState,
)
from common.invariant import invariant

# Kafka's error names.
NONE = "NONE"
CONCURRENT_TRANSACTIONS = "CONCURRENT_TRANSACTIONS"
PRODUCER_FENCED = "PRODUCER_FENCED"
INVALID_PRODUCER_EPOCH = "INVALID_PRODUCER_EPOCH"
INVALID_PRODUCER_ID_MAPPING = "INVALID_PRODUCER_ID_MAPPING"
INVALID_TXN_STATE = "INVALID_TXN_STATE"
INVALID_TRANSACTION_TIMEOUT = "INVALID_TRANSACTION_TIMEOUT"

S = TxnState
VALID_PREVIOUS: Mapping[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
}
"""Kafka's ``TransactionState.validPreviousStates``: ``on_written`` refuses anything else."""


@dataclass(frozen=True)
class TxnConfig:
    """Broker configs; Kafka's names beside each."""

    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    # transactional.id.expiration.ms: an id idle (no transaction) this long is removed.


@dataclass(frozen=True)
class Step:
    """What a request leads to. ``error`` (not NONE): answer it, nothing to write.
    ``target``: write it, then answer ``result``. ``need_producer_id``: call again with a new
    producer id from the allocator. ``result`` is the metadata to answer from."""

    error: str = NONE
    target: TxnMetadata | None = None
    result: TxnMetadata | None = None
    need_producer_id: bool = False


def _err(code: str) -> Step:
    return Step(error=code)


class TxnCoordinatorState:
    """Every transactional id of one ``__transaction_state`` partition."""

    def __init__(self, config: TxnConfig | None = None) -> None:
        self.config = config or TxnConfig()
        self.txns: dict[str, TxnMetadata] = {}
        """Invariant: only ever metadata that is committed in the partition."""
        self.pending: dict[str, TxnMetadata] = {}
        """Targets being written: at most one per id."""
        self.chained: dict[str, TxnMetadata] = {}
        """An ONGOING decided against the id's pending COMPLETE_* and written after it.
        Invariant: an id is in ``chained`` only while it is in ``pending`` with a
        COMPLETE_* target."""

    # ------------------------------------------------------------ replay, writes

    def replay(self, record: TxnMetadata | str) -> None:
        """One record of the partition, in log order (a tombstone is the id alone)."""
        if isinstance(record, str):
            self.txns.pop(record, None)
        else:
            self.txns[record.transactional_id] = record

    def _target(
        self, target: TxnMetadata, result: TxnMetadata | None = None, *, chain: bool = False
    ) -> Step:
        tid = target.transactional_id
        if chain:
            invariant(
                tid in self.pending
                and self.pending[tid].state in COMPLETED
                and tid not in self.chained,
                "%r: a chained transition needs a pending completion and no other chain",
                tid,
            )
            prev: TxnMetadata | None = self.pending[tid]
        else:
            invariant(tid not in self.pending, "two pending transitions of %r", tid)
            prev = self.txns.get(tid)
        if prev is not None:
            invariant(
                prev.state in VALID_PREVIOUS[target.state],
                "%r: %s -> %s is not a legal transition",
                tid,
                prev.state.value,
                target.state.value,
            )
            # Epochs never go back for one producer id (fencing relies on it).
            invariant(
                target.producer_id != prev.producer_id
                or target.producer_epoch >= prev.producer_epoch,
                "%r: epoch went back",
                tid,
            )
        target.check()
        if chain:
            self.chained[tid] = target
        else:
            self.pending[tid] = target
        return Step(target=target, result=result or target)

    def on_written(self, target: TxnMetadata) -> None:
        """``target`` is committed in the partition: it is the id's state now. A chained
        target is taken only after the completion it follows (log order)."""
        tid = target.transactional_id
        invariant(self.pending.get(tid) is target, "%r: written target is not the pending", tid)
        del self.pending[tid]
        if target.state is S.DEAD:
            del self.txns[tid]  # its tombstone is committed: the id is forgotten
        else:
            self.txns[tid] = target
        nxt = self.chained.pop(tid, None)
        if nxt is not None:
            self.pending[tid] = nxt

    def on_write_failed(self, tid: str) -> None:
        """Nothing of the id's pending (and chained) transitions is known to be written."""
        self.pending.pop(tid, None)
        self.chained.pop(tid, None)

    # ------------------------------------------------------------ checks

    def _busy(self, tid: str) -> bool:
        return tid in self.pending

    @staticmethod
    def _check_pair(meta: TxnMetadata, producer_id: int, producer_epoch: int) -> str:
        if producer_id != meta.producer_id:
            if producer_id == meta.prev_producer_id:
                return PRODUCER_FENCED
            return INVALID_PRODUCER_ID_MAPPING
        if producer_epoch < meta.producer_epoch:
            return PRODUCER_FENCED
        if producer_epoch > meta.producer_epoch:
            return INVALID_PRODUCER_EPOCH
        return NONE

    @staticmethod
    def _is_previous_pair(meta: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
        """The pair the client held before the transaction's end bumped it (KIP-890 part 2:
        a retried ``end_txn``)."""
        if meta.rotated:
            return producer_id == meta.prev_producer_id and producer_epoch == EPOCH_MAX - 1
        return producer_id == meta.producer_id and producer_epoch == meta.producer_epoch - 1

    def _bumped(self, meta: TxnMetadata, new_producer_id: int | None) -> TxnMetadata | None:
        """``meta`` with the next client pair: epoch + 1, or a new producer id at epoch 0 when
        the epoch would reach ``EPOCH_MAX`` (None: a new producer id is needed first)."""
        if meta.producer_epoch + 1 < EPOCH_MAX:
            return meta.with_(producer_epoch=meta.producer_epoch + 1, rotated=False)
        if new_producer_id is None:
            return None
        return meta.with_(
            producer_id=new_producer_id,
            producer_epoch=0,
            prev_producer_id=meta.producer_id,
            rotated=False,
        )

    def _ended(
        self,
        meta: TxnMetadata,
        state: TxnState,
        now_ms: int,
        new_producer_id: int | None,
        bump: bool = True,
    ) -> TxnMetadata | None:
        """ONGOING ``meta`` ended (PREPARE_COMMIT or PREPARE_ABORT): the epoch bumped for the
        markers; the client's next pair a new producer id when the bump reaches EPOCH_MAX.
        Without ``bump`` (a client of Kafka's first transaction protocol, EndTxn before v5,
        which keeps its epoch) the markers carry the transaction's own epoch."""
        if not bump:
            return meta.with_(state=state, last_update_ms=now_ms, rotated=False)
        if meta.producer_epoch + 1 < EPOCH_MAX:
            return meta.with_(
                state=state, producer_epoch=meta.producer_epoch + 1, last_update_ms=now_ms
            )
        if new_producer_id is None:
            return None
        return meta.with_(
            state=state,
            producer_id=new_producer_id,
            producer_epoch=0,
            prev_producer_id=meta.producer_id,
            rotated=True,
            last_update_ms=now_ms,
        )

    # ------------------------------------------------------------ requests

    def handle_init_producer_id(
        self, tid: str, timeout_ms: int, now_ms: int, new_producer_id: int | None = None
    ) -> Step:
        """InitProducerId with a transactional id: the next pair for the id, fencing every
        earlier one; an ongoing transaction of the id is aborted first."""
        if not 0 < timeout_ms <= self.config.transaction_max_timeout_ms:
            return _err(INVALID_TRANSACTION_TIMEOUT)
        if self._busy(tid):
            return _err(CONCURRENT_TRANSACTIONS)
        meta = self.txns.get(tid)
        if meta is None:
            if new_producer_id is None:
                return Step(need_producer_id=True)
            return self._target(
                TxnMetadata(tid, new_producer_id, 0, timeout_ms, S.EMPTY, last_update_ms=now_ms)
            )
        if meta.state in PREPARED:
            return _err(CONCURRENT_TRANSACTIONS)  # its markers are being written
        if meta.state is S.ONGOING:
            # Fence the producer that owns it and abort its transaction (Kafka's
            # PrepareEpochFence); this caller comes back once the abort completed.
            ended = self._ended(meta, S.PREPARE_ABORT, now_ms, new_producer_id)
            if ended is None:
                return Step(need_producer_id=True)
            step = self._target(ended)
            return Step(error=CONCURRENT_TRANSACTIONS, target=step.target)
        bumped = self._bumped(meta, new_producer_id)
        if bumped is None:
            return Step(need_producer_id=True)
        return self._target(
            bumped.with_(
                state=S.EMPTY,
                timeout_ms=timeout_ms,
                partitions=frozenset(),
                txn_start_ms=-1,
                last_update_ms=now_ms,
            )
        )

    def handle_add_partitions(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> Step:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition)."""
        meta = self.txns.get(tid)
        if meta is None:
            return _err(INVALID_PRODUCER_ID_MAPPING)
        chain = False
        if self._busy(tid):
            completing = self.pending[tid]
            if completing.state not in COMPLETED or tid in self.chained:
                return _err(CONCURRENT_TRANSACTIONS)
            # The previous transaction's markers are all written and its completion is
            # being appended: decide against that completion and write after it.
            meta, chain = completing, True
        code = self._check_pair(meta, producer_id, producer_epoch)
        if code != NONE:
            return _err(code)
        if meta.state in PREPARED:
            return _err(CONCURRENT_TRANSACTIONS)
        wanted = frozenset(partitions)
        if meta.state is S.ONGOING and wanted <= meta.partitions:
            return Step(result=meta)  # nothing new: no write
        start = meta.txn_start_ms if meta.state is S.ONGOING else now_ms
        return self._target(
            meta.with_(
                state=S.ONGOING,
                partitions=meta.partitions | wanted,
                txn_start_ms=start,
                last_update_ms=now_ms,
                rotated=False,
            ),
            chain=chain,
        )

    def verify_partition(
        self, tid: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> str:
        """AddPartitionsToTxn with verifyOnly (KIP-890 part 1): may this producer write its
        first transactional batch to ``tp``? Answered from committed state only."""
        meta = self.txns.get(tid)
        if meta is None:
            return INVALID_PRODUCER_ID_MAPPING
        code = self._check_pair(meta, producer_id, producer_epoch)
        if code != NONE:
            return code
        if meta.state is not S.ONGOING or tp not in meta.partitions:
            return INVALID_TXN_STATE
        return NONE

    def handle_end_txn(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        new_producer_id: int | None = None,
        bump_epoch: bool = True,
    ) -> Step:
        """EndTxn: the outcome decided (PREPARE_*, the epoch bumped); the markers follow.
        ``result`` carries the client's pair for its next transaction. ``bump_epoch`` False:
        Kafka's first transaction protocol (EndTxn before v5: the client keeps its epoch, and
        only KIP-890 part 1's verification guards its partitions)."""
        meta = self.txns.get(tid)
        if meta is None:
            return _err(INVALID_PRODUCER_ID_MAPPING)
        if self._busy(tid):
            return _err(CONCURRENT_TRANSACTIONS)
        wanted = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        if (
            bump_epoch
            and meta.state in PREPARED | COMPLETED
            and self._is_previous_pair(meta, producer_id, producer_epoch)
        ):
            # A retry of the end that bumped the epoch: same outcome, same answer.
            if meta.state in (wanted, done):
                return Step(result=meta)
            # Ended the other way by someone else (a newer producer, the timeout).
            return _err(PRODUCER_FENCED)
        code = self._check_pair(meta, producer_id, producer_epoch)
        if code != NONE:
            return _err(code)
        if meta.state in PREPARED:
            # (Without the bump, a retried end lands here until the markers are written.)
            return _err(CONCURRENT_TRANSACTIONS)
        if meta.state is S.EMPTY or meta.state in COMPLETED:
            # Nothing begun (the client's transaction had no partition): nothing to write,
            # as Kafka's producer never sends EndTxn for an empty transaction.
            return Step(result=meta)
        invariant(meta.state is S.ONGOING, "%r: end_txn in %s", tid, meta.state.value)
        ended = self._ended(meta, wanted, now_ms, new_producer_id, bump_epoch)
        if ended is None:
            return Step(need_producer_id=True)
        return self._target(ended)

    def on_markers_written(self, tid: str, prepared: TxnMetadata, now_ms: int) -> Step:
        """Every marker of the prepared transaction is written: complete it."""
        meta = self.txns.get(tid)
        if meta is not prepared or self._busy(tid):
            return _err(CONCURRENT_TRANSACTIONS)  # moved on (reloaded): nothing to do
        done = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._target(meta.with_(state=done, partitions=frozenset(), last_update_ms=now_ms))

    # ------------------------------------------------------------ timers, loading

    def timed_out(self, now_ms: int) -> list[str]:
        """Ids whose ONGOING transaction is older than its timeout and not being changed."""
        return sorted(
            tid
            for tid, m in self.txns.items()
            if m.state is S.ONGOING
            and tid not in self.pending
            and m.txn_start_ms + m.timeout_ms <= now_ms
        )

    def abort_timed_out(self, tid: str, now_ms: int, new_producer_id: int | None = None) -> Step:
        """Abort an ONGOING transaction past its timeout, bumping the epoch: the producer is
        fenced (its next request answered PRODUCER_FENCED), as Kafka's coordinator does."""
        meta = self.txns.get(tid)
        if meta is None or meta.state is not S.ONGOING or self._busy(tid):
            return _err(INVALID_TXN_STATE)
        if meta.txn_start_ms + meta.timeout_ms > now_ms:
            return _err(INVALID_TXN_STATE)
        ended = self._ended(meta, S.PREPARE_ABORT, now_ms, new_producer_id)
        if ended is None:
            return Step(need_producer_id=True)
        return self._target(ended)

    def expired(self, now_ms: int) -> list[str]:
        """Ids without a transaction (EMPTY, COMPLETE_*) and not being changed whose last
        transition is at least ``transactional_id_expiration_ms`` old (Kafka's
        ``TransactionStateManager.removeExpiredTransactionalIds``)."""
        return sorted(tid for tid, m in self.txns.items() if self._expirable(tid, m, now_ms))

    def _expirable(self, tid: str, meta: TxnMetadata, now_ms: int) -> bool:
        return (
            (meta.state is S.EMPTY or meta.state in COMPLETED)
            and tid not in self.pending
            and meta.last_update_ms + self.config.transactional_id_expiration_ms <= now_ms
        )

    def expire(self, tid: str, now_ms: int) -> Step:
        """Remove an expired id: the target is DEAD, written as a tombstone; once written
        (``on_written``) the id is gone. INVALID_TXN_STATE if it is no longer expirable (a
        request for it came in since ``expired`` listed it)."""
        meta = self.txns.get(tid)
        if meta is None or not self._expirable(tid, meta, now_ms):
            return _err(INVALID_TXN_STATE)
        return self._target(meta.with_(state=S.DEAD, last_update_ms=now_ms, rotated=False))

    def prepared(self) -> list[TxnMetadata]:
        """Transactions whose outcome is decided but whose markers may not all be written
        (after a load: the previous coordinator may have died in between)."""
        return [m for _, m in sorted(self.txns.items()) if m.state in PREPARED]

    def describe(self, tid: str) -> TxnMetadata | None:
        return self.txns.get(tid)
