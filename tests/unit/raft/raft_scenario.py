"""Scripted Raft scenarios: a small text format of steps and expected output, after
etcd-io/raft's data-driven tests (``testdata/*.txt`` run by ``rafttest/interaction_env.go``).

A script is a series of blocks; each is one command, a ``----`` line, and the output it must
print, up to a blank line. Lines starting with ``#`` (and blank lines) between blocks are
comments and are kept when the file is rewritten::

    # Node 1 wins an election.
    campaign 1
    ----
    INFO 1 became pre-candidate [term=0 last_index=0 last_term=0]
    ...

The output shows every Ready a node handles, every message delivered, and, as ``INFO``
lines where they happen, every transition the core traces (``raft.types.TraceEvent``). So
a script documents a scenario message by message, and a change of behaviour shows up as a
diff. ``LONGBOAT_REWRITE=1 pytest tests/unit/raft/test_raft_scenarios.py`` rewrites the
expected output in place (read the diff before committing it).

Commands (``<id>`` is a node id; ``[...]`` optional):

=========================================  ==============================================
add-nodes <n> [voters=(1,2,3)]             add n nodes with the next ids; options:
  [observers=(..)] [log=(1,1,2)]           ``log`` preloads entries of those terms at
  [pre-vote=b] [check-quorum=b]            1, 2, ... (stored term = the last); no
  [election=10] [heartbeat=1]              ``voters``: a node joining with an empty
  [max-msg-bytes=n] [max-inflight=n]       configuration
campaign <id>                              start an election now
propose <id> <data>                        propose a NORMAL entry
propose-conf-change <id> <kind> <node>     kind: add-voter, add-observer, remove
transfer-leadership <from> <to>            ask <from> to hand leadership to <to>
read-index <id> <context>                  ask for a linearizable read
tick <id> [<n>]                            tick <id> n times (default 1)
tick-election <id> / tick-heartbeat <id>   tick ``election`` times / ``heartbeat`` times
process-ready [<id>...]                    handle each node's Ready (persist, queue msgs)
deliver-msgs [<id>...]                     deliver the queued messages to these nodes
stabilize [<id>...]                        both, in rounds, until nothing is left
isolate <id> / cut <a> <b> / heal          drop messages on these links when delivered
compact <id>                               snapshot the state machine at the applied
                                           index and drop the log up to it
restart <id>                               a new core on what the node persisted
raft-state                                 role, term, vote, leader, commit, log, conf
status <id>                                the leader's progress for each follower
raft-log <id>                              the node's log (and snapshot)
applied [<id>...]                          each node's state machine (applied data)
=========================================  ==============================================

Elections start only where the script says ``campaign`` (what an election timeout does):
the injected rng makes every randomized timeout the longest, ``2 * election - 1`` ticks,
so ``tick-election`` (``election`` ticks) ends followers' leases and runs the leader's
check-quorum without starting an election. Nodes persist a Ready as soon as they handle
it; a ``restart`` loses only what was not yet handled.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from raft.core import ConfChangeError, Config, NotLeaderError, ProposalDroppedError, RaftCore
from raft.messages import Message
from raft.storage_port import MemoryStorage
from raft.types import (
    ConfChange,
    ConfChangeKind,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    LogIndex,
    NodeId,
    Snapshot,
    Term,
    TraceEvent,
)

REWRITE_ENV = "LONGBOAT_REWRITE"
CORE_ERRORS = (NotLeaderError, ProposalDroppedError, ConfChangeError, ValueError)


class LongestTimeoutRng:
    """The core's injected rng: every randomized election timeout is the longest, 2T - 1
    ticks, so ``tick-election`` (T ticks) ends a follower's leader lease and runs the
    leader's check-quorum without starting an election; ``campaign`` starts one."""

    def randrange(self, stop: int, /) -> int:
        return stop - 1


# ---------------------------------------------------------------------------- formatting
def fmt_ids(ids: frozenset[NodeId]) -> str:
    return "(" + " ".join(str(i) for i in sorted(ids)) + ")"


