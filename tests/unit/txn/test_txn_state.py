"""The transaction core, one rule per test: transitions, fencing (KIP-98), the epoch bump on
every end (KIP-890 part 2), verification (KIP-890 part 1), timeouts, producer id rotation,
and the ``__transaction_state`` codec's round trip and refusals."""

from __future__ import annotations

import msgpack
import pytest

from broker.groups.types import TopicPartition
from broker.txn.records import (
    EPOCH_MAX,
    TxnMetadata,
    TxnState,
    decode_txn,
    encode_txn,
)
from broker.txn.state import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    Step,
    TxnConfig,
    TxnCoordinatorState,
)
from common.invariant import InvariantError
from storage.errors import CorruptRecordError

T = "tx-1"
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def written(st: TxnCoordinatorState, step: Step) -> Step:
    """The shell's part: the target is appended and committed."""
    assert step.target is not None, step
    st.on_written(step.target)
    return step


def init(st: TxnCoordinatorState, now: int = 0, pid: int = 1000) -> tuple[int, int]:
    step = st.handle_init_producer_id(T, 60_000, now)
    if step.need_producer_id:
        step = st.handle_init_producer_id(T, 60_000, now, pid)
    assert step.error == NONE, step
    written(st, step)
    m = st.txns[T]
    return m.producer_id, m.producer_epoch


def begin(
    st: TxnCoordinatorState, pair: tuple[int, int], *tps: TopicPartition, now: int = 0
) -> None:
    step = st.handle_add_partitions(T, *pair, tps or (A0,), now)
    assert step.error == NONE, step
    if step.target is not None:
        written(st, step)


def end(st: TxnCoordinatorState, pair: tuple[int, int], commit: bool, now: int = 0) -> Step:
    return st.handle_end_txn(T, *pair, commit, now)


def complete(st: TxnCoordinatorState) -> None:
    written(st, st.on_markers_written(T, st.txns[T], 0))


def test_init_of_a_new_id_asks_for_a_producer_id_then_writes_empty_at_epoch_0() -> None:
    st = TxnCoordinatorState()
    assert st.handle_init_producer_id(T, 60_000, 0).need_producer_id
    assert init(st, pid=7) == (7, 0)
    assert st.txns[T].state is TxnState.EMPTY


def test_init_again_bumps_the_epoch_and_fences_the_older_pair() -> None:
    st = TxnCoordinatorState()
    old = init(st)
    new = init(st)
    assert new == (old[0], old[1] + 1)
    assert st.handle_add_partitions(T, *old, [A0], 0).error == PRODUCER_FENCED
    assert st.handle_end_txn(T, *old, True, 0).error == PRODUCER_FENCED
    assert st.verify_partition(T, *old, A0) == PRODUCER_FENCED


def test_init_during_an_ongoing_transaction_aborts_it_with_a_bumped_epoch() -> None:
    st = TxnCoordinatorState()
    zombie = init(st)
    begin(st, zombie, A0, B0)
    step = st.handle_init_producer_id(T, 60_000, 5)
    # The fence is written (PrepareAbort, epoch + 1) and the caller told to come back.
    assert step.error == CONCURRENT_TRANSACTIONS and step.target is not None
    assert step.target.state is TxnState.PREPARE_ABORT
    assert step.target.marker_pair() == (zombie[0], zombie[1] + 1)
    assert step.target.partitions == {A0, B0}
    written(st, step)
    assert st.handle_end_txn(T, *zombie, True, 5).error == PRODUCER_FENCED
    assert st.handle_init_producer_id(T, 60_000, 6).error == CONCURRENT_TRANSACTIONS
    complete(st)
    assert init(st) == (zombie[0], zombie[1] + 2)


