#!/usr/bin/env python3
"""Run every benchmark in ``--quick`` mode (or ``--smoke``) and print all their figures.

Each benchmark is a separate process so one that crashes does not hide the others; its
standard error passes through (progress), its standard output (figures, JSON lines) is
collected and printed, each figure with one key more, ``command``: the command line that
gave it. Exits 1 if any benchmark failed or printed a line that is not a JSON object.
``scripts/benchmarks_md.py`` turns the output into docs/benchmarks.md.

Usage: python scripts/bench/all.py [--smoke] > results.jsonl
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

BENCHMARKS = (
    "storage_log.py",
    "page_cache.py",
    "raft_node.py",
    "metadata.py",
    "produce.py",
    "http_produce.py",
    "groups.py",
    "schemas.py",
    "security.py",
    "spark_read.py",
    "metrics_scrape.py",
    "reassign.py",
    "kafka_protocol.py",
    "transactions.py",
    "replication_partitions.py",
    "kafka_fetch.py",
)
"""Every benchmark in this folder, cheapest first. The rest are helpers (``_*.py``) and the
per-process servers the benchmarks start (``*_server.py``)."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="run each with --smoke instead")
    args = ap.parse_args()
    size = "--smoke" if args.smoke else "--quick"
    failed = []
    for name in BENCHMARKS:
        print(f"==> {name} {size}", file=sys.stderr, flush=True)
        proc = subprocess.run(
            [sys.executable, str(HERE / name), size], stdout=subprocess.PIPE, text=True
        )
        command = f"python scripts/bench/{name} {size}"
        bad = False
        for line in proc.stdout.splitlines():
            try:
                fig = json.loads(line)
            except ValueError:
                fig = None
            if not isinstance(fig, dict):
                print(f"{name}: not a figure: {line!r}", file=sys.stderr)
                bad = True
                continue
            print(json.dumps({**fig, "command": command}), flush=True)
        if proc.returncode != 0 or bad:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
