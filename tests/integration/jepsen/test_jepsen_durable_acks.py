"""``acks_require_fsync``: an acknowledged write survives a power cut of every replica.

Finding 1b of docs/fault-injection.md: with durability by replication alone (Kafka's way, the
default), losing unsynced writes on several brokers over a run can erase acknowledged writes
(a replica that came back empty was elected as the last ISR member while another replica held
everything). With ``acks_require_fsync`` every ISR member has fsynced a write before it is
acknowledged: the leader's high watermark waits for its own fsync and followers fsync before
each fetch. These tests cut the power of all three brokers at once (``LONGBOAT_LAZYFS=1``:
SIGKILL drops what was not fsynced) right after 200 acks=all writes were acknowledged:

* with the option every write is there after the restart;
* without it (the control) writes are lost, which shows the power cut is real.

The randomized check is ``python -m jepsen_tests run --nemesis lose-unsynced --seed 6
--time-limit 60 --fault-duration 2,6 --fault-gap 1,3 --acks-require-fsync`` (valid; the same
run without the flag lost 583 acknowledged writes).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from jepsen_support import produce_to_partition0, read_partition0

from jepsen_tests.longboat import LongboatCluster

# In the extended tier (docs/testing.md): a real fault-injection run of its own; the fast
# suite keeps the queue workload (test_jepsen_longboat.py) and the transactional one.
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def _lost_after_power_cut_of_every_broker(run: Path, fsync: bool) -> list[int]:
    c = LongboatCluster(n=3, partitions=1, acks_require_fsync=fsync)
    c.setup(run, lambda node: {"LONGBOAT_LAZYFS": "1"}, lambda argv: argv)
    try:
        c.start()
        produce_to_partition0(c, range(200))
        for b in c.brokers:
            c.processes[b].kill()
        for b in c.brokers:
            c.processes[b].start()
        deadline = time.monotonic() + 90
        while not c.healthy() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert c.healthy(), (
            f"the cluster did not recover from the power cut: "
            f"{c.partition_table()}\n"
            + "\n".join((run / "logs" / f"{b}.log").read_text()[-1500:] for b in c.brokers)
        )
        return sorted(set(range(200)) - read_partition0(c))
    finally:
        c.stop()


def test_with_acks_require_fsync_a_power_cut_of_every_replica_loses_nothing(tmp_path: Path) -> None:
    lost = _lost_after_power_cut_of_every_broker(tmp_path, fsync=True)
    assert lost == [], f"{len(lost)} acknowledged writes lost: {lost[:10]}..."


def test_without_it_the_same_power_cut_loses_acknowledged_writes(tmp_path: Path) -> None:
    lost = _lost_after_power_cut_of_every_broker(tmp_path, fsync=False)
    assert lost, "nothing lost: the power cut did not drop unsynced writes"
