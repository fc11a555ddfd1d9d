"""The long sweep: many seeds of every nemesis, one run after another, and the summary table.

Each run is ``python -m jepsen_tests run`` in a child process (so one crashed run cannot take
the sweep with it, and each run cleans up after itself), in ``<sweep dir>/<nemesis>-seed<N>``.
Nemeses take turns, round robin, until each has had ``minutes`` of faults and load (the sum of
its runs' time limits), or the sweep's wall-clock budget is spent. Every finished run appends
one line to ``<sweep dir>/runs.jsonl``; `summarize` reads that file (and so works on a sweep
that was interrupted, or is still running).

Columns of the table, per nemesis (summed over its runs; lose-unsynced runs split by whether
a fault hit more than one broker at once, disk-fault runs by whether one hit more than one
node at once, see `label_of`):

==============  ================================================================
minutes         time under load and faults (time limits), not counting start-up
runs / seeds    runs finished; distinct seeds
invalid         runs the checker found invalid (or that could not run: rc 2)
lost            acknowledged writes missing from the final reads (lost-prefix +
                lost-middle + lost-postfix, with final reads complete)
dup             one value at two offsets (``duplicate``)
inconsistent    one offset with two values (``inconsistent-offsets``)
other           every other invalidating anomaly
==============  ================================================================
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LOST = ("lost-prefix", "lost-middle", "lost-postfix")
COLUMNS = ("nemesis", "minutes", "runs", "seeds", "invalid", "lost", "dup", "inconsistent", "other")


def run_one(
    out: Path, nemesis: str, seed: int, time_limit_s: float, extra: Sequence[str] = ()
) -> dict[str, Any]:
    argv = [
        sys.executable,
        "-m",
        "jepsen_tests",
        "run",
        "--nemesis",
        nemesis,
        "--seed",
        str(seed),
        "--time-limit",
        str(time_limit_s),
        "--out",
        str(out),
        *extra,
    ]
    if out.exists():
        # No row names this directory (rows are written when a run ends), so it is what an
        # interrupted sweep left: keep it for the curious, out of the way of this run.
        aside = _free_name(out.parent / f"{out.name}.interrupted")
        out.rename(aside)
        print(
            f"sweep: {out} was left by an interrupted run; moved to {aside}",
            file=sys.stderr,
            flush=True,
        )
    t0 = time.monotonic()
    with open(out.parent / f"{out.name}.console.log", "w") as console:
        try:
            rc = subprocess.run(
                argv, stdout=console, stderr=subprocess.STDOUT, timeout=time_limit_s + 600
            ).returncode
        except subprocess.TimeoutExpired:
            rc = -1
    row: dict[str, Any] = {
        "nemesis": nemesis,
        "seed": seed,
        "time_limit_s": time_limit_s,
        "extra": list(extra),
        "rc": rc,
        "dir": str(out),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    try:
        res = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        row.update(valid=None, counts={}, anomaly_types=[], final_complete=False)
        return row
    r = res["result"]
    row.update(
        valid=r["valid"],
        counts=r.get("counts", {}),
        anomaly_types=r.get("anomaly_types", []),
        final_complete=all((res.get("final_reads_complete") or {"": False}).values()),
        sends=r.get("stats", {}).get("sends", {}),
    )
    return row


def sweep(
    root: Path,
    nemeses: Sequence[str],
    minutes: float,
    time_limit_s: float,
    first_seed: int = 1,
    budget_minutes: float | None = None,
    extra: Sequence[str] = (),
) -> list[dict[str, Any]]:
    root.mkdir(parents=True, exist_ok=True)
    log = root / "runs.jsonl"
    done_s = {n: 0.0 for n in nemeses}
    for row in load_rows(root):  # resume: count what an earlier sweep here already ran
        if row["nemesis"] in done_s:
            done_s[row["nemesis"]] += row["time_limit_s"]
    started = time.monotonic()
    rows = load_rows(root)
    # Past every seed a row names: a row taken out by hand must not make the next run reuse
    # the seed (and the directory) of one that is still in the table.
    seed = max([first_seed + len(rows), *(int(r["seed"]) + 1 for r in rows)])
    while True:
        todo = [n for n in nemeses if done_s[n] < minutes * 60]
        if not todo:
            break
        for n in todo:
            if budget_minutes is not None and time.monotonic() - started > budget_minutes * 60:
                return load_rows(root)
            out = root / f"{n.replace(',', '+')}-seed{seed}"
            print(
                f"sweep: {n} seed {seed} ({done_s[n] / 60:.1f}/{minutes} min)",
                file=sys.stderr,
                flush=True,
            )
            row = run_one(out, n, seed, time_limit_s, extra)
            with open(log, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(
                f"sweep:   -> valid={row['valid']} rc={row['rc']} "
                f"anomalies={row['anomaly_types']} ({row['wall_s']} s)",
                file=sys.stderr,
                flush=True,
            )
            done_s[n] += time_limit_s
            seed += 1
    return load_rows(root)


def _free_name(path: Path) -> Path:
    n, cand = 1, path
    while cand.exists():
        n += 1
        cand = path.with_name(f"{path.name}{n}")
    return cand


def load_rows(root: Path) -> list[dict[str, Any]]:
    try:
        lines = (root / "runs.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def replicas_lost_at_once(run_dir: str | Path, prefix: str = "b") -> int:
    """The most nodes named `prefix`* (Longboat's brokers) one lose-unsynced fault hit at
    once, from the run's history (targets as resolved when the fault started)."""
    return most_targets_at_once(run_dir, ("lose-unsynced",), prefix)


def most_targets_at_once(run_dir: str | Path, kinds: Sequence[str], prefix: str = "") -> int:
    """The most targets named `prefix`* that one fault of `kinds` hit at once, from the
    run's history (targets as resolved when the fault started)."""
    most = 0
    try:
        lines = (Path(run_dir) / "history.jsonl").read_text().splitlines()
    except OSError:
        return 0
    quoted = [f'"{k}"' for k in kinds]
    for line in lines:
        if '"nemesis"' not in line or not any(q in line for q in quoted):
            continue
        op = json.loads(line)
        value = op.get("value") or {}
        if op.get("f") == "start" and value.get("kind") in kinds:
            targets = value.get("targets") or []
            most = max(most, sum(1 for t in targets if str(t).startswith(prefix)))
    return most


DISK_KINDS = ("disk-full", "disk-eio", "disk-corrupt")


def _option(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in run arguments (``--flag V`` or ``--flag=V``), last one wins."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a[len(flag) + 1 :]
    return value


def label_of(r: dict[str, Any]) -> str:
    """A row's table label. lose-unsynced runs are split by how many brokers one fault hit:
    losing unsynced writes on one replica must lose nothing, while on two or three at once
    it may (durability by replication, `hw_requires_leader_flush` off, as Kafka)."""
    label = str(r["nemesis"])
    extra = r.get("extra", [])
    if "--idempotence" in extra:
        label += f" (idempotence {extra[extra.index('--idempotence') + 1]})"
    if "--acks-require-fsync" in extra:
        label += " (acks_require_fsync)"
    consumers = _option(extra, "--consumers")
    if consumers not in (None, "assign"):
        label += f" (consumers {consumers})"
    if "lose-unsynced" in label.split(","):
        n = replicas_lost_at_once(r["dir"])
        label += " (1 broker at a time)" if n <= 1 else " (2+ brokers at once)"
    disk = [k for k in DISK_KINDS if k in label.split(",") or label.split(",") == ["disk"]]
    if disk:
        n = most_targets_at_once(r["dir"], DISK_KINDS)
        label += " (1 node at a time)" if n <= 1 else " (2+ nodes at once)"
    return label


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    for r in rows:
        label = label_of(r)
        t = table.setdefault(label, {c: 0 for c in COLUMNS} | {"nemesis": label, "seeds": set()})
        counts = r.get("counts", {})
        types = set(r.get("anomaly_types", []))
        t["minutes"] += r["time_limit_s"] / 60
        t["runs"] += 1
        t["seeds"].add(r["seed"])
        t["invalid"] += 0 if r.get("valid") is True else 1
        t["lost"] += sum(counts.get(k, 0) for k in LOST)
        # Allowed without idempotent producers, and still worth seeing in the table.
        t["dup"] += counts.get("duplicate", 0) + counts.get("allowed-duplicate", 0)
        t["inconsistent"] += counts.get("inconsistent-offsets", 0)
        t["other"] += sum(
            counts.get(k, 0) for k in types if k not in (*LOST, "duplicate", "inconsistent-offsets")
        )
    out = []
    for t in table.values():
        t["seeds"] = len(t["seeds"])
        t["minutes"] = round(t["minutes"], 1)
        out.append(t)
    return out


def format_table(summary: Sequence[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for t in summary:
        lines.append("| " + " | ".join(str(t[c]) for c in COLUMNS) + " |")
    return "\n".join(lines)
