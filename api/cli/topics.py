"""``longboat topics create|list|describe|delete|alter``: topic administration over HTTP.

Every command talks to a broker's v3 API (``--bootstrap``, default ``$LONGBOAT_BOOTSTRAP`` or
the local cluster file, as ``longboat produce``); the first broker that answers serves it, and
the broker forwards to the active controller. Tables for people, ``--json`` for scripts (the
API's own JSON). An HTTP error leaves with exit status 1 and the API's message.
"""

from __future__ import annotations

from typing import Any

import click

from api.cli.common import (
    AdminError,
    HttpAdmin,
    bootstrap_option,
    confirm_unless_yes,
    emit_json,
    json_option,
    main,
    print_table,
    resolve_bootstrap,
    yes_option,
)
from api.cli.placement_admin import assignment, plan_json, submit, usable_brokers
from metalog.placement import PlacementError
from metalog.reassign_plan import replication_factor_plan


def alter_replication_factor(admin: HttpAdmin, topic: str, n: int) -> dict[str, Any]:
    """Start the reassignment that gives every partition of ``topic`` ``n`` replicas
    (``metalog.reassign_plan.replication_factor_plan``); the plan started."""
    try:
        plan = replication_factor_plan(assignment(admin, [topic]), n, usable_brokers(admin))
    except PlacementError as e:
        raise AdminError(str(e)) from None
    if plan:
        errors = submit(admin, dict(plan))
        if errors:
            raise AdminError("some reassignments were refused:\n  " + "\n  ".join(errors))
    return plan_json(plan)