def test_every_end_bumps_the_epoch_and_the_markers_carry_it() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    begin(st, pair, A0)
    step = written(st, end(st, pair, commit=True))
    assert step.target is not None and step.target.state is TxnState.PREPARE_COMMIT
    assert step.target.marker_pair() == (pair[0], pair[1] + 1)
    assert step.result is not None
    assert (step.result.producer_id, step.result.producer_epoch) == (pair[0], pair[1] + 1)
    # A late write of the ended transaction (old epoch) cannot join the next one.
    assert st.handle_add_partitions(T, *pair, [A1], 0).error == PRODUCER_FENCED


def test_requests_while_markers_are_written_are_concurrent_transactions() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    begin(st, pair)
    written(st, end(st, pair, True))
    nxt = (pair[0], pair[1] + 1)
    assert st.handle_add_partitions(T, *nxt, [A0], 0).error == CONCURRENT_TRANSACTIONS
    assert st.handle_init_producer_id(T, 60_000, 0).error == CONCURRENT_TRANSACTIONS
    complete(st)
    assert st.txns[T].state is TxnState.COMPLETE_COMMIT and not st.txns[T].partitions
    begin(st, nxt, A1)
    assert st.txns[T].state is TxnState.ONGOING and st.txns[T].partitions == {A1}


def test_the_next_add_chains_behind_a_pending_completion_and_takes_effect_after_it() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    begin(st, pair)
    written(st, end(st, pair, True))
    nxt = (pair[0], pair[1] + 1)
    done = st.on_markers_written(T, st.txns[T], 0)
    assert done.target is not None and done.target.state is TxnState.COMPLETE_COMMIT
    # A stale pair is fenced against the completion as against committed state.
    assert st.handle_add_partitions(T, *pair, [A1], 0).error == PRODUCER_FENCED
    chained = st.handle_add_partitions(T, *nxt, [A1], 7)
    assert chained.error == NONE and chained.target is not None
    assert chained.target.state is TxnState.ONGOING and chained.target.partitions == {A1}
    assert chained.target.txn_start_ms == 7
    # One chain only, and nothing else while it is in flight.
    assert st.handle_add_partitions(T, *nxt, [B0], 0).error == CONCURRENT_TRANSACTIONS
    assert st.handle_end_txn(T, *nxt, True, 0).error == CONCURRENT_TRANSACTIONS
    assert st.handle_init_producer_id(T, 60_000, 0).error == CONCURRENT_TRANSACTIONS
    # Nothing is verified before it is committed, and only in log order.
    assert st.verify_partition(T, *nxt, A1) == INVALID_TXN_STATE
    with pytest.raises(InvariantError):
        st.on_written(chained.target)
    written(st, done)
    assert st.txns[T].state is TxnState.COMPLETE_COMMIT and st.pending[T] is chained.target
    written(st, chained)
    assert st.txns[T].state is TxnState.ONGOING and not st.pending and not st.chained
    assert st.verify_partition(T, *nxt, A1) == NONE


def test_only_an_add_after_a_completion_chains() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    assert st.handle_add_partitions(T, *pair, [A0], 0).target is not None  # pending Ongoing
    assert st.handle_add_partitions(T, *pair, [A1], 0).error == CONCURRENT_TRANSACTIONS
    assert not st.chained


def test_a_failed_completion_drops_the_add_chained_behind_it() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    begin(st, pair)
    written(st, end(st, pair, True))
    st.on_markers_written(T, st.txns[T], 0)
    assert st.handle_add_partitions(T, pair[0], pair[1] + 1, [A1], 0).target is not None
    st.on_write_failed(T)
    assert not st.pending and not st.chained
    assert st.txns[T].state is TxnState.PREPARE_COMMIT


def test_a_pending_write_makes_every_request_concurrent_transactions() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    step = st.handle_add_partitions(T, *pair, [A0], 0)
    assert step.target is not None  # not yet written
    assert st.handle_add_partitions(T, *pair, [A1], 0).error == CONCURRENT_TRANSACTIONS
    assert st.handle_end_txn(T, *pair, True, 0).error == CONCURRENT_TRANSACTIONS
    st.on_write_failed(T)
    assert st.txns[T].state is TxnState.EMPTY  # the failed write changed nothing
    begin(st, pair, A1)


