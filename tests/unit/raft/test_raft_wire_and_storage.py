"""Message wire format round trips (through msgpack, as the transport sends them) and the
MemoryStorage port."""

from __future__ import annotations

import msgpack
import pytest

from raft.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    MalformedMessageError,
    Message,
    ReadIndex,
    ReadIndexResponse,
    RequestVote,
    RequestVoteResponse,
    TimeoutNow,
    TransferLeadership,
    message_from_wire,
    to_wire,
)
from raft.storage_port import (
    CompactedError,
    MemoryStorage,
    SnapshotOutOfDateError,
    UnavailableError,
)
from raft.types import (
    ConfState,
    Entry,
    EntryKind,
    HardState,
    LogIndex,
    NodeId,
    Snapshot,
    SnapshotMetadata,
    Term,
)

A, B, T = NodeId(1), NodeId(2), Term(7)
CS = ConfState(frozenset({A, B}), frozenset({NodeId(9)}))
ENTRIES = (
    Entry(LogIndex(5), Term(6)),
    Entry(LogIndex(6), T, EntryKind.CONF_CHANGE, CS.to_bytes()),
    Entry(LogIndex(7), T, EntryKind.NORMAL, b"\x00\xffdata"),
)
SNAP = Snapshot(SnapshotMetadata(LogIndex(40), Term(3), CS), b"state")

ALL: list[Message] = [
    AppendEntries(A, B, T, LogIndex(4), Term(6), ENTRIES, LogIndex(3)),
    AppendEntries(A, B, T, LogIndex(4), Term(6), (), LogIndex(3)),
    AppendEntriesResponse(B, A, T, LogIndex(7)),
    AppendEntriesResponse(
        B, A, T, LogIndex(9), reject=True, reject_hint=LogIndex(5), log_term=Term(2)
    ),
    Heartbeat(A, B, T, LogIndex(3), b"ctx"),
    HeartbeatResponse(B, A, T, b"ctx"),
    RequestVote(A, B, T, LogIndex(7), Term(6), pre_vote=True, transfer=False),
    RequestVote(A, B, T, LogIndex(7), Term(6), pre_vote=False, transfer=True),
    RequestVoteResponse(B, A, T, True, pre_vote=True),
    InstallSnapshot(A, B, T, SNAP),
    InstallSnapshotResponse(B, A, T, LogIndex(40)),
    TimeoutNow(A, B, T),
    ReadIndex(B, A, T, b"r1"),
    ReadIndexResponse(A, B, T, LogIndex(7), b"r1"),
    TransferLeadership(B, A, T, NodeId(3)),
]


@pytest.mark.parametrize("m", ALL, ids=lambda m: type(m).__name__)
def test_every_message_round_trips_through_msgpack(m: Message) -> None:
    packed = msgpack.packb(m.to_wire(), use_bin_type=True)
    back = message_from_wire(msgpack.unpackb(packed, raw=False))
    assert back == m
    assert type(m).from_wire(to_wire(m)) == m


def test_every_message_class_is_covered() -> None:
    assert {type(m) for m in ALL} == set(Message.__args__)  # type: ignore[attr-defined]