def parse_configs(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{item!r}: expected NAME=VALUE", param_hint="--config")
        out[k] = v
    return out


@main.group("topics")
def topics_group() -> None:
    """Create, list, describe, delete and alter topics."""


@topics_group.command("create")
@click.argument("topic")
@click.option("--partitions", "-p", type=click.IntRange(1), help="Default: the cluster's.")
@click.option("--replication-factor", "-r", type=click.IntRange(1), help="Default: the cluster's.")
@click.option(
    "--config",
    "-c",
    "configs",
    multiple=True,
    metavar="NAME=VALUE",
    help="A topic config, e.g. retention.ms=3600000 (repeatable).",
)
@click.option("--validate-only", is_flag=True, help="Check the request; create nothing.")
@bootstrap_option
@json_option
def topics_create(
    topic: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    validate_only: bool,
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """Create TOPIC (waits until the brokers see it with leaders)."""
    admin = HttpAdmin(resolve_bootstrap(bootstrap))
    body: dict[str, Any] = {
        "topic_name": topic,
        "validate_only": validate_only,
        "configs": [{"name": k, "value": v} for k, v in parse_configs(configs).items()],
    }
    if partitions is not None:
        body["partitions_count"] = partitions
    if replication_factor is not None:
        body["replication_factor"] = replication_factor
    if not as_json:
        click.echo(f"creating topic {topic} ...", err=True)
    _, out = admin.request("POST", admin.v3("/topics"), body)
    if as_json:
        emit_json(out)
    elif validate_only:
        click.echo(f"topic {topic}: valid (nothing created)")
    else:
        click.echo(
            f"created topic {topic}: {out['partitions_count']} partition(s), "
            f"replication factor {out['replication_factor']}"
        )


@topics_group.command("list")
@bootstrap_option
@json_option
@click.option("--internal", is_flag=True, help="Include internal topics (__...).")
def topics_list(bootstrap: str | None, as_json: bool, internal: bool) -> None:
    """List topics."""
    admin = HttpAdmin(resolve_bootstrap(bootstrap))
    _, out = admin.request("GET", admin.v3("/topics"))
    topics = [t for t in out["data"] if internal or not t["is_internal"]]
    if as_json:
        emit_json(topics)
        return
    print_table(
        [
            [t["topic_name"], t["partitions_count"], t["replication_factor"], t["topic_id"]]
            for t in topics
        ],
        ["TOPIC", "PARTITIONS", "RF", "TOPIC ID"],
    )


def _min_isr(cfgs: dict[str, Any]) -> int:
    for c in cfgs["data"]:
        if c["name"] == "min.insync.replicas":
            try:
                return int(c["value"])
            except (TypeError, ValueError):
                return 1
    return 1


def _partition_flags(p: dict[str, Any], min_isr: int, live: set[int]) -> set[str]:
    """Kafka's kafka-topics --describe filters a partition matches: under-replicated (ISR
    smaller than the replicas), under-min-isr (ISR below min.insync.replicas), unavailable
    (no leader, or a leader that is not a live broker)."""
    flags = set()
    if len(p["isr"]) < len(p["replicas"]):
        flags.add("under_replicated")
    if len(p["isr"]) < min_isr:
        flags.add("under_min_isr")
    if p["leader_id"] < 0 or p["leader_id"] not in live:
        flags.add("unavailable")
    return flags


def _describe_one(
    admin: HttpAdmin, topic: str, wanted: set[str], live: set[int]
) -> dict[str, Any] | None:
    """A topic with its partitions (those matching every filter in ``wanted``; the topic
    is None when none does) and their offsets, and its non-default configs."""
    _, t = admin.request("GET", admin.v3(f"/topics/{topic}"))
    _, parts = admin.request("GET", admin.v3(f"/topics/{topic}/partitions"))
    _, cfgs = admin.request("GET", admin.v3(f"/topics/{topic}/configs"))
    min_isr = _min_isr(cfgs)
    rows = []
    for p in parts["data"]:
        flags = _partition_flags(p, min_isr, live)
        if not wanted <= flags:
            continue
        p["under_replicated"] = "under_replicated" in flags
        p["under_min_isr"] = "under_min_isr" in flags
        p["unavailable"] = "unavailable" in flags
        off = {"earliest_offset": None, "latest_offset": None}
        # An unavailable partition has no leader to answer: asking would wait out the
        # broker's leader retries (about 10 s each) for an answer that is known to be none
        if "unavailable" not in flags:
            try:
                _, off = admin.request(
                    "GET", admin.v3(f"/topics/{topic}/partitions/{p['partition_id']}/offset")
                )
            except AdminError:
                pass
        p["earliest_offset"], p["latest_offset"] = off["earliest_offset"], off["latest_offset"]
        rows.append(p)
    if wanted and not rows:
        return None
    overrides = {c["name"]: c["value"] for c in cfgs["data"] if not c["is_default"]}
    return {"topic": t, "partitions": rows, "configs": overrides, "min_insync_replicas": min_isr}


def _print_described(d: dict[str, Any]) -> None:
    t, rows, overrides = d["topic"], d["partitions"], d["configs"]
    click.echo(
        f"Topic: {t['topic_name']}  id: {t['topic_id']}  partitions: "
        f"{t['partitions_count']}  replication factor: {t['replication_factor']}"
    )
    click.echo(
        "Configs: " + (", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "(defaults)")
    )
    print_table(
        [
            [
                p["partition_id"],
                p["leader_id"] if p["leader_id"] >= 0 else "none",
                ",".join(str(r["broker_id"]) for r in p["replicas"]),
                ",".join(str(b) for b in p["isr"]),
                p["earliest_offset"],
                p["latest_offset"],
                "yes" if p["under_replicated"] else "",
            ]
            for p in rows
        ],
        ["PARTITION", "LEADER", "REPLICAS", "ISR", "EARLIEST", "LATEST", "UNDER-REPLICATED"],
    )
    for p in rows:  # KIP-966: only partitions whose ISR fell below min.insync.replicas
        elr, lke = p.get("eligible_leader_replicas") or [], p.get("last_known_elr") or []
        if elr or lke:
            click.echo(
                f"Partition {p['partition_id']}: eligible leader replicas "
                f"{','.join(map(str, elr)) or '-'}, last known ELR "
                f"{','.join(map(str, lke)) or '-'}"
            )
    for p in rows:  # KIP-455: partitions being reassigned
        adding, removing = p.get("adding_replicas") or [], p.get("removing_replicas") or []
        if adding or removing:
            click.echo(
                f"Partition {p['partition_id']}: reassignment in progress, adding "
                f"{','.join(map(str, adding)) or '-'}, removing "
                f"{','.join(map(str, removing)) or '-'}"
            )


@topics_group.command("describe")
@click.argument("topic", required=False)
@click.option(
    "--under-replicated-partitions",
    is_flag=True,
    help="Only partitions whose ISR is smaller than their replicas.",
)
@click.option(
    "--under-min-isr-partitions",
    is_flag=True,
    help="Only partitions whose ISR is below the topic's min.insync.replicas.",
)
@click.option(
    "--unavailable-partitions",
    is_flag=True,
    help="Only partitions without a leader, or whose leader is not a live broker.",
)
@click.option("--internal", is_flag=True, help="Without TOPIC: include internal topics (__...).")
@bootstrap_option
@json_option
def topics_describe(
    topic: str | None,
    under_replicated_partitions: bool,
    under_min_isr_partitions: bool,
    unavailable_partitions: bool,
    internal: bool,
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """Partitions (leader, replicas, ISR, offsets) and non-default configs of TOPIC, or of
    every topic; the filters keep only the partitions (and topics) that match all of them,
    as kafka-topics --describe does."""
    admin = HttpAdmin(resolve_bootstrap(bootstrap))
    wanted = {
        name
        for name, on in (
            ("under_replicated", under_replicated_partitions),
            ("under_min_isr", under_min_isr_partitions),
            ("unavailable", unavailable_partitions),
        )
        if on
    }
    _, brokers = admin.request("GET", admin.v3("/brokers"))
    live = {int(b["broker_id"]) for b in brokers["data"] if not b.get("fenced")}
    if topic is not None:
        names = [topic]
    else:
        _, listed = admin.request("GET", admin.v3("/topics"))
        names = sorted(t["topic_name"] for t in listed["data"] if internal or not t["is_internal"])
    described = [d for n in names if (d := _describe_one(admin, n, wanted, live)) is not None]
    if as_json:
        if topic is not None:  # one topic: the object itself, as before filters existed
            emit_json(described[0] if described else None)
        else:
            emit_json(described)
        return
    for i, d in enumerate(described):
        if i:
            click.echo("")
        _print_described(d)


@topics_group.command("delete")
@click.argument("topic")
@yes_option
@bootstrap_option
@json_option
def topics_delete(topic: str, yes: bool, bootstrap: str | None, as_json: bool) -> None:
    """Delete TOPIC and its data."""
    confirm_unless_yes(yes, f"Delete topic {topic} and all its records?")
    admin = HttpAdmin(resolve_bootstrap(bootstrap))
    admin.request("DELETE", admin.v3(f"/topics/{topic}"))
    if as_json:
        emit_json({"deleted": topic})
    else:
        click.echo(f"deleted topic {topic}")


@topics_group.command("alter")
@click.argument("topic")
@click.option("--partitions", "-p", type=click.IntRange(1), help="Grow to this many.")
@click.option(
    "--replication-factor",
    "-r",
    type=click.IntRange(1),
    help="Add or remove replicas (a reassignment; the preferred leader stays).",
)
@click.option(
    "--set", "sets", multiple=True, metavar="NAME=VALUE", help="Set a config (repeatable)."
)
@click.option(
    "--delete-config",
    "deletes",
    multiple=True,
    metavar="NAME",
    help="Reset a config to its default (repeatable).",
)
@bootstrap_option
@json_option
def topics_alter(
    topic: str,
    partitions: int | None,
    replication_factor: int | None,
    sets: tuple[str, ...],
    deletes: tuple[str, ...],
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """Add partitions to TOPIC, change its replication factor and/or its configs."""
    if partitions is None and replication_factor is None and not sets and not deletes:
        raise click.UsageError(
            "nothing to alter: give --partitions, --replication-factor, --set or --delete-config"
        )
    admin = HttpAdmin(resolve_bootstrap(bootstrap))
    done: dict[str, Any] = {"topic": topic}
    if partitions is not None:
        _, t = admin.request(
            "PATCH", admin.v3(f"/topics/{topic}"), {"partitions_count": partitions}
        )
        done["partitions_count"] = t["partitions_count"]
    if replication_factor is not None:
        done["replication_factor"] = replication_factor
        done["reassignment"] = alter_replication_factor(admin, topic, replication_factor)
    ops = [{"name": k, "value": v, "operation": "SET"} for k, v in parse_configs(sets).items()]
    ops += [{"name": k, "operation": "DELETE"} for k in deletes]
    if ops:
        admin.request("POST", admin.v3(f"/topics/{topic}/configs:alter"), {"data": ops})
        done["configs"] = ops
    if as_json:
        emit_json(done)
        return
    if partitions is not None:
        click.echo(f"topic {topic}: {done['partitions_count']} partition(s)")
    if replication_factor is not None:
        n = len(done["reassignment"]["partitions"])
        click.echo(
            f"topic {topic}: replication factor {replication_factor}"
            + (
                f", reassignment of {n} partition(s) started (see `longboat partitions "
                "reassign --verify`)"
                if n
                else " already"
            )
        )
    for op in ops:
        click.echo(
            f"topic {topic}: {op['name']} "
            + (f"= {op['value']}" if op["operation"] == "SET" else "reset to default")
        )
