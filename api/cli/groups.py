"""``longboat groups list|describe|reset-offsets|delete-offsets|delete``: consumer groups, as
``kafka-consumer-groups`` shows and changes them.

The commands speak the coordinator protocol through the Python client
(``api.client.coordinator``: ``list`` on every broker, ``describe``, ``lag``,
``fetch_offsets``, ``reset_offsets``, ``delete_offsets``, ``delete`` at the group's
coordinator). A reset is planned by ``api.client.offset_reset`` (shared with the HTTP route):
offsets resolved with ``list_offsets`` at the partition leaders, as Kafka's tool resolves
them before it asks the coordinator.

Resets and deletes need an empty group (no members), as Kafka's tool requires: a live member
would overwrite the reset with its next commit. Both are refused up front with the group's
state and member count, and the coordinator refuses them again (NON_EMPTY_GROUP) if a member
joined meanwhile. ``reset-offsets`` without ``--execute`` only prints the plan.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
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
from api.client.offset_reset import (
    ResetError,
    ResetSpec,
    execute_reset,
    offsets_csv,
    parse_duration_ms,
    parse_offsets_csv,
    parse_scope,
    parse_time_ms,
    plan_reset,
    refuse_active,
)

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


def _refuse_active(desc: dict[str, Any], what: str) -> None:
    try:
        refuse_active(desc, what)
    except ResetError as e:
        raise GroupsError(e.message) from None


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


_TARGETS = (
    ("to_earliest", "earliest"),
    ("to_latest", "latest"),
    ("to_current", "current"),
    ("to_offset", "offset"),
    ("to_datetime", "datetime"),
    ("shift_by", "shift-by"),
    ("by_duration", "by-duration"),
    ("from_file", "file"),
)


def _spec(group: str, given: dict[str, Any]) -> ResetSpec:
    """The one target the user chose, parsed (a usage error for none or several)."""
    chosen = [(how, given[opt]) for opt, how in _TARGETS if given[opt] not in (None, False)]
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-current, --to-offset, "
            "--to-datetime, --shift-by, --by-duration, --from-file"
        )
    how, arg = chosen[0]
    try:
        if how == "datetime":
            return ResetSpec(how, parse_time_ms(str(arg)))
        if how == "by-duration":
            return ResetSpec(how, parse_duration_ms(str(arg)))
        if how == "file":
            text = click.open_file(str(arg)).read()
            return ResetSpec(how, parse_offsets_csv(text, group))
    except ResetError as e:
        flag = {"datetime": "--to-datetime", "file": "--from-file"}.get(how, f"--{how}")
        raise click.UsageError(f"{flag}: {e}") from None
    except OSError as e:
        raise click.UsageError(f"--from-file: {e}") from None
    return ResetSpec(how, None if arg is True else int(arg))


def _scopes(
    topics: tuple[str, ...], partitions: tuple[int, ...]
) -> list[tuple[str, list[int] | None]]:
    try:
        scopes = [parse_scope(t) for t in topics]
    except ResetError as e:
        raise click.UsageError(str(e)) from None
    if partitions:
        if len(scopes) != 1 or scopes[0][1] is not None:
            raise click.UsageError("--partition applies to one --topic without :P,P")
        scopes = [(scopes[0][0], sorted(set(partitions)))]
    return scopes


def _reset_error(e: ResetError) -> GroupsError:
    return GroupsError(e.message)


@groups_group.command("reset-offsets")
@click.option("--group", "-g", required=True, help="The consumer group.")
@click.option(
    "--topic",
    "-t",
    "topics",
    multiple=True,
    metavar="TOPIC[:P,P...]",
    help="A topic (all its partitions, or those listed) whose offsets to reset (repeatable).",
)
@click.option(
    "--partition",
    "-p",
    "partitions",
    type=click.IntRange(0),
    multiple=True,
    help="Only these partitions of the one --topic (repeatable; as TOPIC:P,P).",
)
@click.option("--all-topics", is_flag=True, help="Every topic the group has offsets for.")
@click.option("--to-earliest", is_flag=True, help="The first offset still in the log.")
@click.option("--to-latest", is_flag=True, help="The end of the log (skip everything).")
@click.option(
    "--to-current",
    is_flag=True,
    help="The committed offset (the end where there is none): writes it down as is.",
)
@click.option(
    "--to-offset", type=click.IntRange(0), metavar="N", help="This offset (clamped to the log)."
)
@click.option(
    "--to-datetime",
    metavar="ISO-8601|MS",
    help="The first offset with a timestamp at or after this time.",
)
@click.option(
    "--shift-by",
    type=int,
    metavar="N",
    help="The committed offset plus N (negative: back), clamped to the log.",
)
@click.option(
    "--by-duration",
    metavar="PnDTnHnMnS",
    help="The first offset at or after now minus this ISO-8601 duration (PT1H: an hour ago).",
)
@click.option(
    "--from-file",
    metavar="CSV",
    help="Offsets from a file of topic,partition,offset lines (kafka-consumer-groups' "
    "--export format; '-' reads stdin). Its partitions are the scope.",
)
@click.option("--dry-run", is_flag=True, help="Only print the plan (the default).")
@click.option(
    "--execute", is_flag=True, help="Apply the plan. Without it, a dry run prints the plan."
)
@click.option(
    "--export", is_flag=True, help="Print the plan as topic,partition,offset lines (CSV)."
)
@bootstrap_option
@json_option
def groups_reset_offsets(
    group: str,
    topics: tuple[str, ...],
    partitions: tuple[int, ...],
    all_topics: bool,
    dry_run: bool,
    execute: bool,
    export: bool,
    bootstrap: str | None,
    as_json: bool,
    **targets: Any,
) -> None:
    """Move GROUP's committed offsets, as kafka-consumer-groups --reset-offsets: a scope
    (--topic T, --topic T:0,1, --all-topics, or --from-file) and one target. Prints the plan;
    --execute applies it. The group must have no members."""
    if dry_run and execute:
        raise click.UsageError("--dry-run and --execute exclude each other")
    spec = _spec(group, targets)
    scopes = _scopes(topics, partitions)
    if spec.how != "file" and bool(scopes) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")

    async def go(c: AsyncConsumer) -> dict[str, Any]:
        call = _coordinator(c, group).call
        try:
            plan = await plan_reset(
                c,
                call,
                group,
                spec,
                scopes=scopes,
                all_topics=all_topics,
                now_ms=int(time.time() * 1000),
            )
            if execute:
                await execute_reset(call, plan)
        except ResetError as e:
            raise _reset_error(e) from None
        return plan

    plan = _run(go, bootstrap)
    plan["executed"] = execute
    if as_json:
        emit_json(plan)
        return
    if export:
        click.echo(offsets_csv(plan), nl=False)
        return
    for r in plan["plan"]:
        if r["clamped"]:
            click.echo(
                f"note: the offset asked for {r['topic']}-{r['partition']} is outside its "
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


@groups_group.command("delete-offsets")
@click.option("--group", "-g", required=True, help="The consumer group.")
@click.option(
    "--topic",
    "-t",
    "topics",
    required=True,
    multiple=True,
    metavar="TOPIC[:P,P...]",
    help="A topic (all its partitions, or those listed) whose offsets to delete (repeatable).",
)
@bootstrap_option
@json_option
def groups_delete_offsets(
    group: str, topics: tuple[str, ...], bootstrap: str | None, as_json: bool
) -> None:
    """Delete GROUP's committed offsets of some topics or partitions (Kafka's OffsetDelete,
    KIP-496): refused for a topic a live member subscribes to. A group left without offsets
    is gone."""
    scopes = _scopes(topics, ())

    async def go(c: AsyncConsumer) -> list[list[Any]]:
        coord = _coordinator(c, group)
        desc = await _describe(coord)
        if str(desc.get("state")) == "DEAD":
            raise GroupsError(f"consumer group '{group}' does not exist")
        committed = (await coord.call("fetch_offsets", {})).get("offsets") or []
        have = {(str(r[0]), int(r[1])) for r in committed if r[2] is not None and r[2] >= 0}
        doomed: list[list[Any]] = []
        for topic, parts in scopes:
            mine = sorted(p for t, p in have if t == topic)
            wanted = mine if parts is None else parts
            doomed += [[topic, p, "deleted" if p in mine else "no offset"] for p in wanted]
        ans = await coord.call("delete_offsets", {"partitions": [[t, p] for t, p, _ in doomed]})
        err = str(ans.get("error") or "NONE")
        if err == "GROUP_SUBSCRIBED_TO_TOPIC":
            raise GroupsError(
                f"cannot delete offsets of group '{group}': a live member subscribes to "
                f"{', '.join(sorted({s[0] for s in scopes}))} (GROUP_SUBSCRIBED_TO_TOPIC); "
                "nothing was deleted"
            )
        if err == "GROUP_ID_NOT_FOUND":
            raise GroupsError(f"consumer group '{group}' does not exist")
        if err != "NONE":
            raise GroupsError(f"delete refused: {err}: {ans.get('message') or ''}".rstrip(": "))
        return doomed

    rows = _run(go, bootstrap)
    if as_json:
        emit_json(
            {
                "group": group,
                "partitions": [
                    dict(zip(("topic", "partition", "result"), r, strict=True)) for r in rows
                ],
            }
        )
        return
    print_table(rows, ["TOPIC", "PARTITION", "RESULT"])


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
