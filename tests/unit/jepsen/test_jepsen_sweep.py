"""The sweep's table: per nemesis, minutes, runs, seeds and the anomaly columns."""

from __future__ import annotations

import json
from pathlib import Path

from jepsen_tests.sweep import format_table, load_rows, summarize


def _row(nemesis: str, seed: int, valid: bool, counts: dict[str, int],
         extra: list[str] | None = None) -> dict[str, object]:
    return {"nemesis": nemesis, "seed": seed, "time_limit_s": 60.0, "extra": extra or [],
            "rc": 0 if valid else 1, "valid": valid, "counts": counts,
            "anomaly_types": [k for k in counts if k not in ("unseen",)] if not valid else []}


def test_summary_sums_runs_and_splits_anomaly_columns(tmp_path: Path) -> None:
    rows = [
        _row("kill", 1, True, {"unseen": 2}),
        _row("kill", 2, False, {"lost-middle": 3, "lost-prefix": 1, "lost-write": 3,
                                "inconsistent-offsets": 4, "unseen": 1}),
        _row("pause", 3, False, {"duplicate": 2}),
        _row("kill", 4, True, {}, ["--idempotence", "off"]),
    ]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = {t["nemesis"]: t for t in summarize(load_rows(tmp_path))}
    kill = table["kill"]
    assert (kill["minutes"], kill["runs"], kill["seeds"], kill["invalid"]) == (2.0, 2, 2, 1)
    assert (kill["lost"], kill["dup"], kill["inconsistent"]) == (4, 0, 4)
    assert kill["other"] == 3  # lost-write: Jepsen's view of the same losses
    assert table["pause"]["dup"] == 2 and table["pause"]["invalid"] == 1
    assert table["kill (idempotence off)"]["runs"] == 1
    text = format_table(list(table.values()))
    assert text.splitlines()[0].startswith("| nemesis | minutes | runs | seeds | invalid")
    assert "| kill | 2.0 | 2 | 2 | 1 | 4 | 0 | 4 | 3 |" in text


def test_lose_unsynced_runs_split_by_brokers_hit_at_once(tmp_path: Path) -> None:
    def run_dir(name: str, targets: list[list[str]]) -> str:
        d = tmp_path / name
        d.mkdir()
        ops = [{"process": "nemesis", "type": "info", "f": "start",
                "value": {"id": str(i), "kind": "lose-unsynced", "targets": t}}
               for i, t in enumerate(targets)]
        (d / "history.jsonl").write_text("".join(json.dumps(o) + "\n" for o in ops))
        return str(d)

    rows = [dict(_row("lose-unsynced", 1, True, {}), dir=run_dir("a", [["b1", "q1", "q2"]])),
            dict(_row("lose-unsynced", 2, False, {"lost-middle": 5}),
                 dir=run_dir("b", [["b1"], ["b2", "b3"]]))]
    table = {t["nemesis"]: t for t in summarize(rows)}
    assert table["lose-unsynced (1 broker at a time)"]["invalid"] == 0
    assert table["lose-unsynced (2+ brokers at once)"]["lost"] == 5


def test_runs_with_group_consumers_get_their_own_rows() -> None:
    rows = [_row("kill", 1, True, {}, ["--consumers", "group"]),
            _row("kill", 2, True, {}, ["--consumers=mixed"]),
            _row("kill", 3, True, {}, ["--consumers", "assign"])]
    table = {t["nemesis"]: t["runs"] for t in summarize(rows)}
    assert table == {"kill (consumers group)": 1, "kill (consumers mixed)": 1, "kill": 1}
