"""``longboat brokers drain ID``: move every replica off a broker before retiring it.

The plan (``metalog.reassign_plan.drain_plan``) moves only that broker's replicas, each to
the least loaded usable broker in a rack its partition does not use yet, keeping its place in
the replica list; it is printed, and started unless ``--dry-run``. ``--wait`` waits until
the moves are done (then the broker leads and holds nothing and can be stopped for good).
"""

from __future__ import annotations

import json
import time

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
    plan_json,
    set_throttle,
    topic_names,
    usable_brokers,
)
from metalog.placement import PlacementError
from metalog.reassign_plan import drain_plan
from metalog.records import BrokerId


@main.group("brokers")
def brokers_group() -> None:
    """Operate on brokers of a running cluster."""


@brokers_group.command("drain")
@click.argument("broker_id", type=click.IntRange(0))
@click.option("--dry-run", is_flag=True, help="Print the plan; move nothing.")
@click.option("--throttle", type=click.IntRange(1), help="Replication limit, bytes/s.")
@click.option("--wait", "wait_s", type=click.FloatRange(0), help="Wait up to this many seconds.")
@bootstrap_option
@json_option
def drain(
    broker_id: int,
    dry_run: bool,
    throttle: int | None,
    wait_s: float | None,
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """Move every partition replica off BROKER_ID."""
    admin = HttpAdmin(resolve_bootstrap(bootstrap))
    current = assignment(admin, topic_names(admin))
    try:
        plan = drain_plan(current, BrokerId(broker_id), usable_brokers(admin))
    except PlacementError as e:
        raise AdminError(str(e)) from None
    if not plan:
        if as_json:
            emit_json({"broker_id": broker_id, "plan": plan_json({})})
        else:
            click.echo(f"broker {broker_id} holds no replicas")
        return
    if dry_run:
        if as_json:
            emit_json({"broker_id": broker_id, "plan": plan_json(plan)})
        else:
            click.echo(f"Proposed reassignment to drain broker {broker_id}")
            click.echo(json.dumps(plan_json(plan)))
        return
    out = execute(admin, plan, throttle, as_json=as_json)
    if wait_s is not None:
        deadline = time.monotonic() + wait_s
        while ongoing(admin).keys() & plan.keys():
            if time.monotonic() > deadline:
                raise AdminError(f"the moves off broker {broker_id} did not finish in {wait_s} s")
            time.sleep(0.5)
        if throttle is not None:
            set_throttle(admin, None)
        if not as_json:
            click.echo(f"broker {broker_id} is drained")
    if as_json:
        emit_json({"broker_id": broker_id, **out, "drained": wait_s is not None})