def fmt_conf(cs: ConfState) -> str:
    return f"voters={fmt_ids(cs.voters)} observers={fmt_ids(cs.observers)}"


def fmt_entry(e: Entry) -> str:
    if e.kind is EntryKind.CONF_CHANGE:
        return f"{e.index}@{e.term} conf {fmt_conf(ConfState.from_bytes(e.data))}"
    return f'{e.index}@{e.term} "{e.data.decode()}"'


def fmt_snapshot(s: Snapshot) -> str:
    return f"{s.index}@{s.term} {fmt_conf(s.metadata.conf_state)} data={s.data.decode()!r}"


def fmt_message(m: Message) -> str:
    """``src->dst Type field=value ...``: every field but those at their default."""
    parts = [f"{m.src}->{m.dst} {type(m).__name__}"]
    for f in dataclasses.fields(m):  # type: ignore[arg-type]
        if f.name in ("src", "dst"):
            continue
        v = getattr(m, f.name)
        if f.default is not dataclasses.MISSING and v == f.default:
            continue
        if isinstance(v, tuple):
            parts.append(f"{f.name}=[{', '.join(fmt_entry(e) for e in v)}]")
        elif isinstance(v, Snapshot):
            parts.append(f"{f.name}={fmt_snapshot(v)}")
        elif isinstance(v, bytes):
            parts.append(f'{f.name}="{v.decode()}"')
        else:
            parts.append(f"{f.name}={v}")
    return " ".join(parts)


# ---------------------------------------------------------------------------- the cluster
@dataclass
class ScenarioNode:
    core: RaftCore
    storage: MemoryStorage
    config: Config
    applied: list[str] = field(default_factory=list)  # the state machine: applied data


class Env:
    """The nodes, the message queue and the output of the command being run."""

    def __init__(self) -> None:
        self.nodes: dict[NodeId, ScenarioNode] = {}
        self.queue: list[Message] = []
        self.isolated: set[NodeId] = set()
        self.cut_links: set[tuple[NodeId, NodeId]] = set()
        self.out: list[str] = []
        self.indent = ""

    # ------------------------------------------------------------------ output
    def emit(self, line: str) -> None:
        self.out.append(self.indent + line)

    def _trace(self, ev: TraceEvent) -> None:
        self.emit(f"INFO {ev}")

    # ------------------------------------------------------------------ nodes
    def _start(self, n: NodeId, storage: MemoryStorage, config: Config) -> ScenarioNode:
        core = RaftCore(config, storage, LongestTimeoutRng(), trace=self._trace)
        node = ScenarioNode(core, storage, config)
        snap = storage.snapshot()
        node.applied = snap.data.decode().split(",") if snap.data else []
        self.nodes[n] = node
        return node

    def node(self, arg: str) -> ScenarioNode:
        n = NodeId(int(arg))
        if n not in self.nodes:
            raise ScriptError(f"no node {n}")
        return self.nodes[n]

    def targets(self, args: list[str]) -> list[NodeId]:
        return [NodeId(int(a)) for a in args] if args else sorted(self.nodes)

    # ------------------------------------------------------------------ Ready and delivery
    def process_ready(self, n: NodeId) -> bool:
        node = self.nodes[n]
        c = node.core
        if not c.has_ready():
            return False
        rd = c.ready()
        self.emit(f"> {n} handling Ready")
        self.indent = "  "
        self.emit(f"Ready must_sync={rd.must_sync}:")
        if rd.soft_state is not None:
            ss = rd.soft_state
            self.emit(f"soft state: role={ss.role.value} leader={ss.leader}")
        if rd.hard_state is not None:
            hs = rd.hard_state
            self.emit(f"hard state: term={hs.term} vote={hs.vote} commit={hs.commit}")
        if rd.snapshot is not None:
            self.emit(f"snapshot: {fmt_snapshot(rd.snapshot)}")
            node.storage.apply_snapshot(rd.snapshot)
            data = rd.snapshot.data.decode()
            node.applied = data.split(",") if data else []
        self._list("entries", [fmt_entry(e) for e in rd.entries])
        node.storage.append(rd.entries)
        if rd.hard_state is not None:
            node.storage.set_hard_state(rd.hard_state)
        self._list("committed", [fmt_entry(e) for e in rd.committed_entries])
        for e in rd.committed_entries:
            if e.kind is EntryKind.NORMAL and e.data:
                node.applied.append(e.data.decode())
        self._list(
            "read states", [f"index={r.index} context={r.context.decode()}" for r in rd.read_states]
        )
        self._list("messages", [fmt_message(m) for m in rd.messages])
        self.queue.extend(rd.messages)
        c.advance(rd)
        self.indent = ""
        return True

    def _list(self, title: str, lines: list[str]) -> None:
        if lines:
            self.emit(f"{title}:")
            for line in lines:
                self.emit(line)

    def _dropped(self, m: Message) -> bool:
        return (
            m.src in self.isolated
            or m.dst in self.isolated
            or (m.src, m.dst) in self.cut_links
            or m.dst not in self.nodes
        )

    def deliver(self, n: NodeId) -> bool:
        msgs = [m for m in self.queue if m.dst == n]
        if not msgs:
            return False
        self.queue = [m for m in self.queue if m.dst != n]
        self.emit(f"> {n} receiving messages")
        self.indent = "  "
        for m in msgs:
            if self._dropped(m):
                self.emit(f"{fmt_message(m)} DROPPED")
                continue
            self.emit(fmt_message(m))
            self.nodes[n].core.step(m)
        self.indent = ""
        return True

    def stabilize(self, ids: list[NodeId]) -> None:
        while True:
            busy = False
            for n in ids:
                busy |= self.process_ready(n)
            for n in ids:
                busy |= self.deliver(n)
            if not busy:
                return


