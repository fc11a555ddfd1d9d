"""What every benchmark in scripts/bench shares: its run-size flags and its output.

A benchmark prints one JSON object per figure on standard output and nothing else there
(progress goes to standard error), so ``all.py``, ``scripts/benchmarks_md.py`` and the smoke
test (tests/integration/bench/test_bench_smoke.py) can read it. A figure's line:

    {"bench": "storage.append", "unit": "MB/s", "value": 512.3,
     "baseline": "os.write loop, same bytes", "baseline_value": 640.1, "ratio": 0.8,
     "params": {...}, "runs": 5}

``value`` and ``baseline_value`` are medians over the runs; ``ratio`` is
value / baseline_value for throughputs and baseline_value / value for latencies, so higher is
always better. A figure with no natural baseline (a failover time) has ``"baseline": null``
and neither ``baseline_value`` nor ``ratio``.

Run sizes: the full run by default, ``--quick`` within about 60 s on 2 cores, ``--smoke`` a
few seconds of tiny data that still prints every figure (its values mean nothing: it checks
that the benchmark runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any, Literal

Size = Literal["smoke", "quick", "full"]


def add_size_flags(ap: argparse.ArgumentParser) -> None:
    """``--quick`` and ``--smoke`` (exclusive); read them back with ``size(args)``."""
    group = ap.add_mutually_exclusive_group()
    group.add_argument(
        "--quick", action="store_true", help="small data, few runs: within about 60 s on 2 cores"
    )
    group.add_argument(
        "--smoke",
        action="store_true",
        help="a few seconds of tiny data: every figure, values meaningless",
    )


def size(args: argparse.Namespace) -> Size:
    return "smoke" if args.smoke else "quick" if args.quick else "full"


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def figure(
    bench: str,
    unit: str,
    values: list[float],
    *,
    baseline: str | None = None,
    baseline_values: list[float] | None = None,
    higher_is_better: bool = True,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Print one figure: the medians of ``values`` and ``baseline_values``, and the ratio
    where higher is better (``higher_is_better=False`` for latencies and durations)."""
    if not values:
        raise ValueError(f"{bench}: no values")
    if (baseline is None) != (not baseline_values):
        raise ValueError(f"{bench}: a baseline needs both its description and its values")
    value = statistics.median(values)
    out: dict[str, Any] = {
        "bench": bench,
        "unit": unit,
        "value": round(value, 3),
        "baseline": baseline,
    }
    if baseline_values:
        base = statistics.median(baseline_values)
        out["baseline_value"] = round(base, 3)
        # No ratio against a zero (a pause that never happened): it would be 0 or infinite.
        if value > 0 and base > 0:
            out["ratio"] = round(value / base if higher_is_better else base / value, 3)
    out["params"] = params or {}
    out["runs"] = len(values)
    print(json.dumps(out), flush=True)
    return out
