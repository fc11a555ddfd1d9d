"""api.http.console: which fault-injection runs the console finds, and which ids it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api.http.console import Console
from api.http.errors import HttpError


def console(reports_dir: Path | None) -> Console:
    return Console(ctx=None, local_rows=list, voter_urls={}, reports_dir=reports_dir)  # type: ignore[arg-type]


def run(d: Path, results: Any = None) -> Path:
    d.mkdir(parents=True)
    body = results if results is not None else {"config": {"seed": 1}, "result": {"valid": True}}
    (d / "results.json").write_text(body if isinstance(body, str) else json.dumps(body))
    return d


def test_runs_are_found_up_to_three_levels_down_and_never_inside_a_run(tmp_path: Path) -> None:
    run(tmp_path / "a")
    run(tmp_path / "sweep" / "b")
    run(tmp_path / "x" / "y" / "c")
    run(tmp_path / "x" / "y" / "z" / "too-deep")
    run(tmp_path / "a" / "data" / "inner")  # a run's own subdirectories are not runs
    run(tmp_path / ".hidden")
    ids = sorted(r["run"] for r in console(tmp_path).reports_list())
    assert ids == ["a", "sweep/b", "x/y/c"]


def test_an_unreadable_results_file_is_listed_with_its_error(tmp_path: Path) -> None:
    run(tmp_path / "broken", "{not json")
    run(tmp_path / "list", [1, 2])
    runs = {r["run"]: r for r in console(tmp_path).reports_list()}
    assert "results.json" in runs["broken"]["error"]
    assert "not a JSON object" in runs["list"]["error"]


def test_a_run_id_is_only_one_the_scan_found(tmp_path: Path) -> None:
    run(tmp_path / "runs" / "a")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "results.json").write_text("{}")
    c = console(tmp_path / "runs")
    assert c.run_dir_or_404("a") == tmp_path / "runs" / "a"
    for bad in ("../secret", "..", "/etc", "a/..", "", "b"):
        with pytest.raises(HttpError) as e:
            c.run_dir_or_404(bad)
        assert e.value.status == 404


def test_the_directory_itself_may_be_a_run(tmp_path: Path) -> None:
    d = run(tmp_path / "one-run")
    c = console(d)
    assert [r["run"] for r in c.reports_list()] == ["one-run"]
    assert c.run_dir_or_404("one-run") == d


def test_off_without_a_directory(tmp_path: Path) -> None:
    assert console(None).reports_list() == []
    assert console(tmp_path / "missing").reports_list() == []
