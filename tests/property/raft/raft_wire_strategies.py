"""Hypothesis strategies of well-formed Raft messages (the rules of ``raft.messages``), shared
by the wire property tests and the fuzz suite (tests/integration/fuzz)."""

from __future__ import annotations

from hypothesis import strategies as st

from raft.messages import (
    CONTEXT_BYTES_MAX,
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    ReadIndex,
    ReadIndexResponse,
    RequestVote,
    RequestVoteResponse,
    TimeoutNow,
    TransferLeadership,
)
from raft.types import (
    INDEX_MAX,
    NODE_ID_MAX,
    TERM_MAX,
    ConfState,
    Entry,
    EntryKind,
    LogIndex,
    NodeId,
    Snapshot,
    SnapshotMetadata,
    Term,
)


def _small_or(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Mostly small values (they meet a real log's indexes and terms), sometimes any."""
    return st.one_of(st.integers(lo, min(hi, lo + 12)), st.integers(lo, hi))


node_ids = _small_or(1, NODE_ID_MAX).map(NodeId)
terms = _small_or(0, TERM_MAX).map(Term)
indexes = _small_or(0, INDEX_MAX).map(LogIndex)
contexts = st.binary(max_size=CONTEXT_BYTES_MAX)


@st.composite
def conf_states(draw: st.DrawFn, ids: st.SearchStrategy[NodeId] = node_ids) -> ConfState:
    voters = draw(st.frozensets(ids, min_size=1, max_size=5))
    observers = draw(st.frozensets(ids, max_size=3))
    return ConfState(voters, observers - voters)


@st.composite
def messages(
    draw: st.DrawFn,
    src: st.SearchStrategy[NodeId] = node_ids,
    dst: st.SearchStrategy[NodeId] = node_ids,
    term: st.SearchStrategy[Term] = terms,
) -> Message:
    """A well-formed message of any type (the rules of raft/messages.py's docstring)."""
    s = draw(src)
    d = draw(dst.filter(lambda x: x != s))
    t = draw(term)
    kind = draw(st.sampled_from(range(12)))
    if kind == 0:
        pt = draw(st.integers(0, t))
        pi = draw(indexes)
        n = draw(st.integers(0, 4)) if t >= 1 else 0
        n = min(n, INDEX_MAX - pi)
        ts = sorted(draw(st.lists(st.integers(max(1, pt), t), min_size=n, max_size=n))) if n else []
        ents = []
        for k, et in enumerate(ts):
            if draw(st.integers(0, 4)) == 0:
                data = draw(conf_states(node_ids)).to_bytes()
                ents.append(Entry(LogIndex(pi + 1 + k), Term(et), EntryKind.CONF_CHANGE, data))
            else:
                ents.append(Entry(LogIndex(pi + 1 + k), Term(et), data=draw(st.binary(max_size=8))))
        return AppendEntries(s, d, t, pi, Term(pt), tuple(ents), draw(indexes))
    if kind == 1:
        return AppendEntriesResponse(
            s,
            d,
            t,
            draw(indexes),
            draw(st.booleans()),
            draw(indexes),
            Term(draw(st.integers(0, t))),
        )
    if kind == 2:
        return Heartbeat(s, d, t, draw(indexes), draw(contexts))
    if kind == 3:
        return HeartbeatResponse(s, d, t, draw(contexts))
    if kind == 4:
        return RequestVote(
            s,
            d,
            t,
            draw(indexes),
            Term(draw(st.integers(0, t))),
            draw(st.booleans()),
            draw(st.booleans()),
        )
    if kind == 5:
        return RequestVoteResponse(s, d, t, draw(st.booleans()), draw(st.booleans()))
    if kind == 6:
        t = max(t, Term(1))
        meta = SnapshotMetadata(
            draw(indexes.filter(bool)), Term(draw(st.integers(1, t))), draw(conf_states(node_ids))
        )
        return InstallSnapshot(s, d, t, Snapshot(meta, draw(st.binary(max_size=16))))
    if kind == 7:
        return InstallSnapshotResponse(s, d, t, draw(indexes))
    if kind == 8:
        return TimeoutNow(s, d, t)
    if kind == 9:
        return ReadIndex(s, d, t, draw(contexts.filter(bool)))
    if kind == 10:
        return ReadIndexResponse(s, d, t, draw(indexes), draw(contexts.filter(bool)))
    return TransferLeadership(s, d, t, draw(node_ids))