def test_an_end_retried_with_the_epoch_before_the_bump_gets_the_same_answer() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    begin(st, pair)
    first = written(st, end(st, pair, True))
    again = end(st, pair, True)
    assert again.error == NONE and again.target is None and again.result == first.result
    complete(st)
    assert end(st, pair, True).result == st.txns[T]
    # The other outcome is not what the client asked for: someone else ended it.
    assert end(st, pair, False).error == PRODUCER_FENCED


def test_add_partitions_already_in_the_transaction_writes_nothing() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    begin(st, pair, A0, A1)
    step = st.handle_add_partitions(T, *pair, [A1], 9)
    assert step.error == NONE and step.target is None
    step = st.handle_add_partitions(T, *pair, [B0], 9)
    assert step.target is not None and step.target.txn_start_ms == 0  # start kept


def test_verify_only_accepts_partitions_of_the_ongoing_transaction_only() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    assert st.verify_partition(T, *pair, A0) == INVALID_TXN_STATE  # nothing begun
    begin(st, pair, A0)
    assert st.verify_partition(T, *pair, A0) == NONE
    assert st.verify_partition(T, *pair, A1) == INVALID_TXN_STATE
    assert st.verify_partition(T, pair[0], pair[1] + 1, A0) == INVALID_PRODUCER_EPOCH
    assert st.verify_partition(T, pair[0] + 1, pair[1], A0) == INVALID_PRODUCER_ID_MAPPING
    assert st.verify_partition("other", *pair, A0) == INVALID_PRODUCER_ID_MAPPING
    written(st, end(st, pair, True))
    assert st.verify_partition(T, *pair, A0) == PRODUCER_FENCED


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    begin(st, pair, A0, now=1_000)
    assert st.timed_out(60_999) == []
    assert st.timed_out(61_000) == [T]
    step = written(st, st.abort_timed_out(T, 61_000))
    assert step.target is not None and step.target.state is TxnState.PREPARE_ABORT
    assert st.timed_out(99_000) == []
    complete(st)
    assert st.handle_add_partitions(T, *pair, [A0], 0).error == PRODUCER_FENCED
    assert end(st, pair, True).error == PRODUCER_FENCED
    assert init(st) == (pair[0], pair[1] + 2)


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    st = TxnCoordinatorState()
    st.replay(TxnMetadata(T, 5, EPOCH_MAX - 2, 60_000, TxnState.EMPTY))
    pair = (5, EPOCH_MAX - 2)
    begin(st, pair)
    step = written(st, end(st, pair, True))  # ends at EPOCH_MAX - 1: no rotation yet
    assert step.result is not None and step.result.producer_epoch == EPOCH_MAX - 1
    complete(st)
    pair = (5, EPOCH_MAX - 1)
    begin(st, pair)
    step = end(st, pair, True)
    assert step.need_producer_id
    step = written(st, st.handle_end_txn(T, *pair, True, 0, 77))
    assert step.target is not None
    # The markers close the old id at EPOCH_MAX; the client carries on as (77, 0).
    assert step.target.marker_pair() == (5, EPOCH_MAX)
    assert (step.target.producer_id, step.target.producer_epoch) == (77, 0)
    assert end(st, pair, True).result == step.target  # a retry still recognised
    complete(st)
    assert st.handle_add_partitions(T, *pair, [A0], 0).error == PRODUCER_FENCED
    begin(st, (77, 0), A0)


def test_init_at_the_last_epoch_rotates_too() -> None:
    st = TxnCoordinatorState()
    st.replay(TxnMetadata(T, 5, EPOCH_MAX - 1, 60_000, TxnState.COMPLETE_ABORT))
    assert init(st, pid=9) == (9, 0)
    assert st.handle_add_partitions(T, 5, EPOCH_MAX - 1, [A0], 0).error == PRODUCER_FENCED