def _ae(**change: object) -> dict[str, object]:
    w = AppendEntries(A, B, T, LogIndex(4), Term(6), ENTRIES, LogIndex(3)).to_wire()
    w.update(change)
    return w


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({}, "type must be one of"),
        ([1, 2], "a message must be a map"),
        ({"type": "Nope"}, "type must be one of"),
        ({"type": "TimeoutNow", "src": 1}, "TimeoutNow without dst"),
        ({"type": "TimeoutNow", "src": 1, "dst": 2, "term": 3, "x": 1}, "has no field 'x'"),
        ({"type": "TimeoutNow", "src": 1, "dst": 1, "term": 3}, "dst must be another node"),
        # The shapes that ended a node's task (issue 17).
        (_ae(term="7"), "term must be a term in [0, 2147483647], got '7'"),
        (_ae(entries=[{"index": 5}]), "entries[0] must be [index, term, kind, data]"),
        (_ae(entries="x"), "entries must be a list"),
        # Types and ranges of every kind of field.
        (_ae(src=0), "src must be a node id in [1, 2147483647], got 0"),
        (_ae(src=True), "src must be a node id"),
        (_ae(dst=2**31), "dst must be a node id"),
        (_ae(term=-1), "term must be a term"),
        (_ae(term=2**31), "term must be a term"),
        (_ae(term=7.0), "term must be a term"),
        (_ae(leader_commit=2**63), "leader_commit must be an index in [0, 4611686018427387904]"),
        (_ae(prev_log_term=8), "prev_log_term must be at most the message term 7"),
        (_ae(entries=[[6, 6, 0, b""]]), "entries[0].index must be 5"),
        (_ae(entries=[[5, 6, 0, b""], [7, 7, 0, b""]]), "entries[1].index must be 6"),
        (_ae(entries=[[5, 7, 0, b""], [6, 6, 0, b""]]), "entries[1].term must be in [7, 7]"),
        (_ae(entries=[[5, 5, 0, b""]]), "entries[0].term must be in [6, 7]"),
        (_ae(entries=[[5, 8, 0, b""]]), "entries[0].term must be in [6, 7]"),
        (_ae(entries=[[5, 7, 2, b""]]), "entries[0].kind must be one of [0, 1]"),
        (_ae(entries=[[5, 7, True, b""]]), "entries[0].kind must be one of [0, 1]"),
        (_ae(entries=[[5, 7, 0, "text"]]), "entries[0].data must be bytes"),
        (_ae(entries=[[5, 7, 1, b"\x00\x01"]]), "entries[0].data must be a configuration"),
        (
            _ae(entries=[[5, 7, 1, ConfState(frozenset(), frozenset({A})).to_bytes()]]),
            "a configuration with at least one voter",
        ),
        (
            {**HeartbeatResponse(B, A, T).to_wire(), "context": b"x" * 1025},
            "context must be bytes (at most 1024)",
        ),
        ({**ReadIndex(B, A, T, b"r").to_wire(), "context": b""}, "context must be non-empty"),
        (
            {**RequestVote(A, B, T, LogIndex(1), T).to_wire(), "pre_vote": 1},
            "pre_vote must be a bool",
        ),
        (
            {**InstallSnapshot(A, B, T, SNAP).to_wire(), "snapshot": [0, 3, [[1], []], b""]},
            "snapshot.index must be at least 1",
        ),
        (
            {**InstallSnapshot(A, B, T, SNAP).to_wire(), "snapshot": [40, 3, [[], [1]], b""]},
            "snapshot.conf_state must be a configuration with at least one voter",
        ),
        (
            {**InstallSnapshot(A, B, T, SNAP).to_wire(), "snapshot": [40, 3, [[1], [1]], b""]},
            "snapshot.conf_state must be a configuration naming each node once",
        ),
        (
            {**InstallSnapshot(A, B, T, SNAP).to_wire(), "snapshot": [40, 8, [[1], []], b""]},
            "snapshot.term must be at most the message term 7",
        ),
        (
            {**InstallSnapshot(A, B, T, SNAP).to_wire(), "snapshot": {"index": 40}},
            "snapshot must be [index, term, [voters, observers], data]",
        ),
    ],
)
def test_malformed_wire_dicts_are_refused_naming_the_field(bad: object, says: str) -> None:
    with pytest.raises(MalformedMessageError) as ei:
        message_from_wire(bad)
    assert says in str(ei.value)
    assert isinstance(ei.value, ValueError)


def test_a_missing_field_with_a_default_takes_it() -> None:
    w = AppendEntriesResponse(B, A, T, LogIndex(7)).to_wire()
    for k in ("reject", "reject_hint", "log_term"):
        del w[k]
    assert message_from_wire(w) == AppendEntriesResponse(B, A, T, LogIndex(7))


