"""The sweep's table: per nemesis, minutes, runs, seeds and the anomaly columns."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from jepsen_tests.sweep import format_table, load_rows, summarize


def _row(
    nemesis: str, seed: int, valid: bool, counts: dict[str, int], extra: list[str] | None = None
) -> dict[str, object]:
    return {
        "nemesis": nemesis,
        "seed": seed,
        "time_limit_s": 60.0,
        "extra": extra or [],
        "rc": 0 if valid else 1,
        "valid": valid,
        "counts": counts,
        "anomaly_types": [k for k in counts if k not in ("unseen",)] if not valid else [],
    }


def test_summary_sums_runs_and_splits_anomaly_columns(tmp_path: Path) -> None:
    rows = [
        _row("kill", 1, True, {"unseen": 2}),
        _row(
            "kill",
            2,
            False,
            {
                "lost-middle": 3,
                "lost-prefix": 1,
                "lost-write": 3,
                "inconsistent-offsets": 4,
                "unseen": 1,
            },
        ),
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
        ops = [
            {
                "process": "nemesis",
                "type": "info",
                "f": "start",
                "value": {"id": str(i), "kind": "lose-unsynced", "targets": t},
            }
            for i, t in enumerate(targets)
        ]
        (d / "history.jsonl").write_text("".join(json.dumps(o) + "\n" for o in ops))
        return str(d)

    rows = [
        dict(_row("lose-unsynced", 1, True, {}), dir=run_dir("a", [["b1", "q1", "q2"]])),
        dict(
            _row("lose-unsynced", 2, False, {"lost-middle": 5}),
            dir=run_dir("b", [["b1"], ["b2", "b3"]]),
        ),
    ]
    table = {t["nemesis"]: t for t in summarize(rows)}
    assert table["lose-unsynced (1 broker at a time)"]["invalid"] == 0
    assert table["lose-unsynced (2+ brokers at once)"]["lost"] == 5


def test_runs_with_group_consumers_get_their_own_rows() -> None:
    rows = [
        _row("kill", 1, True, {}, ["--consumers", "group"]),
        _row("kill", 2, True, {}, ["--consumers=mixed"]),
        _row("kill", 3, True, {}, ["--consumers", "assign"]),
    ]
    table = {t["nemesis"]: t["runs"] for t in summarize(rows)}
    assert table == {"kill (consumers group)": 1, "kill (consumers mixed)": 1, "kill": 1}


def test_a_run_refuses_a_directory_an_earlier_run_left(tmp_path: Path) -> None:
    # Started over an interrupted run's files, the nodes would open its data and the checker
    # would read its records as this run's (the sweep once reported 457 "duplicates" so).
    from jepsen_tests.runner import RunConfig, run

    (tmp_path / "data").mkdir()
    with pytest.raises(ValueError, match="not empty"):
        run(object(), RunConfig(out_dir=tmp_path))  # type: ignore[arg-type]


def test_the_sweep_moves_an_interrupted_runs_directory_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jepsen_tests import sweep

    out = tmp_path / "kill-seed7"
    (out / "data").mkdir(parents=True)
    (out / "data" / "old").write_text("left by a run that never finished")
    seen: list[bool] = []

    def fake_run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        seen.append(out.exists())  # the run starts on an empty directory
        out.mkdir()
        (out / "results.json").write_text(json.dumps({"result": {"valid": True}}))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(sweep.subprocess, "run", fake_run)
    row = sweep.run_one(out, "kill", 7, 1.0)
    assert seen == [False]
    assert row["valid"] is True
    assert (tmp_path / "kill-seed7.interrupted" / "data" / "old").read_text().startswith("left")
    (out / "results.json").unlink()
    out.rmdir()
    out.mkdir()
    (out / "x").write_text("again")
    sweep.run_one(out, "kill", 7, 1.0)
    assert (tmp_path / "kill-seed7.interrupted2" / "x").exists()


def test_a_resumed_sweep_numbers_its_runs_past_every_seed_in_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jepsen_tests import sweep

    # Two rows, seeds 5 and 9 (a third was taken out by hand): the next run is seed 10, not 3,
    # whose number (and directory) may belong to a run still in the table.
    (tmp_path / "runs.jsonl").write_text(
        "".join(json.dumps(_row("pause", s, True, {})) + "\n" for s in (5, 9))
    )
    seeds: list[int] = []

    def fake_run_one(
        out: Path, nemesis: str, seed: int, time_limit_s: float, extra: object = ()
    ) -> dict[str, object]:
        seeds.append(seed)
        return {**_row(nemesis, seed, True, {}), "wall_s": 1.0}

    monkeypatch.setattr(sweep, "run_one", fake_run_one)
    sweep.sweep(tmp_path, ["kill"], minutes=1.0, time_limit_s=60.0, first_seed=1)
    assert seeds == [10]


def test_disk_fault_runs_split_by_nodes_hit_at_once(tmp_path: Path) -> None:
    def run_dir(name: str, faults: list[tuple[str, list[str]]]) -> str:
        d = tmp_path / name
        d.mkdir()
        ops = [
            {
                "process": "nemesis",
                "type": "info",
                "f": "start",
                "value": {"id": str(i), "kind": k, "targets": t},
            }
            for i, (k, t) in enumerate(faults)
        ]
        # a ballast note names one node; it is not a fault start and must not count
        ops.append(
            {
                "process": "nemesis",
                "type": "info",
                "f": "ballast",
                "value": {"id": "9", "kind": "disk-full", "targets": ["a", "b", "c"]},
            }
        )
        (d / "history.jsonl").write_text("".join(json.dumps(o) + "\n" for o in ops))
        return str(d)

    rows = [
        {
            **_row("disk-eio", 1, True, {}),
            "dir": run_dir("a", [("disk-eio", ["b1"]), ("disk-eio", ["q2"])]),
        },
        {**_row("disk-eio", 2, True, {}), "dir": run_dir("b", [("disk-eio", ["b1", "q3"])])},
        {
            **_row("disk-corrupt,kill", 3, True, {}),
            "dir": run_dir("c", [("kill", ["b1", "b2"]), ("disk-corrupt", ["q1"])]),
        },
        {**_row("partition-oneway", 4, True, {}), "dir": run_dir("d", [])},
    ]
    labels = {t["nemesis"] for t in summarize(rows)}
    assert labels == {
        "disk-eio (1 node at a time)",
        "disk-eio (2+ nodes at once)",
        "disk-corrupt,kill (1 node at a time)",
        "partition-oneway",
    }