class ScriptError(Exception):
    """A script error (unknown command, bad arguments): fails the test."""


# ---------------------------------------------------------------------------- commands
def _kv(args: list[str]) -> tuple[list[str], dict[str, str]]:
    pos = [a for a in args if "=" not in a]
    kv = dict(a.split("=", 1) for a in args if "=" in a)
    return pos, kv


def _id_list(v: str) -> frozenset[NodeId]:
    return frozenset(NodeId(int(x)) for x in v.strip("()").split(",") if x.strip())


def _bool(v: str) -> bool:
    if v not in ("true", "false"):
        raise ScriptError(f"expected true or false, got {v!r}")
    return v == "true"


CONFIG_OPTIONS: dict[str, tuple[str, Callable[[str], object]]] = {
    "pre-vote": ("pre_vote", _bool),
    "check-quorum": ("check_quorum", _bool),
    "election": ("election_timeout_ticks", int),
    "heartbeat": ("heartbeat_interval_ticks", int),
    "max-msg-bytes": ("max_entries_bytes_per_msg", int),
    "max-inflight": ("max_inflight_msgs", int),
}

CONF_CHANGE_KINDS = {
    "add-voter": ConfChangeKind.ADD_VOTER,
    "add-observer": ConfChangeKind.ADD_OBSERVER,
    "remove": ConfChangeKind.REMOVE_NODE,
}


def cmd_add_nodes(env: Env, args: list[str]) -> None:
    pos, kv = _kv(args)
    cs = ConfState(_id_list(kv.pop("voters", "")), _id_list(kv.pop("observers", "")))
    log_terms = [int(t) for t in kv.pop("log", "").strip("()").split(",") if t]
    overrides: dict[str, object] = {}
    for k, v in kv.items():
        if k not in CONFIG_OPTIONS:
            raise ScriptError(f"unknown add-nodes option {k!r}")
        name, parse = CONFIG_OPTIONS[k]
        overrides[name] = parse(v)
    first = max(env.nodes, default=0) + 1
    for n in range(first, first + int(pos[0])):
        storage = MemoryStorage(cs)
        if log_terms:
            storage.append([Entry(LogIndex(i + 1), Term(t)) for i, t in enumerate(log_terms)])
            storage.set_hard_state(HardState(Term(max(log_terms))))
        config = dataclasses.replace(Config(id=NodeId(n)), **overrides)  # type: ignore[arg-type]
        env._start(NodeId(n), storage, config)


