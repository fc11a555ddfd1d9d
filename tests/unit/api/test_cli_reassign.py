"""The placement commands' input checks: kafka-reassign-partitions' and kafka-delete-records'
JSON files and the option combinations are refused with a clear message before any broker is
asked (no cluster runs here: a request would fail with "no broker answered")."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from api.cli.main import main
from api.cli.placement_admin import parse_plan, plan_json

NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, [*args, "--bootstrap", NOWHERE])
    return res.exit_code, res.output


def test_a_plan_round_trips_through_kafkas_json() -> None:
    data = {
        "version": 1,
        "partitions": [
            {"topic": "t", "partition": 1, "replicas": [3, 1]},
            {"topic": "t", "partition": 0, "replicas": [2], "log_dirs": ["any"]},
        ],
    }
    plan = parse_plan(data)
    assert plan == {("t", 0): (2,), ("t", 1): (3, 1)}
    assert parse_plan(plan_json(plan)) == plan


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"partitions": []},
        {"partitions": [{"topic": "t", "partition": 0}]},
        {"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]},
        {"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]},
        {"partitions": [{"topic": "t", "partition": 0, "replicas": ["1"]}]},
        {"partitions": [{"topic": "t", "partition": 0, "replicas": []}]},
        {
            "partitions": [
                {"topic": "t", "partition": 0, "replicas": [1]},
                {"topic": "t", "partition": 0, "replicas": [2]},
            ]
        },
    ],
)
def test_bad_plans_are_refused(data: object) -> None:
    with pytest.raises(click.BadParameter):
        parse_plan(data)


def test_reassign_needs_a_mode_and_its_files(tmp_path: Path) -> None:
    code, out = run("partitions", "reassign")
    assert code == 2 and "--generate, --execute, --verify, --cancel" in out
    code, out = run("partitions", "reassign", "--execute")
    assert code == 2 and "--reassignment-json-file" in out
    code, out = run("partitions", "reassign", "--generate", "--broker-list", "1,2")
    assert code == 2 and "--topics-to-move-json-file" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, out = run("partitions", "reassign", "--verify", "--reassignment-json-file", str(bad))
    assert code == 2 and "is not JSON" in out


def test_leaders_elect_needs_one_scope() -> None:
    code, out = run("leaders", "elect", "--type", "preferred")
    assert code == 2 and "--all or --topic" in out
    code, out = run("leaders", "elect", "--type", "preferred", "--all", "--topic", "t")
    assert code == 2
    code, out = run("leaders", "elect", "--type", "dirty", "--all")
    assert code == 2 and "preferred" in out


def test_records_delete_checks_its_file(tmp_path: Path) -> None:
    f = tmp_path / "offsets.json"
    f.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": -2}]}))
    code, out = run("records", "delete", "--offset-json-file", str(f), "--yes")
    assert code == 2 and "offsets >= -1" in out
