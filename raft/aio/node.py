"""``RaftNode``: the asyncio shell that runs one ``raft.core.RaftCore``.

Owns: the core (exactly one task, the *node task*, touches it: no locks), the durable log
(``raft.aio.durable_log``), the transport (``raft.aio.transport``), the clock that turns
into ``tick()`` calls, and the futures of callers waiting on proposals, reads and
membership changes. Does not own: the state machine (the ``on_commit`` / ``on_snapshot``
callbacks), the HTTP server (``add_routes`` puts the Raft route on the caller's app).

The node task's loop, one iteration::

    wait until: a tick is due, a message arrived, a proposal or an operation was queued
    tick() for every tick_ms elapsed
    step() every inbound message                (all that arrived since the last iteration)
    run queued operations                       (read_index, transfer, conf changes, ...)
    propose() every queued proposal             (many per iteration: they share one Ready)
    if has_ready():
        rd = ready()
        persist snapshot + entries + hard state, ONE fsync   (worker thread; the loop keeps
                                                              receiving meanwhile)
        send rd.messages                         (only now: they may acknowledge step above)
        queue rd.snapshot, then rd.committed_entries, for the apply task
        serve rd.read_states once applied
        advance(rd)

While a Ready is being persisted, new messages and proposals queue up and are all handled by
the next iteration, so under load one fsync covers many proposals (group commit).

The *apply task* hands what the node task queued to the state machine, in log order:
``on_snapshot(snapshot)``, ``on_commit(entries)``; then ``applied`` moves, proposals resolve
and reads waiting for that index are served. It is a task of its own, as etcd's server applies
on its own goroutine, so that a slow apply (an ``on_commit`` that waits, e.g. for a big entry
decoded in a worker thread) never holds up ticks, heartbeats and votes: before, a controller applying
an entry of 10,000 records sent no heartbeat and answered no append until it was done, and on
a loaded machine that outlasted the election timeout (finding 13). The core counts entries as
applied once handed over (etcd's "applying"); only this shell's ``applied`` says what the
state machine holds. At most ``apply_backlog_bytes_max`` of entries wait: past it the node
task waits for the apply task (memory stays bounded when apply is slower than commit).

Failure semantics for callers: ``propose`` raises ``NotLeaderError`` (with the leader's id
and URL when known) at once on a non-leader; if leadership is lost while a proposal is in
flight it raises ``NotLeaderError`` too, and the entry *may still commit* (as with any Raft
client, the outcome is then unknown; the metadata controller re-validates against its
image). ``read_index`` and ``transfer_leadership`` take a timeout.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import itertools
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from common.invariant import invariant
from common.waits import join_task
from raft import core as raft_core
from raft.aio.durable_log import DurableLog
from raft.aio.transport import RaftTransport
from raft.core import (
    ConfChangeError,
    Config,
    InvalidMessageError,
    ProposalDroppedError,
    RaftCore,
    Ready,
)
from raft.messages import Message, message_from_wire
from raft.types import (
    NO_NODE,
    ConfChange,
    ConfChangeKind,
    ConfState,
    Entry,
    EntryKind,
    LogIndex,
    NodeId,
    Role,
    Snapshot,
    SnapshotMetadata,
    Term,
    TraceEvent,
)
from storage.fileio import FileLayer

log = logging.getLogger(__name__)
# The core's transitions (role, term, votes, transfers, configuration), one line each as
# etcd-raft logs them. The core does no I/O, so it hands them to this shell to log.
core_log = logging.getLogger("raft.core")


def _log_transition(event: TraceEvent) -> None:
    core_log.info("%s", event)  # formatted only if INFO is enabled for raft.core


__all__ = [
    "ConfChangeError",
    "NodeStatus",
    "NotLeaderError",
    "ProposalDroppedError",
    "RaftNode",
    "RaftNodeConfig",
]


class NotLeaderError(Exception):
    """This node is not the leader. ``leader_id`` 0 and ``leader_url`` None: unknown."""

    def __init__(self, leader_id: int, leader_url: str | None, detail: str = "") -> None:
        who = f"{leader_id} at {leader_url}" if leader_id else "unknown"
        super().__init__(f"not the leader (leader is {who}){': ' + detail if detail else ''}")
        self.leader_id = leader_id
        self.leader_url = leader_url


class NodeStoppedError(Exception):
    """The node was stopped while the caller waited."""


OnCommit = Callable[[list[Entry]], Awaitable[None] | None]
OnSnapshot = Callable[[Snapshot], Awaitable[None] | None]


@dataclass(frozen=True)
class RaftNodeConfig:
    """One node's settings. Times are in ticks of ``tick_ms``.

    Default failover: a follower campaigns after a randomized 10-20 ticks without hearing
    from the leader (0.5-1.0 s at 50 ms), then pre-vote and vote take two round trips, so a
    new leader commits within about 1.1 s of the old one's last heartbeat.
    """

    node_id: int
    data_dir: str
    voters: Mapping[int, str]
    """Initial voters (id -> base URL) when bootstrapping a new cluster; also addresses."""
    observers: Mapping[int, str] = field(default_factory=dict)
    """Initial observers when bootstrapping; also addresses."""
    peers: Mapping[int, str] = field(default_factory=dict)
    """More addresses (nodes added later). Every member must be addressable."""
    join: bool = False
    """Start with an empty configuration and learn it from the leader (a node being added)."""
    tick_ms: int = 50
    election_timeout_ticks: int = 10
    heartbeat_interval_ticks: int = 2
    """100 ms at 50 ms ticks: five heartbeats in the shortest election timeout (etcd sends
    one per tenth of it). Heartbeats carry only liveness: a commit that advances is sent to
    the followers at once. Every tick cost an idle quorum a sixth of a core between three
    controllers (40 HTTP requests a second from the leader), against 12% at every other."""
    pre_vote: bool = True
    check_quorum: bool = True
    fsync: bool = True
    max_inflight_msgs: int = 4
    """Appends in flight per follower. Small on purpose: while the window is full, new
    proposals accumulate and the next append carries all of them (batching)."""
    max_entries_bytes_per_msg: int = 1 << 20
    max_apply_bytes: int | None = 8 << 20
    proposals_per_iteration_max: int = 2000
    """Proposals handed to the core per loop iteration: bounds the time between ticks and
    between receiving messages when clients flood the leader (the core spends ~10-20 us
    per proposal), so heartbeats keep flowing under load."""
    seed: int | None = None
    """Seed for the election-timeout jitter (None: from os.urandom)."""
    apply_backlog_bytes_max: int = 64 << 20
    """Committed entries' bytes handed to the apply task and not applied yet, past which the
    node task waits for it (see the module docstring)."""


@dataclass(frozen=True)
class FollowerStatus:
    node_id: int
    match: int
    next: int
    state: str
    is_observer: bool
    recent_active: bool
    last_contact_ms: float | None
    """ms since a message from it arrived (None: never)."""


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    role: str
    term: int
    vote: int
    leader_id: int
    leader_url: str | None
    commit: int
    applied: int
    first_index: int
    last_index: int
    snapshot_index: int
    voters: tuple[int, ...]
    observers: tuple[int, ...]
    followers: tuple[FollowerStatus, ...]
    fsyncs: int

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "followers"}
        d["voters"] = list(self.voters)
        d["observers"] = list(self.observers)
        d["followers"] = [f.__dict__ for f in self.followers]
        return d


@dataclass
class _Pending:
    """Callers waiting for indexes [first, last] proposed in ``term`` to commit."""

    first: LogIndex
    last: LogIndex
    term: Term
    fut: asyncio.Future[list[int]]
    error: Exception | None = None


class RaftNode:
    """One Raft node: see the module docstring. Create, ``add_routes(app)``, ``start()``."""

    def __init__(
        self,
        config: RaftNodeConfig,
        *,
        on_commit: OnCommit | None = None,
        on_snapshot: OnSnapshot | None = None,
        file_layer: FileLayer | None = None,
    ) -> None:
        self.config = config
        self.id = NodeId(config.node_id)
        self._on_commit = on_commit
        self._on_snapshot = on_snapshot
        self.addresses: dict[int, str] = {
            **dict(config.peers),
            **dict(config.observers),
            **dict(config.voters),
        }
        self.transport = RaftTransport(
            config.node_id,
            {i: u for i, u in self.addresses.items() if i != config.node_id},
            self._on_messages,
            on_unreachable=self._on_unreachable,
        )
        self.durable = DurableLog(config.data_dir, fsync=config.fsync, file_layer=file_layer)
        self.core: RaftCore | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._inbox: list[Message] = []
        self._proposals: list[tuple[list[bytes], asyncio.Future[list[int]]]] = []
        self._ops: list[Callable[[RaftCore], None]] = []
        self._pending: dict[LogIndex, _Pending] = {}
        self._reads: dict[bytes, asyncio.Future[int]] = {}
        self._read_ids = itertools.count(1)
        self._waiting_reads: list[tuple[LogIndex, asyncio.Future[int]]] = []
        self._apply_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._leader_waiters: list[asyncio.Future[int]] = []
        self._last_contact: dict[int, float] = {}
        self._snapshot_requests: list[Snapshot] = []
        self._snapshot_done: list[asyncio.Future[None]] = []
        self._apply_queue: collections.deque[Snapshot | list[Entry]] = collections.deque()
        """Handed to the apply task, not applied yet, in log order."""
        self._apply_backlog_bytes = 0
        """Bytes of the entries in ``_apply_queue``."""
        self._apply_wake = asyncio.Event()
        """Set when the apply task has work."""
        self._apply_error: BaseException | None = None
        """Why the apply task died; the node task raises it (fail-stop)."""
        self._stopping = False
        self.applied = LogIndex(0)
        self.role = Role.FOLLOWER
        self.leader_id = NO_NODE
        self.on_proposal_committed: Callable[[float], None] | None = None
        """Told the seconds from each accepted proposal to its commit and apply (the
        controller's commit latency histogram); None: nothing measured."""

    # ------------------------------------------------------------------ lifecycle

    def add_routes(self, app: web.Application) -> None:
        """Put the internal Raft route on the node's own aiohttp app."""
        self.transport.add_routes(app)

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The node loop, once started (the process watches it: ``common.essential``)."""
        return self._task

    async def start(self) -> None:
        """Recover from disk (or bootstrap) and start the node task."""
        cfg = self.config
        bootstrap = (
            ConfState()
            if cfg.join
            else ConfState(
                frozenset(NodeId(i) for i in cfg.voters),
                frozenset(NodeId(i) for i in cfg.observers),
            )
        )
        await asyncio.to_thread(self.durable.open, bootstrap)
        mem = self.durable.memory
        seed = cfg.seed if cfg.seed is not None else int.from_bytes(os.urandom(8), "big")
        self.core = RaftCore(
            Config(
                id=self.id,
                election_timeout_ticks=cfg.election_timeout_ticks,
                heartbeat_interval_ticks=cfg.heartbeat_interval_ticks,
                pre_vote=cfg.pre_vote,
                check_quorum=cfg.check_quorum,
                max_entries_bytes_per_msg=cfg.max_entries_bytes_per_msg,
                max_inflight_msgs=cfg.max_inflight_msgs,
                max_apply_bytes=cfg.max_apply_bytes,
            ),
            mem,
            random.Random(seed),
            trace=_log_transition,
        )
        snap = mem.snapshot()
        self.applied = snap.index
        if not snap.is_empty() and self._on_snapshot is not None:
            await _maybe_await(self._on_snapshot(snap))
        hs, _ = mem.initial_state()
        log.info(
            "raft node %d: recovered term %d vote %d commit %d, log [%d, %d], snapshot %d",
            self.id,
            hs.term,
            hs.vote,
            hs.commit,
            mem.first_index(),
            mem.last_index(),
            snap.index,
        )
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"raft-node-{self.id}"
        )

    async def stop(self) -> None:
        """Stop the node task, fail every waiter, close transport and log."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            await join_task(self._task)
            self._task = None
        self._fail_all(NodeStoppedError("raft node stopped"))
        await self.transport.close()
        await asyncio.to_thread(self.durable.close)

    # ------------------------------------------------------------------ public API

    def propose(self, data: bytes) -> Awaitable[int]:
        """Append ``data`` as one entry; resolves with its index once committed and applied."""
        fut = self._propose_many([data])

        async def one() -> int:
            return (await fut)[0]

        return one()

    async def propose_many(self, datas: Sequence[bytes]) -> list[int]:
        """Each of ``datas`` as its own entry (in order, consecutive indexes); one wait."""
        if not datas:
            return []
        return await self._propose_many(list(datas))

    def _propose_many(self, datas: list[bytes]) -> asyncio.Future[list[int]]:
        fut: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        if self._stopping:
            fut.set_exception(NodeStoppedError("raft node stopped"))
        elif self.role is not Role.LEADER:
            fut.set_exception(self._not_leader())
        else:
            self._proposals.append((datas, fut))
            self._wake.set()
            observe = self.on_proposal_committed
            if observe is not None:
                t0 = time.monotonic()

                def done(f: asyncio.Future[list[int]]) -> None:
                    if not f.cancelled() and f.exception() is None:
                        observe(time.monotonic() - t0)

                fut.add_done_callback(done)
        return fut

    async def read_index(self, timeout_s: float | None = None) -> int:
        """Linearizable read barrier (Raft thesis §6.4): returns an index ``i`` such that
        the state machine, once it has applied ``i`` (this call waits for that), reflects
        every write committed before the call. Works on followers too (asks the leader).
        """
        timeout_s = timeout_s if timeout_s is not None else self._election_timeout_s() * 2
        ctx = f"{self.id}:{next(self._read_ids)}".encode()
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._reads[ctx] = fut

        def op(core: RaftCore) -> None:
            try:
                core.read_index(ctx)
            except raft_core.NotLeaderError:
                self._reads.pop(ctx, None)
                if not fut.done():
                    fut.set_exception(self._not_leader())

        self._queue_op(op)
        try:
            # Not wait_for: on 3.11 it can swallow a cancellation that comes as fut resolves.
            async with asyncio.timeout(timeout_s):
                return await fut
        finally:
            self._reads.pop(ctx, None)

    async def transfer_leadership(self, to: int, timeout_s: float | None = None) -> None:
        """Hand leadership to voter ``to`` (thesis §3.10); returns once it leads."""
        timeout_s = timeout_s if timeout_s is not None else self._election_timeout_s() * 2
        deadline = time.monotonic() + timeout_s

        def op(core: RaftCore) -> None:
            with contextlib.suppress(raft_core.NotLeaderError):
                core.transfer_leadership(NodeId(to))

        self._queue_op(op)
        while self.leader_id != to:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"leadership did not move to {to} within {timeout_s} s")
            await self._leader_news(remaining)

    async def add_voter(self, node_id: int, url: str) -> int:
        """Add ``node_id`` (or promote an observer) as a voter; resolves when committed."""
        return await self._conf_change(ConfChangeKind.ADD_VOTER, node_id, url)

    async def add_observer(self, node_id: int, url: str) -> int:
        """Add a non-voting member that replicates the log (a broker, or a voter-to-be)."""
        return await self._conf_change(ConfChangeKind.ADD_OBSERVER, node_id, url)

    async def remove_voter(self, node_id: int) -> int:
        """Remove a member (voter or observer). A leader that removes itself resigns."""
        return await self._conf_change(ConfChangeKind.REMOVE_NODE, node_id, None)

    async def _conf_change(self, kind: ConfChangeKind, node_id: int, url: str | None) -> int:
        if self.role is not Role.LEADER:
            raise self._not_leader()
        if url is not None:
            self.addresses[node_id] = url
            self.transport.set_peer(node_id, url)
        fut: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()

        def op(core: RaftCore) -> None:
            try:
                idx = core.propose_conf_change(ConfChange(kind, NodeId(node_id)))
            except raft_core.NotLeaderError:
                fut.set_exception(self._not_leader())
                return
            except (ConfChangeError, ProposalDroppedError) as e:
                fut.set_exception(e)
                return
            self._pending[idx] = _Pending(idx, idx, core.term, fut)

        self._queue_op(op)
        return (await fut)[0]

    async def take_snapshot(self, data: bytes, index: int | None = None) -> Snapshot:
        """Record the state machine's snapshot as of ``index`` (default: ``applied``), write
        ``<index>-<term>.checkpoint`` and move the log start past it.

        ``data`` must be the state machine's state after applying exactly ``index``; with
        the default, call this outside ``on_commit`` (nothing is applied meanwhile).
        """
        fut: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
        at = LogIndex(index if index is not None else self.applied)

        def op(core: RaftCore) -> None:
            if at > self.applied or at <= self.durable.memory.snapshot().index:
                fut.set_exception(
                    ValueError(
                        f"snapshot index {at} must be in ({self.durable.memory.snapshot().index},"
                        f" applied={self.applied}]"
                    )
                )
                return
            # The configuration as of ``at``: the snapshot's, updated by every CONF_CHANGE
            # entry up to ``at`` (the core's own may already include later, appended ones).
            conf = self._conf_at(at)
            term = self.durable.memory.term(at)
            fut.set_result(Snapshot(SnapshotMetadata(at, term, conf), data))

        self._queue_op(op)
        snap = await fut
        self._snapshot_requests.append(snap)
        self._wake.set()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._snapshot_done.append(done)
        await done
        return snap

    def _conf_at(self, at: LogIndex) -> ConfState:
        mem = self.durable.memory
        conf = mem.snapshot().metadata.conf_state
        for e in mem.entries(mem.first_index(), LogIndex(at + 1), None):
            if e.kind is EntryKind.CONF_CHANGE:
                conf = ConfState.from_bytes(e.data)
        return conf

    async def wait_applied(self, index: int) -> None:
        if self.applied >= index:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._apply_waiters.append((index, fut))
        await fut

    async def _leader_news(self, timeout_s: float) -> None:
        """Return when the leader this node knows changes, or after ``timeout_s``."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._leader_waiters.append(fut)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await fut

    async def wait_leader(self, timeout_s: float = 10.0) -> int:
        """The leader's id once one is known (to this node)."""
        deadline = time.monotonic() + timeout_s
        while self.leader_id == NO_NODE:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no leader known within {timeout_s} s")
            await self._leader_news(remaining)
        return int(self.leader_id)

    def status(self) -> NodeStatus:
        core = self.core
        invariant(core is not None, "status() before start()")
        assert core is not None
        mem = self.durable.memory
        now = time.monotonic()
        followers = []
        if core.is_leader:
            for n in sorted(core.conf.members()):
                if n == self.id:
                    continue
                pr = core.progress(n)
                if pr is None:
                    continue
                seen = self._last_contact.get(n)
                followers.append(
                    FollowerStatus(
                        node_id=n,
                        match=pr.match,
                        next=pr.next,
                        state=pr.state.value,
                        is_observer=pr.is_observer,
                        recent_active=pr.recent_active,
                        last_contact_ms=None if seen is None else round((now - seen) * 1000, 1),
                    )
                )
        return NodeStatus(
            node_id=self.id,
            role=core.role.role.value,
            term=core.term,
            vote=core.vote,
            leader_id=core.leader,
            leader_url=self.addresses.get(core.leader),
            commit=core.log.committed,
            applied=self.applied,
            first_index=mem.first_index(),
            last_index=core.log.last_index(),
            snapshot_index=mem.snapshot().index,
            voters=tuple(sorted(core.conf.voters)),
            observers=tuple(sorted(core.conf.observers)),
            followers=tuple(followers),
            fsyncs=self.durable.stats.fsyncs,
        )

    # ------------------------------------------------------------------ inputs

    def _on_messages(self, sender: int, msgs: list[Any]) -> None:
        """Check one POST's messages and queue them all, or raise ``ValueError`` (the
        transport answers 400) and queue none: each must be well formed
        (``message_from_wire``), come from ``sender``, a node this one knows (a member, or a
        node whose address it was given: a voter being added, the leader of a joining
        node), be addressed to this node, and fit its log as it is now
        (``RaftCore.check_message``; ``step`` checks again, as the log may change before
        the message is stepped)."""
        if self._stopping:
            return
        core = self.core
        if sender == self.id or (
            sender not in self.addresses and (core is None or sender not in core.conf.members())
        ):
            raise InvalidMessageError(f"node {self.id} does not know node {sender}")
        checked: list[Message] = []
        for n, w in enumerate(msgs):
            try:
                m = message_from_wire(w)
                if m.src != sender or m.dst != self.id:
                    raise InvalidMessageError(
                        f"a message from {m.src} to {m.dst} in a POST from {sender} to {self.id}"
                    )
                if core is not None:
                    core.check_message(m)
            except ValueError as e:
                raise InvalidMessageError(f"message {n}: {e}") from None
            checked.append(m)
        self._last_contact[sender] = time.monotonic()
        self._inbox.extend(checked)
        self._wake.set()

    def _on_unreachable(self, peer: int) -> None:
        if not self._stopping:
            self._ops.append(lambda core: core.report_unreachable(NodeId(peer)))
            self._wake.set()

    def _queue_op(self, op: Callable[[RaftCore], None]) -> None:
        if self._stopping:
            raise NodeStoppedError("raft node stopped")
        self._ops.append(op)
        self._wake.set()

    def _not_leader(self, detail: str = "") -> NotLeaderError:
        lid = int(self.leader_id)
        return NotLeaderError(lid, self.addresses.get(lid) if lid else None, detail)

    def _election_timeout_s(self) -> float:
        return self.config.election_timeout_ticks * self.config.tick_ms / 1000

    # ------------------------------------------------------------------ the node task

    async def _run(self) -> None:
        core = self.core
        assert core is not None
        loop = asyncio.get_running_loop()
        tick_s = self.config.tick_ms / 1000
        next_tick = loop.time() + tick_s
        applier = loop.create_task(self._apply_loop(), name=f"raft-apply-{self.id}")
        try:
            while not self._stopping:
                if self._apply_error is not None:
                    raise self._apply_error
                if not (self._inbox or self._proposals or self._ops or self._snapshot_requests):
                    timer = loop.call_at(next_tick, self._wake.set)
                    await self._wake.wait()
                    timer.cancel()
                self._wake.clear()
                if self._stopping:
                    break
                now = loop.time()
                if now >= next_tick:
                    behind = int((now - next_tick) / tick_s) + 1
                    # After a long stall (GC, a slow disk) tick at most a few times at once,
                    # so that a stall alone does not look like a dead leader to everyone.
                    for _ in range(min(behind, 3)):
                        core.tick()
                    next_tick += behind * tick_s
                if self._inbox:
                    inbox, self._inbox = self._inbox, []
                    for m in inbox:
                        try:
                            core.step(m)
                        except InvalidMessageError as e:
                            # Checked on arrival; the log changed since (nothing stepped).
                            log.warning("raft node %d: dropping a message: %s", self.id, e)
                if self._ops:
                    ops, self._ops = self._ops, []
                    for op in ops:
                        op(core)
                if self._proposals:
                    self._propose_queued(core)
                if self._snapshot_requests:
                    await self._save_snapshots()
                if core.has_ready():
                    await self._handle_ready(core, core.ready())
        except Exception:
            log.exception("raft node %d: node task failed", self.id)
            self._fail_all(NodeStoppedError("raft node task failed"))
            raise
        finally:
            applier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await applier

    def _propose_queued(self, core: RaftCore) -> None:
        props = self._proposals
        limit = self.config.proposals_per_iteration_max
        taken = 0
        i = 0
        while i < len(props) and taken < limit:
            datas, fut = props[i]
            i += 1
            taken += len(datas)
            if fut.done():
                continue
            if not core.is_leader:
                fut.set_exception(self._not_leader())
                continue
            first: LogIndex | None = None
            last = LogIndex(0)
            dropped: Exception | None = None
            try:
                for d in datas:
                    last = core.propose(d)
                    if first is None:
                        first = last
            except ProposalDroppedError as e:
                dropped = e
            if first is None:
                fut.set_exception(dropped or ProposalDroppedError("nothing proposed"))
                continue
            # A batch cut short by a leadership transfer: wait for the part in the log,
            # then report the drop (the caller learns which part may have committed).
            self._pending[last] = _Pending(first, last, core.term, fut, dropped)
        del props[:i]
        if props:
            self._wake.set()

    async def _save_snapshots(self) -> None:
        reqs, self._snapshot_requests = self._snapshot_requests, []
        dones, self._snapshot_done = self._snapshot_done, []
        mem = self.durable.memory
        for snap in reqs:
            if snap.index <= mem.snapshot().index:
                continue
            await asyncio.to_thread(self.durable.save_snapshot, snap)
            mem.create_snapshot(snap.index, snap.metadata.conf_state, snap.data)
            mem.compact(snap.index)
        for d in dones:
            if not d.done():
                d.set_result(None)

    async def _handle_ready(self, core: RaftCore, rd: Ready) -> None:
        # 1. soft state
        if rd.soft_state is not None:
            self._on_soft_state(rd.soft_state.role, rd.soft_state.leader)
        # 2. persist (one fsync), then let the core read it back through the port
        if rd.entries or rd.snapshot is not None or rd.hard_state is not None:
            if (
                rd.entries
                or rd.snapshot is not None
                or (rd.hard_state is not None and self.durable.hard_state_save_due(rd.hard_state))
            ):
                await asyncio.to_thread(
                    self.durable.persist, rd.hard_state, rd.entries, rd.snapshot, rd.must_sync
                )
            self.durable.mirror_ready(rd.hard_state, rd.entries, rd.snapshot)
        # 3. send
        send = self.transport.send
        for m in rd.messages:
            send(m.dst, m.to_wire())
        # 4. apply: hand over to the apply task, in log order
        if rd.snapshot is not None:
            self._apply_queue.append(rd.snapshot)
            self._apply_wake.set()
        if rd.committed_entries:
            ents = list(rd.committed_entries)
            self._apply_queue.append(ents)
            self._apply_backlog_bytes += sum(len(e.data) for e in ents)
            self._apply_wake.set()
        # 5. reads
        for rs in rd.read_states:
            fut = self._reads.pop(rs.context, None)
            if fut is not None and not fut.done():
                self._waiting_reads.append((rs.index, fut))
        if self._waiting_reads or self._apply_waiters:
            self._release_applied()
        core.advance(rd)
        if self._apply_backlog_bytes > self.config.apply_backlog_bytes_max:
            await self._wait_apply_backlog()

    async def _wait_apply_backlog(self) -> None:
        """Wait until the apply task is below ``apply_backlog_bytes_max`` again (or died)."""
        while (
            self._apply_backlog_bytes > self.config.apply_backlog_bytes_max
            and self._apply_error is None
            and not self._stopping
        ):
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._apply_waiters.append((self.applied + 1, fut))
            with contextlib.suppress(NodeStoppedError):
                await fut

    async def _apply_loop(self) -> None:
        """The apply task: see the module docstring. Its failure (a state machine that
        cannot apply a committed entry) is the node task's: it stops the node."""
        queue = self._apply_queue
        try:
            while True:
                while not queue:
                    self._apply_wake.clear()
                    await self._apply_wake.wait()
                item = queue[0]
                if isinstance(item, Snapshot):
                    if self._on_snapshot is not None:
                        await _maybe_await(self._on_snapshot(item))
                    self.applied = item.index
                else:
                    if self._on_commit is not None:
                        await _maybe_await(self._on_commit(item))
                    self.applied = item[-1].index
                    self._apply_backlog_bytes -= sum(len(e.data) for e in item)
                    self._resolve_committed(item)
                queue.popleft()
                if self._waiting_reads or self._apply_waiters:
                    self._release_applied()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._apply_error = e
            self._wake.set()
            for _, fut in self._apply_waiters:  # the node task may wait in the backlog
                if not fut.done():
                    fut.set_result(None)

    def _resolve_committed(self, ents: list[Entry]) -> None:
        pending = self._pending
        if not pending:
            return
        for e in ents:
            p = pending.pop(e.index, None)
            if p is None:
                continue
            if p.fut.done():
                continue
            if e.term == p.term and p.error is not None:
                p.fut.set_exception(p.error)
            elif e.term == p.term:
                # Log matching: the entry at ``last`` is ours, so [first, last] are too.
                p.fut.set_result(list(range(p.first, p.last + 1)))
            else:
                p.fut.set_exception(
                    self._not_leader(f"entries {p.first}-{p.last} of term {p.term} were replaced")
                )

    def _release_applied(self) -> None:
        applied = self.applied
        keep_r = []
        for idx, fut in self._waiting_reads:
            if idx <= applied:
                if not fut.done():
                    fut.set_result(int(idx))
            else:
                keep_r.append((idx, fut))
        self._waiting_reads = keep_r
        keep_a = []
        for idx2, fut2 in self._apply_waiters:
            if idx2 <= applied:
                if not fut2.done():
                    fut2.set_result(None)
            else:
                keep_a.append((idx2, fut2))
        self._apply_waiters = keep_a

    def _on_soft_state(self, role: Role, leader: NodeId) -> None:
        was_leader = self.role is Role.LEADER
        self.role = role
        self.leader_id = leader
        log.info("raft node %d: %s, leader %d", self.id, role.value, leader)
        if was_leader and role is not Role.LEADER:
            # In-flight proposals may or may not commit: tell their callers we lost
            # leadership (outcome unknown) rather than leave them waiting.
            err = self._not_leader("leadership lost; the entries may still commit")
            for p in self._pending.values():
                if not p.fut.done():
                    p.fut.set_exception(err)
            self._pending.clear()
            for _, fut in self._proposals:
                if not fut.done():
                    fut.set_exception(err)
            self._proposals.clear()
        if leader != NO_NODE:
            waiters, self._leader_waiters = self._leader_waiters, []
            for f in waiters:
                if not f.done():
                    f.set_result(int(leader))

    def _fail_all(self, err: Exception) -> None:
        futs: list[asyncio.Future[Any]] = [p.fut for p in self._pending.values()]
        futs += [f for _, f in self._proposals]
        futs += list(self._reads.values())
        futs += [f for _, f in self._waiting_reads]
        futs += [f for _, f in self._apply_waiters]
        futs += self._leader_waiters
        futs += self._snapshot_done
        for f in futs:
            if not f.done():
                f.set_exception(err)
                f.exception()  # mark retrieved: nobody may be waiting any more
        self._pending.clear()
        self._proposals.clear()
        self._reads.clear()
        self._waiting_reads.clear()
        self._apply_waiters.clear()
        self._leader_waiters.clear()


async def _maybe_await(x: Awaitable[None] | None) -> None:
    if inspect.isawaitable(x):
        await x
