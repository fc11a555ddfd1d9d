"""Shared helpers for the benchmark scripts: JSON figures on stdout, progress on stderr."""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any


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
    """Print one figure as BENCHMARKS.md asks: medians, and a ratio where higher is better."""
    value = statistics.median(values)
    out: dict[str, Any] = {"bench": bench, "unit": unit, "value": round(value, 3),
                           "baseline": baseline}
    if baseline is not None and baseline_values:
        base = statistics.median(baseline_values)
        out["baseline_value"] = round(base, 3)
        if value > 0 and base > 0:
            out["ratio"] = round(value / base if higher_is_better else base / value, 3)
    out["params"] = params or {}
    out["runs"] = len(values)
    print(json.dumps(out), flush=True)
    return out
