#!/usr/bin/env python3
"""Run the deterministic simulator.

    python scripts/sim.py raft --seed 7                 # one seed
    python scripts/sim.py raft --seed 0 --seeds 1000    # seeds 0..999
    python scripts/sim.py raft --seed 7 -v              # trace every node event
    python scripts/sim.py metadata --seed 0 --seeds 200 # the controller on the Raft sim
    python scripts/sim.py metadata --seed 104 --faults clock_skew,transfer_storm

Prints one JSON line per seed (with --seeds > 1: a summary) and, on a failure, the violated
property and the one line that reproduces it. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.sim import metadata_sim, raft_sim
from tests.sim.raft_sim import add_seed_arguments, run_seeds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sim.py", description=__doc__.split("\n\n")[0])
    p.add_argument("target", choices=["raft", "metadata"])
    add_seed_arguments(p)
    p.add_argument(
        "--faults",
        default=None,
        help="metadata only: comma-separated fault kinds instead of the seed's draw",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="trace events")
    a = p.parse_args(argv)
    faults = None if a.faults is None else frozenset(k for k in a.faults.split(",") if k)

    def run_one(seed: int) -> dict[str, Any]:
        if a.target == "raft":
            return raft_sim.run_seed(seed, a.steps, verbose=a.verbose)
        return metadata_sim.run_seed(seed, a.steps, verbose=a.verbose, faults=faults)

    t0 = time.perf_counter()
    failures = run_seeds(run_one, a.seed, a.seeds, verbose=a.verbose)
    if a.seeds > 1:
        dt = time.perf_counter() - t0
        print(json.dumps({"seeds": a.seeds, "failures": failures, "seconds": round(dt, 2)}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