def test_the_timeout_must_be_within_the_maximum() -> None:
    st = TxnCoordinatorState()
    assert st.handle_init_producer_id(T, 0, 0).error == INVALID_TRANSACTION_TIMEOUT
    assert st.handle_init_producer_id(T, 900_001, 0).error == INVALID_TRANSACTION_TIMEOUT


def test_end_of_an_empty_transaction_writes_nothing() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    step = end(st, pair, True)
    assert step.error == NONE and step.target is None


def test_an_illegal_transition_is_an_invariant_error() -> None:
    st = TxnCoordinatorState()
    st.replay(TxnMetadata(T, 5, 1, 60_000, TxnState.EMPTY))
    with pytest.raises(InvariantError):
        st._target(TxnMetadata(T, 5, 2, 60_000, TxnState.COMPLETE_COMMIT))


def test_replay_rebuilds_and_a_tombstone_forgets() -> None:
    st = TxnCoordinatorState()
    pair = init(st)
    begin(st, pair, A0)
    records = [encode_txn(m) for m in [st.txns[T]]]
    again = TxnCoordinatorState()
    for k, v in records:
        again.replay(decode_txn(k, v))
    assert again.txns == st.txns
    again.replay(
        decode_txn(*encode_txn(st.txns[T].with_(state=TxnState.DEAD, partitions=frozenset())))
    )
    assert T not in again.txns


# ---------------------------------------------------------------- codec


def test_codec_round_trips_a_prepared_rotated_transaction() -> None:
    m = TxnMetadata(T, 77, 0, 60_000, TxnState.PREPARE_COMMIT, frozenset({A0, B0}), 5, 6, 5, True)
    assert decode_txn(*encode_txn(m)) == m


def _value(**over: object) -> bytes:
    v: list[object] = [0, 5, 1, -1, 60_000, "Ongoing", [["a", 0]], 1, 2, False]
    names = [
        "version",
        "pid",
        "epoch",
        "prev",
        "timeout",
        "state",
        "parts",
        "start",
        "update",
        "rotated",
    ]
    for k, x in over.items():
        v[names.index(k)] = x
    return bytes(msgpack.packb(v))


