"""Deterministic simulation of the metadata quorum: Raft cores driving ``QuorumController``s,
with simulated brokers and clients (TigerBeetle VOPR / FoundationDB style, after Kafka's
``QuorumControllerIntegrationTest`` run under ``RaftEventSimulationTest``'s faults).

One seed fixes everything. A failure prints one line that reproduces it::

    python -m tests.sim.metadata_sim --seed 123 --steps 4000

Model
-----
* The Raft layer is ``tests.sim.raft_sim.Simulation`` (scheduler, network with loss,
  duplication, delay/reordering and partitions, disk that loses unsynced writes on a crash,
  restarts from durable state, clock skew, leadership transfers, snapshots), subclassed here.
  Its Raft checks (election safety, log matching, leader completeness, state machine safety,
  votes, commit monotonicity) keep running. Membership changes are off: 3 or 5 voters.
* Every node runs the glue that ships: ``metalog.driver.ControllerDriver``, the sans-IO core
  of ``metalog/service.py``, decides how committed entries are replayed (one command's
  records are one Raft entry, dense metadata offsets, entries without records take none),
  when the controller activates (after a read-index barrier and applying up to
  ``activation_index``, if the node still leads that term) and stands by (``stale_controller``,
  or a failed proposal), what a command proposes and what it answers. The simulator plays
  the part of the service's asyncio shell and of ``RaftNode``: it calls the driver's ``tick``
  every node tick (100 ms, the service's poll interval), issues the read-index barrier (5 s
  timeout), fails in-flight proposals when leadership is lost, and refuses a command sent to
  a node that is not serving with ``NotControllerError`` naming the Raft leader.
  Snapshots hold ``encode_snapshot(image)``; a restarted or lagging node restores the image
  through the driver. (The Raft snapshot bytes carry the simulator's chain hash, which its
  checker needs; the image bytes sit in a side table keyed by snapshot index, checked equal
  for every node that snapshots at that index.)
* Time: 1 unit = 10 ms, a tick = 10 units = 100 ms (election timeout 1 s). Brokers heartbeat
  every 2 s of sim time; the controller's session timeout is 9 s (KRaft's defaults).
* 4-6 brokers register, heartbeat (reporting the metadata offset of the controller node they
  talk to), die (stop sending), shut down cleanly (``want_shutdown`` heartbeats until told to
  stop), and come back as a new incarnation. A broker that believes it leads a partition (in
  the image of the node it talks to, possibly stale) sends AlterPartition ISR shrinks and
  expands with the epochs it sees. Clients create topics (1-3 partitions, RF 2-3, some with
  unclean leader election on) and delete them, from a small pool of names, so names are
  reused with new topic ids; they toggle unclean election and ask for preferred elections.
  Requests and responses cross the same lossy network; a broker follows the leader hint of a
  ``NotControllerError`` and tries another node when a request goes unanswered.

Checked after every event (exact message on failure, then the reproduction line)
------------------------------------------------------------------------------
1. Committed only: a node's image is rebuilt only by replaying committed entries (its applied
   index never exceeds its commit index; the Raft checker proves the entries are the
   committed ones) and nodes at the same applied Raft index have byte-identical images
   (blake2b of ``encode_snapshot``), the same metadata offset and the same snapshot bytes.
2. Partitions, in every node's committed image: ISR within the replicas, empty only without
   a leader; ELR outside the ISR, last known ELR outside both (KIP-966); the leader is -1 or
   an ISR member that is usable (registered, unfenced, not shutting down); leader = -1 only
   if no ISR member is usable and, with an empty ISR, no ELR member is. Dead brokers are only known dead through
   their session: for the active controller A, a dead broker whose last session refresh on A
   (registration or heartbeat handled by A, or A's activation, whichever is later) was at t is
   fenced in A's *latest* image (committed + proposed) by t + 9 s + one tick of A; with the
   invariant above, every partition it led has by then a new leader or, when no ISR member is
   usable, leader -1.
3. Per node and topic id: leader epoch and partition epoch never decrease; every change of a
   registration bumps the partition epoch, every change of leader bumps the leader epoch; a
   deleted topic id never reappears. Across nodes and restarts, a partition's epochs are
   monotonic in the Raft index at which they were seen.
4. Broker epochs: a broker's epoch equals the metadata offset of its RegisterBrokerRecord;
   an epoch names one (broker, incarnation) cluster-wide; per node a broker's epoch never
   decreases; a registration response carries the committed epoch.
5. Activation: an active controller leading its epoch has applied every entry before its
   term's first entry; records are proposed only into the Raft term equal to the epoch of
   the controller that decided them (the controller epoch is the Raft term).

Liveness, after healing (network prompt and lossless, all controllers up, every broker but
at most one alive): within 60 s an active controller exists, every live broker is unfenced
and the dead one fenced in the active controller's image (the dead one within 9 s + 2 s of
its last session refresh); then a topic creation sent to the active controller commits and is
answered within 3 s; then within 5 s every node has applied it with an identical image, and
every partition with a live ISR member (or, its ISR empty, a live ELR member) has a live
leader on every node, as has every partition awaiting an unclean recovery that does not wait
for the dead broker (brokers report made-up log ends in their heartbeats; the controller's
``balanced`` recovery waits for its last known ELR, or all its replicas).

Brokers that complete a controlled shutdown come back with the clean-shutdown marker
(``previous_broker_epoch``); those that die come back without. Some topics have
``min.insync.replicas`` 2, so their ELR holds more than the last ISR member.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from metalog.commands import (
    AlterConfigs,
    AlterPartition,
    BrokerHeartbeat,
    Command,
    CreateTopic,
    DeleteTopic,
    ElectionType,
    ElectLeaders,
    IsrMember,
    PartitionStateChange,
    RegisterBroker,
    ReplicaLogInfo,
)
from metalog.controller import ControllerConfig, QuorumController
from metalog.delta import encode_snapshot
from metalog.driver import ControllerDriver
from metalog.errors import (
    BrokerIdNotRegisteredError,
    MetadataError,
    NotControllerError,
    StaleBrokerEpochError,
    TopicExistsError,
)
from metalog.image import MetadataImage
from metalog.records import (
    NO_LEADER,
    BrokerEpoch,
    BrokerId,
    ConfigResourceType,
    Endpoint,
    LeaderEpoch,
    PartitionEpoch,
    RegisterBrokerRecord,
    TopicId,
)
from metalog.responses import (
    AlterPartitionResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    CreateTopicResponse,
)
from raft.core import NotLeaderError, ProposalDroppedError, Ready
from raft.storage_port import MemoryStorage
from raft.types import ConfState, LogIndex, NodeId
from tests.sim.raft_sim import (
    TICK_UNITS,
    Checker,
    Faults,
    SimDisk,
    SimNode,
    Simulation,
    SimulationFailure,
    _Event,
    add_seed_arguments,
    run_guarded,
    run_seeds,
)

MS_PER_UNIT = 10
HEARTBEAT_INTERVAL_MS = 2_000
SESSION_TIMEOUT_MS = 9_000
ACTIVATION_TIMEOUT_MS = 5_000  # the service's read_index(timeout_s=5.0)
SNAPSHOT_RECORDS = 40  # the service's snapshot_records, scaled down
LIVENESS_MS = 60_000
CREATE_BOUND_MS = 3_000
CATCH_UP_BOUND_MS = 5_000
FENCE_SLACK_MS = 2_000  # liveness: a dead broker is fenced in the committed image by then
DEFAULT_STEPS = 4000
TOPIC_NAMES = ("orders", "clicks", "audit", "users", "events", "logs")
DISABLED_FAULTS = frozenset({"membership", "read_index"})


def repro_line(seed: int, steps: int, faults: frozenset[str] | None = None) -> str:
    extra = f" --faults {','.join(sorted(faults))}" if faults is not None else ""
    return f"python -m tests.sim.metadata_sim --seed {seed} --steps {steps}{extra}"


# ------------------------------------------------------------------------------ actors
@dataclass
class InFlight:
    """A proposal awaiting its entry's commit, as ``RaftNode`` tracks one: it resolves when
    the entry at its index commits in the term it was proposed in, and fails otherwise."""

    term: int
    on_commit: Callable[[int], None]  # given the entry's Raft index
    on_fail: Callable[[], None]


@dataclass
class MetaNode(SimNode):
    """A controller node: the Raft node of ``raft_sim`` running the service's glue
    (``metalog.driver.ControllerDriver``); this class holds what the asyncio shell would."""

    driver: ControllerDriver | None = None  # None while the node is down
    proposals: dict[int, InFlight] = field(default_factory=dict)
    activation_ctx: bytes = b""
    activation_started_ms: int = 0
    active_since_ms: int | None = None
    refreshed_ms: dict[BrokerId, int] = field(default_factory=dict)  # session refresh times
    # Per-incarnation history for the monotonicity checks.
    seen_partitions: dict[tuple[TopicId, int], Any] = field(default_factory=dict)
    seen_broker_epochs: dict[BrokerId, int] = field(default_factory=dict)
    deleted_topics: set[TopicId] = field(default_factory=set)
    checked_parts: tuple[Any, Any] | None = None
    digest_key: tuple[Any, ...] | None = None
    digest_body: bytes = b""

    @property
    def ctl(self) -> QuorumController | None:
        return None if self.driver is None else self.driver.controller

    @property
    def ctl_index(self) -> int:
        """Raft index the controller's image stands for."""
        assert self.driver is not None
        return self.driver.applied_index

    @property
    def next_offset(self) -> int:
        """Metadata offset of the next committed record."""
        assert self.driver is not None
        return self.driver.next_offset


