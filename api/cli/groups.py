"""``longboat groups list|describe|reset-offsets|delete``: consumer groups, as
``kafka-consumer-groups`` shows and changes them.

The commands speak the coordinator protocol through the Python client
(``api.client.coordinator``: ``list`` on every broker, ``describe``, ``lag``,
``fetch_offsets``, ``reset_offsets``, ``delete`` at the group's coordinator); offsets for
``--to-earliest``, ``--to-latest`` and ``--to-datetime`` are resolved with ``list_offsets`` at
the partition leaders (``AsyncConsumer.beginning_offsets``, ``end_offsets``,
``offsets_for_times``), as Kafka's tool resolves them before it asks the coordinator.

Resets and deletes need an empty group (no members), as Kafka's tool requires: a live member
would overwrite the reset with its next commit. Both are refused up front with the group's
state and member count, and the coordinator refuses them again (NON_EMPTY_GROUP) if a member
joined meanwhile. ``reset-offsets`` without ``--execute`` only prints the plan.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import click

from api.cli.common import (
    bootstrap_option,
    confirm_unless_yes,
    emit_json,
    json_option,
    main,
    print_table,
    resolve_bootstrap,
    run_loop,
    yes_option,
)
from api.client.consumer import AsyncConsumer
from api.client.coordinator import CoordinatorClient, list_groups
from api.client.errors import ClientError
from api.client.types import TopicPartition

T = TypeVar("T")
REQUEST_TIMEOUT_MS = 30_000


class GroupsError(click.ClickException):
    pass


def _run(fn: Callable[[AsyncConsumer], Awaitable[T]], bootstrap: str | None) -> T:
    """``fn`` with a started client (its transport and metadata serve the coordinator
    calls too); a client error ends the command with its message."""

    async def go() -> T:
        c = AsyncConsumer(resolve_bootstrap(bootstrap), request_timeout_ms=REQUEST_TIMEOUT_MS)
        try:
            await c.start()
            return await fn(c)
        finally:
            await c.close()

    try:
        result: T = run_loop(go())
    except ClientError as e:
        raise GroupsError(str(e)) from None
    return result


def _coordinator(c: AsyncConsumer, group: str) -> CoordinatorClient:
    return CoordinatorClient(
        c.transport, c.metadata, group, retry_timeout_s=REQUEST_TIMEOUT_MS / 1000
    )


async def _describe(coord: CoordinatorClient) -> dict[str, Any]:
    return await coord.call("describe", {})


def _is_empty(desc: dict[str, Any]) -> bool:
    return str(desc.get("state")) in ("EMPTY", "DEAD") and not desc.get("members")


def _refuse_active(desc: dict[str, Any], what: str) -> None:
    if not _is_empty(desc):
        n = len(desc.get("members") or [])
        raise GroupsError(
            f"cannot {what} group '{desc['group']}': it has {n} active member(s) (state "
            f"{desc.get('state')}); stop its consumers first (as kafka-consumer-groups "
            "requires: a live member would overwrite the change with its next commit)"
        )


@main.group("groups")
def groups_group() -> None:
    """List, describe, reset the offsets of, and delete consumer groups."""


@groups_group.command("list")
@bootstrap_option
@json_option
def groups_list(bootstrap: str | None, as_json: bool) -> None:
    """Every consumer group of the cluster, with its state."""

    async def go(c: AsyncConsumer) -> list[dict[str, Any]]:
        return await list_groups(c.transport, c.metadata)

    groups = _run(go, bootstrap)
    if as_json:
        emit_json(groups)
        return
    print_table(
        [[g["group"], g["state"], "simple" if g.get("is_simple") else "consumer"] for g in groups],
        ["GROUP", "STATE", "TYPE"],
    )


async def _describe_all(c: AsyncConsumer, group: str) -> dict[str, Any]:
    coord = _coordinator(c, group)
    desc = await _describe(coord)
    if str(desc.get("state")) == "DEAD":
        raise GroupsError(f"consumer group '{group}' does not exist")
    lag = await coord.call("lag", {})
    return {
        "describe": desc,
        "lag": lag.get("partitions") or [],
        "coordinator_id": coord.coordinator_id,
    }


@groups_group.command("describe")
@click.argument("group")
@bootstrap_option
@json_option
def groups_describe(group: str, bootstrap: str | None, as_json: bool) -> None:
    """State, members, assignment and lag per partition of GROUP."""
    out = _run(lambda c: _describe_all(c, group), bootstrap)
    desc, rows = out["describe"], out["lag"]
    members = desc.get("members") or []
    clients = {str(m["member_id"]): m.get("client_id") for m in members}
    if as_json:
        emit_json(
            {
                "group": desc,
                "coordinator_id": out["coordinator_id"],
                "partitions": [
                    {
                        "topic": t,
                        "partition": p,
                        "current_offset": cur,
                        "log_end_offset": leo,
                        "lag": lag,
                        "consumer_id": m,
                        "client_id": clients.get(m) if m else None,
                    }
                    for t, p, cur, leo, lag, m in rows
                ],
            }
        )
        return
    kind = (
        "simple group"
        if desc.get("is_simple")
        else (
            f"generation {desc.get('generation')}, protocol {desc.get('protocol') or '-'}, "
            f"assignor {desc.get('assignor') or '-'}"
        )
    )
    click.echo(
        f"Group {group}: {desc.get('state')}, {kind}, {len(members)} member(s), "
        f"coordinator {out['coordinator_id']}"
    )
    if not members:
        click.echo(f"Consumer group '{group}' has no active members.")
    click.echo("")
    print_table(
        [
            [group, t, p, cur, leo, lag, m]
            for t, p, cur, leo, lag, m in sorted(rows, key=lambda r: (str(r[0]), int(r[1])))
        ],
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID"],
    )
    if members:
        click.echo("")
        print_table(
            [
                [
                    m["member_id"],
                    m.get("client_id"),
                    len(m.get("assignment") or []),
                    ",".join(f"{t}-{p}" for t, p in sorted(m.get("assignment") or [])) or "-",
                ]
                for m in sorted(members, key=lambda m: str(m["member_id"]))
            ],
            ["CONSUMER-ID", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
        )


def _parse_datetime(v: str) -> int:
    """ISO-8601; without a zone, local time (as kafka-consumer-groups reads it)."""
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise click.BadParameter(
            f"{v!r} is not an ISO-8601 date-time (e.g. 2026-11-21T12:00:00Z)",
            param_hint="--to-datetime",
        ) from None
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return int(dt.timestamp() * 1000)


async def _plan(
    c: AsyncConsumer,
    group: str,
    topics: tuple[str, ...],
    partitions: tuple[int, ...],
    to: tuple[str, Any],
) -> dict[str, Any]:
    coord = _coordinator(c, group)
    desc = await _describe(coord)
    _refuse_active(desc, "reset the offsets of")
    tps: list[TopicPartition] = []
    for t in topics:
        have = await c.partitions_for(t)
        wanted = list(partitions) if partitions else have
        missing = sorted(set(wanted) - set(have))
        if missing:
            raise GroupsError(f"topic '{t}' has no partition(s) {', '.join(map(str, missing))}")
        tps += [TopicPartition(t, p) for p in sorted(wanted)]
    first = await c.beginning_offsets(tps)
    end = await c.end_offsets(tps)
    how, arg = to
    if how == "earliest":
        new = dict(first)
    elif how == "latest":
        new = dict(end)
    elif how == "datetime":
        found = await c.offsets_for_times({tp: int(arg) for tp in tps})
        # No record at or after the time: the end, as Kafka's tool does.
        new = {tp: end[tp] if off is None else off for tp, off in found.items()}
    else:
        # Out of range is clamped to the log, with a note, as Kafka's tool does.
        new = {tp: min(max(int(arg), first[tp]), end[tp]) for tp in tps}
    ans = await coord.call(
        "fetch_offsets", {"partitions": [[tp.topic, tp.partition] for tp in tps]}
    )
    current = {
        TopicPartition(str(r[0]), int(r[1])): r[2]
        for r in ans.get("offsets") or []
        if r[2] is not None and int(r[2]) >= 0
    }
    return {
        "group": group,
        "state": desc.get("state"),
        "plan": [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "current_offset": current.get(tp),
                "new_offset": new[tp],
                "earliest": first[tp],
                "latest": end[tp],
            }
            for tp in tps
        ],
    }


async def _execute(c: AsyncConsumer, plan: dict[str, Any]) -> None:
    ans = await _coordinator(c, plan["group"]).call(
        "reset_offsets",
        {"offsets": [[r["topic"], r["partition"], r["new_offset"]] for r in plan["plan"]]},
    )
    err = str(ans.get("error") or "NONE")
    if err == "NON_EMPTY_GROUP":
        raise GroupsError(
            f"cannot reset the offsets of group '{plan['group']}': a member "
            "joined it meanwhile (NON_EMPTY_GROUP); nothing was changed"
        )
    if err != "NONE":
        raise GroupsError(f"reset refused: {err}: {ans.get('message') or ''}".rstrip(": "))


@groups_group.command("reset-offsets")
@click.option("--group", "-g", required=True, help="The consumer group.")
@click.option(
    "--topic",
    "-t",
    "topics",
    required=True,
    multiple=True,
    help="A topic whose offsets to reset (repeatable).",
)
@click.option(
    "--partition",
    "-p",
    "partitions",
    type=click.IntRange(0),
    multiple=True,
    help="Only these partitions (repeatable; default: all of each topic).",
)
@click.option("--to-earliest", is_flag=True, help="The first offset still in the log.")
@click.option("--to-latest", is_flag=True, help="The end of the log (skip everything).")
@click.option(
    "--to-datetime",
    metavar="ISO-8601",
    help="The first offset with a timestamp at or after this time.",
)
@click.option(
    "--to-offset",
    type=click.IntRange(0),
    metavar="N",
    help="This offset (clamped to the log's range).",
)
@click.option(
    "--execute", is_flag=True, help="Apply the plan. Without it, a dry run prints the plan."
)
@bootstrap_option
@json_option
def groups_reset_offsets(
    group: str,
    topics: tuple[str, ...],
    partitions: tuple[int, ...],
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    to_offset: int | None,
    execute: bool,
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """Move GROUP's committed offsets on the given topic(s). The group must have no members."""
    chosen = [
        (n, v)
        for n, v in (
            ("earliest", to_earliest or None),
            ("latest", to_latest or None),
            ("datetime", to_datetime),
            ("offset", to_offset),
        )
        if v is not None
    ]
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset"
        )
    how, arg = chosen[0]
    if how == "datetime":
        arg = _parse_datetime(str(arg))
    if partitions and len(topics) > 1:
        raise click.UsageError("--partition applies to one --topic")

    async def go(c: AsyncConsumer) -> dict[str, Any]:
        plan = await _plan(c, group, topics, partitions, (how, arg))
        if execute:
            await _execute(c, plan)
        return plan

    plan = _run(go, bootstrap)
    plan["executed"] = execute
    if as_json:
        emit_json(plan)
        return
    if how == "offset":
        for r in plan["plan"]:
            if r["new_offset"] != arg:
                click.echo(
                    f"note: offset {arg} is outside {r['topic']}-{r['partition']}'s "
                    f"range [{r['earliest']}, {r['latest']}]; using {r['new_offset']}",
                    err=True,
                )
    print_table(
        [
            [group, r["topic"], r["partition"], r["current_offset"], r["new_offset"]]
            for r in plan["plan"]
        ],
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
    )
    if execute:
        click.echo(f"reset {len(plan['plan'])} partition(s) of group {group}")
    else:
        click.echo("dry run: nothing changed (add --execute to apply this plan)")