def cmd_restart(env: Env, args: list[str]) -> None:
    node = env.node(args[0])
    env._start(node.config.id, node.storage, node.config)


def cmd_campaign(env: Env, args: list[str]) -> None:
    env.node(args[0]).core.campaign()


def cmd_propose(env: Env, args: list[str]) -> None:
    env.node(args[0]).core.propose(args[1].encode())


def cmd_propose_conf_change(env: Env, args: list[str]) -> None:
    kind = CONF_CHANGE_KINDS[args[1]]
    env.node(args[0]).core.propose_conf_change(ConfChange(kind, NodeId(int(args[2]))))


def cmd_transfer_leadership(env: Env, args: list[str]) -> None:
    env.node(args[0]).core.transfer_leadership(NodeId(int(args[1])))


def cmd_read_index(env: Env, args: list[str]) -> None:
    env.node(args[0]).core.read_index(args[1].encode())


def _tick(env: Env, node: ScenarioNode, times: int) -> None:
    for _ in range(times):
        node.core.tick()


def cmd_tick(env: Env, args: list[str]) -> None:
    _tick(env, env.node(args[0]), int(args[1]) if len(args) > 1 else 1)


def cmd_tick_election(env: Env, args: list[str]) -> None:
    node = env.node(args[0])
    _tick(env, node, node.config.election_timeout_ticks)


def cmd_tick_heartbeat(env: Env, args: list[str]) -> None:
    node = env.node(args[0])
    _tick(env, node, node.config.heartbeat_interval_ticks)


def cmd_process_ready(env: Env, args: list[str]) -> None:
    for n in env.targets(args):
        env.process_ready(n)


def cmd_deliver_msgs(env: Env, args: list[str]) -> None:
    for n in env.targets(args):
        env.deliver(n)


def cmd_stabilize(env: Env, args: list[str]) -> None:
    env.stabilize(env.targets(args))


def cmd_isolate(env: Env, args: list[str]) -> None:
    env.isolated.add(NodeId(int(args[0])))


def cmd_cut(env: Env, args: list[str]) -> None:
    a, b = NodeId(int(args[0])), NodeId(int(args[1]))
    env.cut_links |= {(a, b), (b, a)}


def cmd_heal(env: Env, args: list[str]) -> None:
    env.isolated.clear()
    env.cut_links.clear()


def cmd_compact(env: Env, args: list[str]) -> None:
    node = env.node(args[0])
    c = node.core
    data = ",".join(node.applied).encode()
    node.storage.create_snapshot(c.log.applied, c.applied_conf, data)
    node.storage.compact(c.log.applied)
    env.emit(f"snapshot {fmt_snapshot(node.storage.snapshot())}")


def cmd_raft_state(env: Env, args: list[str]) -> None:
    for n in env.targets(args):
        c = env.nodes[n].core
        env.emit(
            f"{n}: {c.role.role.value} term={c.term} vote={c.vote} leader={c.leader}"
            f" commit={c.log.committed} applied={c.log.applied}"
            f" last={c.log.last_index()}@{c.log.last_term()} {fmt_conf(c.conf)}"
        )


def cmd_status(env: Env, args: list[str]) -> None:
    c = env.node(args[0]).core
    if not c.is_leader:
        env.emit(f"{c.id} is not the leader")
        return
    for n in sorted(c.conf.members() | {c.id}):
        pr = c.progress(n)
        if pr is not None:
            env.emit(f"{n}: {pr.state.value} match={pr.match} next={pr.next}")


def cmd_raft_log(env: Env, args: list[str]) -> None:
    c = env.node(args[0]).core
    snap = c.log.snapshot()
    if not snap.is_empty():
        env.emit(f"snapshot {fmt_snapshot(snap)}")
    ents = c.log.slice(c.log.first_index(), LogIndex(c.log.last_index() + 1), None)
    for e in ents:
        env.emit(fmt_entry(e))
    if not ents:
        env.emit("log is empty")


