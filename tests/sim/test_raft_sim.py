"""Run the Raft simulator over many seeds (see tests/sim/raft_sim.py for the model).

Each seed is its own test case, so a failure names the seed; the assertion message ends with
the one line that reproduces it. ``LONGBOAT_SIM_SEEDS`` and ``LONGBOAT_SIM_STEPS`` widen the
search (e.g. in a nightly job) without changing the default budget.
"""

from __future__ import annotations

import os

import pytest

from tests.sim.raft_sim import DEFAULT_STEPS, SimulationFailure, run_seed

SEEDS = int(os.environ.get("LONGBOAT_SIM_SEEDS", "600"))
STEPS = int(os.environ.get("LONGBOAT_SIM_STEPS", str(DEFAULT_STEPS)))


@pytest.mark.parametrize("seed", range(SEEDS))
def test_raft_simulation_keeps_safety_and_liveness(seed: int) -> None:
    try:
        out = run_seed(seed, STEPS)
    except SimulationFailure as e:
        pytest.fail(str(e), pytrace=False)
    assert out["applied"] > 0, f"nothing was applied: python scripts/sim.py raft --seed {seed}"
