"""Memory, open files and CPU time of node processes, read from /proc; the soak's growth bound.

A soak (``python -m jepsen_tests soak``) samples every node process every
``interval_s`` into ``resources.jsonl`` in the run directory: resident memory (``VmRSS`` of
``/proc/<pid>/status``), open files (entries of ``/proc/<pid>/fd``) and CPU time (utime +
stime of ``/proc/<pid>/stat``), summed over the node's process group. Its *baseline* is each
node's first sample after ``warmup_s`` (imports, caches and connection pools have filled by
then); its *end* is the last sample, taken after the final reads. The run fails
(`resource-growth`) if for any node that ran as one process from baseline to end

    rss_end > rss_factor * rss_baseline + rss_slack_bytes    or
    fds_end > fds_baseline + fds_slack

(defaults: twice the baseline plus 50 MB; 100 more descriptors). A node restarted in between
(a new pid) cannot be compared with itself and is reported as not checked; a soak in which
no node could be checked fails too, since it proved nothing.

`check_growth` is pure; `ResourceMonitor` does the reading in a thread.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jepsen_tests.nemesis.process import NodeProcess, group_pids

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MB = 1 << 20


@dataclass(frozen=True)
class Usage:
    rss_bytes: int
    fds: int
    cpu_ticks: int


def read_usage(pid: int) -> Usage | None:
    """One process's usage, or None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError):
        return None
    rss_kb = 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
            break
    # Fields after the command name, which may hold spaces and parentheses: utime, stime
    # are fields 14 and 15 of the line, 12 and 13 after the closing parenthesis.
    rest = stat.rsplit(")", 1)[1].split()
    return Usage(rss_kb * 1024, fds, int(rest[11]) + int(rest[12]))


def read_group_usage(pgid: int) -> Usage | None:
    """The usage of a node's whole process group (it leads its own session)."""
    total: Usage | None = None
    for pid in group_pids(pgid):
        u = read_usage(pid)
        if u is None:
            continue
        total = (
            u
            if total is None
            else Usage(
                total.rss_bytes + u.rss_bytes, total.fds + u.fds, total.cpu_ticks + u.cpu_ticks
            )
        )
    return total


@dataclass(frozen=True)
class Sample:
    node: str
    pid: int
    t_s: float
    rss_bytes: int
    fds: int
    cpu_ticks: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ResourceBound:
    """A node fails the soak when it ends above ``rss_factor`` x baseline RSS +
    ``rss_slack_bytes``, or ``fds_slack`` descriptors above its baseline."""

    rss_factor: float = 2.0
    rss_slack_bytes: int = 50 * MB
    fds_slack: int = 100

    def violation(self, base: Sample, end: Sample) -> str | None:
        rss_max = self.rss_factor * base.rss_bytes + self.rss_slack_bytes
        fds_max = base.fds + self.fds_slack
        problems = []
        if end.rss_bytes > rss_max:
            problems.append(
                f"RSS {end.rss_bytes / MB:.1f} MB > {self.rss_factor:g} x "
                f"{base.rss_bytes / MB:.1f} MB + {self.rss_slack_bytes / MB:g} MB"
            )
        if end.fds > fds_max:
            problems.append(f"open files {end.fds} > {base.fds} + {self.fds_slack}")
        return "; ".join(problems) or None

    def describe(self) -> str:
        return (
            f"RSS <= {self.rss_factor:g} x baseline + {self.rss_slack_bytes / MB:g} MB, "
            f"open files <= baseline + {self.fds_slack}"
        )


def check_growth(
    samples: Sequence[Sample], bound: ResourceBound, warmup_s: float = 0.0
) -> dict[str, Any]:
    """Per node: baseline (first sample at or after `warmup_s`), end (last sample), and
    whether the growth between them stays inside `bound`. Pure."""
    by_node: dict[str, list[Sample]] = {}
    for s in sorted(samples, key=lambda s: s.t_s):
        by_node.setdefault(s.node, []).append(s)
    nodes: dict[str, Any] = {}
    violations: dict[str, str] = {}
    for node, ss in sorted(by_node.items()):
        after = [s for s in ss if s.t_s >= warmup_s] or ss[-1:]
        base, end = after[0], ss[-1]
        entry: dict[str, Any] = {
            "baseline": base.to_json(),
            "end": end.to_json(),
            "rss_growth_bytes": end.rss_bytes - base.rss_bytes,
            "fds_growth": end.fds - base.fds,
            "checked": base.pid == end.pid and end.t_s > base.t_s,
        }
        if base.pid != end.pid:
            entry["why_not_checked"] = f"restarted (pid {base.pid} -> {end.pid})"
        elif end.t_s <= base.t_s:
            entry["why_not_checked"] = "a single sample after the warm-up"
        if entry["checked"]:
            v = bound.violation(base, end)
            entry["violation"] = v
            if v is not None:
                violations[node] = v
        nodes[node] = entry
    checked = sum(1 for e in nodes.values() if e["checked"])
    ok = checked > 0 and not violations
    return {
        "bound": asdict(bound),
        "bound_text": bound.describe(),
        "warmup_s": warmup_s,
        "nodes": nodes,
        "checked": checked,
        "violations": violations,
        "ok": ok,
    }


class ResourceMonitor:
    """Samples every node process every `interval_s` (and on demand) in a daemon thread,
    appending each sample to `path` as a JSON line."""

    def __init__(
        self,
        processes: Mapping[str, NodeProcess],
        path: Path,
        interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.processes = processes
        self.path = path
        self.interval_s = interval_s
        self.clock = clock
        self.samples: list[Sample] = []
        self._t0 = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def sample(self) -> list[Sample]:
        now = self.clock() - self._t0
        out = []
        for name, p in self.processes.items():
            pid = p.pid
            if pid is None or not p.alive():
                continue
            u = read_group_usage(pid)
            if u is not None:
                out.append(Sample(name, pid, round(now, 3), u.rss_bytes, u.fds, u.cpu_ticks))
        with self._lock:
            self.samples.extend(out)
            with open(self.path, "a") as f:
                for s in out:
                    f.write(json.dumps(s.to_json()) + "\n")
        return out

    def start(self) -> None:
        self._t0 = self.clock()
        self.sample()

        def loop() -> None:
            while not self._stop.wait(self.interval_s):
                self.sample()

        self._thread = threading.Thread(target=loop, name="resources", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def elapsed_s(self) -> float:
        return self.clock() - self._t0


def load_samples(path: Path) -> list[Sample]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    return [Sample(**json.loads(line)) for line in lines if line.strip()]