KEY = bytes(msgpack.packb(["txn", T]))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\xc1", _value()),
        (bytes(msgpack.packb(["group", T])), _value()),
        (bytes(msgpack.packb(["txn", ""])), _value()),
        (KEY, b"\xc1"),
        (KEY, _value(version=1)),
        (KEY, _value(pid=-1)),
        (KEY, _value(epoch=EPOCH_MAX + 1)),
        (KEY, _value(epoch=EPOCH_MAX)),  # a client pair never carries it
        (KEY, _value(timeout=0)),
        (KEY, _value(state="Nope")),
        (KEY, _value(state="Dead")),
        (KEY, _value(state="PrepareEpochFence")),
        (KEY, _value(state="Empty")),  # partitions in a state that has none
        (KEY, _value(parts=[["a", -1]])),
        (KEY, _value(parts=[["a"]])),
        (KEY, _value(pid=True)),
        (KEY, _value(prev=-2)),
        (KEY, bytes(msgpack.packb([0, 5, 1]))),
        (KEY, _value(rotated=1)),
        (KEY, _value(rotated=True)),  # rotated while ongoing
    ],
)
def test_codec_refuses_what_it_cannot_trust(key: bytes, value: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_txn(key, value)


def test_without_the_bump_the_markers_carry_the_transactions_own_epoch() -> None:
    # Kafka's first protocol (EndTxn before v5): the client keeps its pair.
    st = TxnCoordinatorState()
    pair = init(st)
    begin(st, pair, A0)
    step = written(st, st.handle_end_txn(T, *pair, True, 0, bump_epoch=False))
    assert step.target is not None and step.target.marker_pair() == pair
    retry = st.handle_end_txn(T, *pair, True, 0, bump_epoch=False)
    assert retry.error == CONCURRENT_TRANSACTIONS  # until the markers are written
    complete(st)
    assert st.handle_end_txn(T, *pair, True, 0, bump_epoch=False).error == NONE
    begin(st, pair, A1)  # the same pair carries on
    assert st.txns[T].state is TxnState.ONGOING


def test_a_rotation_at_init_is_not_taken_for_one_at_the_end() -> None:
    st = TxnCoordinatorState()
    st.replay(TxnMetadata(T, 5, EPOCH_MAX - 1, 60_000, TxnState.COMPLETE_ABORT))
    pair = init(st, pid=9)
    assert pair == (9, 0)
    begin(st, pair, A0)
    step = written(st, st.handle_end_txn(T, *pair, True, 0, bump_epoch=False))
    assert step.target is not None and step.target.marker_pair() == (9, 0)
    assert decode_txn(*encode_txn(step.target)).marker_pair() == (9, 0)


# ---------------------------------------------------------------- expiration

DAY_MS = 24 * 3600 * 1000
WEEK_MS = 7 * DAY_MS


def test_an_idle_id_expires_after_seven_days_into_a_tombstone_and_is_forgotten() -> None:
    st = TxnCoordinatorState()
    pair = init(st, now=1_000)
    begin(st, pair, A0, now=2_000)
    written(st, end(st, pair, True, now=3_000))
    written(st, st.on_markers_written(T, st.txns[T], 3_000))  # COMPLETE_COMMIT at 3 s
    assert st.expired(3_000 + WEEK_MS - 1) == []
    assert st.expired(3_000 + WEEK_MS) == [T]
    step = st.expire(T, 3_000 + WEEK_MS)
    assert step.target is not None and step.target.state is TxnState.DEAD
    assert encode_txn(step.target)[1] is None  # a tombstone: compaction drops the key
    # Pending: every request waits, and the id is not listed again.
    assert st.handle_init_producer_id(T, 60_000, 0).error == CONCURRENT_TRANSACTIONS
    assert st.expired(3_000 + 2 * WEEK_MS) == []
    written(st, step)
    assert T not in st.txns
    # The old pair means nothing now; the next init starts afresh with a new producer id.
    assert st.handle_add_partitions(T, *pair, [A0], 0).error == INVALID_PRODUCER_ID_MAPPING
    assert init(st, pid=2000) == (2000, 0)


def test_an_id_with_a_transaction_never_expires() -> None:
    st = TxnCoordinatorState(TxnConfig(transactional_id_expiration_ms=10))
    pair = init(st, now=0)
    begin(st, pair, A0, now=0)
    assert st.expired(10 * WEEK_MS) == []
    assert st.expire(T, 10 * WEEK_MS).error == INVALID_TXN_STATE
    written(st, end(st, pair, False, now=0))  # PREPARE_ABORT: markers not yet written
    assert st.expired(10 * WEEK_MS) == []
    assert st.expire(T, 10 * WEEK_MS).error == INVALID_TXN_STATE
    complete(st)
    assert st.expired(10 * WEEK_MS) == [T]


def test_a_request_since_the_scan_keeps_the_id() -> None:
    st = TxnCoordinatorState(TxnConfig(transactional_id_expiration_ms=1_000))
    init(st, now=0)
    assert st.expired(1_000) == [T]
    init(st, now=1_000)  # the producer came back: its last update is now
    assert st.expire(T, 1_500).error == INVALID_TXN_STATE
    assert T in st.txns
    assert st.expired(2_000) == [T]


def test_a_failed_tombstone_write_changes_nothing() -> None:
    st = TxnCoordinatorState(TxnConfig(transactional_id_expiration_ms=1_000))
    pair = init(st, now=0)
    step = st.expire(T, 5_000)
    assert step.target is not None
    st.on_write_failed(T)
    assert st.txns[T].state is TxnState.EMPTY
    assert (st.txns[T].producer_id, st.txns[T].producer_epoch) == pair
