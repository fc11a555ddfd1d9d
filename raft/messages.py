"""raft.messages: the messages Raft nodes exchange, named as in the Raft paper.

Every message carries ``src``, ``dst`` and the sender's ``term``. Each round-trips through
a plain dict of msgpack-able values (ints, bools, bytes, lists, str keys) with
``to_wire()`` and ``message_from_wire()``; the transport chooses the encoding.

``message_from_wire`` is the boundary: it takes whatever another process sent and returns a
message only if every field has its type and range, or raises ``MalformedMessageError``
saying which field is wrong (docs/operations.md, "Validation"). Rules:

* node ids are ints in [1, NODE_ID_MAX]; terms in [0, TERM_MAX]; indexes in [0, INDEX_MAX]
  (``raft.types``: beyond them a value cannot be stored); bools are bools; bytes are bytes,
  a read-index context at most ``CONTEXT_BYTES_MAX`` of them (non-empty in ReadIndex and
  its response);
* ``src != dst``; no term inside a message exceeds the message's own ``term``;
* AppendEntries' entries are ``[index, term, kind, data]``, consecutive from
  ``prev_log_index + 1``, with terms in [max(1, prev_log_term), term] that never decrease;
  a CONF_CHANGE entry's data is a valid configuration with at least one voter;
* an InstallSnapshot's snapshot is ``[index >= 1, term >= 1, [voters], [observers], data]``
  with at least one voter and no node in both lists;
* a missing field that has a default takes it; an unknown ``type`` or key is refused (all
  nodes of a cluster speak one version of these messages).

Whether a well-formed message fits the receiver's log is ``RaftCore.check_message``.

Pure: no I/O, no clock, no global random.

=======================  ==============================================================
message                  meaning
=======================  ==============================================================
AppendEntries            leader -> follower: entries after (prev_log_index, prev_log_term)
AppendEntriesResponse    follower -> leader: matched up to ``index``, or reject with a
                         hint (``reject_hint``, ``log_term``) for fast back-off
Heartbeat                leader -> follower: I am alive; commit = min(match, committed);
                         ``context`` echoes a read-index round
HeartbeatResponse        follower -> leader: echo of ``context``
RequestVote              candidate -> voter; ``pre_vote`` for the pre-vote phase (the
                         term is the one the candidate *would* use); ``transfer`` marks
                         a campaign started by TimeoutNow, which ignores the leader lease
RequestVoteResponse      voter -> candidate
InstallSnapshot          leader -> follower whose next entry was compacted away
InstallSnapshotResponse  follower -> leader: now matches up to ``index``
TimeoutNow               leader -> transferee: campaign at once (leadership transfer)
ReadIndex                follower -> leader: a read-index request with ``context``
ReadIndexResponse        leader -> follower: read at ``index`` once applied
TransferLeadership       follower -> leader: please transfer to ``transferee``
=======================  ==============================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.text import show
from raft.types import (
    INDEX_MAX,
    NO_INDEX,
    NO_TERM,
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


class _Wire:
    """``m.to_wire()`` and ``Cls.from_wire(d)`` for every message class."""

    __slots__ = ()

    def to_wire(self) -> dict[str, Any]:
        return to_wire(self)  # type: ignore[arg-type]

    @staticmethod
    def from_wire(d: dict[str, Any]) -> Message:
        return message_from_wire(d)


@dataclass(frozen=True, slots=True)
class AppendEntries(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    prev_log_index: LogIndex
    prev_log_term: Term
    entries: tuple[Entry, ...]
    leader_commit: LogIndex


@dataclass(frozen=True, slots=True)
class AppendEntriesResponse(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    index: LogIndex  # accepted: last index now matching; rejected: the prev_log_index refused
    reject: bool = False
    reject_hint: LogIndex = NO_INDEX  # highest index that may match (fast back-off)
    log_term: Term = NO_TERM  # follower's term at reject_hint (0: unknown)


@dataclass(frozen=True, slots=True)
class Heartbeat(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    commit: LogIndex
    context: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    context: bytes = b""


@dataclass(frozen=True, slots=True)
class RequestVote(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    last_log_index: LogIndex
    last_log_term: Term
    pre_vote: bool = False
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class RequestVoteResponse(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class InstallSnapshot(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class InstallSnapshotResponse(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    index: LogIndex


@dataclass(frozen=True, slots=True)
class TimeoutNow(_Wire):
    src: NodeId
    dst: NodeId
    term: Term


@dataclass(frozen=True, slots=True)
class ReadIndex(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    context: bytes


@dataclass(frozen=True, slots=True)
class ReadIndexResponse(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    index: LogIndex
    context: bytes


@dataclass(frozen=True, slots=True)
class TransferLeadership(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    transferee: NodeId


Message = (
    AppendEntries
    | AppendEntriesResponse
    | Heartbeat
    | HeartbeatResponse
    | RequestVote
    | RequestVoteResponse
    | InstallSnapshot
    | InstallSnapshotResponse
    | TimeoutNow
    | ReadIndex
    | ReadIndexResponse
    | TransferLeadership
)

_TYPES: dict[str, type[Any]] = {
    c.__name__: c
    for c in (
        AppendEntries,
        AppendEntriesResponse,
        Heartbeat,
        HeartbeatResponse,
        RequestVote,
        RequestVoteResponse,
        InstallSnapshot,
        InstallSnapshotResponse,
        TimeoutNow,
        ReadIndex,
        ReadIndexResponse,
        TransferLeadership,
    )
}


def to_wire(m: Message) -> dict[str, Any]:
    """A plain dict of msgpack-able values; ``"type"`` names the message class."""
    d: dict[str, Any] = {"type": type(m).__name__}
    for name in m.__dataclass_fields__:
        v = getattr(m, name)
        if name == "entries":
            v = [e.to_wire() for e in v]
        elif name == "snapshot":
            v = v.to_wire()
        d[name] = v
    return d


class MalformedMessageError(ValueError):
    """A wire message that is not one of ours: wrong type, field, range or shape."""


CONTEXT_BYTES_MAX = 1024
"""A read-index context is an id the reader picks ("<node>:<n>"); the leader keeps it until
the read is confirmed and echoes it in a heartbeat to every follower, so it stays small."""

_MISSING: Any = object()


def _bad(field: str, want: str, v: object) -> MalformedMessageError:
    return MalformedMessageError(f"{field} must be {want}, got {show(v)}")


def _node_id(field: str, v: Any) -> NodeId:
    if type(v) is not int or not 0 < v <= NODE_ID_MAX:
        raise _bad(field, f"a node id in [1, {NODE_ID_MAX}]", v)
    return NodeId(v)


def _term(field: str, v: Any) -> Term:
    if type(v) is not int or not 0 <= v <= TERM_MAX:
        raise _bad(field, f"a term in [0, {TERM_MAX}]", v)
    return Term(v)


def _index(field: str, v: Any) -> LogIndex:
    if type(v) is not int or not 0 <= v <= INDEX_MAX:
        raise _bad(field, f"an index in [0, {INDEX_MAX}]", v)
    return LogIndex(v)


def _bool(field: str, v: Any) -> bool:
    if type(v) is not bool:
        raise _bad(field, "a bool", v)
    return v


def _context(field: str, v: Any) -> bytes:
    if type(v) is not bytes or len(v) > CONTEXT_BYTES_MAX:
        raise _bad(field, f"bytes (at most {CONTEXT_BYTES_MAX})", v)
    return v


def _conf_state(field: str, v: Any) -> ConfState:
    if type(v) not in (list, tuple) or len(v) != 2:
        raise _bad(field, "[voters, observers]", v)
    lists = []
    for name, ids in zip(("voters", "observers"), v, strict=True):
        if type(ids) not in (list, tuple):
            raise _bad(f"{field}.{name}", "a list of node ids", ids)
        lists.append([_node_id(f"{field}.{name}", i) for i in ids])
    voters, observers = frozenset(lists[0]), frozenset(lists[1])
    if len(voters) != len(lists[0]) or len(observers) != len(lists[1]) or voters & observers:
        raise _bad(field, "a configuration naming each node once", v)
    if not voters:
        raise _bad(field, "a configuration with at least one voter", v)
    return ConfState(voters, observers)


def _snapshot(field: str, v: Any) -> Snapshot:
    if type(v) not in (list, tuple) or len(v) != 4:
        raise _bad(field, "[index, term, [voters, observers], data]", v)
    index, term, cs, data = v
    # The leader sends only a real snapshot (an empty one is never compacted away).
    if _index(f"{field}.index", index) == 0:
        raise _bad(f"{field}.index", "at least 1", index)
    if _term(f"{field}.term", term) == 0:
        raise _bad(f"{field}.term", "at least 1", term)
    if type(data) is not bytes:
        raise _bad(f"{field}.data", "bytes", data)
    return Snapshot(SnapshotMetadata(index, term, _conf_state(f"{field}.conf_state", cs)), data)


def _conf_change_kind(n: int, k: Any, d: bytes) -> EntryKind:
    """The kind of entry ``n`` when it is not NORMAL: CONF_CHANGE with a valid configuration."""
    if type(k) is not int or k != EntryKind.CONF_CHANGE:
        raise _bad(f"entries[{n}].kind", f"one of {[int(x) for x in EntryKind]}", k)
    try:
        cs = ConfState.from_bytes(d)
    except ValueError as e:
        raise _bad(f"entries[{n}].data", f"a configuration ({e})", d) from None
    if not cs.voters:
        raise _bad(f"entries[{n}].data", "a configuration with at least one voter", d)
    return EntryKind.CONF_CHANGE


def _entries(v: Any, prev_index: LogIndex, prev_term: Term, term: Term) -> tuple[Entry, ...]:
    """The entries of an AppendEntries: the hot path of replication, so one tight loop
    (about 1 us an entry, most of it building the Entry) rather than a checker per field."""
    if type(v) not in (list, tuple):
        raise _bad("entries", "a list", v)
    out: list[Entry] = []
    append = out.append
    # Entry without the NewType calls (index and term are checked ints): 10% of the loop.
    entry: Callable[[int, int, EntryKind, bytes], Entry] = Entry  # type: ignore[assignment]
    expect = prev_index + 1
    low = max(1, prev_term)
    normal = EntryKind.NORMAL
    for w in v:
        if (type(w) is not list and type(w) is not tuple) or len(w) != 4:
            raise _bad(f"entries[{len(out)}]", "[index, term, kind, data]", w)
        i, t, k, d = w
        if type(i) is not int or i != expect:
            raise _bad(f"entries[{len(out)}].index", f"{expect} (the next after the last)", i)
        if type(t) is not int or t < low or t > term:
            raise _bad(
                f"entries[{len(out)}].term",
                f"in [{low}, {term}] (non-decreasing, at most the message term)",
                t,
            )
        if type(d) is not bytes:
            raise _bad(f"entries[{len(out)}].data", "bytes", d)
        if k == 0 and type(k) is int:
            append(entry(i, t, normal, d))
        else:
            append(entry(i, t, _conf_change_kind(len(out), k, d), d))
        expect += 1
        low = t
    if expect - 1 > INDEX_MAX:
        raise _bad("entries", f"indexes up to {INDEX_MAX}", expect - 1)
    return tuple(out)


# The checker of each field, by its annotation (every field of every message has one: a new
# annotation fails at import, not on the wire). Entries and snapshots need more than their
# own value and are decoded by ``message_from_wire`` itself.
_CHECKERS: dict[str, Callable[[str, Any], Any]] = {
    "NodeId": _node_id,
    "Term": _term,
    "LogIndex": _index,
    "bool": _bool,
    "bytes": _context,
    "Snapshot": _snapshot,
    "tuple[Entry, ...]": lambda _f, v: v,  # below, once prev_log_index/term are known
}

_SPECS: dict[str, tuple[type[Any], tuple[tuple[str, Callable[[str, Any], Any], Any], ...]]] = {
    name: (
        cls,
        tuple(
            (
                f.name,
                _CHECKERS[str(f.type)],
                f.default if f.default is not dataclasses.MISSING else _MISSING,
            )
            for f in dataclasses.fields(cls)
        ),
    )
    for name, cls in _TYPES.items()
}


def message_from_wire(d: Any) -> Message:
    """Inverse of ``to_wire``: the message, or ``MalformedMessageError`` (a ``ValueError``)
    naming the first field that breaks the rules of the module docstring."""
    if type(d) is not dict:
        raise _bad("a message", "a map", d)
    t = d.get("type")
    spec = _SPECS.get(t) if type(t) is str else None
    if spec is None:
        raise _bad("type", f"one of {sorted(_SPECS)}", t)
    cls, fields = spec
    kw: dict[str, Any] = {}
    for name, check, default in fields:
        v = d.get(name, default)
        if v is _MISSING:
            raise MalformedMessageError(f"{t} without {name}")
        kw[name] = check(name, v)
    if len(d) > 1 + len(fields) or any(k != "type" and k not in kw for k in d):
        extra = sorted(show(k) for k in d if k != "type" and k not in kw)
        raise MalformedMessageError(f"{t} has no field {', '.join(extra)}")
    if kw["src"] == kw["dst"]:
        raise _bad("dst", "another node than src", kw["dst"])
    term = kw["term"]
    if cls is AppendEntries:
        if kw["prev_log_term"] > term:
            raise _bad("prev_log_term", f"at most the message term {term}", kw["prev_log_term"])
        kw["entries"] = _entries(kw["entries"], kw["prev_log_index"], kw["prev_log_term"], term)
    elif cls is RequestVote and kw["last_log_term"] > term:
        raise _bad("last_log_term", f"at most the message term {term}", kw["last_log_term"])
    elif cls is AppendEntriesResponse and kw["log_term"] > term:
        raise _bad("log_term", f"at most the message term {term}", kw["log_term"])
    elif cls is InstallSnapshot and kw["snapshot"].term > term:
        raise _bad("snapshot.term", f"at most the message term {term}", kw["snapshot"].term)
    elif cls in (ReadIndex, ReadIndexResponse) and not kw["context"]:
        raise _bad("context", "non-empty bytes", kw["context"])
    m: Message = cls(**kw)
    return m
