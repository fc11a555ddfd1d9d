"""An in-memory network of RaftCores for unit tests (etcd's raft_test.go ``network``).

Each node persists its Ready to a ``MemoryStorage`` at once (no crash model here: that is
tests/sim's job), sends the messages, and records what it applied. The network delivers
messages depth-first until quiet, dropping those on cut links, to isolated nodes, or
matching a drop filter.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from raft.core import Config, RaftCore, Ready
from raft.messages import Message
from raft.storage_port import MemoryStorage
from raft.types import (
    ConfState,
    Entry,
    EntryKind,
    HardState,
    LogIndex,
    NodeId,
    ReadState,
    Snapshot,
    Term,
    TraceEvent,
)


def ids(*ns: int) -> frozenset[NodeId]:
    return frozenset(NodeId(n) for n in ns)


@dataclass
class Node:
    core: RaftCore
    storage: MemoryStorage
    applied: list[Entry] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)
    readies: list[Ready] = field(default_factory=list)
    events: list[TraceEvent] = field(default_factory=list)  # lone_core's trace

    def process_ready(self) -> list[Message]:
        out: list[Message] = []
        while self.core.has_ready():
            rd = self.core.ready()
            self.readies.append(rd)
            if rd.snapshot is not None:
                self.storage.apply_snapshot(rd.snapshot)
                self.snapshots.append(rd.snapshot)
            self.storage.append(rd.entries)
            if rd.hard_state is not None:
                self.storage.set_hard_state(rd.hard_state)
            out.extend(rd.messages)
            self.applied.extend(rd.committed_entries)
            self.read_states.extend(rd.read_states)
            self.core.advance(rd)
        return out

    def applied_data(self) -> list[bytes]:
        return [e.data for e in self.applied if e.kind is EntryKind.NORMAL and e.data]


def make_config(node_id: int, **overrides: object) -> Config:
    return replace(Config(id=NodeId(node_id)), **overrides)  # type: ignore[arg-type]


class Network:
    def __init__(
        self,
        voters: Iterable[int],
        observers: Iterable[int] = (),
        *,
        seed: int = 0,
        extra: Iterable[int] = (),
        logs: dict[int, list[int]] | None = None,
        terms: dict[int, int] | None = None,
        core_class: type[RaftCore] = RaftCore,
        **config: object,
    ) -> None:
        """``logs`` preloads node n's log with entries of the given terms at 1, 2, ...
        (and its hard-state term to the last of them); ``terms`` sets node n's stored
        term higher (as if it had seen later elections); ``core_class`` builds every core
        as a subclass of ``RaftCore`` (one that checks itself after each input, say)."""
        self.conf = ConfState(ids(*voters), ids(*observers))
        self.config = config
        self.core_class = core_class
        self.rng = random.Random(seed)
        # Every core's transitions, in order: tracing is on in every unit test, so the trace
        # code runs on every path these tests take.
        self.events: list[TraceEvent] = []
        self.nodes: dict[NodeId, Node] = {}
        for n in sorted(self.conf.members()):
            st = MemoryStorage(self.conf)
            log_terms = (logs or {}).get(n, [])
            if log_terms:
                st.append(
                    [Entry(LogIndex(i + 1), Term(t), data=b"") for i, t in enumerate(log_terms)]
                )
            term = max([*log_terms, (terms or {}).get(n, 0)], default=0)
            if term:
                st.set_hard_state(HardState(Term(term)))
            self.add_node(n, st)
        for n in extra:  # started empty, to be added by a conf change
            self.add_node(n, MemoryStorage())
        self.cut_links: set[tuple[NodeId, NodeId]] = set()
        self.isolated: set[NodeId] = set()
        self.drop_filters: list[Callable[[Message], bool]] = []
        self.delivered: list[Message] = []
        self.dropped: list[Message] = []

    def add_node(self, n: int, storage: MemoryStorage) -> Node:
        core = self.core_class(
            make_config(n, **self.config),
            storage,
            random.Random(self.rng.random()),
            trace=self.events.append,
        )
        node = self.nodes[NodeId(n)] = Node(core, storage)
        return node

    def restart(self, n: int) -> Node:
        """Restart from the node's storage (everything it persisted survives here)."""
        return self.add_node(n, self.nodes[NodeId(n)].storage)

    def core(self, n: int) -> RaftCore:
        return self.nodes[NodeId(n)].core

    def __getitem__(self, n: int) -> Node:
        return self.nodes[NodeId(n)]

    # ------------------------------------------------------------------ faults
    def cut(self, a: int, b: int) -> None:
        self.cut_links |= {(NodeId(a), NodeId(b)), (NodeId(b), NodeId(a))}

    def isolate(self, n: int) -> None:
        self.isolated.add(NodeId(n))

    def recover(self) -> None:
        self.cut_links.clear()
        self.isolated.clear()
        self.drop_filters.clear()

    def drop(self, pred: Callable[[Message], bool]) -> None:
        self.drop_filters.append(pred)

    def _dropped(self, m: Message) -> bool:
        return (
            (m.src, m.dst) in self.cut_links
            or m.src in self.isolated
            or m.dst in self.isolated
            or m.dst not in self.nodes
            or any(f(m) for f in self.drop_filters)
        )

    # ------------------------------------------------------------------ driving
    def send(self, msgs: Iterable[Message]) -> None:
        """Deliver ``msgs`` and every message they cause, until the network is quiet."""
        queue = list(msgs)
        while queue:
            m = queue.pop(0)
            if self._dropped(m):
                self.dropped.append(m)
                continue
            self.delivered.append(m)
            node = self.nodes[m.dst]
            node.core.step(m)
            queue.extend(node.process_ready())

    def stabilize(self) -> None:
        out: list[Message] = []
        for node in self.nodes.values():
            out.extend(node.process_ready())
        self.send(out)

    def tick(self, n: int, times: int = 1) -> None:
        """Tick node ``n`` ``times`` times, letting the network settle after each tick."""
        for _ in range(times):
            self.core(n).tick()
            self.stabilize()

    def tick_all(self, times: int = 1) -> None:
        for _ in range(times):
            for node in self.nodes.values():
                node.core.tick()
            self.stabilize()

    def campaign(self, n: int) -> None:
        self.core(n).campaign()
        self.stabilize()

    def elect(self, n: int) -> RaftCore:
        self.campaign(n)
        c = self.core(n)
        assert c.is_leader, f"node {n} failed to become leader: {c!r}"
        return c

    def propose(self, n: int, data: bytes) -> LogIndex:
        idx = self.core(n).propose(data)
        self.stabilize()
        return idx

    def leaders(self) -> list[NodeId]:
        return [n for n, node in self.nodes.items() if node.core.is_leader]

    def log_of(self, n: int) -> list[tuple[int, int, bytes]]:
        c = self.core(n)
        ents = c.log.slice(c.log.first_index(), LogIndex(c.log.last_index() + 1), None)
        return [(e.index, e.term, e.data) for e in ents]


def lone_core(
    node_id: int = 1,
    voters: Iterable[int] = (1, 2, 3),
    terms: list[int] | None = None,
    term: int = 0,
    vote: int = 0,
    seed: int = 0,
    **config: object,
) -> Node:
    """One node whose messages the test reads and answers by hand; ``terms`` preloads
    its log, ``term`` and ``vote`` its stored hard state."""
    st = MemoryStorage(ConfState(ids(*voters)))
    if terms:
        st.append([Entry(LogIndex(i + 1), Term(t)) for i, t in enumerate(terms)])
    if terms or term or vote:
        st.set_hard_state(HardState(Term(max([term, *(terms or [])])), NodeId(vote)))
    events: list[TraceEvent] = []
    core = RaftCore(make_config(node_id, **config), st, random.Random(seed), trace=events.append)
    return Node(core, st, events=events)
