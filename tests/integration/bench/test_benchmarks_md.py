"""scripts/benchmarks_md.py: the page it writes from all.py's output keeps the hand-kept
History, shows each figure beside its baseline, and names the benchmarks that printed
nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "benchmarks_md.py"
MARKER = (
    "<!-- The History section below is kept by hand: scripts/benchmarks_md.py copies it "
    "unchanged. -->"
)


def _figure(bench: str, value: float, baseline: str | None, base: float | None) -> str:
    fig: dict[str, object] = {"bench": bench, "unit": "ms", "value": value, "baseline": baseline}
    if base is not None:
        fig.update(baseline_value=base, ratio=round(base / value, 3))
    fig.update(params={}, runs=1, command="python scripts/bench/raft_node.py --quick")
    return json.dumps(fig)


def test_page_keeps_history_and_shows_figures_beside_baselines(tmp_path: Path) -> None:
    results = tmp_path / "2026-11-27.jsonl"
    results.write_text(
        _figure("raft.commit_latency_p50", 15.764, "PySyncObj 0.3.17", 108.302)
        + "\n"
        + _figure("raft.failover", 772.1, None, None)
        + "\n"
    )
    out = tmp_path / "benchmarks.md"
    out.write_text(f"# old generated part\n\n{MARKER}\n\n## History\n\n* raft: kept by hand\n")
    subprocess.run([sys.executable, str(SCRIPT), str(results), "--out", str(out)], check=True)
    page = out.read_text()
    assert "# old generated part" not in page
    assert page.count(MARKER) == 1
    assert page.endswith("## History\n\n* raft: kept by hand\n")
    assert "2026-11-27" in page.split(MARKER)[0]
    assert "## `python scripts/bench/raft_node.py --quick`" in page
    assert "| `raft.commit_latency_p50` | 15.8 ms | PySyncObj 0.3.17 | 108 ms | 6.87 |" in page
    assert "| `raft.failover` | 772 ms | none |  |  |" in page
    # every other benchmark of all.py printed nothing in this run: the page says so
    missing = page.split("**No figures in this run** from ", 1)[1].split("(failed", 1)[0]
    assert "`storage_log.py`" in missing and "`raft_node.py`" not in missing
