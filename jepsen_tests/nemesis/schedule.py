"""A fault schedule drawn from a seed: which fault, when, on which targets, for how long.

`generate` is a pure function of its arguments: the same seed, kinds, nodes and limits give
the same schedule, so a run is reproduced with ``--seed``. Faults run one after another on each
of `tracks` independent tracks (two tracks give overlapping combinations, such as a partition
during a kill, which is where NATS lost writes); each track draws from its own
`random.Random(f"{seed}/{track}")`. Targets whose identity only exists at run time
(`RUNTIME_SPECS`: a partition ``leader``, the active ``controller``, a leader and its
followers) are left as specs and resolved by the runner when the fault starts.

No fault starts in the first `warmup_s` or ends after ``time_limit_s``; the runner heals
everything at the time limit anyway and then waits before the final reads.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jepsen_tests.nemesis import KINDS, Fault, select_targets
from jepsen_tests.nemesis.disk import FILE_CLASSES
from jepsen_tests.nemesis.lazydisk import FSYNC_MATCHES
from jepsen_tests.nemesis.net import ONE_WAY_SHAPES, majority_minority


@dataclass(frozen=True)
class Step:
    at_s: float
    duration_s: float
    fault: Fault
    target_spec: str = ""
    params_at_start: dict[str, Any] = field(default_factory=dict, compare=False)

    def describe(self) -> dict[str, Any]:
        return {
            "at_s": round(self.at_s, 3),
            "duration_s": round(self.duration_s, 3),
            "spec": self.target_spec,
            **self.fault.describe(),
        }


RUNTIME_SPECS = frozenset(
    {"leader", "controller", "leader-followers", "voter", "txn-coordinator", "schemas-leader"}
)
"""Target specs only the running cluster can resolve (the runner does, at fault start).
``txn-coordinator``: the broker leading the ``__transaction_state`` partition of one of the
run's transactional ids (``--target-specs txn-coordinator``: coordinator failover).
``schemas-leader``: the broker leading the Schema Registry's ``_schemas`` partition."""


PROCESS_SPECS = ("one", "one", "minority", "majority", "leader", "controller")
DISK_SPECS = ("one", "one", "minority", "leader", "controller")
"""Disk faults hit one node or a minority at once (a majority would stop the cluster)."""
CLOCK_SPECS = ("controller", "controller", "controller", "one")
"""Wall-clock skew and strobe go mostly to the active controller: its clock is the one
broker sessions, fencing and metadata timestamps would read."""


def _spec_targets(spec: str, nodes: Sequence[str], rng: random.Random) -> tuple[str, ...]:
    return () if spec in RUNTIME_SPECS else select_targets(spec, nodes, rng)


