"""The metadata workload against a real cluster, without faults: topic creates, deletes and
describes through random brokers' v3 HTTP API, checked for linearizability per topic.

Found: not linearizable even without faults. A ``DELETE .../topics/{t}`` is answered 404
from the receiving broker's own metadata image, which lags the controller: a create the
controller has accepted (another client already got ``TOPIC_ALREADY_EXISTS`` because of
it) is not in that image yet, so a later delete says the topic does not exist, and then the
topic appears. Describes read the same lagging images (Kafka's metadata reads are eventually
consistent too; its DeleteTopics, though, is decided by the controller). Expected to fail
until the product changes. Not strict: a short run on a loaded machine sometimes misses the
window (about one run in three at 12 s), so an XPASS alone proves nothing.

    python -m jepsen_tests run --workload metadata --time-limit 20 --seed 1
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jepsen_support import require_netns

pytestmark = pytest.mark.slow


@pytest.mark.xfail(strict=False, reason="product: DELETE topic answers 404 from the broker's "
                   "lagging image; describes read it too (reported to the lead)")
def test_topic_admin_is_linearizable_without_faults(tmp_path: Path) -> None:
    require_netns()
    out = tmp_path / "meta"
    p = subprocess.run([sys.executable, "-m", "jepsen_tests", "run", "--cluster", "longboat",
                        "--workload", "metadata", "--time-limit", "15", "--seed", "1",
                        "--out", str(out)], capture_output=True, text=True, timeout=150)
    res = json.loads((out / "results.json").read_text())
    r = res["result"]
    ops = res["ops"]
    assert ops > 400, p.stdout + p.stderr[-2000:]
    assert r["valid"] is True, json.dumps(r["counts"])
