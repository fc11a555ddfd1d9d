"""The queue workload with a second client implementation: confluent-kafka (librdkafka) over
the brokers' Kafka listeners (``run --client kafka``, `jepsen_tests.kafka_client`), under
kills, pauses and partitions of the nodes.

The checker is the same as for Longboat's own client: every acknowledged write is read at its
offset, nothing is read that was not written, offsets are unique per key. librdkafka cannot
bind a source address, so the partitions cut nodes from each other, not from the clients (see
the client's docstring). A failure is a product bug (or a harness bug): the run directory
named in the assertion holds history.jsonl, node logs and report.html.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jepsen_support import no_leftover_nodes, require_netns

pytest.importorskip("confluent_kafka")

# In the extended tier (docs/testing.md): a fault-injection run of its own; the fast suite
# keeps the queue workload with Longboat's client (test_jepsen_longboat.py) and the
# confluent-kafka conformance tests (tests/integration/kafka).
pytestmark = [pytest.mark.slow, pytest.mark.extended]

# Drawn (jepsen_tests.nemesis.schedule.generate) so that the 30 s run kills and pauses a
# partition leader and partitions a majority and a ring.
SEED = "14"
ARGS = (
    "--time-limit",
    "30",
    "--fault-duration",
    "2,8",
    "--fault-gap",
    "1,3",
    "--nemesis",
    "kill,pause,partition",
    "--seed",
    SEED,
)


def test_no_acknowledged_write_lost_with_librdkafka_clients_under_faults(tmp_path: Path) -> None:
    require_netns()
    out = tmp_path / "run"
    p = subprocess.run(
        [
            *(sys.executable, "-m", "jepsen_tests", "run", "--cluster", "longboat"),
            *("--client", "kafka", "--out", str(out), *ARGS),
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    res_path = out / "results.json"
    assert res_path.exists(), p.stdout + p.stderr[-4000:]
    res = json.loads(res_path.read_text())
    r = res["result"]
    where = (
        f"run dir {out}; rerun: python -m jepsen_tests run --client kafka {' '.join(ARGS)}\n"
        f"{json.dumps(r, indent=1)[:3000]}"
    )
    assert r["valid"] is True and r["anomaly_types"] == [], where
    assert p.returncode == 0, p.stderr[-4000:]
    assert all(res["final_reads_complete"].values()), where
    stats = r["stats"]
    assert stats["sends"]["ok"] > 0 and stats["values_read"] >= stats["sends"]["ok"], where
    # The faults happened and hurt: some sends went unknown or some polls failed.
    kinds = {s["kind"] for s in json.loads((out / "schedule.json").read_text())}
    assert {"kill", "pause"} <= kinds and any(k.startswith("partition") for k in kinds), kinds
    assert stats["sends"].get("info", 0) + stats["polls"].get("fail", 0) > 0, where
    no_leftover_nodes(out)