@groups_group.command("delete")
@click.argument("group")
@yes_option
@bootstrap_option
@json_option
def groups_delete(group: str, yes: bool, bootstrap: str | None, as_json: bool) -> None:
    """Delete GROUP and its committed offsets. The group must have no members."""
    confirm_unless_yes(yes, f"Delete consumer group {group} and its committed offsets?")

    async def go(c: AsyncConsumer) -> None:
        coord = _coordinator(c, group)
        desc = await _describe(coord)
        if str(desc.get("state")) == "DEAD":
            raise GroupsError(f"consumer group '{group}' does not exist")
        _refuse_active(desc, "delete")
        ans = await coord.call("delete", {})
        err = str(ans.get("error") or "NONE")
        if err == "NON_EMPTY_GROUP":
            raise GroupsError(
                f"cannot delete group '{group}': a member joined it meanwhile (NON_EMPTY_GROUP)"
            )
        if err == "GROUP_ID_NOT_FOUND":
            raise GroupsError(f"consumer group '{group}' does not exist")
        if err != "NONE":
            raise GroupsError(f"delete refused: {err}: {ans.get('message') or ''}".rstrip(": "))

    _run(go, bootstrap)
    if as_json:
        emit_json({"deleted": group})
    else:
        click.echo(f"deleted consumer group {group}")
