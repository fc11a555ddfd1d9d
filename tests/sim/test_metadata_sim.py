"""Run the metadata-quorum simulator over many seeds (see tests/sim/metadata_sim.py).

Each seed is its own test case; a failure's message ends with the one line that reproduces
it. ``LONGBOAT_META_SIM_SEEDS`` and ``LONGBOAT_META_SIM_STEPS`` widen the search (e.g. in a
nightly job) without changing the default budget (~30 s on one core).
"""

from __future__ import annotations

import os

import pytest

from tests.sim.metadata_sim import DEFAULT_STEPS, run_seed
from tests.sim.raft_sim import SimulationFailure

SEEDS = int(os.environ.get("LONGBOAT_META_SIM_SEEDS", "120"))
STEPS = int(os.environ.get("LONGBOAT_META_SIM_STEPS", str(DEFAULT_STEPS)))


@pytest.mark.parametrize("seed", range(SEEDS))
def test_metadata_quorum_simulation_keeps_safety_and_liveness(seed: int) -> None:
    try:
        out = run_seed(seed, STEPS)
    except SimulationFailure as e:
        pytest.fail(str(e), pytrace=False)
    assert out.get("activations", 0) > 0, (
        f"no controller ever became active: python -m tests.sim.metadata_sim --seed {seed}"
    )
