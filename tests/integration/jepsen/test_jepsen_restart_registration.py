"""A broker restarted after a power cut registers at once, not after its old session.

The restarted process takes its data directory's lock and names the incarnation that held
the directory before (``broker.clean_shutdown.claim_data_dir``); the controller then
replaces that registration at once instead of answering ``DUPLICATE_BROKER_REGISTRATION``
until the old session (9 s) expires. Before, the restarted broker sat idle for most of a
session, fetching nothing, while its dead incarnation still led its partitions: in the
lose-unsynced runs of finding 1b (docs/fault-injection.md) the last replica holding
acknowledged writes was cut in that window.

Real processes (3 brokers, 3 controllers, ``LONGBOAT_LAZYFS=1`` so the SIGKILL loses what was
not fsynced): 100 acks=all writes, the leader is killed and restarted at once; its first
registration attempt is accepted, leadership has moved to a replica that holds the writes,
the restarted broker fetches them back, and nothing is lost.

    python -m pytest -q tests/integration/jepsen/test_jepsen_restart_registration.py
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from jepsen_support import read_partition0

from api.client import AsyncProducer
from jepsen_tests.longboat import LongboatCluster

# A real fault-injection run of its own: extended tier (docs/testing.md).
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def test_a_broker_restarted_after_a_power_cut_registers_without_waiting_out_its_session(
    tmp_path: Path,
) -> None:
    c = LongboatCluster(n=3, partitions=1)
    c.setup(tmp_path, lambda node: {"LONGBOAT_LAZYFS": "1"}, lambda argv: argv)
    try:
        c.start()

        async def produce(values: range) -> None:
            async with AsyncProducer(c.broker_urls(), acks=-1, linger_ms=0) as p:
                for i in values:
                    await p.send_and_wait(c.topic, str(i).encode(), partition=0)

        asyncio.run(produce(range(100)))
        leader = c.by_id[int(c.partition_table()[0]["leader"])]
        log_path = tmp_path / "logs" / f"{leader}.log"
        c.processes[leader].kill()  # unsynced bytes die with it
        before = len(log_path.read_text().splitlines())
        c.processes[leader].start()
        deadline = time.monotonic() + 60
        while not c.healthy() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert c.healthy(), "the cluster did not recover within 60 s"
        new_lines = log_path.read_text().splitlines()[before:]
        refused = [line for line in new_lines if "another incarnation" in line]
        registered = [line for line in new_lines if "registered with epoch" in line]
        assert registered, "\n".join(new_lines[-30:])
        assert refused == [], "the restart waited out its old session:\n" + "\n".join(refused)
        asyncio.run(produce(range(100, 110)))
        lost = sorted(set(range(110)) - read_partition0(c, timeout_s=20))
        assert lost == [], f"{len(lost)} acknowledged writes lost: {lost[:10]}"
    finally:
        c.stop()
