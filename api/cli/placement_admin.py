"""What the replica-placement commands share (``partitions reassign``, ``brokers drain``,
``topics alter --replication-factor``): reading the current assignment and the brokers over
the v3 API, and submitting a plan in kafka-reassign-partitions' JSON format.

Not a subcommand module: it registers nothing, imports only ``api.cli.common`` and the
layers below, and the command modules import it (so the command line keeps no import cycle).

The plan format is Kafka's::

    {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]}

(``log_dirs``, which Kafka also accepts, is ignored: each broker has one data directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from api.cli.common import AdminError, HttpAdmin
from metalog.placement import PlacementBroker
from metalog.records import BrokerId

Plan = dict[tuple[str, int], tuple[BrokerId, ...]]


def read_json_file(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise click.BadParameter(
            f"cannot read {path}: {e.strerror or e}", param_hint=what
        ) from None
    except ValueError as e:
        raise click.BadParameter(f"{path} is not JSON: {e}", param_hint=what) from None


def parse_plan(data: Any, what: str = "--reassignment-json-file") -> Plan:
    """A reassignment JSON's partitions -> target replicas; a clear error for anything else."""
    parts = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(parts, list) or not parts:
        raise click.BadParameter(
            'expected {"version": 1, "partitions": [{"topic", "partition", "replicas"}]}',
            param_hint=what,
        )
    out: Plan = {}
    for i, e in enumerate(parts):
        ok = (
            isinstance(e, dict)
            and isinstance(e.get("topic"), str)
            and type(e.get("partition")) is int
            and e["partition"] >= 0
            and isinstance(e.get("replicas"), list)
            and e["replicas"]
            and all(type(b) is int and b >= 0 for b in e["replicas"])
            and len(set(e["replicas"])) == len(e["replicas"])
        )
        if not ok:
            raise click.BadParameter(
                f"partitions[{i}] needs a topic, a partition >= 0 and distinct broker ids "
                f"as replicas: {e!r}",
                param_hint=what,
            )
        key = (e["topic"], e["partition"])
        if key in out:
            raise click.BadParameter(f"{key[0]}-{key[1]} appears twice", param_hint=what)
        out[key] = tuple(BrokerId(b) for b in e["replicas"])
    return out


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "version": 1,
        "partitions": [
            {"topic": t, "partition": p, "replicas": [int(b) for b in plan[(t, p)]]}
            for t, p in sorted(plan)
        ],
    }


def brokers(admin: HttpAdmin) -> list[dict[str, Any]]:
    _, body = admin.request("GET", admin.v3("/brokers"))
    return list(body["data"])


def usable_brokers(admin: HttpAdmin, only: set[int] | None = None) -> list[PlacementBroker]:
    """Brokers that may receive replicas: registered, unfenced, not shutting down (and in
    ``only`` if given), with their racks."""
    out = []
    for b in brokers(admin):
        if b.get("fenced") or b.get("in_controlled_shutdown"):
            continue
        if only is not None and b["broker_id"] not in only:
            continue
        out.append(PlacementBroker(BrokerId(b["broker_id"]), b.get("rack")))
    return out


def topic_names(admin: HttpAdmin) -> list[str]:
    _, body = admin.request("GET", admin.v3("/topics"))
    return sorted(t["topic_name"] for t in body["data"])


def assignment(admin: HttpAdmin, topics: list[str]) -> Plan:
    """The current replicas of every partition of ``topics`` (targets first while moving:
    the replicas as the broker lists them)."""
    out: Plan = {}
    for t in topics:
        _, body = admin.request("GET", admin.v3(f"/topics/{t}/partitions"))
        for p in body["data"]:
            out[(t, int(p["partition_id"]))] = tuple(
                BrokerId(r["broker_id"]) for r in p["replicas"]
            )
    return out


def submit(admin: HttpAdmin, plan: dict[tuple[str, int], tuple[BrokerId, ...] | None]) -> list[str]:
    """Start (or, with None, cancel) the moves of ``plan``; the per-partition refusals."""
    body = {
        "version": 1,
        "partitions": [
            {
                "topic": t,
                "partition": p,
                "replicas": None if plan[(t, p)] is None else [int(b) for b in plan[(t, p)] or ()],
            }
            for t, p in sorted(plan)
        ],
    }
    _, ans = admin.request("POST", admin.v3("/topics/-/partitions/-/reassignment"), body)
    return [
        f"{r['topic_name']}-{r['partition_id']}: {r['message']}"
        for r in ans["data"]
        if r.get("error_code")
    ]


def ongoing(admin: HttpAdmin) -> dict[tuple[str, int], dict[str, Any]]:
    _, body = admin.request("GET", admin.v3("/topics/-/partitions/-/reassignment"))
    return {(r["topic_name"], int(r["partition_id"])): r for r in body["data"]}


def set_throttle(admin: HttpAdmin, rate_bytes_per_s: int | None) -> None:
    """The cluster-wide replication throttle for reassignment traffic (None: removed)."""
    if rate_bytes_per_s is None:
        admin.request("DELETE", admin.v3("/reassignment-throttle"))
    else:
        admin.request(
            "PUT", admin.v3("/reassignment-throttle"), {"rate_bytes_per_s": rate_bytes_per_s}
        )


def execute(admin: HttpAdmin, plan: Plan, throttle: int | None, *, as_json: bool) -> dict[str, Any]:
    """Print the current assignment (to roll back with), set the throttle, start the plan."""
    current = assignment(admin, sorted({t for t, _ in plan}))
    missing = sorted(k for k in plan if k not in current)
    if missing:
        raise AdminError("no such partition(s): " + ", ".join(f"{t}-{p}" for t, p in missing))
    rollback = plan_json({k: current[k] for k in plan})
    if not as_json:
        click.echo("Current partition replica assignment\n")
        click.echo(json.dumps(rollback))
        click.echo("\nSave this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:
        set_throttle(admin, throttle)
        if not as_json:
            click.echo(
                f"Warning: You must run --verify periodically, until the reassignment "
                f"completes, to ensure the throttle is removed.\n"
                f"The inter-broker throttle limit was set to {throttle} B/s"
            )
    errors = submit(admin, dict(plan))
    if errors:
        raise AdminError("some reassignments were refused:\n  " + "\n  ".join(errors))
    if not as_json:
        click.echo(
            "Successfully started partition reassignment(s) for "
            + ",".join(f"{t}-{p}" for t, p in sorted(plan))
        )
    return {"rollback": rollback, "started": plan_json(plan), "throttle": throttle}
