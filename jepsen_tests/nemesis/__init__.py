"""Fault injectors ("nemeses") and the interface they share.

A nemesis handles some fault kinds. `start(fault)` begins a fault, `stop(fault)` ends it,
`heal_all()` ends every fault it has started (and wipes its rules even if it lost track).
Each start and stop is recorded in the history as a nemesis op (process ``"nemesis"``, type
``info``, ``f`` ``start``/``stop``, ``value = {"id", "kind", "targets", ...params}``); the
checkers and the report read the fault windows from those ops.

Fault kinds (`KINDS` maps each to the module that implements it):

=====================  ========================================================
kill                   SIGKILL the targets; stop restarts them (process.py)
pause                  SIGSTOP the targets; stop sends SIGCONT (process.py)
freeze                 cgroup-v1 freezer on the targets' process trees (process.py)
lose-unsynced          SIGKILL nodes started with LONGBOAT_LAZYFS=1, so bytes not
                       yet fsynced are lost; stop restarts them (process.py)
partition-majority     random majority/minority split (net.py; proxy.py fallback)
partition-isolate      one node cut off from everyone (net.py)
partition-ring         each node reaches only its two ring neighbours (net.py)
partition-cut          params.node cut off from params.cut_from, reaching the rest
                       (the Kafka 0.8 finding: a leader cut from its followers but
                       still reaching the controllers) (net.py)
partition-oneway       one-way: params.shape deaf (the target hears nobody),
                       mute (nobody hears the target) or split (params.half
                       hears nobody of the other half, which hears it) (net.py)
delay                  params.delay_ms (plus up to params.jitter_ms) on every
                       link into and out of the targets (proxy.py)
reorder                delay with a jitter much larger than the delay, so
                       messages on different connections overtake (proxy.py)
blackhole              links into and out of the targets swallow bytes (proxy.py)
clock-bump             the targets' clocks jump by params.delta_s (clock.py)
clock-skew             the targets' wall clocks run params.delta_s off (clock.py)
clock-strobe           the targets' wall clocks flip between true and
                       params.delta_s off every params.period_ms (clock.py)
membership             remove the target controller from the Raft voters; stop
                       adds it back (membership.py)
disk-full              the targets' filesystems full: ENOSPC (disk.py)
disk-eio               every write-back of the targets' filesystems fails:
                       EIO from fsync; stop restarts them (disk.py)
disk-corrupt           SIGKILL, flip a bit in or truncate one file of class
                       params.file; stop restarts them (disk.py)
lazy-fsync-eio         the params.nth fsync from now (of a path containing
                       params.match) fails with EIO in the targets' lazy file
                       layer; stop is a power cut and a restart (lazydisk.py)
lazy-disk-full         the targets' lazy layers have params.free_bytes left:
                       ENOSPC after a short write (lazydisk.py)
reassign               move the workload topic's replicas to new brokers
                       (KIP-455, params.throttle bytes/s); stop cancels the
                       moves still running if params.cancel (reassign.py)
=====================  ========================================================
"""

from __future__ import annotations

import itertools
import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jepsen_tests.history import NEMESIS, Recorder

KINDS: dict[str, str] = {
    "kill": "process",
    "pause": "process",
    "freeze": "process",
    "lose-unsynced": "process",
    "partition-majority": "net",
    "partition-isolate": "net",
    "partition-ring": "net",
    "partition-cut": "net",
    "partition-oneway": "net",
    "delay": "proxy",
    "reorder": "proxy",
    "blackhole": "proxy",
    "clock-bump": "clock",
    "clock-skew": "wallclock",
    "clock-strobe": "wallclock",
    "membership": "membership",
    "disk-full": "disk",
    "disk-eio": "disk",
    "disk-corrupt": "disk",
    "lazy-fsync-eio": "lazydisk",
    "lazy-disk-full": "lazydisk",
    "reassign": "reassign",
}
# Names accepted on the command line, expanded to fault kinds.
GROUPS: dict[str, tuple[str, ...]] = {
    "partition": ("partition-majority", "partition-isolate", "partition-ring", "partition-cut"),
    "process": ("kill", "pause"),
    "clock": ("clock-bump",),
    "disk": ("disk-full", "disk-eio", "disk-corrupt"),
    "lazy-disk": ("lazy-fsync-eio", "lazy-disk-full"),
    **{k: (k,) for k in KINDS},
}