def cmd_applied(env: Env, args: list[str]) -> None:
    for n in env.targets(args):
        env.emit(f"{n}: [{' '.join(env.nodes[n].applied)}]")


COMMANDS: dict[str, Callable[[Env, list[str]], None]] = {
    "add-nodes": cmd_add_nodes,
    "restart": cmd_restart,
    "campaign": cmd_campaign,
    "propose": cmd_propose,
    "propose-conf-change": cmd_propose_conf_change,
    "transfer-leadership": cmd_transfer_leadership,
    "read-index": cmd_read_index,
    "tick": cmd_tick,
    "tick-election": cmd_tick_election,
    "tick-heartbeat": cmd_tick_heartbeat,
    "process-ready": cmd_process_ready,
    "deliver-msgs": cmd_deliver_msgs,
    "stabilize": cmd_stabilize,
    "isolate": cmd_isolate,
    "cut": cmd_cut,
    "heal": cmd_heal,
    "compact": cmd_compact,
    "raft-state": cmd_raft_state,
    "status": cmd_status,
    "raft-log": cmd_raft_log,
    "applied": cmd_applied,
}


def run_command(env: Env, line: str) -> list[str]:
    """Run one command; its output lines (``ok`` if it printed nothing)."""
    words = shlex.split(line)
    fn = COMMANDS.get(words[0])
    if fn is None:
        raise ScriptError(f"unknown command {words[0]!r}")
    env.out, env.indent = [], ""
    try:
        fn(env, words[1:])
    except CORE_ERRORS as e:
        # Refusals are part of the behaviour under test: print them, like any output.
        env.emit(f"error: {type(e).__name__}: {e}")
    except (IndexError, KeyError) as e:
        raise ScriptError(f"bad arguments in {line!r}: {e!r}") from e
    return env.out or ["ok"]


# ---------------------------------------------------------------------------- the file
@dataclass
class Block:
    comments: list[str]  # comment and blank lines before the command, verbatim
    command: str
    lineno: int
    expected: list[str]


SEPARATOR = "----"


def parse(text: str) -> tuple[list[Block], list[str]]:
    """The blocks of a script, and the comment lines after the last one."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            pending.append(line)
            i += 1
            continue
        if i + 1 >= len(lines) or lines[i + 1] != SEPARATOR:
            raise ScriptError(f"line {i + 1}: {line!r} is not followed by {SEPARATOR!r}")
        j = i + 2
        expected = []
        while j < len(lines) and lines[j].strip():
            expected.append(lines[j])
            j += 1
        blocks.append(Block(pending, line, i + 1, expected))
        pending = []
        i = j + 1  # the blank line that ends the block belongs to it
    return blocks, pending


def render(blocks: list[Block], actual: list[list[str]], tail: list[str]) -> str:
    out: list[str] = []
    for b, lines in zip(blocks, actual, strict=True):
        out += [*b.comments, b.command, SEPARATOR, *lines, ""]
    out += tail
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + "\n"


def run_script(path: Path) -> tuple[str, str]:
    """Run the script at ``path``: (the file's text, the text with the actual output)."""
    text = path.read_text()
    blocks, tail = parse(text)
    env = Env()
    actual = []
    for b in blocks:
        try:
            actual.append(run_command(env, b.command))
        except ScriptError as e:
            raise ScriptError(f"{path.name}:{b.lineno}: {e}") from e
    return text, render(blocks, actual, tail)


def check_script(path: Path) -> None:
    """Fail with a diff if the script's output differs from what it expects; with
    ``LONGBOAT_REWRITE=1`` write the actual output into the file instead."""
    expected, actual = run_script(path)
    if actual == expected:
        return
    if os.environ.get(REWRITE_ENV) == "1":
        path.write_text(actual)
        return
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            f"{path.name} (expected)",
            f"{path.name} (actual)",
        )
    )
    raise AssertionError(
        f"{path.name}: output differs ({REWRITE_ENV}=1 rewrites the file):\n{diff}"
    )


def scripts(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.txt"))
