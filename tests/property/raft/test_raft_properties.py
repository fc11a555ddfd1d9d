"""Property tests of the Raft core's building blocks: the configuration codec, MemoryStorage
and the unstable log against list models, and majority arithmetic against brute force. The
message codec has its own file (test_raft_wire_properties.py)."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from raft.log import RaftLog
from raft.quorum import MajorityConfig, VoteResult
from raft.storage_port import MemoryStorage
from raft.types import NODE_ID_MAX, ConfState, Entry, LogIndex, NodeId, Term

ids = st.integers(1, NODE_ID_MAX).map(NodeId)
conf_states = st.builds(
    lambda v, o: ConfState(frozenset(v), frozenset(o - v)),
    st.sets(ids, max_size=5),
    st.sets(ids, max_size=3),
)


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
