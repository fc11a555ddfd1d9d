"""The HTML report renders verdicts, anomaly counts, fault windows and plots."""

from __future__ import annotations

from jepsen_builder import H

from jepsen_tests import report
from jepsen_tests.checkers.queue import check


def test_report_shows_verdict_anomalies_windows_and_plots() -> None:
    h = H()
    h.send(0, "k", 1, offset=0, node="n1")
    h.nemesis("start", "w1", "kill", ["n1"])
    h.send(0, "k", 2, offset=1, node="n1")
    h.send(1, "k", 9, type="info")
    h.nemesis("stop", "w1", "kill", ["n1"])
    h.send(0, "k", 3, offset=2, node="n1")
    h.poll(2, {"k": [(0, 1), (2, 3)]}, final=True)
    history = h.history()
    results = {
        "config": {"workload": "queue", "nemeses": ["kill"], "seed": 1},
        "warnings": ["clock nemesis unavailable: test"],
        "result": check(history),
    }
    page = report.render(results, history)
    assert "INVALID" in page
    assert "lost-write" in page and "lost-middle" in page and "invalidates" in page
    assert "during kill(n1)" in page
    assert page.count("<svg") == 3  # throughput, send latency, poll latency
    assert "kill(n1)" in page and "WARNING: clock nemesis unavailable" in page
    assert "<script" not in page  # self-contained, static


def test_report_of_an_empty_valid_history() -> None:
    h = H().history()
    page = report.render({"result": check(h)}, h)
    assert "VALID" in page and "INVALID" not in page