def test_a_configuration_of_the_wrong_length_or_ids_is_refused() -> None:
    good = CS.to_bytes()
    for bad in (
        b"",
        good[:3],
        good[:-1],
        good + b"\x00",
        ConfState(frozenset({NodeId(2**31)})).to_bytes(),
        b"\x00\x02\x00\x00" + b"\x00" * 7 + b"\x01" + b"\x00" * 7 + b"\x01",
    ):
        with pytest.raises(ValueError):
            ConfState.from_bytes(bad)


def test_conf_state_bytes_round_trip() -> None:
    assert ConfState.from_bytes(CS.to_bytes()) == CS
    assert ConfState.from_bytes(ConfState().to_bytes()) == ConfState()


def test_a_node_cannot_be_voter_and_observer() -> None:
    with pytest.raises(ValueError):
        ConfState(frozenset({A}), frozenset({A}))


# ---------------------------------------------------------------------------- MemoryStorage
def _storage(n: int) -> MemoryStorage:
    st = MemoryStorage(ConfState(frozenset({A})))
    st.append([Entry(LogIndex(i), Term(1 + i // 4), data=b"x%d" % i) for i in range(1, n + 1)])
    return st


def test_memory_storage_indexes_and_terms() -> None:
    st = _storage(10)
    assert (st.first_index(), st.last_index()) == (1, 10)
    assert st.term(LogIndex(0)) == 0
    assert st.term(LogIndex(8)) == 3
    with pytest.raises(UnavailableError):
        st.term(LogIndex(11))


def test_memory_storage_entries_respects_max_bytes_but_returns_at_least_one() -> None:
    st = _storage(10)
    one = st.entries(LogIndex(2), LogIndex(8), 1)
    assert [e.index for e in one] == [2]
    some = st.entries(LogIndex(2), LogIndex(8), 2 * (24 + 2))
    assert [e.index for e in some] == [2, 3]
    assert len(st.entries(LogIndex(2), LogIndex(8), None)) == 6
    with pytest.raises(UnavailableError):
        st.entries(LogIndex(2), LogIndex(12), None)


def test_memory_storage_append_truncates_a_conflicting_suffix() -> None:
    st = _storage(10)
    st.append([Entry(LogIndex(6), Term(9))])
    assert st.last_index() == 6 and st.term(LogIndex(6)) == 9


def test_memory_storage_append_refuses_a_gap() -> None:
    st = _storage(3)
    with pytest.raises(AssertionError):
        st.append([Entry(LogIndex(6), Term(1))])


def test_snapshot_and_compact_keep_the_snapshot_term_answerable() -> None:
    st = _storage(10)
    snap = st.create_snapshot(LogIndex(6), ConfState(frozenset({A})), b"s")
    st.compact(LogIndex(6))
    assert st.first_index() == 7
    assert st.term(LogIndex(6)) == snap.term
    with pytest.raises(CompactedError):
        st.term(LogIndex(5))
    with pytest.raises(CompactedError):
        st.entries(LogIndex(6), LogIndex(8), None)
    assert st.initial_state()[1] == ConfState(frozenset({A}))


def test_apply_snapshot_replaces_the_log_and_refuses_older_ones() -> None:
    st = _storage(5)
    st.apply_snapshot(SNAP)
    assert (st.first_index(), st.last_index()) == (41, 40)
    with pytest.raises(SnapshotOutOfDateError):
        st.apply_snapshot(Snapshot(SnapshotMetadata(LogIndex(30), Term(3), CS)))


def test_hard_state_and_copy_are_independent() -> None:
    st = _storage(3)
    st.set_hard_state(HardState(Term(4), A, LogIndex(2)))
    c = st.copy()
    st.append([Entry(LogIndex(4), Term(4))])
    assert c.last_index() == 3 and c.initial_state()[0] == HardState(Term(4), A, LogIndex(2))