@dataclass
class Request:
    src: str  # "b<id>" or "client"
    rid: int
    cmd: Command
    sent_ms: int
    incarnation: int = 0


@dataclass
class SimBroker:
    id: BrokerId
    target: NodeId
    alive: bool = False
    incarnation: int = 0
    epoch: int | None = None
    gen: int = 0
    awaiting: int | None = None  # rid of the last request not yet answered
    shutdown_by_ms: int | None = None  # in controlled shutdown: dies by then regardless
    offset_seen: int = -1
    clean_epoch: int | None = None
    """The epoch of the incarnation whose controlled shutdown completed, for the next one's
    registration (the clean-shutdown marker, KIP-966); None after a death."""
    previous_epoch: int | None = None  # what this incarnation registers with

    @property
    def incarnation_id(self) -> str:
        return f"b{self.id}-inc{self.incarnation}"


# ------------------------------------------------------------------------------ simulation
class MetadataSimulation(Simulation):
    def __init__(
        self, seed: int, steps: int, *, verbose: bool = False, faults: frozenset[str] | None = None
    ) -> None:
        super().__init__(seed, steps, verbose=verbose)
        # Rebuild the cluster as controller nodes (the raft simulation's own nodes go).
        f = self.faults
        self.faults_override = faults
        if faults is None:
            self.faults = Faults(
                f.enabled - DISABLED_FAULTS, f.loss_rate, f.duplicate_rate, f.delay_units_max
            )
        else:
            self.faults = Faults(
                faults,
                loss_rate=0.05 if "loss" in faults else 0.0,
                duplicate_rate=0.05 if "duplicate" in faults else 0.0,
                delay_units_max=30 if "reorder" in faults else 2,
            )
        self.events = []
        self.checker = Checker(self._fail)
        self.ctl_config = ControllerConfig(
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            noop_interval_ms=500,
            leader_imbalance_check_interval_ms=self.rng.choice([10_000, 30_000]),
        )
        self.snap_images: dict[int, bytes] = {}
        self.digest_at: dict[int, tuple[int, int, bytes, NodeId]] = {}
        self.epoch_owner: dict[int, tuple[BrokerId, str]] = {}
        self.topic_names: dict[TopicId, str] = {}
        self.partition_at: dict[tuple[TopicId, int], tuple[int, Any]] = {}
        self.digest_every_entry = False
        self.rid = 0
        self.requests_sent = 0
        self.responses: dict[int, Any] = {}
        self.live_create: tuple[int, NodeId, int] | None = None  # rid, node, sent_ms
        n_voters = self.rng.choice([3, 3, 3, 5])
        initial = ConfState(frozenset(NodeId(i) for i in range(1, n_voters + 1)))
        self.nodes = {}
        for i in range(1, n_voters + 1):
            nid = NodeId(i)
            node = MetaNode(nid, SimDisk(MemoryStorage(initial)))
            if "clock_skew" in self.faults:
                node.tick_units = self.rng.randint(6, 18)
            self.nodes[nid] = node
            self._restart(node)
        self.brokers: dict[BrokerId, SimBroker] = {}
        for i in range(1, self.rng.randint(4, 6) + 1):
            b = SimBroker(BrokerId(100 + i), target=self.rng.choice(sorted(self.nodes)))
            self.brokers[b.id] = b
            self._broker_up(b)
        self.client_target = self.rng.choice(sorted(self.nodes))

    # ------------------------------------------------------------------ plumbing
    def repro(self) -> str:
        return repro_line(self.seed, self.steps, self.faults_override)

    def _fail(self, msg: str) -> None:
        raise SimulationFailure(f"seed {self.seed} t={self.now_ms} ms: {msg}", self.repro())

    @property
    def now_ms(self) -> int:
        return self.now * MS_PER_UNIT

    def _meta(self, nid: NodeId) -> MetaNode:
        node = self.nodes[nid]
        assert isinstance(node, MetaNode)
        return node

    def _metas(self) -> list[MetaNode]:
        return [n for n in self.nodes.values() if isinstance(n, MetaNode)]

    # ------------------------------------------------------------------ node lifecycle
    def _restart(self, node: SimNode) -> None:
        super()._restart(node)
        if not isinstance(node, MetaNode):
            return
        assert node.view is not None
        node.driver = ControllerDriver(QuorumController(node.id, self.ctl_config))
        node.proposals = {}
        node.active_since_ms = None
        node.refreshed_ms = {}
        node.seen_partitions = {}
        node.seen_broker_epochs = {}
        node.deleted_topics = set()
        node.checked_parts = None
        snap = node.view.snapshot()
        if not snap.is_empty():
            self._restore(node, snap.index)

    def _restore(self, node: MetaNode, index: int) -> None:
        data = self.snap_images.get(index)
        if data is None:
            self._fail(f"n{node.id}: no metadata image was saved for the snapshot at {index}")
        assert data is not None and node.driver is not None
        node.driver.restore(index, data)
        self._on_image(node)

    def _crash(self, node: SimNode) -> None:
        super()._crash(node)
        if isinstance(node, MetaNode):
            node.driver = None
            node.proposals = {}  # callers never hear back: they time out

    # ------------------------------------------------------------------ the Ready loop
    def _finish_ready(self, node: SimNode, rd: Ready) -> None:
        """What ``RaftNode`` does after persisting and sending, for the service's callbacks
        (``on_snapshot``, ``on_commit``), then the service's activation on read states."""
        super()._finish_ready(node, rd)  # sync, send, Raft checks, advance
        if not isinstance(node, MetaNode) or node.driver is None:
            return
        c, driver = node.core, node.driver
        assert c is not None
        if not c.is_leader and node.proposals:
            # RaftNode fails in-flight proposals when leadership is lost; the service's
            # callers then stand by.
            props, node.proposals = node.proposals, {}
            driver.on_proposal_failed()
            node.active_since_ms = None
            for p in props.values():
                p.on_fail()
        if rd.snapshot is not None:
            self._restore(node, rd.snapshot.index)
        for e in rd.committed_entries:
            applied = driver.apply_entry(e)
            if applied is not None:
                for i, r in enumerate(applied.records):
                    if isinstance(r, RegisterBrokerRecord):
                        self._check_registration(node, r, applied.base_offset + i)
            prop = node.proposals.pop(e.index, None)
            if prop is not None:
                if prop.term == e.term:
                    prop.on_commit(e.index)
                else:
                    prop.on_fail()
            if self.digest_every_entry:
                self._on_image(node)
        if rd.committed_entries and not self.digest_every_entry:
            self._on_image(node)
        for rs in rd.read_states:
            term = driver.activating_term
            if rs.context == node.activation_ctx and term is not None:
                driver.on_read_index(term, rs.index, c.log.last_index())
        self._maybe_activate(node)

    def _maybe_activate(self, node: MetaNode) -> None:
        """The end of the service's ``_activate``, once the barrier's index is applied."""
        c, driver = node.core, node.driver
        if c is None or driver is None:
            return
        term = driver.activating_term
        if not driver.maybe_activate(self.now_ms, is_leader=c.is_leader, term=c.term):
            return
        # Rule 5: everything before this term's first entry is applied.
        nxt = LogIndex(node.ctl_index + 1)
        if nxt <= c.log.last_index() and c.log.term(nxt) != term:
            self._fail(
                f"activation: n{node.id} becomes active in term {term} at applied index "
                f"{node.ctl_index}, but entry {nxt} is of term {c.log.term(nxt)}"
            )
        node.active_since_ms = self.now_ms
        self._log(f"n{node.id} ACTIVE controller epoch {term} at offset {node.next_offset - 1}")
        self._count("activations")

    def _controller_tick(self, node: MetaNode) -> None:
        """The service's ``_tick`` (its poll interval is one tick here)."""
        c, driver = node.core, node.driver
        assert c is not None and driver is not None
        now = self.now_ms
        tick = driver.tick(now, is_leader=c.is_leader, term=c.term)
        if tick.stood_by_from is not None:
            node.active_since_ms = None
            self._log(f"n{node.id} standby")
        if tick.activate_term is not None:
            node.activation_started_ms = now
            node.activation_ctx = b"activate/%d/%d/%d" % (node.id, node.incarnation, c.term)
            c.read_index(node.activation_ctx)
        term = driver.activating_term
        if (
            term is not None
            and driver.activation_index is None
            and now - node.activation_started_ms > ACTIVATION_TIMEOUT_MS
        ):
            driver.abandon_activation(term)  # read_index timed out; retried on the next tick
        if tick.data is not None:
            self._propose_entry(node, tick.data, lambda index: None, lambda: None)
        if driver.snapshot_due(SNAPSHOT_RECORDS):
            self._snapshot(node)
        self._drive(node)

    def _propose_entry(
        self,
        node: MetaNode,
        data: bytes,
        on_commit: Callable[[int], None],
        on_fail: Callable[[], None],
    ) -> None:
        """``RaftNode.propose`` and the service's handling of its failure."""
        c, driver = node.core, node.driver
        assert c is not None and driver is not None
        ctl = driver.controller
        if c.is_leader and ctl.controller_epoch != c.term:
            # The controller epoch is the Raft term (as KRaft's): records decided by the
            # controller of an older term may rest on an image that misses what other
            # leaders committed since.
            self._fail(
                f"epoch: n{node.id} proposes records decided by its controller of epoch "
                f"{ctl.controller_epoch} into Raft term {c.term} (applied index "
                f"{node.ctl_index}, commit {c.log.committed})"
            )
        try:
            idx = c.propose(data)
        except (NotLeaderError, ProposalDroppedError):
            driver.on_proposal_failed()
            node.active_since_ms = None
            on_fail()
            return
        node.proposals[idx] = InFlight(c.term, on_commit, on_fail)
        self._drive(node)

    def _snapshot(self, node: SimNode) -> None:
        if isinstance(node, MetaNode) and node.ctl is not None and node.core is not None:
            if node.busy or node.core.log.has_pending_snapshot():
                return
            if node.ctl_index != node.core.log.applied:
                self._fail(
                    f"n{node.id}: controller at {node.ctl_index}, Raft applied "
                    f"{node.core.log.applied}"
                )
            data = encode_snapshot(node.ctl.image)
            got = self.snap_images.setdefault(node.ctl_index, data)
            if got != data:
                self._fail(
                    f"snapshot divergence: n{node.id}'s image at Raft index "
                    f"{node.ctl_index} differs from another node's snapshot there"
                )
        super()._snapshot(node)

    # ------------------------------------------------------------------ requests
    def _send_request(self, req: Request, to: NodeId) -> None:
        self.requests_sent += 1
        self._net("req", to, req)

    def _net(self, kind: str, *args: Any) -> None:
        f = self.faults
        if not self.healing and self.rng.random() < f.loss_rate:
            return
        copies = 2 if (not self.healing and self.rng.random() < f.duplicate_rate) else 1
        delay_max = 2 if self.healing else f.delay_units_max
        for _ in range(copies):
            self._at(self.rng.randint(1, delay_max), kind, *args)

    def _handle_request(self, node: MetaNode, req: Request) -> None:
        """The service's ``execute``."""
        c, driver = node.core, node.driver
        assert c is not None and driver is not None

        def reply(resp: Any) -> None:
            self._net("resp", req, resp, node.id)

        if not driver.serving(c.is_leader, c.term):
            err = NotControllerError(f"node {node.id} is not the active controller")
            err.leader_id = int(c.leader)  # type: ignore[attr-defined]
            reply(err)
            return
        try:
            proposal = driver.handle(req.cmd, self.now_ms)
        except MetadataError as e:
            reply(e)
            return
        if isinstance(req.cmd, RegisterBroker | BrokerHeartbeat):
            node.refreshed_ms[req.cmd.broker_id] = self.now_ms
        if proposal.data is None:
            reply(proposal.result.response)
            return

        def committed(index: int) -> None:
            resp = driver.response(proposal, index)
            if isinstance(resp, BrokerRegistrationResponse):
                self._check_registration_response(node, req, resp)
            reply(resp)

        self._propose_entry(
            node,
            proposal.data,
            committed,
            lambda: reply(NotControllerError("leadership lost while committing")),
        )

    # ------------------------------------------------------------------ brokers
    def _broker_up(self, b: SimBroker) -> None:
        b.alive = True
        b.incarnation += 1
        b.previous_epoch, b.clean_epoch = b.clean_epoch, None
        b.epoch = None
        b.gen += 1
        b.awaiting = None
        b.shutdown_by_ms = None
        self._log(f"broker {b.id} up as {b.incarnation_id}")
        self._at(self.rng.randint(1, HEARTBEAT_INTERVAL_MS // MS_PER_UNIT), "btimer", b.id, b.gen)

    def _broker_down(self, b: SimBroker) -> None:
        b.alive = False
        b.gen += 1
        self._log(f"broker {b.id} DIES ({b.incarnation_id}, epoch {b.epoch})")
        self._count("broker_deaths")

    def _broker_timer(self, b: SimBroker) -> None:
        if b.awaiting is not None:  # unanswered: try another node
            b.target = self.rng.choice(sorted(self.nodes))
        self.rid += 1
        node = self.nodes[b.target]
        if isinstance(node, MetaNode) and node.ctl is not None:
            b.offset_seen = max(b.offset_seen, node.next_offset - 1)
        cmd: Command
        if b.epoch is None:
            cmd = RegisterBroker(
                broker_id=b.id,
                incarnation_id=b.incarnation_id,
                endpoints=(Endpoint("http", "127.0.0.1", 9000 + b.id),),
                previous_broker_epoch=BrokerEpoch(
                    -1 if b.previous_epoch is None else b.previous_epoch
                ),
            )
        else:
            if b.shutdown_by_ms is not None and self.now_ms >= b.shutdown_by_ms:
                self._broker_down(b)  # controlled shutdown took too long: just stop
                return
            cmd = BrokerHeartbeat(
                broker_id=b.id,
                broker_epoch=BrokerEpoch(b.epoch),
                current_metadata_offset=b.offset_seen,
                want_shutdown=b.shutdown_by_ms is not None,
                replica_logs=self._replica_logs(b),
            )
        b.awaiting = self.rid
        self._send_request(Request(f"b{b.id}", self.rid, cmd, self.now_ms, b.incarnation), b.target)
        if b.epoch is not None and self.rng.random() < 0.5:
            self._alter_partition(b)
        self._at(HEARTBEAT_INTERVAL_MS // MS_PER_UNIT, "btimer", b.id, b.gen)

    def _replica_logs(self, b: SimBroker) -> tuple[ReplicaLogInfo, ...]:
        """Where this broker's replicas of partitions awaiting an unclean recovery end, in
        the image of the node it talks to. The simulator keeps no logs: a made-up end,
        a function of the broker and the partition only (no draw from the seed's generator),
        so the controller's choice is exercised without changing any run's schedule."""
        node = self.nodes[b.target]
        if not isinstance(node, MetaNode) or node.ctl is None:
            return ()
        out = []
        for t, p, reg in sorted(
            node.ctl.image.topics.partitions(), key=lambda tpr: (tpr[0].topic_id, tpr[1])
        ):
            if b.id in reg.replicas and reg.leader == NO_LEADER and not reg.isr and not reg.elr:
                out.append(
                    ReplicaLogInfo(
                        topic_id=t.topic_id,
                        partition=p,
                        partition_epoch=PartitionEpoch(reg.partition_epoch),
                        last_leader_epoch=LeaderEpoch(reg.leader_epoch - b.id % 2),
                        log_end_offset=(b.id * 7 + p) % 11,
                    )
                )
        if out:
            self._count("replica_log_reports")
        return tuple(out)

    def _alter_partition(self, b: SimBroker) -> None:
        """ISR changes as a partition leader would propose them, from a possibly stale view."""
        node = self.nodes[b.target]
        if not isinstance(node, MetaNode) or node.ctl is None or b.epoch is None:
            return
        view = node.ctl.image
        me = view.brokers.get(b.id)
        if me is None or me.broker_epoch != b.epoch:
            return
        changes = []
        # In a fixed order: the image iterates in hash order, which differs between processes
        # (PYTHONHASHSEED), and each partition draws from the seed's generator.
        in_order = sorted(view.topics.partitions(), key=lambda tpr: (tpr[0].topic_id, tpr[1]))
        for t, p, reg in in_order:
            if reg.leader != b.id or self.rng.random() < 0.5:
                continue
            isr = list(reg.isr)
            outside = [r for r in reg.replicas if r not in isr]
            if outside and (len(isr) == 1 or self.rng.random() < 0.5):
                isr.append(self.rng.choice(outside))  # a follower caught up (or so it seems)
            elif len(isr) > 1:
                isr.remove(self.rng.choice([r for r in isr if r != b.id]))  # lagging follower
            else:
                continue
            members = []
            for r in isr:
                rb = view.brokers.get(r)
                members.append(IsrMember(r, BrokerEpoch(rb.broker_epoch if rb else -1)))
            changes.append(
                PartitionStateChange(
                    t.topic_id, p, reg.leader_epoch, reg.partition_epoch, tuple(members)
                )
            )
        if changes:
            self.rid += 1
            cmd = AlterPartition(
                broker_id=b.id, broker_epoch=BrokerEpoch(b.epoch), partitions=tuple(changes)
            )
            self._send_request(
                Request(f"b{b.id}", self.rid, cmd, self.now_ms, b.incarnation), b.target
            )
            self._count("alter_partitions")

    def _on_response(self, req: Request, resp: Any, from_node: NodeId) -> None:
        self.responses[req.rid] = resp
        if isinstance(resp, NotControllerError):
            hint = getattr(resp, "leader_id", 0)
            target = NodeId(hint) if hint in self.nodes else self.rng.choice(sorted(self.nodes))
        else:
            target = from_node
        if req.src == "client":
            self.client_target = target
            if isinstance(resp, CreateTopicResponse):
                self._count("topics_created")
            return
        b = self.brokers[BrokerId(int(req.src[1:]))]
        if not b.alive or req.incarnation != b.incarnation:
            return
        b.target = target
        if req.rid == b.awaiting:
            b.awaiting = None
        if isinstance(resp, BrokerRegistrationResponse):
            if b.epoch is None or resp.broker_epoch > b.epoch:
                b.epoch = resp.broker_epoch
            self._count("registrations")
        elif isinstance(resp, BrokerHeartbeatResponse) and resp.should_shutdown:
            if b.shutdown_by_ms is not None:
                self._count("controlled_shutdowns")
                epoch = b.epoch
                self._broker_down(b)
                b.clean_epoch = epoch
        elif isinstance(resp, StaleBrokerEpochError | BrokerIdNotRegisteredError):
            if isinstance(req.cmd, BrokerHeartbeat) and req.cmd.broker_epoch == b.epoch:
                b.epoch = None  # register again
        elif isinstance(resp, AlterPartitionResponse):
            for r in resp.results:
                if r.error is None:
                    assert r.registration is not None
                    if r.registration.leader != b.id:
                        self._fail(
                            f"AlterPartition by {b.id} answered with leader "
                            f"{r.registration.leader} for {r.topic_id}-{r.partition}"
                        )
                    self._count("isr_changes")

    # ------------------------------------------------------------------ clients
    def _client_op(self) -> None:
        name = self.rng.choice(TOPIC_NAMES)
        cmd: Command
        r = self.rng.random()
        if r < 0.55:
            unclean = {"unclean.leader.election.enable": "true"} if self.rng.random() < 0.2 else {}
            partitions, rf = self.rng.randint(1, 3), self.rng.randint(2, 3)
            # Some topics keep an ELR above one member (min.insync.replicas 2), chosen from
            # the draws above so that every seed keeps the schedule it had.
            min_isr = {"min.insync.replicas": "2"} if rf == 3 and partitions != 2 else {}
            cmd = CreateTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=rf,
                configs={**unclean, **min_isr},
            )
        elif r < 0.85:
            cmd = DeleteTopic(name=name)
        elif r < 0.93:
            cmd = AlterConfigs(
                resource_type=ConfigResourceType.TOPIC,
                resource_name=name,
                ops={"unclean.leader.election.enable": self.rng.choice(["true", "false", None])},
            )
        else:
            cmd = ElectLeaders(election=ElectionType.PREFERRED)
        self.rid += 1
        target = (
            self.client_target if self.rng.random() < 0.8 else self.rng.choice(sorted(self.nodes))
        )
        self._send_request(Request("client", self.rid, cmd, self.now_ms), target)

    # ------------------------------------------------------------------ chaos
    def _chaos(self) -> None:
        r = self.rng.random()
        f = self.faults
        if "transfer_storm" in f and self.rng.random() < 0.3:
            leader = self._leader()
            if leader is not None and leader.core is not None:
                to = self.rng.choice(sorted(leader.core.conf.voters))
                if to != leader.id:
                    leader.core.transfer_leadership(to)
                    self._log(f"transfer n{leader.id} -> n{to} (storm)")
                    self._drive(leader)
                    self._at(self.rng.randint(1, 3), "transfer_back", to, leader.id, 20)
            return
        if r < 0.06:
            self._client_op()
        elif r < 0.075:
            b = self.brokers[self.rng.choice(sorted(self.brokers))]
            if b.alive and b.epoch is not None and self.rng.random() < 0.3:
                # Controlled shutdown (KIP-631): heartbeat want_shutdown until told to stop.
                b.shutdown_by_ms = b.shutdown_by_ms or self.now_ms + 10_000
            elif b.alive:
                self._broker_down(b)
            else:
                self._broker_up(b)
        elif r < 0.095 and ("partition" in f or "asymmetric_partition" in f):
            self._partition(sorted(self.nodes))
        elif r < 0.115 and ("crash" in f or "kill_leader" in f):
            self._crash_or_restart()
        elif r < 0.135 and "snapshot" in f:
            self._snapshot(self.nodes[self.rng.choice(sorted(self.nodes))])
        elif r < 0.145 and "transfer" in f:
            moved = self._transfer()
            if moved is not None:
                leader, to = moved
                if to != leader.id and self.rng.random() < 0.5:
                    # Hand it straight back once the transferee leads: the old leader may then
                    # lead again before its controller noticed it had lost leadership.
                    self._at(self.rng.randint(2, 12), "transfer_back", to, leader.id, 6)

    # ------------------------------------------------------------------ checks
    def _on_image(self, node: MetaNode) -> None:
        """Checks 1-4 on a node's committed image (after each applied batch)."""
        c, ctl = node.core, node.ctl
        assert c is not None and ctl is not None
        image = ctl.image
        idx = node.ctl_index
        if idx > c.log.committed:
            self._fail(
                f"committed only: n{node.id} applied index {idx} beyond its commit "
                f"{c.log.committed}"
            )
        if image.offset != node.next_offset - 1:
            self._fail(
                f"n{node.id}: image offset {image.offset} but {node.next_offset} "
                "records were replayed"
            )
        d = self._digest(node, image)
        got = self.digest_at.setdefault(idx, (*d, node.id))
        if got[:3] != d:
            self._fail(
                f"image divergence: n{node.id} and n{got[3]} both applied Raft index {idx} "
                f"but differ: n{node.id} (offset {d[0]}, epoch {d[1]}, digest {d[2].hex()}) vs "
                f"n{got[3]} (offset {got[0]}, epoch {got[1]}, digest {got[2].hex()})"
            )
        parts = (image.topics, image.brokers)
        if node.checked_parts is not None and all(
            a is b for a, b in zip(parts, node.checked_parts, strict=True)
        ):
            return
        node.checked_parts = parts
        self._check_partitions(node, image)
        self._check_broker_epochs(node, image)

    def _digest(self, node: MetaNode, image: MetadataImage) -> tuple[int, int, bytes]:
        key = (image.topics, image.brokers, image.configs, image.producer_ids, image.features)
        if node.digest_key is None or not all(
            a is b for a, b in zip(key, node.digest_key, strict=True)
        ):
            node.digest_key = key
            body = encode_snapshot(replace(image, offset=0, epoch=0))
            node.digest_body = hashlib.blake2b(body, digest_size=8).digest()
        return image.offset, image.epoch, node.digest_body

    def _check_partitions(self, node: MetaNode, image: MetadataImage) -> None:
        where = f"n{node.id} at Raft index {node.ctl_index}"
        live_tids = set()
        for t, p, reg in image.topics.partitions():
            tid = t.topic_id
            live_tids.add(tid)
            name = self.topic_names.setdefault(tid, t.name)
            if name != t.name:
                self._fail(f"{where}: topic id {tid} names {t.name!r}, elsewhere {name!r}")
            if tid in node.deleted_topics:
                self._fail(f"{where}: deleted topic {t.name} ({tid}) is back")
            tp = f"{t.name}-{p} ({tid})"
            if not set(reg.isr) <= set(reg.replicas) or (not reg.isr and reg.leader != NO_LEADER):
                self._fail(
                    f"{where}: {tp} ISR {reg.isr} not a subset of replicas "
                    f"{reg.replicas}, or empty with leader {reg.leader}"
                )
            if not set(reg.elr) <= set(reg.replicas) - set(reg.isr) or not set(
                reg.last_known_elr
            ) <= set(reg.replicas) - set(reg.isr) - set(reg.elr):
                self._fail(
                    f"{where}: {tp} ELR {reg.elr} / last known ELR "
                    f"{reg.last_known_elr} overlap ISR {reg.isr} or leave replicas "
                    f"{reg.replicas}"
                )
            usable_isr = [r for r in reg.isr if image.brokers.is_usable(r)]
            usable_elr = [r for r in reg.elr if image.brokers.is_usable(r)]
            if reg.leader == NO_LEADER:
                if usable_isr:
                    self._fail(
                        f"{where}: {tp} has no leader but ISR members {usable_isr} are "
                        f"usable (ISR {reg.isr})"
                    )
                if not reg.isr and usable_elr:
                    self._fail(
                        f"{where}: {tp} has no leader and no ISR but ELR members "
                        f"{usable_elr} are usable (ELR {reg.elr})"
                    )
            elif reg.leader not in reg.isr:
                self._fail(f"{where}: {tp} leader {reg.leader} not in ISR {reg.isr}")
            elif not image.brokers.is_usable(reg.leader):
                self._fail(
                    f"{where}: {tp} leader {reg.leader} is fenced, shutting down or "
                    f"unregistered: {image.brokers.get(reg.leader)}"
                )
            prev = node.seen_partitions.get((tid, p))
            if prev is not None:
                if reg.leader_epoch < prev.leader_epoch or (
                    reg.partition_epoch < prev.partition_epoch
                ):
                    self._fail(
                        f"{where}: {tp} epochs went back: leader epoch "
                        f"{prev.leader_epoch} -> {reg.leader_epoch}, partition epoch "
                        f"{prev.partition_epoch} -> {reg.partition_epoch}"
                    )
                if reg != prev and reg.partition_epoch == prev.partition_epoch:
                    self._fail(
                        f"{where}: {tp} changed {prev} -> {reg} without a partition epoch bump"
                    )
                if reg.leader != prev.leader and reg.leader_epoch == prev.leader_epoch:
                    self._fail(
                        f"{where}: {tp} leader {prev.leader} -> {reg.leader} without "
                        f"a leader epoch bump (still {reg.leader_epoch})"
                    )
                if (
                    node.id == min(self.nodes)
                    and reg.leader != NO_LEADER
                    and prev.leader == NO_LEADER
                ):
                    self._count(
                        "elected_from_elr"
                        if reg.leader in prev.elr
                        else "unclean_recoveries"
                        if not prev.isr and not prev.elr
                        else "elected_offline"
                    )
            node.seen_partitions[(tid, p)] = reg
            # Across nodes and restarts: epochs are monotonic in the Raft index.
            i = node.ctl_index
            far = self.partition_at.get((tid, p))
            if far is not None:
                lo, hi = (far, (i, reg)) if far[0] <= i else ((i, reg), far)
                if (
                    hi[1].leader_epoch < lo[1].leader_epoch
                    or hi[1].partition_epoch < lo[1].partition_epoch
                ):
                    self._fail(
                        f"{where}: {tp} has leader/partition epochs "
                        f"{hi[1].leader_epoch}/{hi[1].partition_epoch} at Raft index {hi[0]} "
                        f"but {lo[1].leader_epoch}/{lo[1].partition_epoch} at the earlier "
                        f"index {lo[0]}"
                    )
            if far is None or i > far[0]:
                self.partition_at[(tid, p)] = (i, reg)
        for tid, _p in list(node.seen_partitions):
            if tid not in live_tids and image.topics.get_by_id(tid) is None:
                node.deleted_topics.add(tid)
                del node.seen_partitions[(tid, _p)]

    def _check_broker_epochs(self, node: MetaNode, image: MetadataImage) -> None:
        for bid, reg in image.brokers.brokers.items():
            e = reg.broker_epoch
            if e < 0 or e > image.offset:
                self._fail(
                    f"n{node.id}: broker {bid} has epoch {e} outside [0, offset {image.offset}]"
                )
            owner = self.epoch_owner.setdefault(e, (bid, reg.incarnation_id))
            if owner != (bid, reg.incarnation_id):
                self._fail(
                    f"n{node.id}: broker epoch {e} names {bid}/{reg.incarnation_id} "
                    f"and also {owner[0]}/{owner[1]}"
                )
            prev = node.seen_broker_epochs.get(bid)
            if prev is not None and e < prev:
                self._fail(f"n{node.id}: broker {bid} epoch went back {prev} -> {e}")
            node.seen_broker_epochs[bid] = e

    def _check_registration(self, node: MetaNode, r: RegisterBrokerRecord, offset: int) -> None:
        assert node.ctl is not None
        reg = node.ctl.image.brokers.get(r.broker_id)
        if reg is None or reg.broker_epoch != offset:
            self._fail(
                f"n{node.id}: RegisterBrokerRecord of {r.broker_id} at offset {offset} "
                f"gave epoch {None if reg is None else reg.broker_epoch}"
            )

    def _check_registration_response(
        self, node: MetaNode, req: Request, resp: BrokerRegistrationResponse
    ) -> None:
        """Check 4: the epoch a broker is told is the one its committed record got."""
        assert node.ctl is not None and isinstance(req.cmd, RegisterBroker)
        reg = node.ctl.image.brokers.get(req.cmd.broker_id)
        if (
            reg is None
            or reg.broker_epoch != resp.broker_epoch
            or reg.incarnation_id != req.cmd.incarnation_id
        ):
            self._fail(
                f"registration of {req.cmd.incarnation_id} answered with epoch "
                f"{resp.broker_epoch} by n{node.id}, whose committed image has {reg}"
            )

    def _check_active_controllers(self) -> None:
        """Check 5 (an active leader has applied every entry of earlier terms in its log) and
        check 2's time bound on every active controller's latest image."""
        dead = [b for b in self.brokers.values() if not b.alive]
        for node in self._metas():
            ctl, c = node.ctl, node.core
            if ctl is None or c is None or not ctl.is_active:
                continue
            if c.is_leader and c.term != ctl.controller_epoch:
                self._count("active_in_older_epoch")
            if c.is_leader and c.term == ctl.controller_epoch:
                nxt = LogIndex(node.ctl_index + 1)
                if nxt <= c.log.last_index() and c.log.term(nxt) != c.term:
                    self._fail(
                        f"activation: n{node.id} is active in epoch {c.term} with applied "
                        f"index {node.ctl_index}, but entry {nxt} of term {c.log.term(nxt)} is "
                        "not applied yet (decisions on a stale image)"
                    )
            if not dead or node.active_since_ms is None:
                continue
            latest: MetadataImage | None = None
            for b in dead:
                refreshed = max(node.active_since_ms, node.refreshed_ms.get(b.id, 0))
                deadline = refreshed + SESSION_TIMEOUT_MS + node.tick_units * MS_PER_UNIT
                if self.now_ms <= deadline:
                    continue
                latest = latest or ctl.latest_image
                reg = latest.brokers.get(b.id)
                if reg is not None and reg.incarnation_id == b.incarnation_id and not reg.fenced:
                    self._fail(
                        f"session: broker {b.id} ({b.incarnation_id}) is dead, its session on "
                        f"active controller n{node.id} was last refreshed at {refreshed} ms, "
                        f"yet at {self.now_ms} ms it is still unfenced in n{node.id}'s latest "
                        f"image (bound: {SESSION_TIMEOUT_MS} ms + one tick)"
                    )

    def _check_nodes(self) -> None:
        super()._check_nodes()
        self._check_active_controllers()

    # ------------------------------------------------------------------ run
    def _event(self, ev: _Event) -> None:
        k = ev.kind
        if k == "tick":
            nid, inc = ev.args
            node = self._meta(nid)
            if node.core is not None and node.incarnation == inc:
                self.now = ev.time
                self._controller_tick(node)
            super()._event(ev)
            return
        if k not in ("req", "resp", "btimer", "transfer_back"):
            super()._event(ev)
            return
        self.now = ev.time
        if k == "req":
            nid, req = ev.args
            node = self._meta(nid)
            if node.core is not None and node.ctl is not None:
                self._handle_request(node, req)
        elif k == "resp":
            req, resp, from_node = ev.args
            self._on_response(req, resp, from_node)
        elif k == "transfer_back":
            frm, to, tries = ev.args
            n = self.nodes[frm]
            if n.core is not None and n.core.is_leader and not self.healing:
                n.core.transfer_leadership(to)
                self._log(f"transfer back n{frm} -> n{to}")
                self._count("transfers_back")
                self._drive(n)
            elif tries > 0:
                self._at(self.rng.randint(1, 4), "transfer_back", frm, to, tries - 1)
        elif k == "btimer":
            bid, gen = ev.args
            b = self.brokers[bid]
            if b.alive and b.gen == gen:
                self._broker_timer(b)
        self._check_nodes()

    def run(self) -> dict[str, Any]:
        self._log(
            f"seed {self.seed} faults {sorted(self.faults.enabled)} "
            f"nodes {sorted(self.nodes)} brokers {sorted(self.brokers)}"
        )
        self._at(1, "chaos")
        for _ in range(self.steps):
            self._event(self._pop())
        dead = self._heal_all()
        self._liveness_after_heal(dead)
        return {
            "seed": self.seed,
            "faults": sorted(self.faults.enabled),
            "nodes": len(self.nodes),
            "brokers": len(self.brokers),
            "time_s": self.now_ms // 1000,
            "applied": self.checker.max_applied,
            "requests": self.requests_sent,
            **self.stats,
        }

    def _pop(self) -> _Event:
        return heapq.heappop(self.events)

    def _heal_all(self) -> SimBroker | None:
        self._heal()
        dead: SimBroker | None = None
        for b in self.brokers.values():
            if b.alive and b.shutdown_by_ms is not None:
                self._broker_down(b)  # finish the controlled shutdown; it restarts below
        down = [b for b in self.brokers.values() if not b.alive]
        if down:
            dead = self.rng.choice(down)
        elif self.rng.random() < 0.5:
            dead = self.rng.choice(sorted(self.brokers.values(), key=lambda b: b.id))
            self._broker_down(dead)
        for b in self.brokers.values():
            if not b.alive and b is not dead:
                self._broker_up(b)
        self.digest_every_entry = True
        self._log(f"HEAL: brokers all up{'' if dead is None else f' but {dead.id}'}")
        return dead

    def _active(self) -> MetaNode | None:
        for n in self._metas():
            if n.ctl is not None and n.ctl.is_active and n.core is not None and n.core.is_leader:
                return n
        return None

    def _liveness_after_heal(self, dead: SimBroker | None) -> None:
        start = self.now_ms
        deadline = start + LIVENESS_MS
        phase = "settle"
        create_rid = 0
        create_node: MetaNode | None = None
        create_sent = 0
        caught_up_by = 0
        attempts = 0
        name = f"live-{self.seed}"
        while self.now_ms < deadline:
            self._event(self._pop())
            a = self._active()
            if phase == "settle":
                if a is None or a.ctl is None:
                    continue
                img = a.ctl.image
                ok = all(
                    (reg := img.brokers.get(b.id)) is not None
                    and reg.incarnation_id == b.incarnation_id
                    and not reg.fenced
                    for b in self.brokers.values()
                    if b.alive
                )
                if dead is not None:
                    reg = img.brokers.get(dead.id)
                    if reg is not None and not reg.fenced:
                        ok = False
                        assert a.active_since_ms is not None
                        since = max(a.active_since_ms, a.refreshed_ms.get(dead.id, 0))
                        if self.now_ms > since + SESSION_TIMEOUT_MS + FENCE_SLACK_MS:
                            self._fail(
                                f"liveness: dead broker {dead.id} not fenced in active n{a.id}'s "
                                f"committed image {self.now_ms - since} ms after its last "
                                f"session refresh (bound {SESSION_TIMEOUT_MS + FENCE_SLACK_MS})"
                            )
                if ok:
                    phase = "create"
            if phase == "create" and create_node is None:
                if a is None:
                    continue
                self.rid += 1
                attempts += 1
                create_rid, create_node, create_sent = self.rid, a, self.now_ms
                cmd = CreateTopic(name=name, num_partitions=3, replication_factor=2)
                self._send_request(Request("client", create_rid, cmd, self.now_ms), a.id)
            if phase == "create" and create_node is not None:
                resp = self.responses.get(create_rid)
                if isinstance(resp, CreateTopicResponse):
                    phase = "catch_up"
                    caught_up_by = self.now_ms + CATCH_UP_BOUND_MS
                elif resp is not None or self.now_ms > create_sent + CREATE_BOUND_MS:
                    if create_node is a and resp is None:
                        self._fail(
                            f"liveness: topic creation sent to active n{a.id} at "
                            f"{create_sent} ms not answered within {CREATE_BOUND_MS} ms"
                        )
                    if isinstance(resp, TopicExistsError) and attempts > 1:
                        phase = "catch_up"  # an earlier attempt committed after all
                        caught_up_by = self.now_ms + CATCH_UP_BOUND_MS
                        continue
                    if resp is not None and not isinstance(resp, NotControllerError):
                        self._fail(f"liveness: topic creation refused: {resp!r}")
                    create_node = None  # leadership moved: send again
            if phase == "catch_up":
                if self._caught_up(name, dead):
                    return
                if self.now_ms > caught_up_by:
                    self._fail(
                        f"liveness: {CATCH_UP_BOUND_MS} ms after topic {name} committed, "
                        f"nodes have not all applied it with live leaders: " + self._describe_meta()
                    )
        self._fail(
            f"liveness: not settled {LIVENESS_MS} ms after healing (phase {phase}); "
            + self._describe_meta()
        )

    def _caught_up(self, name: str, dead: SimBroker | None) -> bool:
        metas = self._metas()
        if any(n.ctl is None for n in metas) or len({n.ctl_index for n in metas}) != 1:
            return False
        for n in metas:
            assert n.ctl is not None
            img = n.ctl.image
            if img.topics.get(name) is None:
                return False
            for t, p, reg in img.topics.partitions():
                live_isr = [r for r in reg.isr if dead is None or r != dead.id]
                live_elr = [r for r in reg.elr if dead is None or r != dead.id]
                # Unclean recovery (balanced) waits for the last known ELR, or every replica.
                awaited = reg.last_known_elr or reg.replicas
                recoverable = (
                    not reg.isr and not reg.elr and (dead is None or dead.id not in awaited)
                )
                if (live_isr or (not reg.isr and live_elr) or recoverable) and (
                    reg.leader == NO_LEADER or (dead and reg.leader == dead.id)
                ):
                    return False
                if reg.isr and not live_isr and reg.leader != NO_LEADER:
                    self._fail(
                        f"n{n.id}: {t.name}-{p} led by {reg.leader} with only dead ISR {reg.isr}"
                    )
        self._count_offline(metas[0])
        return True

    def _count_offline(self, node: MetaNode) -> None:
        assert node.ctl is not None
        for _t, _p, reg in node.ctl.image.topics.partitions():
            if reg.leader == NO_LEADER:
                self._count("offline_partitions_at_end")

    def _describe_meta(self) -> str:
        out = [self.describe()]
        for n in self._metas():
            if n.ctl is not None:
                out.append(
                    f"\n  n{n.id}: applied {n.ctl_index} offset {n.next_offset - 1} "
                    f"active={n.ctl.is_active} epoch={n.ctl.controller_epoch}"
                )
        for b in self.brokers.values():
            out.append(
                f"\n  broker {b.id}: alive={b.alive} {b.incarnation_id} epoch={b.epoch} "
                f"target=n{b.target}"
            )
        return "".join(out)


def run_seed(
    seed: int,
    steps: int = DEFAULT_STEPS,
    verbose: bool = False,
    faults: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Run one seed; any failure (a broken property, or an exception such as an
    ``InvariantError`` from the controller or Raft) is raised as ``SimulationFailure``
    whose message ends with the one reproduction line. ``faults`` replaces the seed's drawn
    fault mix (``FAULT_KINDS`` of raft_sim plus ``transfer_storm``)."""
    sim = MetadataSimulation(seed, steps, verbose=verbose, faults=faults)
    return run_guarded(sim, seed, lambda: f"t={sim.now_ms} ms")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.sim.metadata_sim",
        description="Deterministic simulation of the metadata quorum.",
    )
    add_seed_arguments(p, steps_default=DEFAULT_STEPS)
    p.add_argument(
        "--faults",
        default=None,
        help="comma-separated fault kinds instead of the seed's draw (raft_sim's "
        "FAULT_KINDS, plus transfer_storm: leadership handed back and forth)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="trace events")
    a = p.parse_args(argv)
    faults = None if a.faults is None else frozenset(k for k in a.faults.split(",") if k)
    failures = run_seeds(
        lambda seed: run_seed(seed, a.steps, verbose=a.verbose, faults=faults),
        a.seed,
        a.seeds,
        verbose=a.verbose,
    )
    if a.seeds > 1:
        print(json.dumps({"seeds": a.seeds, "failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["DEFAULT_STEPS", "TICK_UNITS", "MetadataSimulation", "main", "run_seed"]
