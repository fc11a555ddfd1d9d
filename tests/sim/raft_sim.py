"""Deterministic simulation of a cluster of ``RaftCore``s (TigerBeetle VOPR / FoundationDB
style, after Kafka's RaftEventSimulationTest).

One integer seed fixes everything: the fault mix ("swarm": each seed enables a random subset
of fault kinds), the schedule, every message delay and loss, every crash point. A failure
prints one line that reproduces it::

    python scripts/sim.py raft --seed 1234 --steps 2000

Model
-----
* Time is an integer clock of *units*; a node ticks every ``TICK_UNITS`` (skewed per node
  when clock skew is on). Events sit in a heap keyed (time, sequence).
* Network: each message gets a delay (reordering when delays vary), may be lost or
  duplicated, and is dropped at delivery if its directed link is cut (symmetric and
  asymmetric partitions) or its destination is down.
* Disk: a node's Ready is *written* at once (the node's read view sees it) but becomes
  durable only at the *sync* that follows after a disk latency; the node sends the Ready's
  messages and applies its entries only after that sync (``must_sync``) and then advances.
  A crash keeps a random prefix of the unsynced writes (a WAL with a torn tail) and drops
  the rest; a restart rebuilds the node from the durable state only.
* Application: a state machine that hashes the applied entries into a chain; snapshots
  carry (index, hash); nodes snapshot and compact their logs during the run.

Checked after every event (the ``Checker``): every message sent decodes from its wire form
to itself (the boundary of ``raft.messages``, which refuses anything else) and is never
refused by the core it reaches (``RaftCore.check_message``); at most one leader per term; log
matching (an (index, term) pair fixes the entry and its predecessor's term); leader
completeness (a new leader holds every entry applied anywhere); state machine safety (every
node applies the same entry at an index, and installs snapshots equal to the chain); a node
never grants two votes in one term, across restarts too; per-node commit is monotonic within an incarnation
and a restart never comes back below the last *synced* commit; read-index results are never
older than a write completed before the read began. Then a liveness phase heals everything
and requires a leader and a committed proposal within a tick bound.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import random
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raft.core import (
    ConfChangeError,
    Config,
    InvalidMessageError,
    NotLeaderError,
    ProposalDroppedError,
    RaftCore,
    Ready,
)
from raft.messages import (
    InstallSnapshot,
    MalformedMessageError,
    Message,
    RequestVoteResponse,
    TimeoutNow,
    message_from_wire,
)
from raft.storage_port import MemoryStorage
from raft.types import (
    ConfChange,
    ConfChangeKind,
    ConfState,
    Entry,
    HardState,
    LogIndex,
    NodeId,
    Snapshot,
)

TICK_UNITS = 10
ELECTION_TIMEOUT_TICKS = 10
LIVENESS_TICKS_MAX = 40 * ELECTION_TIMEOUT_TICKS
DEFAULT_STEPS = 3000


class SimulationFailure(AssertionError):
    """An invariant or liveness violation; ``repro`` is the one-line reproduction."""

    def __init__(self, msg: str, repro: str) -> None:
        super().__init__(f"{msg}\nreproduce: {repro}")
        self.repro = repro


# ------------------------------------------------------------------------------ faults
FAULT_KINDS = (
    "loss",
    "duplicate",
    "reorder",
    "partition",
    "asymmetric_partition",
    "crash",
    "kill_leader",
    "torn_writes",
    "clock_skew",
    "membership",
    "snapshot",
    "transfer",
    "read_index",
    "small_batches",
)


@dataclass(frozen=True)
class Faults:
    enabled: frozenset[str]
    loss_rate: float
    duplicate_rate: float
    delay_units_max: int

    @staticmethod
    def draw(rng: random.Random) -> Faults:
        enabled = frozenset(k for k in FAULT_KINDS if rng.random() < 0.5)
        return Faults(
            enabled,
            loss_rate=rng.choice([0.01, 0.05, 0.2]) if "loss" in enabled else 0.0,
            duplicate_rate=rng.choice([0.01, 0.05, 0.1]) if "duplicate" in enabled else 0.0,
            delay_units_max=rng.choice([10, 30, 60]) if "reorder" in enabled else 2,
        )

    def __contains__(self, kind: str) -> bool:
        return kind in self.enabled


# ------------------------------------------------------------------------------ disk
@dataclass
class SimDisk:
    """Durable state plus unsynced writes. Records are applied in order (a WAL)."""

    durable: MemoryStorage
    pending: list[Callable[[MemoryStorage], None]] = field(default_factory=list)
    synced_hard_state: HardState = field(default_factory=HardState)

    def write(self, op: Callable[[MemoryStorage], None]) -> None:
        self.pending.append(op)

    def sync(self) -> None:
        for op in self.pending:
            op(self.durable)
        self.pending.clear()
        self.synced_hard_state = self.durable.hard_state()

    def crash(self, rng: random.Random, torn: bool) -> None:
        keep = rng.randrange(len(self.pending) + 1) if torn else 0
        for op in self.pending[:keep]:
            op(self.durable)
        self.pending.clear()


def _persist_ready(st: MemoryStorage, rd: Ready) -> None:
    if rd.snapshot is not None:
        st.apply_snapshot(rd.snapshot)
    st.append(rd.entries)
    if rd.hard_state is not None:
        st.set_hard_state(rd.hard_state)


def _snapshot_and_compact(st: MemoryStorage, index: LogIndex, cs: ConfState, data: bytes) -> None:
    if index > st.snapshot().index:
        st.create_snapshot(index, cs, data)
    keep_from = st.snapshot().index
    if keep_from >= st.first_index():
        st.compact(keep_from)


# ------------------------------------------------------------------------------ state machine
def chain_hash(prev: bytes, e: Entry) -> bytes:
    h = hashlib.blake2b(prev, digest_size=8)
    h.update(struct.pack(">QQB", e.index, e.term, e.kind))
    h.update(e.data)
    return h.digest()


GENESIS = b"\0" * 8


def sm_snapshot_data(index: int, h: bytes) -> bytes:
    return struct.pack(">Q", index) + h


def sm_from_snapshot(snap: Snapshot) -> tuple[int, bytes]:
    if snap.is_empty():
        return 0, GENESIS
    (index,) = struct.unpack_from(">Q", snap.data)
    return index, snap.data[8:]


# ------------------------------------------------------------------------------ nodes
@dataclass
class SimNode:
    id: NodeId
    disk: SimDisk
    core: RaftCore | None = None
    view: MemoryStorage | None = None  # what the core reads: durable + unsynced writes
    incarnation: int = 0
    busy: bool = False  # a Ready is written but not yet synced/advanced
    sm_index: int = 0
    sm_hash: bytes = GENESIS
    last_commit: int = 0
    tick_units: int = TICK_UNITS
    ticks: int = 0  # this incarnation's tick count
    heard_tick: dict[NodeId, int] = field(default_factory=dict)  # last delivery from each node
    leader_since_tick: int = 0
    conf_index_seen: int = -1
    was_leader_term: int = -1

    @property
    def up(self) -> bool:
        return self.core is not None


class Checker:
    """Cluster-wide safety invariants, checked after every event."""

    def __init__(self, fail: Callable[[str], None]) -> None:
        self.fail = fail
        self.leader_of_term: dict[int, NodeId] = {}
        self.entry_at: dict[tuple[int, int], tuple[int, bytes, int | None]] = {}
        self.chain: dict[int, bytes] = {0: GENESIS}
        self.applied_term: dict[int, int] = {}
        self.max_applied = 0
        self.vote_in_term: dict[tuple[NodeId, int], NodeId] = {}

    def on_leader(self, node: SimNode) -> None:
        c = node.core
        assert c is not None
        other = self.leader_of_term.setdefault(c.term, node.id)
        if other != node.id:
            self.fail(f"election safety: {other} and {node.id} both lead term {c.term}")
        # Leader completeness: every entry applied anywhere is in the new leader's log.
        lo = max(1, c.log.first_index())
        if c.log.last_index() < self.max_applied:
            self.fail(
                f"leader completeness: leader {node.id} of term {c.term} ends at "
                f"{c.log.last_index()}, but index {self.max_applied} was applied"
            )
        for i in range(lo, self.max_applied + 1):
            t = c.log.term(LogIndex(i))
            if t != self.applied_term.get(i, t):
                self.fail(
                    f"leader completeness: leader {node.id} of term {c.term} has term {t} at "
                    f"{i}, applied entry has term {self.applied_term[i]}"
                )

    def on_persist(self, node: SimNode, entries: tuple[Entry, ...]) -> None:
        c = node.core
        assert c is not None
        prev_term: int | None = None
        for k, e in enumerate(entries):
            prev_term = entries[k - 1].term if k else c.log.term(LogIndex(e.index - 1))
            key = (e.index, e.term)
            val = (int(e.kind), e.data, prev_term)
            got = self.entry_at.setdefault(key, val)
            if got != val:
                self.fail(
                    f"log matching: node {node.id} holds ({e.index}, {e.term}) = {val}, "
                    f"another node holds {got}"
                )

    def on_apply(self, node: SimNode, e: Entry) -> None:
        if e.index != node.sm_index + 1:
            self.fail(f"node {node.id} applies {e.index} after {node.sm_index}")
        node.sm_hash = chain_hash(node.sm_hash, e)
        node.sm_index = e.index
        want = self.chain.setdefault(e.index, node.sm_hash)
        if want != node.sm_hash:
            self.fail(
                f"state machine safety: node {node.id} applied a different entry at {e.index}"
            )
        self.applied_term.setdefault(e.index, e.term)
        self.max_applied = max(self.max_applied, e.index)

    def on_install_snapshot(self, node: SimNode, snap: Snapshot) -> None:
        idx, h = sm_from_snapshot(snap)
        if idx != snap.index:
            self.fail(f"snapshot metadata index {snap.index} but data says {idx}")
        want = self.chain.get(idx)
        if want is not None and want != h:
            self.fail(
                f"state machine safety: node {node.id} installed a divergent snapshot at {idx}"
            )
        node.sm_index, node.sm_hash = idx, h

    def on_send(self, m: Message) -> None:
        # What a core emits must pass the boundary a real node puts before step.
        try:
            back = message_from_wire(m.to_wire())
        except MalformedMessageError as e:
            self.fail(f"node {m.src} sent a message the wire refuses: {e}")
        if back != m:
            self.fail(f"node {m.src} sent {m!r}, which decodes as {back!r}")
        if isinstance(m, RequestVoteResponse) and m.granted and not m.pre_vote:
            got = self.vote_in_term.setdefault((m.src, m.term), m.dst)
            if got != m.dst:
                self.fail(f"node {m.src} voted for {got} and {m.dst} in term {m.term}")


# ------------------------------------------------------------------------------ simulation
@dataclass(order=True)
class _Event:
    time: int
    seq: int
    kind: str = field(compare=False)
    args: tuple[Any, ...] = field(compare=False, default=())


class Simulation:
    def __init__(self, seed: int, steps: int, *, verbose: bool = False) -> None:
        self.seed = seed
        self.steps = steps
        self.verbose = verbose
        self.rng = random.Random(seed)
        self.faults = Faults.draw(self.rng)
        self.now = 0
        self.seq = 0
        self.events: list[_Event] = []
        self.checker = Checker(self._fail)
        self.cut: set[tuple[NodeId, NodeId]] = set()
        self.healing = False
        self.proposed = 0
        self.read_seq = 0
        self.reads: dict[bytes, int] = {}  # context -> max applied index when issued
        self.stats: dict[str, int] = {}
        self.small_batches = "small_batches" in self.faults
        # 1 byte: one entry per AppendEntries, the schedule that exposes Figure 8.
        self.batch_bytes_max = self.rng.choice([1, 64]) if self.small_batches else 1 << 20
        n_voters = self.rng.choice([1, 3, 3, 5, 5])
        n_total = min(6, n_voters + (2 if "membership" in self.faults else 0))
        initial = ConfState(frozenset(NodeId(i) for i in range(1, n_voters + 1)))
        self.nodes: dict[NodeId, SimNode] = {}
        for i in range(1, n_total + 1):
            nid = NodeId(i)
            st = MemoryStorage(initial if nid in initial.voters else ConfState())
            self.nodes[nid] = SimNode(nid, SimDisk(st))
            if "clock_skew" in self.faults:
                # Up to 3x apart: a slow-clocked deposed leader outlives the others' timeouts.
                self.nodes[nid].tick_units = self.rng.randint(6, 18)
            self._restart(self.nodes[nid])

    # ------------------------------------------------------------------ plumbing
    def repro(self) -> str:
        return f"python scripts/sim.py raft --seed {self.seed} --steps {self.steps}"

    def _fail(self, msg: str) -> None:
        raise SimulationFailure(f"seed {self.seed} t={self.now}: {msg}", self.repro())

    def _log(self, msg: str) -> None:
        if self.verbose:
            print(f"t={self.now:6d} {msg}")

    def _at(self, delay: int, kind: str, *args: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, _Event(self.now + delay, self.seq, kind, args))

    def _count(self, k: str) -> None:
        self.stats[k] = self.stats.get(k, 0) + 1

    def _config(self, nid: NodeId) -> Config:
        return Config(
            id=nid,
            election_timeout_ticks=ELECTION_TIMEOUT_TICKS,
            heartbeat_interval_ticks=2,
            max_entries_bytes_per_msg=self.batch_bytes_max,
            max_inflight_msgs=2 if self.small_batches else 16,
        )

    # ------------------------------------------------------------------ node lifecycle
    def _restart(self, node: SimNode) -> None:
        node.view = node.disk.durable.copy()
        node.incarnation += 1
        node.busy = False
        core_rng = random.Random(self.rng.random())
        node.core = RaftCore(self._config(node.id), node.view, core_rng)
        node.sm_index, node.sm_hash = sm_from_snapshot(node.view.snapshot())
        if node.core.log.committed < node.disk.synced_hard_state.commit:
            self._fail(
                f"node {node.id} restarted with commit {node.core.log.committed} below its "
                f"synced commit {node.disk.synced_hard_state.commit}"
            )
        if node.core.term < node.disk.synced_hard_state.term:
            self._fail(f"node {node.id} restarted with a term below its synced term")
        node.last_commit = node.core.log.committed
        node.was_leader_term = -1
        node.ticks = 0
        node.heard_tick = {}
        self._at(self.rng.randrange(node.tick_units) + 1, "tick", node.id, node.incarnation)
        self._log(f"n{node.id} up (incarnation {node.incarnation}) {node.core!r}")

    def _crash(self, node: SimNode) -> None:
        node.disk.crash(self.rng, "torn_writes" in self.faults)
        node.core = None
        node.view = None
        node.busy = False
        self._log(f"n{node.id} CRASH")
        self._count("crashes")

    # ------------------------------------------------------------------ the Ready loop
    def _drive(self, node: SimNode) -> None:
        """Take a Ready if the node is idle; write it; sync now or after a disk latency."""
        c = node.core
        if c is None or node.busy or not c.has_ready():
            return
        rd = c.ready()
        assert node.view is not None
        self.checker.on_persist(node, rd.entries)
        _persist_ready(node.view, rd)
        # Three writes in the contract's order (snapshot, entries, hard state): a torn tail
        # may keep a prefix of them.
        if rd.snapshot is not None:
            node.disk.write(lambda st, snap=rd.snapshot: st.apply_snapshot(snap))  # type: ignore[misc]
        if rd.entries:
            node.disk.write(lambda st, ents=rd.entries: st.append(ents))  # type: ignore[misc]
        if rd.hard_state is not None:
            node.disk.write(lambda st, hs=rd.hard_state: st.set_hard_state(hs))  # type: ignore[misc]
        if rd.must_sync:
            node.busy = True
            self._at(self.rng.randint(1, 4), "synced", node.id, node.incarnation, rd)
        else:
            self._finish_ready(node, rd)

    def _finish_ready(self, node: SimNode, rd: Ready) -> None:
        c = node.core
        assert c is not None
        if rd.must_sync:
            node.disk.sync()
        for m in rd.messages:
            self._send(m)
        if rd.snapshot is not None:
            self.checker.on_install_snapshot(node, rd.snapshot)
        for e in rd.committed_entries:
            self.checker.on_apply(node, e)
        for rs in rd.read_states:
            issued = self.reads.pop(rs.context, None)
            if issued is not None and rs.index < issued:
                self._fail(
                    f"read-index: node {node.id} got read index {rs.index} for a read issued "
                    f"after index {issued} was applied (stale read)"
                )
            self._count("reads")
        c.advance(rd)
        node.busy = False

    # ------------------------------------------------------------------ network
    def _send(self, m: Message) -> None:
        self.checker.on_send(m)
        f = self.faults
        if not self.healing and self.rng.random() < f.loss_rate:
            return
        copies = 2 if (not self.healing and self.rng.random() < f.duplicate_rate) else 1
        delay_max = 2 if self.healing else f.delay_units_max  # healed: prompt and in order
        for _ in range(copies):
            self._at(self.rng.randint(1, delay_max), "deliver", m)

    def _deliver(self, m: Message) -> None:
        node = self.nodes.get(m.dst)
        if node is None or node.core is None or (m.src, m.dst) in self.cut:
            return
        node.heard_tick[m.src] = node.ticks
        try:
            node.core.step(m)
        except InvalidMessageError as e:
            self._fail(f"an honest message was refused: {e}")
        self._count("delivered")
        if isinstance(m, InstallSnapshot | TimeoutNow):
            self._count(type(m).__name__)

    # ------------------------------------------------------------------ chaos
    def _chaos(self) -> None:
        r = self.rng.random()
        f = self.faults
        ids = sorted(self.nodes)
        if r < 0.45:
            self._propose()
        elif r < 0.55 and ("partition" in f or "asymmetric_partition" in f):
            self._partition(ids)
        elif r < 0.62 and ("crash" in f or "kill_leader" in f):
            self._crash_or_restart()
        elif r < 0.70 and "membership" in f:
            self._change_membership(ids)
        elif r < 0.78 and "snapshot" in f:
            self._snapshot(self.nodes[self.rng.choice(ids)])
        elif r < 0.83 and "transfer" in f:
            self._transfer()
        elif r < 0.93 and "read_index" in f:
            self._read()
        else:
            self._propose()

    def _crash_or_restart(self) -> None:
        """One crash step: restart a down node (more often than not), else crash the leader
        (with ``kill_leader``) or any node that is up."""
        up = [n for n in self.nodes.values() if n.up]
        down = [n for n in self.nodes.values() if not n.up]
        leader = self._leader()
        if down and (self.rng.random() < 0.6 or not up):
            self._restart(self.rng.choice(down))
        elif "kill_leader" in self.faults and leader is not None and self.rng.random() < 0.7:
            self._crash(leader)  # Jepsen's favourite: kill the leader mid-replication
        elif up:
            self._crash(self.rng.choice(up))

    def _transfer(self) -> tuple[SimNode, NodeId] | None:
        """Ask the leader to hand leadership to a voter drawn at random (itself included);
        the leader and the transferee, or None without a leader."""
        leader = self._leader()
        if leader is None or leader.core is None:
            return None
        to = self.rng.choice(sorted(leader.core.conf.voters))
        leader.core.transfer_leadership(to)
        self._log(f"transfer n{leader.id} -> n{to}")
        self._drive(leader)
        return leader, to

    def _partition(self, ids: list[NodeId]) -> None:
        if self.cut and self.rng.random() < 0.5:
            self.cut = set()
            self._log("partition healed")
            return
        leader = self._leader()
        if leader is not None and self.rng.random() < 0.3:
            side = {leader.id}  # isolate the leader: it must stop serving, others elect anew
        else:
            side = {n for n in ids if self.rng.random() < 0.5}
        asym = "asymmetric_partition" in self.faults and (
            "partition" not in self.faults or self.rng.random() < 0.5
        )
        self.cut = set()
        for a in side:
            for b in ids:
                if b not in side:
                    self.cut.add((a, b))
                    if not asym:
                        self.cut.add((b, a))
        self._log(f"partition {sorted(side)} | rest {'one-way' if asym else ''}")
        self._count("partitions")

    def _leader(self) -> SimNode | None:
        best: SimNode | None = None
        for n in self.nodes.values():
            if (
                n.core is not None
                and n.core.is_leader
                and (best is None or (best.core is not None and n.core.term > best.core.term))
            ):
                best = n
        return best

    def _propose(self) -> None:
        leader = self._leader()
        if leader is None or leader.core is None:
            return
        self.proposed += 1
        try:
            leader.core.propose(b"v%d" % self.proposed)
            self._count("proposals")
        except (NotLeaderError, ProposalDroppedError):
            return
        self._drive(leader)

    def _change_membership(self, ids: list[NodeId]) -> None:
        leader = self._leader()
        if leader is None or leader.core is None:
            return
        cs = leader.core.conf
        choices: list[ConfChange] = []
        for n in ids:
            if n in cs.voters and len(cs.voters) > 1:
                choices.append(ConfChange(ConfChangeKind.REMOVE_NODE, n))
                choices.append(ConfChange(ConfChangeKind.ADD_OBSERVER, n))
            elif n in cs.observers:
                choices.append(ConfChange(ConfChangeKind.ADD_VOTER, n))
            elif n not in cs.voters:
                choices.append(ConfChange(ConfChangeKind.ADD_OBSERVER, n))
                choices.append(ConfChange(ConfChangeKind.ADD_VOTER, n))
        if not choices:
            return
        cc = self.rng.choice(choices)
        try:
            leader.core.propose_conf_change(cc)
        except (ConfChangeError, ProposalDroppedError):
            return
        self._log(f"conf change at n{leader.id}: {cc.kind.name} n{cc.node_id}")
        self._count("conf_changes")
        self._drive(leader)

    def _snapshot(self, node: SimNode) -> None:
        c = node.core
        if c is None or node.busy or c.log.has_pending_snapshot():
            return
        assert node.view is not None
        applied = c.log.applied
        if applied != node.sm_index:
            self._fail(
                f"node {node.id}: core applied {applied} but state machine at {node.sm_index}"
            )
        if applied <= node.view.snapshot().index:
            return
        data = sm_snapshot_data(node.sm_index, node.sm_hash)
        cs = c.applied_conf
        _snapshot_and_compact(node.view, applied, cs, data)
        node.disk.write(lambda st: _snapshot_and_compact(st, applied, cs, data))
        self._log(f"n{node.id} snapshot+compact at {applied}")
        self._count("snapshots")

    def _read(self) -> None:
        up = [n for n in self.nodes.values() if n.core is not None]
        if not up:
            return
        leaders = sorted(
            (n for n in up if n.core is not None and n.core.is_leader),
            key=lambda n: n.core.term if n.core is not None else 0,
        )
        # Half the time ask the oldest leader: if it was deposed, a read must not be stale.
        node = leaders[0] if leaders and self.rng.random() < 0.5 else self.rng.choice(up)
        assert node.core is not None
        self.read_seq += 1
        ctx = b"r%d" % self.read_seq
        try:
            node.core.read_index(ctx)
        except NotLeaderError:
            return
        self.reads[ctx] = self.checker.max_applied
        self._drive(node)

    # ------------------------------------------------------------------ checks
    def _check_committed_entry_cannot_be_lost(self) -> None:
        """No node lacking the last applied entry could ever be elected.

        Raft's leader completeness, checked before it is too late: if a node n without a
        committed entry e could gather a majority of its configuration's voters whose
        durable logs (what survives a crash) are no more up to date than n's, some future
        election could make n leader and e would be overwritten (Figure 8). Applied entries
        are committed, and the last applied one implies all before it (log matching).
        """
        i = self.checker.max_applied
        if i == 0:
            return
        t = self.checker.applied_term[i]
        for n in self.nodes.values():
            c = n.core
            if c is None or i < c.log.first_index() or c.log.term(LogIndex(i)) == t:
                continue
            if not c.promotable():
                continue
            n_last = (c.log.last_term(), c.log.last_index())
            grant = []
            for v in c.conf.voters:
                if v == n.id:
                    grant.append(v)
                    continue
                vn = self.nodes.get(v)
                if vn is None:
                    continue
                d = vn.disk.durable
                if (d.term(d.last_index()), d.last_index()) <= n_last:
                    grant.append(v)
            if len(grant) >= len(c.conf.voters) // 2 + 1:
                self._fail(
                    f"committed entry ({i}, {t}) can be lost: n{n.id} (last {n_last}) lacks it "
                    f"and voters {sorted(grant)} of {sorted(c.conf.voters)} would elect it"
                )

    def _check_leader_heard_from_quorum(self, node: SimNode) -> None:
        """Check-quorum (KAFKA-15489): a leader cut off from a majority of voters steps down within
        an election timeout (of its own ticks) of last hearing from them."""
        c = node.core
        if c is None or not c.is_leader:
            return
        window = ELECTION_TIMEOUT_TICKS + 1
        if c.conf_index != node.conf_index_seen:
            # A new voter gets an election timeout of grace, as at the start of a term.
            node.conf_index_seen = c.conf_index
            node.leader_since_tick = max(node.leader_since_tick, node.ticks - 1)
        if node.ticks - node.leader_since_tick <= window:
            return
        heard = sum(
            1
            for v in c.conf.voters
            if v == node.id or node.ticks - node.heard_tick.get(v, -(10**9)) <= window
        )
        if heard < len(c.conf.voters) // 2 + 1:
            self._fail(
                f"check-quorum: n{node.id} still leads term {c.term} but has heard from only "
                f"{heard} of {sorted(c.conf.voters)} in {window} ticks"
            )

    def _check_nodes(self) -> None:
        self._check_committed_entry_cannot_be_lost()
        for node in self.nodes.values():
            c = node.core
            if c is None:
                continue
            if c.log.committed < node.last_commit:
                self._fail(
                    f"node {node.id} commit went back {node.last_commit} -> {c.log.committed}"
                )
            node.last_commit = c.log.committed
            if c.is_leader and node.was_leader_term != c.term:
                node.was_leader_term = c.term
                node.leader_since_tick = node.ticks
                self._log(f"n{node.id} LEADER term {c.term}")
                self.checker.on_leader(node)
                self._count("elections")

    # ------------------------------------------------------------------ run
    def _event(self, ev: _Event) -> None:
        self.now = ev.time
        k = ev.kind
        if k == "tick":
            nid, inc = ev.args
            node = self.nodes[nid]
            if node.core is None or node.incarnation != inc:
                return
            node.core.tick()
            node.ticks += 1
            self._check_leader_heard_from_quorum(node)
            self._at(node.tick_units, "tick", nid, inc)
            self._drive(node)
        elif k == "deliver":
            (m,) = ev.args
            self._deliver(m)
            self._drive(self.nodes[m.dst])
        elif k == "synced":
            nid, inc, rd = ev.args
            node = self.nodes[nid]
            if node.core is None or node.incarnation != inc:
                return  # crashed before the sync completed: the write may be lost
            self._finish_ready(node, rd)
            self._drive(node)
        elif k == "chaos" and not self.healing:
            self._chaos()
            self._at(self.rng.randint(1, 2 * TICK_UNITS), "chaos")
        self._check_nodes()

    def run(self) -> dict[str, Any]:
        self._log(
            f"seed {self.seed} faults {sorted(self.faults.enabled)} nodes {sorted(self.nodes)}"
        )
        self._at(1, "chaos")
        for _ in range(self.steps):
            self._event(heapq.heappop(self.events))
        self._heal()
        self._liveness()
        return {
            "seed": self.seed,
            "faults": sorted(self.faults.enabled),
            "time_ticks": self.now // TICK_UNITS,
            "applied": self.checker.max_applied,
            **self.stats,
        }

    def _heal(self) -> None:
        self.healing = True
        self.cut = set()
        for node in self.nodes.values():
            if not node.up:
                self._restart(node)
        self._log("HEAL: partitions removed, nodes restarted, no loss, duplication or reordering")

    def _liveness(self) -> None:
        deadline = self.now + LIVENESS_TICKS_MAX * TICK_UNITS
        target: bytes | None = None
        start = self.checker.max_applied
        while self.now < deadline:
            self._event(heapq.heappop(self.events))
            leader = self._leader()
            if leader is not None and leader.core is not None and target is None:
                try:
                    self.proposed += 1
                    target = b"live%d" % self.proposed
                    leader.core.propose(target)
                    self._drive(leader)
                    target_index = leader.core.log.last_index()
                    target_term = leader.core.term
                except (NotLeaderError, ProposalDroppedError):
                    target = None
                    continue
            if target is not None:
                # Done once the target (or, if that term ended, a later entry) is applied.
                if self.checker.max_applied >= target_index and self.checker.max_applied > start:
                    if self.checker.applied_term.get(target_index) == target_term:
                        return
                    target = None  # overwritten by a new leader: propose again
                elif leader is None or leader.core is None or leader.core.term != target_term:
                    target = None
        self._fail(
            f"liveness: no proposal committed within {LIVENESS_TICKS_MAX} ticks after healing; "
            + self.describe()
        )

    def describe(self) -> str:
        """One line per node: role, term, vote, log and configuration."""
        out = []
        for n in self.nodes.values():
            c = n.core
            if c is None:
                out.append(f"\n  n{n.id}: down")
                continue
            out.append(
                f"\n  n{n.id}: {c.role.role.value} term={c.term} vote={c.vote} leader={c.leader}"
                f" last=({c.log.last_index()},{c.log.last_term()}) commit={c.log.committed}"
                f" voters={sorted(c.conf.voters)} observers={sorted(c.conf.observers)}"
                f"@{c.conf_index} elapsed={c.election_elapsed}"
            )
        return "".join(out)


def run_seed(seed: int, steps: int = DEFAULT_STEPS, verbose: bool = False) -> dict[str, Any]:
    """Run one seed; any failure (a broken property, or an exception such as a core
    ``InvariantError``) is raised as ``SimulationFailure`` carrying the reproduction line."""
    sim = Simulation(seed, steps, verbose=verbose)
    return run_guarded(sim, seed, lambda: f"t={sim.now}")


def run_guarded(sim: Any, seed: int, when: Callable[[], str]) -> dict[str, Any]:
    """``sim.run()``, with any exception that is not already a ``SimulationFailure`` (an
    ``InvariantError`` from a core, say) turned into one carrying ``sim.repro()``."""
    try:
        result: dict[str, Any] = sim.run()
        return result
    except SimulationFailure:
        raise
    except Exception as e:
        import traceback

        tb = "".join(traceback.format_exception(e)[-12:])
        raise SimulationFailure(
            f"seed {seed} {when()}: {type(e).__name__}: {e}\n{tb}", sim.repro()
        ) from e


def add_seed_arguments(p: argparse.ArgumentParser, steps_default: int = DEFAULT_STEPS) -> None:
    """The options of every simulator command line: which seeds, and how long each runs."""
    p.add_argument("--seed", type=int, required=True, help="first seed")
    p.add_argument("--seeds", type=int, default=1, help="how many seeds from --seed")
    p.add_argument("--steps", type=int, default=steps_default, help="events in the fault phase")


def run_seeds(
    run_one: Callable[[int], dict[str, Any]], first: int, count: int, *, verbose: bool
) -> int:
    """Run seeds ``first`` to ``first + count - 1``: a seed's summary as one JSON line when it
    is the only seed or ``verbose``, a failure as a ``FAIL`` line on stderr; how many failed."""
    failures = 0
    for seed in range(first, first + count):
        try:
            out = run_one(seed)
        except SimulationFailure as e:
            failures += 1
            print(f"FAIL {e}", file=sys.stderr)
            continue
        if count == 1 or verbose:
            print(json.dumps(out))
    return failures
