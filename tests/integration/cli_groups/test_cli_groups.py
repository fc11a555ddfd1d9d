"""``longboat groups list|describe|reset-offsets|delete`` against a real local cluster, through
click's CliRunner. Group members are v2 consumer instances (they live in the brokers, so the
test process needs no event loop of its own while the CLI runs).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from consumer_groups_support import Consumers, cluster_with_groups, produce, wait_group
from http_cluster_support import HttpCluster

from api.cli.main import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpCluster]:
    root: Path = tmp_path_factory.mktemp("cli-groups")
    with cluster_with_groups(root) as cl:
        yield cl


def run(c: HttpCluster, *args: str) -> Result:
    return CliRunner().invoke(main, ["groups", *args, "--bootstrap", ",".join(c.urls)])


def ok(c: HttpCluster, *args: str) -> str:
    r = run(c, *args)
    assert r.exit_code == 0, (args, r.output, r.exception)
    return r.output


def committed(c: HttpCluster, g: str) -> dict[int, Any]:
    out = json.loads(ok(c, "describe", g, "--json"))
    return {p["partition"]: p["current_offset"] for p in out["partitions"]}


@pytest.fixture(scope="module")
def active(c: HttpCluster) -> Iterator[Consumers]:
    """Group "cli" with one member (instance "m") that has consumed 10 of 30 records per
    partition and committed that; topic "cli-t" has 3 partitions."""
    c.create_topic("cli-t", partitions=3, rf=3)
    produce(
        c,
        "cli-t",
        [{"partition_id": i % 3, "value": {"type": "JSON", "data": i}} for i in range(30)],
    )
    v2 = Consumers(c)
    v2.committed_member("cli", "m", "cli-t", 30, {p: 1 for p in range(3)})
    yield v2


def test_list_and_describe_an_active_group(c: HttpCluster, active: Consumers) -> None:
    wait_group(c, "cli", lambda g: g["state"] == "STABLE")
    out = ok(c, "list")
    line = next(ln for ln in out.splitlines() if ln.startswith("cli "))
    assert line.split() == ["cli", "STABLE", "consumer"]
    assert any(g["group"] == "cli" for g in json.loads(ok(c, "list", "--json")))
    out = ok(c, "describe", "cli")
    lines = out.splitlines()
    assert lines[0].startswith("Group cli: STABLE, generation ")
    assert "assignor range, 1 member(s), coordinator 10" in lines[0]
    header = next(i for i, ln in enumerate(lines) if ln.startswith("GROUP"))
    assert lines[header].split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
    ]
    rows = [ln.split() for ln in lines[header + 1 : header + 4]]
    assert [r[:6] for r in rows] == [["cli", "cli-t", str(p), "2", "10", "8"] for p in range(3)]
    assert "CLIENT-ID" in out and " m " in out
    assert "does not exist" in run(c, "describe", "no-such").output


def test_reset_and_delete_refuse_a_group_with_members(c: HttpCluster, active: Consumers) -> None:
    r = run(c, "reset-offsets", "--group", "cli", "--topic", "cli-t", "--to-earliest", "--execute")
    assert r.exit_code == 1 and "1 active member(s)" in r.output, r.output
    r = run(c, "delete", "cli", "--yes")
    assert r.exit_code == 1 and "active member(s)" in r.output, r.output
    r = run(c, "delete-offsets", "--group", "cli", "--topic", "cli-t:0")
    assert r.exit_code == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in r.output, r.output
    assert committed(c, "cli") == {0: 2, 1: 2, 2: 2}


def test_reset_offsets_dry_run_then_execute_each_target(c: HttpCluster, active: Consumers) -> None:
    assert active.call("DELETE", "cli", "m")[0] == 204
    wait_group(c, "cli", lambda g: g["state"] == "EMPTY")
    r = run(
        c, "reset-offsets", "--group", "cli", "--topic", "cli-t", "--to-earliest", "--to-latest"
    )
    assert r.exit_code == 2 and "exactly one of" in r.output

    out = ok(c, "reset-offsets", "--group", "cli", "--topic", "cli-t", "--to-earliest")
    assert "dry run: nothing changed" in out
    assert [ln.split() for ln in out.splitlines()[1:4]] == [
        ["cli", "cli-t", str(p), "2", "0"] for p in range(3)
    ]
    assert committed(c, "cli") == {0: 2, 1: 2, 2: 2}

    out = ok(c, "reset-offsets", "--group", "cli", "--topic", "cli-t", "--to-earliest", "--execute")
    assert "reset 3 partition(s) of group cli" in out
    assert committed(c, "cli") == {0: 0, 1: 0, 2: 0}
    ok(
        c,
        "reset-offsets",
        "--group",
        "cli",
        "--topic",
        "cli-t",
        "--partition",
        "1",
        "--to-latest",
        "--execute",
    )
    assert committed(c, "cli") == {0: 0, 1: 10, 2: 0}
    r = run(
        c, "reset-offsets", "--group", "cli", "--topic", "cli-t", "--to-offset", "99", "--execute"
    )
    assert r.exit_code == 0 and "outside" in r.output
    assert committed(c, "cli") == {0: 10, 1: 10, 2: 10}
    ok(c, "reset-offsets", "--group", "cli", "--topic", "cli-t", "--to-offset", "4", "--execute")
    assert committed(c, "cli") == {0: 4, 1: 4, 2: 4}
    ok(
        c,
        "reset-offsets",
        "--group",
        "cli",
        "--topic",
        "cli-t",
        "--to-datetime",
        "2000-01-01T00:00:00Z",
        "--execute",
    )
    assert committed(c, "cli") == {0: 0, 1: 0, 2: 0}
    future = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3600))
    ok(
        c,
        "reset-offsets",
        "--group",
        "cli",
        "--topic",
        "cli-t",
        "--to-datetime",
        future,
        "--execute",
    )
    assert committed(c, "cli") == {0: 10, 1: 10, 2: 10}
    r = run(
        c,
        "reset-offsets",
        "--group",
        "cli",
        "--topic",
        "cli-t",
        "--partition",
        "7",
        "--to-earliest",
    )
    assert r.exit_code == 1 and "no partition(s) 7" in r.output

    # A new member starts where the reset put the group.
    ok(c, "reset-offsets", "--group", "cli", "--topic", "cli-t", "--to-offset", "8", "--execute")
    assert active.create("cli", "m2", format="json")[0] == 200
    assert active.call("POST", "cli", "m2", "/subscription", {"topics": ["cli-t"]})[0] == 204
    recs = active.poll_until("cli", "m2", 6)
    assert sorted((r["partition"], r["offset"]) for r in recs) == [
        (p, o) for p in range(3) for o in (8, 9)
    ]
    assert active.call("DELETE", "cli", "m2")[0] == 204


def test_reset_offsets_scopes_shifts_durations_current_and_files(
    c: HttpCluster, active: Consumers, tmp_path: Path
) -> None:
    g = ["--group", "cli2"]
    # A reset names a new group into being (a simple group, as Kafka's tool does).
    ok(c, "reset-offsets", *g, "--topic", "cli-t:0,2", "--to-offset", "5", "--execute")
    assert committed(c, "cli2") == {0: 5, 2: 5}
    out = ok(c, "reset-offsets", *g, "--all-topics", "--shift-by", "-2", "--execute")
    assert "reset 2 partition(s)" in out
    assert committed(c, "cli2") == {0: 3, 2: 3}
    r = run(c, "reset-offsets", *g, "--topic", "cli-t", "--shift-by", "1")
    assert r.exit_code == 1 and "cannot shift cli-t-1" in r.output, r.output
    r = run(c, "reset-offsets", *g, "--all-topics", "--shift-by", "100", "--execute")
    assert r.exit_code == 0 and "outside its range [0, 10]; using 10" in r.output, r.output
    out = ok(c, "reset-offsets", *g, "--all-topics", "--to-current", "--export")
    assert out == "cli-t,0,10\ncli-t,2,10\n"

    f = tmp_path / "offsets.csv"
    f.write_text("cli-t,0,7\ncli2,cli-t,1,9\nother,cli-t,2,1\n")
    out = ok(c, "reset-offsets", *g, "--from-file", str(f), "--execute")
    assert committed(c, "cli2") == {0: 7, 1: 9, 2: 10}
    # The records were written just now: an hour back is the start, no time back the end.
    ok(c, "reset-offsets", *g, "--all-topics", "--by-duration", "PT1H", "--execute")
    assert committed(c, "cli2") == {0: 0, 1: 0, 2: 0}
    out = ok(c, "reset-offsets", *g, "--all-topics", "--by-duration", "PT0S", "--json")
    assert [r["new_offset"] for r in json.loads(out)["plan"]] == [10, 10, 10]
    assert committed(c, "cli2") == {0: 0, 1: 0, 2: 0}  # --json without --execute: a dry run

    for bad, says in [
        (["--all-topics", "--by-duration", "1h"], "expected ISO-8601 PnDTnHnMnS"),
        (["--topic", "cli-t:x", "--to-latest"], "partition numbers"),
        (["--topic", "cli-t", "--to-latest", "--dry-run", "--execute"], "exclude each other"),
        (["--to-latest"], "--topic (repeatable) or --all-topics"),
    ]:
        r = run(c, "reset-offsets", *g, *bad)
        assert r.exit_code == 2 and says in r.output, (bad, r.output)
    r = run(c, "reset-offsets", *g, "--topic", "no-such-topic", "--to-latest")
    assert r.exit_code == 1 and "topic 'no-such-topic' does not exist" in r.output, r.output
    assert committed(c, "cli2") == {0: 0, 1: 0, 2: 0}

    out = ok(c, "delete-offsets", *g, "--topic", "cli-t:1,5")
    assert [ln.split() for ln in out.splitlines()[1:]] == [
        ["cli-t", "1", "deleted"],
        ["cli-t", "5", "no", "offset"],
    ]
    assert committed(c, "cli2") == {0: 0, 2: 0}
    ok(c, "delete-offsets", *g, "--topic", "cli-t")
    r = run(c, "describe", "cli2")
    assert r.exit_code == 1 and "does not exist" in r.output  # no offset left: the group is gone


def test_delete_an_empty_group(c: HttpCluster, active: Consumers) -> None:
    wait_group(c, "cli", lambda g: g["state"] == "EMPTY")
    assert ok(c, "delete", "cli", "--yes").strip() == "deleted consumer group cli"
    r = run(c, "describe", "cli")
    assert r.exit_code == 1 and "does not exist" in r.output
    r = run(c, "delete", "cli", "--yes")
    assert r.exit_code == 1 and "does not exist" in r.output
    assert not any(g["group"] == "cli" for g in json.loads(ok(c, "list", "--json")))
