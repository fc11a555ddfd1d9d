"""Finding 1b of docs/fault-injection.md, with real processes: the last ISR member comes back
empty from a power cut while another replica holds every acknowledged write.

Three brokers X (the leader), Y and Z; one partition, replication factor 3,
``min.insync.replicas`` 2; every broker with ``LONGBOAT_LAZYFS=1``, so a SIGKILL loses what
was not fsynced, as a power cut would (Kafka's default: nothing is fsynced per write). 100
acks=all writes are acknowledged with all three in the ISR. Then Z and Y freeze (SIGSTOP)
until the controller fences them: the ISR shrinks to X, and Y, which left it while it was
below two members, is an eligible leader replica (KIP-966). X loses power and restarts at
once with an empty log; it registers without a clean-shutdown marker.

* With the ELR (the default) X leaves the ISR and the ELR: once unfenced, it is a live
  replica of a partition that still has no leader, because Y holds the committed writes. Y
  and Z thaw, Y is elected, X truncates and catches up: nothing is lost.
* Without it (``eligible_leader_replicas_enable = false``, Kafka 3.x, the code before this
  change) X stays the last ISR member and leads again with its empty log; Y and Z truncate
  to it and the 100 writes are gone. The control shows the power cut is real.

    python -m pytest -q tests/integration/jepsen/test_jepsen_last_replica_standing.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jepsen_support import produce_to_partition0, read_partition0

from jepsen_tests.longboat import LongboatCluster

# In the extended tier (docs/testing.md): a real fault-injection run of its own; the fast
# suite keeps the queue workload (test_jepsen_longboat.py) and the transactional one.
pytestmark = [pytest.mark.slow, pytest.mark.extended]

WRITES = 100


def _wait(
    what: str, cond: Callable[[], Any], timeout_s: float, c: LongboatCluster, run: Path
) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.3)
    logs = "\n".join(
        f"--- {b}\n" + (run / "logs" / f"{b}.log").read_text()[-2500:] for b in c.brokers
    )
    raise AssertionError(
        f"timed out waiting for {what}; partition 0: {c.partition_table().get(0)}\n{logs}"
    )


def _last_replica_standing(run: Path, *, elr: bool) -> tuple[dict[str, Any], list[int]]:
    """The registration of partition 0 once X is back and unfenced (Y and Z frozen), and
    the acknowledged writes lost at the end."""
    c = LongboatCluster(n=3, partitions=1, min_insync_replicas=2)
    c.setup(run, lambda node: {"LONGBOAT_LAZYFS": "1"}, lambda argv: argv)
    if not elr:
        for q in c.controllers:
            with open(run / "config" / f"{q}.toml", "a") as f:
                f.write("eligible_leader_replicas_enable = false\n")
    try:
        c.start()
        produce_to_partition0(c, range(WRITES))
        table = c.partition_table()[0]
        x = c.by_id[int(table["leader"])]
        y, z = (c.by_id[r] for r in table["replicas"] if c.by_id[r] != x)
        ids = {b: c.node_ids[b] for b in (x, y, z)}

        def part() -> dict[str, Any]:
            md = c.broker_metadata()
            return c.partition_table(md).get(0, {}) if md else {}

        c.processes[z].pause()
        _wait(f"{z} out of the ISR", lambda: ids[z] not in part().get("isr", [ids[z]]), 30, c, run)
        c.processes[y].pause()
        _wait(f"the ISR down to {x}", lambda: part().get("isr") == [ids[x]], 30, c, run)
        if elr:
            assert part()["eligible_leader_replicas"] == [ids[y]], part()
        c.processes[x].kill()  # a power cut: what X had not fsynced is gone
        c.processes[x].start()

        def x_back_unfenced() -> dict[str, Any] | None:
            md = c.broker_metadata()
            if md is None:
                return None
            reg = next((b for b in md["brokers"] if b["broker_id"] == ids[x]), None)
            p = c.partition_table(md).get(0)
            ready = md.get("broker", {}).get("ready")
            return p if reg is not None and not reg["fenced"] and ready else None

        seen = _wait(f"{x} registered again and unfenced", x_back_unfenced, 60, c, run)
        time.sleep(1.0)  # an election it could win would have happened by now
        seen = part() or seen
        c.processes[y].resume()
        c.processes[z].resume()
        _wait("every broker ready and the partition led with a full ISR", c.healthy, 90, c, run)
        produce_to_partition0(c, range(WRITES, WRITES + 10))
        lost = sorted(set(range(WRITES + 10)) - read_partition0(c))
        return seen, lost
    finally:
        c.stop()


def test_a_replica_back_empty_is_not_elected_while_an_eligible_replica_holds_the_writes(
    tmp_path: Path,
) -> None:
    seen, lost = _last_replica_standing(tmp_path, elr=True)
    assert seen["leader"] == -1 and seen["isr"] == [], seen
    assert len(seen["eligible_leader_replicas"]) == 1, seen
    assert lost == [], f"{len(lost)} acknowledged writes lost: {lost[:10]}..."


def test_without_elr_the_replica_back_empty_leads_and_acknowledged_writes_are_lost(
    tmp_path: Path,
) -> None:
    seen, lost = _last_replica_standing(tmp_path, elr=False)
    assert seen["leader"] >= 0 and seen["isr"] == [seen["leader"]], seen
    assert lost, "nothing lost: the power cut did not drop unsynced writes"
