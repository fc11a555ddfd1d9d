"""Found by the lose-unsynced nemesis: a partition leader that loses its unsynced writes and
restarts within the controller's session timeout wipes acknowledged acks=all writes from
every replica.

Sequence (3 brokers, RF 3, ISR of 3, every node with ``LONGBOAT_LAZYFS=1`` so a SIGKILL loses
what was not fsynced, as a power cut would): 100 acks=all writes are acknowledged; the leader
is killed and restarted 1 s later. Before its new registration is accepted (the old
incarnation's session is still alive), its metadata image still shows it leading: it opened
the partition with an empty log and led again *in the same leader epoch* with the same ISR.
The followers fetched, got a diverging epoch ``[0, 0]``, truncated to 0 below their high
watermark, and the 100 writes were gone. With the restart after the session timeout (12 s) leadership moves first and nothing
is lost (second test), so the bug is the quick re-registration path.

Fixed in ``broker/replica_manager.py`` (``ReplicaManager._registered_in``): a broker's
replicas follow the metadata only once the image holds *this* incarnation's registration,
as Kafka's ``BrokerServer`` installs its metadata publishers only after registering and
catching up. The controller takes a re-registering broker out of every ISR and leadership
in the same batch as its registration (KIP-966), so the restarted broker's first applied
image makes it a follower, and it truncates to the new leader instead of the reverse.

    python -m pytest -q tests/integration/jepsen/test_jepsen_unsynced_leader.py
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from jepsen_support import read_partition0

from api.client import AsyncProducer
from jepsen_tests.longboat import LongboatCluster

# In the extended tier (docs/testing.md): a real fault-injection run of its own; the fast
# suite keeps the queue workload (test_jepsen_longboat.py) and the transactional one.
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def _lost_after_leader_restart(run: Path, restart_after_s: float) -> tuple[list[int], str]:
    c = LongboatCluster(n=3, partitions=1)
    c.setup(run, lambda node: {"LONGBOAT_LAZYFS": "1"}, lambda argv: argv)
    try:
        c.start()

        async def produce(values: range) -> None:
            async with AsyncProducer(c.broker_urls(), acks=-1, linger_ms=0) as p:
                for i in values:
                    await p.send_and_wait(c.topic, str(i).encode(), partition=0)

        asyncio.run(produce(range(100)))
        leader = c.by_id[int(c.partition_table()[0]["leader"])]
        c.processes[leader].kill()  # LONGBOAT_LAZYFS=1: unsynced bytes die with it
        time.sleep(restart_after_s)
        c.processes[leader].start()
        deadline = time.monotonic() + 40
        while not c.healthy() and time.monotonic() < deadline:
            time.sleep(0.5)
        asyncio.run(produce(range(100, 110)))
        lost = sorted(set(range(110)) - read_partition0(c, timeout_s=20))
        logs = "\n".join(
            line
            for b in c.brokers
            for line in (run / "logs" / f"{b}.log").read_text().splitlines()
            if "truncat" in line or "leader of" in line
        )
        return lost, logs
    finally:
        c.stop()


def test_leader_losing_unsynced_writes_and_restarting_at_once_loses_nothing(tmp_path: Path) -> None:
    lost, logs = _lost_after_leader_restart(tmp_path, restart_after_s=1.0)
    assert lost == [], f"{len(lost)} acknowledged writes lost: {lost[:10]}...\n{logs}"


def test_leader_losing_unsynced_writes_after_the_session_timeout_loses_nothing(
    tmp_path: Path,
) -> None:
    lost, logs = _lost_after_leader_restart(tmp_path, restart_after_s=12.0)
    assert lost == [], f"{len(lost)} acknowledged writes lost: {lost[:10]}...\n{logs}"