def draw_fault(
    kind: str,
    nodes: Sequence[str],
    rng: random.Random,
    fid: str,
    process_specs: Sequence[str] = PROCESS_SPECS,
    disk_specs: Sequence[str] = DISK_SPECS,
) -> tuple[Fault, str]:
    """One fault of `kind` with targets and parameters drawn from rng; `process_specs` and
    `disk_specs` are the target specs process and disk faults choose from
    (``--target-specs`` sets both)."""
    if kind in ("kill", "pause", "freeze", "lose-unsynced"):
        spec = rng.choice(list(process_specs))
        targets = () if spec in RUNTIME_SPECS else select_targets(spec, nodes, rng)
        return Fault(kind, targets, {}, fid), spec
    if kind == "partition-majority":
        maj, mino = majority_minority(nodes, rng)
        return Fault(kind, tuple(mino), {"majority": maj, "minority": mino}, fid), "minority"
    if kind == "partition-isolate":
        spec = rng.choice(["one", "leader", "controller"])
        targets = () if spec in RUNTIME_SPECS else select_targets("one", nodes, rng)
        return Fault(kind, targets, {}, fid), spec
    if kind == "partition-ring":
        order = list(nodes)
        rng.shuffle(order)
        return Fault(kind, tuple(order), {"order": order}, fid), "all"
    if kind == "partition-cut":
        node = rng.choice(list(nodes))
        others = [n for n in nodes if n != node]
        cut_from = sorted(rng.sample(others, max(1, len(others) // 2)))
        # Mostly the Kafka 0.8 shape (a partition leader cut from its followers, still
        # reaching the controllers), resolved at run time; else this random cut.
        spec = rng.choice(["leader-followers", "leader-followers", node])
        return Fault(kind, (node,), {"node": node, "cut_from": cut_from}, fid), spec
    if kind == "partition-oneway":
        shape = rng.choice(list(ONE_WAY_SHAPES))
        if shape == "split":
            half = sorted(rng.sample(list(nodes), max(1, len(nodes) // 2)))
            return Fault(kind, tuple(half), {"shape": shape, "half": half}, fid), "split"
        spec = rng.choice(["one", "leader", "controller"])
        return Fault(kind, _spec_targets(spec, nodes, rng), {"shape": shape}, fid), spec
    if kind in ("delay", "reorder", "blackhole"):
        spec = rng.choice(["one", "minority", "leader", "controller"])
        targets = _spec_targets(spec, nodes, rng)
        params: dict[str, Any] = {}
        if kind == "delay":
            params = {
                "delay_ms": rng.choice([50, 100, 200, 500]),
                "jitter_ms": rng.choice([0, 0, 20, 100]),
            }
        elif kind == "reorder":
            params = {
                "delay_ms": rng.choice([0, 5, 20]),
                "jitter_ms": rng.choice([50, 100, 200, 400]),
            }
        if kind != "blackhole":
            params["nodes_only"] = rng.random() < 0.5
        return Fault(kind, targets, params, fid), spec
    if kind in ("clock-skew", "clock-strobe"):
        spec = rng.choice(list(CLOCK_SPECS))
        sign = rng.choice([-1, 1])
        if kind == "clock-skew":
            params = {"delta_s": sign * rng.choice([1, 5, 30, 120, 600])}
        else:
            params = {
                "delta_s": sign * rng.choice([1, 5, 30, 120]),
                "period_ms": rng.choice([10, 50, 200]),
            }
        return Fault(kind, _spec_targets(spec, nodes, rng), params, fid), spec
    if kind in ("disk-full", "disk-eio", "disk-corrupt", "lazy-fsync-eio", "lazy-disk-full"):
        spec = rng.choice(list(disk_specs))
        targets = _spec_targets(spec, nodes, rng)
        params = {}
        if kind == "disk-corrupt":
            params = {
                "file": rng.choice(list(FILE_CLASSES)),
                "how": rng.choice(["flip", "flip", "truncate"]),
            }
        elif kind == "lazy-fsync-eio":
            params = {"nth": rng.choice([1, 1, 2, 3]), "match": rng.choice(list(FSYNC_MATCHES))}
        elif kind == "lazy-disk-full":
            params = {"free_bytes": rng.choice([0, 4096, 65536])}
        return Fault(kind, targets, params, fid), spec
    if kind == "membership":
        # Which controllers exist is the cluster's business: a voter, or the active one.
        return Fault(kind, (), {}, fid), rng.choice(["voter", "voter", "controller"])
    if kind == "reassign":
        # Which brokers is the cluster's business; the plan is drawn from the seed.
        params = {
            "seed": rng.randrange(2**31),
            "throttle": rng.choice([None, None, 100_000, 1_000_000]),
            "cancel": rng.random() < 0.3,
        }
        return Fault(kind, (), params, fid), "cluster"
    if kind == "clock-bump":
        spec = "one"
        delta = rng.choice([-1, 1]) * rng.choice([1, 2, 5, 10])
        return Fault(kind, select_targets(spec, nodes, rng), {"delta_s": delta}, fid), spec
    raise ValueError(f"unknown fault kind {kind!r}; known: {sorted(KINDS)}")


def generate(
    seed: int,
    kinds: Sequence[str],
    nodes: Sequence[str],
    time_limit_s: float,
    *,
    warmup_s: float = 1.0,
    duration_s: tuple[float, float] = (1.0, 4.0),
    gap_s: tuple[float, float] = (0.5, 2.0),
    tracks: int = 1,
    process_specs: Sequence[str] = PROCESS_SPECS,
    disk_specs: Sequence[str] = DISK_SPECS,
) -> list[Step]:
    if not kinds:
        return []
    steps: list[Step] = []
    for track in range(tracks):
        rng = random.Random(f"{seed}/{track}")
        t = warmup_s + rng.uniform(0, gap_s[1])
        i = 0
        while True:
            d = rng.uniform(*duration_s)
            if t + d > time_limit_s:
                break
            kind = rng.choice(list(kinds))
            fault, spec = draw_fault(kind, nodes, rng, f"{track}.{i}", process_specs, disk_specs)
            steps.append(Step(t, d, fault, spec))
            t += d + rng.uniform(*gap_s)
            i += 1
    steps.sort(key=lambda s: (s.at_s, s.fault.id))
    return steps
