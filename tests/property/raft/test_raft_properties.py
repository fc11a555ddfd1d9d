"""Property tests of the Raft core's building blocks: the wire codec, MemoryStorage and the
unstable log against list models, and majority arithmetic against brute force."""

from __future__ import annotations

from itertools import combinations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from raft.log import RaftLog
from raft.messages import AppendEntries, InstallSnapshot, RequestVote, message_from_wire
from raft.quorum import MajorityConfig, VoteResult
from raft.storage_port import MemoryStorage
from raft.types import (
    ConfState,
    Entry,
    EntryKind,
    LogIndex,
    NodeId,
    Snapshot,
    SnapshotMetadata,
    Term,
)

ids = st.integers(1, 2**63 - 1).map(NodeId)
terms = st.integers(0, 2**63 - 1).map(Term)
indexes = st.integers(0, 2**63 - 1).map(LogIndex)
conf_states = st.builds(
    lambda v, o: ConfState(frozenset(v), frozenset(o - v)),
    st.sets(ids, max_size=5),
    st.sets(ids, max_size=3),
)
entries = st.builds(Entry, indexes, terms, st.sampled_from(EntryKind), st.binary(max_size=64))


@given(ids, ids, terms, indexes, terms, st.lists(entries, max_size=5), indexes)
def test_append_entries_round_trips_through_msgpack(s, d, t, pi, pt, ents, c) -> None:
    m = AppendEntries(s, d, t, pi, pt, tuple(ents), c)
    assert message_from_wire(msgpack.unpackb(msgpack.packb(m.to_wire()), raw=False)) == m


@given(ids, ids, terms, indexes, terms, conf_states, st.binary(max_size=256))
def test_install_snapshot_round_trips_through_msgpack(s, d, t, i, st_, cs, data) -> None:
    m = InstallSnapshot(s, d, t, Snapshot(SnapshotMetadata(i, st_, cs), data))
    assert message_from_wire(msgpack.unpackb(msgpack.packb(m.to_wire()), raw=False)) == m


@given(ids, ids, terms, indexes, terms, st.booleans(), st.booleans())
def test_request_vote_round_trips(s, d, t, i, lt, pre, tr) -> None:
    m = RequestVote(s, d, t, i, lt, pre, tr)
    assert RequestVote.from_wire(m.to_wire()) == m


@given(conf_states)
def test_conf_state_bytes_round_trip(cs: ConfState) -> None:
    assert ConfState.from_bytes(cs.to_bytes()) == cs


# A log operation: (start index offset from the current last, number of entries, term bump)
ops = st.lists(st.tuples(st.integers(-5, 1), st.integers(1, 4), st.integers(0, 2)), max_size=25)


@settings(max_examples=200)
@given(ops)
def test_memory_storage_append_matches_a_list_model(steps: list[tuple[int, int, int]]) -> None:
    storage = MemoryStorage()
    model: list[int] = []  # model[i] = term of index i + 1
    term = 1
    for back, n, bump in steps:
        term += bump
        start = max(1, len(model) + back + (1 if back == 1 else 0))
        start = min(start, len(model) + 1)
        new = [Entry(LogIndex(start + k), Term(term)) for k in range(n)]
        storage.append(new)
        model = model[: start - 1] + [term] * n
        assert storage.last_index() == len(model)
        assert [storage.term(LogIndex(i)) for i in range(1, len(model) + 1)] == model


@settings(max_examples=200)
@given(ops, st.data())
def test_raft_log_with_unstable_tail_reads_like_a_list(
    steps: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    storage = MemoryStorage()
    log = RaftLog(storage)
    model: list[int] = []
    term = 1
    for back, n, bump in steps:
        term += bump
        start = min(max(1, len(model) + back + 1), len(model) + 1)
        new = [Entry(LogIndex(start + k), Term(term)) for k in range(n)]
        log.append(new)
        model = model[: start - 1] + [term] * n
        if data.draw(st.booleans()):
            # The node persists what is unstable, as after a Ready.
            uns = log.unstable_entries()
            storage.append(uns)
            if uns:
                log.stable_to(uns[-1].index, uns[-1].term)
        assert log.last_index() == len(model)
        got = log.slice(LogIndex(1), LogIndex(len(model) + 1), None)
        assert [e.term for e in got] == model
        assert [log.term(LogIndex(i)) for i in range(1, len(model) + 1)] == model


@given(
    st.dictionaries(
        st.integers(1, 7).map(NodeId), st.integers(0, 20).map(LogIndex), min_size=1, max_size=7
    )
)
def test_committed_index_is_the_largest_index_a_majority_has(match: dict[NodeId, LogIndex]) -> None:
    cfg = MajorityConfig(frozenset(match))
    q = len(match) // 2 + 1
    brute = max(min(match[v] for v in group) for group in combinations(sorted(match), q))
    assert cfg.committed_index(lambda v: match[v]) == brute


@given(st.dictionaries(st.integers(1, 7).map(NodeId), st.booleans(), max_size=7), st.integers(1, 7))
def test_vote_result_agrees_with_counting(votes: dict[NodeId, bool], n: int) -> None:
    voters = frozenset(NodeId(i) for i in range(1, n + 1))
    votes = {k: v for k, v in votes.items() if k in voters}
    res = MajorityConfig(voters).vote_result(votes)
    yes = sum(votes.values())
    no = len(votes) - yes
    q = n // 2 + 1
    want = VoteResult.WON if yes >= q else VoteResult.LOST if n - no < q else VoteResult.PENDING
    assert res is want
