"""``common.malloc``: with the thresholds raised, large buffers allocated and freed in turn (a
broker's requests) come from the heap instead of fresh pages; an operator's own glibc
variables win. Each case runs in a process of its own (the setting is process-wide)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

REPO = Path(__file__).resolve().parents[3]
WORKLOAD = """
import os, resource, sys
from common.malloc import keep_large_buffers
tuned = keep_large_buffers() if sys.argv[1] == "tuned" else False
keep = []
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(400):
    fresh = os.urandom(1) * (200_000 + (i * 7919) % 800_000)  # a request-sized buffer
    keep.append(bytes(fresh))  # and a copy of it, as a read path makes
    if len(keep) > 3:
        keep.pop(0)
    del fresh
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _run(mode: str, **env: str) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", WORKLOAD, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    ).stdout.split()
    return out[0] == "True", int(out[1])


def test_large_buffers_are_reused_instead_of_faulted_in_anew() -> None:
    _, default_faults = _run("default")
    tuned, tuned_faults = _run("tuned")
    assert tuned
    # Measured: about 18,000 page faults by default, about 1,200 tuned.
    assert tuned_faults * 4 < default_faults, (tuned_faults, default_faults)


def test_an_operators_own_malloc_variables_are_left_alone() -> None:
    tuned, _ = _run("tuned", MALLOC_TRIM_THRESHOLD_="131072")
    assert not tuned