_ids = itertools.count(1)


class FaultInjectionUnavailable(RuntimeError):
    """This machine cannot inject the fault (no root, no nft, no faketime...). Loud, always."""


@dataclass(frozen=True)
class Fault:
    kind: str
    targets: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    id: str = field(default_factory=lambda: str(next(_ids)))

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "targets": list(self.targets), **self.params}


class Nemesis(ABC):
    """Records fault windows; subclasses do the damage in `_start` and undo it in `_stop`."""

    kinds: tuple[str, ...] = ()

    def __init__(self, recorder: Recorder | None = None) -> None:
        self.recorder = recorder
        self._lock = threading.RLock()
        self.active: dict[str, Fault] = {}

    def handles(self, kind: str) -> bool:
        return kind in self.kinds

    def start(self, fault: Fault) -> None:
        if not self.handles(fault.kind):
            raise ValueError(f"{type(self).__name__} does not do {fault.kind!r}")
        with self._lock:
            self._record("start", fault)
            self.active[fault.id] = fault
            self._start(fault)

    def stop(self, fault: Fault) -> None:
        with self._lock:
            if self.active.pop(fault.id, None) is None:
                return
            self._stop(fault)
            self._record("stop", fault)

    def heal_all(self) -> None:
        with self._lock:
            for f in list(self.active.values())[::-1]:
                self.stop(f)
            self._heal()

    def _record(self, what: str, fault: Fault) -> None:
        if self.recorder is not None:
            self.recorder.info(NEMESIS, what, fault.describe())

    @abstractmethod
    def _start(self, fault: Fault) -> None: ...

    @abstractmethod
    def _stop(self, fault: Fault) -> None: ...

    def _heal(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Blanket repair after all tracked faults were stopped (flush rules, resume all)."""


class Composite(Nemesis):
    """Routes each fault kind to the nemesis that handles it."""

    def __init__(self, parts: Iterable[Nemesis]) -> None:
        super().__init__(None)
        self.parts = list(parts)
        self.kinds = tuple(k for p in self.parts for k in p.kinds)

    def _part(self, kind: str) -> Nemesis:
        for p in self.parts:
            if p.handles(kind):
                return p
        raise ValueError(f"no nemesis for fault kind {kind!r}")

    def start(self, fault: Fault) -> None:
        self._part(fault.kind).start(fault)

    def stop(self, fault: Fault) -> None:
        self._part(fault.kind).stop(fault)

    def heal_all(self) -> None:
        errors = []
        for p in self.parts:
            try:
                p.heal_all()
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def _start(self, fault: Fault) -> None:  # pragma: no cover - routed above
        raise NotImplementedError

    def _stop(self, fault: Fault) -> None:  # pragma: no cover - routed above
        raise NotImplementedError


def select_targets(
    spec: str, nodes: Sequence[str], rng: random.Random, leader: str | None = None
) -> tuple[str, ...]:
    """Resolve a target spec: one, minority, majority, all, leader, or a node name."""
    nodes = list(nodes)
    n = len(nodes)
    if spec == "one":
        return (rng.choice(nodes),)
    if spec == "minority":
        return tuple(sorted(rng.sample(nodes, max(1, (n - 1) // 2))))
    if spec == "majority":
        return tuple(sorted(rng.sample(nodes, n // 2 + 1)))
    if spec == "all":
        return tuple(nodes)
    if spec == "leader":
        if leader is None:
            raise ValueError("target 'leader' but the cluster names no leader")
        return (leader,)
    if spec in nodes:
        return (spec,)
    raise ValueError(f"unknown target spec {spec!r} (nodes: {nodes})")
