"""TxnOffsetCommit in the group core: offsets of a transaction stay pending until the
producer's marker (``complete_txn``), count on commit, vanish on abort; a fenced member
cannot commit through a transaction (KIP-447); replay of the log rebuilds the same."""

from __future__ import annotations

from broker.groups.group import (
    GroupCoordinatorState,
    OffsetAndMetadata,
    OffsetCommitRequest,
    TxnOffsetCommitRequest,
)
from broker.groups.records import OffsetCommitRecord
from broker.groups.types import ErrorCode, TopicPartition

TP0, TP1 = TopicPartition("in", 0), TopicPartition("in", 1)
PID = 42


def state() -> GroupCoordinatorState:
    return GroupCoordinatorState(new_member_id=lambda c: f"{c}-1", partitions_per_topic={"in": 2})


def txn(offsets: dict[TopicPartition, int], pid: int = PID, **kw: object) -> TxnOffsetCommitRequest:
    return TxnOffsetCommitRequest(
        "g",
        pid,
        3,
        {tp: OffsetAndMetadata(o) for tp, o in offsets.items()},
        **kw,  # type: ignore[arg-type]
    )


def offsets(st: GroupCoordinatorState) -> dict[TopicPartition, int]:
    return {tp: o.offset for tp, o in st.fetch_offsets("g", None).items()}


def test_txn_offsets_are_pending_until_the_commit_marker() -> None:
    st = state()
    out = st.handle_txn_offset_commit(txn({TP0: 5, TP1: 7}), 100)
    assert out.response == ErrorCode.NONE
    assert out.txn == (PID, 3)  # written as the producer's transactional batch
    assert [type(r) for r in out.records] == [OffsetCommitRecord, OffsetCommitRecord]
    assert offsets(st) == {}
    st.complete_txn(PID, True, 200)
    assert offsets(st) == {TP0: 5, TP1: 7}


def test_txn_offsets_are_dropped_by_the_abort_marker() -> None:
    st = state()
    st.handle_offset_commit(OffsetCommitRequest("g", {TP0: OffsetAndMetadata(3)}), 50)
    st.handle_txn_offset_commit(txn({TP0: 9}), 100)
    st.complete_txn(PID, False, 200)
    assert offsets(st) == {TP0: 3}
    st.complete_txn(PID, True, 300)  # a second marker finds nothing pending
    assert offsets(st) == {TP0: 3}


def test_another_producers_marker_leaves_the_pending_offsets_alone() -> None:
    st = state()
    st.handle_txn_offset_commit(txn({TP0: 9}), 100)
    st.complete_txn(PID + 1, True, 200)
    assert offsets(st) == {}
    st.complete_txn(PID, True, 300)
    assert offsets(st) == {TP0: 9}


def test_a_member_of_an_older_generation_cannot_commit_through_a_transaction() -> None:
    st = state()
    st.handle_offset_commit(OffsetCommitRequest("g", {TP0: OffsetAndMetadata(1)}), 0)
    out = st.handle_txn_offset_commit(txn({TP0: 9}, member_id="m-0", generation=4), 100)
    assert out.response == ErrorCode.UNKNOWN_MEMBER_ID and not out.records
    assert st.handle_txn_offset_commit(txn({TP0: 9}, member_id="x", generation=1), 0).response == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    st.complete_txn(PID, True, 200)
    assert offsets(st) == {TP0: 1}


def test_replay_of_the_log_rebuilds_pending_and_completed_offsets() -> None:
    st = state()
    first = st.handle_txn_offset_commit(txn({TP0: 5}), 100).records
    second = st.handle_txn_offset_commit(txn({TP1: 8}, pid=PID + 1), 100).records
    st.complete_txn(PID, True, 200)
    again = state()
    for r in first:
        again.replay_txn(r, PID)
    for r in second:
        again.replay_txn(r, PID + 1)
    again.complete_txn(PID, True, 0)  # the marker, read from the log
    assert offsets(again) == offsets(st) == {TP0: 5}
    assert again.pending_txn.keys() == st.pending_txn.keys() == {PID + 1}


def test_offsets_held_by_an_open_transaction_are_unstable_until_its_marker() -> None:
    st = state()
    assert not st.unstable("g", None)
    st.handle_txn_offset_commit(txn({TP0: 5}), 100)
    assert st.unstable("g", None) and st.unstable("g", [TP0])
    assert not st.unstable("g", [TP1]) and not st.unstable("other", None)
    st.complete_txn(PID, False, 200)
    assert not st.unstable("g", [TP0])
