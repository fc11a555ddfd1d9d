"""``longboat partitions reassign``: kafka-reassign-partitions over the v3 API.

* ``--generate --topics-to-move-json-file F --broker-list 1,2,3``: prints the current
  assignment of those topics and a proposed one, balanced and rack-aware over the listed
  brokers (``metalog.reassign_plan.balanced_plan``); changes nothing.
* ``--execute --reassignment-json-file F [--throttle B/s]``: prints the current assignment
  (keep it to roll back), sets the replication throttle, starts the moves.
* ``--verify --reassignment-json-file F``: which moves are done, which still run; once all
  are done it removes the throttle, as Kafka's tool does.
* ``--cancel --reassignment-json-file F``: cancels the moves still running (back to the
  original replicas); with none left running it removes the throttle.

The files use Kafka's JSON formats (``{"version": 1, "topics": [{"topic": "t"}]}`` and
``{"version": 1, "partitions": [{"topic", "partition", "replicas"}]}``).
"""

from __future__ import annotations

import json
from typing import Any

import click

from api.cli.common import (
    AdminError,
    HttpAdmin,
    bootstrap_option,
    emit_json,
    json_option,
    main,
    resolve_bootstrap,
)
from api.cli.placement_admin import (
    assignment,
    execute,
    ongoing,
    parse_plan,
    plan_json,
    read_json_file,
    set_throttle,
    submit,
    usable_brokers,
)
from metalog.placement import PlacementBroker, PlacementError
from metalog.reassign_plan import balanced_plan


@main.group("partitions")
def partitions_group() -> None:
    """Move partition replicas between brokers (KIP-455)."""


def _broker_list(value: str | None) -> set[int] | None:
    if value is None:
        return None
    try:
        out = {int(x) for x in value.split(",") if x.strip()}
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: expected ids like 1,2,3", param_hint="--broker-list"
        ) from None
    if not out:
        raise click.BadParameter("no broker ids given", param_hint="--broker-list")
    return out


def _topics_to_move(path: str) -> list[str]:
    data = read_json_file(path, "--topics-to-move-json-file")
    topics = data.get("topics") if isinstance(data, dict) else None
    if (
        not isinstance(topics, list)
        or not topics
        or not all(isinstance(t, dict) and isinstance(t.get("topic"), str) for t in topics)
    ):
        raise click.BadParameter(
            'expected {"version": 1, "topics": [{"topic": "name"}, ...]}',
            param_hint="--topics-to-move-json-file",
        )
    return sorted({t["topic"] for t in topics})


@partitions_group.command("reassign")
@click.option("--generate", "mode", flag_value="generate", help="Propose a balanced plan.")
@click.option("--execute", "mode", flag_value="execute", help="Start the moves of a plan.")
@click.option("--verify", "mode", flag_value="verify", help="Report on the moves of a plan.")
@click.option("--cancel", "mode", flag_value="cancel", help="Cancel the moves of a plan.")
@click.option("--topics-to-move-json-file", type=click.Path(dir_okay=False), help="For --generate.")
@click.option("--broker-list", help="For --generate: the brokers to spread over, e.g. 1,2,3.")
@click.option(
    "--disable-rack-aware", is_flag=True, help="For --generate: ignore the brokers' racks."
)
@click.option(
    "--reassignment-json-file",
    type=click.Path(dir_okay=False),
    help="The plan, for --execute, --verify and --cancel.",
)
@click.option(
    "--throttle",
    type=click.IntRange(1),
    help="For --execute: replication of the moving replicas at most this many bytes/s.",
)
@bootstrap_option
@json_option
def reassign(
    mode: str | None,
    topics_to_move_json_file: str | None,
    broker_list: str | None,
    disable_rack_aware: bool,
    reassignment_json_file: str | None,
    throttle: int | None,
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """Generate, execute, verify or cancel a partition reassignment."""
    if mode is None:
        raise click.UsageError("give one of --generate, --execute, --verify, --cancel")
    admin = HttpAdmin(resolve_bootstrap(bootstrap))
    if mode == "generate":
        if topics_to_move_json_file is None or broker_list is None:
            raise click.UsageError("--generate needs --topics-to-move-json-file and --broker-list")
        topics = _topics_to_move(topics_to_move_json_file)
        wanted = _broker_list(broker_list)
        brokers = usable_brokers(admin, wanted)
        unknown = sorted((wanted or set()) - {int(b.broker_id) for b in brokers})
        if unknown:
            raise AdminError(f"broker(s) {unknown} are not registered, or fenced")
        if disable_rack_aware:
            brokers = [PlacementBroker(b.broker_id) for b in brokers]
        current = assignment(admin, topics)
        try:
            proposed = balanced_plan(current, brokers)
        except PlacementError as e:
            raise AdminError(str(e)) from None
        if as_json:
            emit_json({"current": plan_json(current), "proposed": plan_json(proposed)})
            return
        click.echo("Current partition replica assignment")
        click.echo(json.dumps(plan_json(current)))
        click.echo("\nProposed partition reassignment configuration")
        click.echo(json.dumps(plan_json(proposed)))
        return
    if reassignment_json_file is None:
        raise click.UsageError(f"--{mode} needs --reassignment-json-file")
    plan = parse_plan(read_json_file(reassignment_json_file, "--reassignment-json-file"))
    if mode == "execute":
        out = execute(admin, plan, throttle, as_json=as_json)
        if as_json:
            emit_json(out)
        return
    if mode == "cancel":
        running = ongoing(admin)
        todo = {k: None for k in plan if k in running}
        errors = submit(admin, dict(todo)) if todo else []
        if errors:
            raise AdminError("some cancellations were refused:\n  " + "\n  ".join(errors))
        # As Kafka's tool does: with no move left running, the throttle goes too.
        cleared = not ongoing(admin)
        if cleared:
            set_throttle(admin, None)
        if as_json:
            emit_json(
                {"cancelled": [f"{t}-{p}" for t, p in sorted(todo)], "throttle_removed": cleared}
            )
            return
        if cleared:
            click.echo("Clearing broker-level throttles")
        if todo:
            click.echo(
                "Successfully cancelled partition reassignment(s) for "
                + ",".join(f"{t}-{p}" for t, p in sorted(todo))
            )
        else:
            click.echo("None of those partitions is being reassigned.")
        return
    _verify(admin, plan, as_json)


def _verify(admin: HttpAdmin, plan: dict[Any, Any], as_json: bool) -> None:
    running = ongoing(admin)
    current = assignment(admin, sorted({t for t, _ in plan}))
    status: dict[str, str] = {}
    for key in sorted(plan):
        name = f"{key[0]}-{key[1]}"
        if key in running:
            status[name] = "in progress"
        elif current.get(key) == plan[key]:
            status[name] = "complete"
        else:
            status[name] = "not started or cancelled"
    done = not running.keys() & plan.keys()
    if done:
        set_throttle(admin, None)
    if as_json:
        emit_json({"partitions": status, "throttle_removed": done})
        return
    click.echo("Status of partition reassignment:")
    for name, st in status.items():
        if st == "complete":
            click.echo(f"Reassignment of partition {name} is completed.")
        elif st == "in progress":
            click.echo(f"Reassignment of partition {name} is still in progress.")
        else:
            click.echo(
                f"Reassignment of partition {name} is not running and its replicas differ "
                "from the plan (cancelled, or never started)."
            )
    if done:
        click.echo("\nClearing broker-level throttles")
