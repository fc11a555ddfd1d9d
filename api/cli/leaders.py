"""``longboat leaders elect``: Kafka's kafka-leader-election over the v3 API.

``--type preferred`` moves leadership back to each partition's first replica where it is a
live ISR member; ``--type unclean`` gives a leader to partitions that have none, from any
live replica (records may be lost: Kafka's unclean election). ``--topic T --partition P``
names one partition, ``--topic T`` all of a topic's, ``--all`` every partition.
"""

from __future__ import annotations

from typing import Any

import click

from api.cli.common import (
    HttpAdmin,
    bootstrap_option,
    emit_json,
    json_option,
    main,
    print_table,
    resolve_bootstrap,
)


@main.group("leaders")
def leaders_group() -> None:
    """Partition leadership."""


@leaders_group.command("elect")
@click.option(
    "--type",
    "--election-type",
    "election",
    type=click.Choice(["preferred", "unclean"], case_sensitive=False),
    required=True,
)
@click.option("--topic", help="A topic (all its partitions unless --partition).")
@click.option("--partition", type=click.IntRange(0), help="One partition of --topic.")
@click.option("--all", "--all-topic-partitions", "all_", is_flag=True, help="Every partition.")
@bootstrap_option
@json_option
def elect(
    election: str,
    topic: str | None,
    partition: int | None,
    all_: bool,
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """Elect leaders of the given partitions."""
    if all_ == (topic is not None):
        raise click.UsageError("give either --all or --topic (with --partition or not)")
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    admin = HttpAdmin(resolve_bootstrap(bootstrap))
    body: dict[str, Any] = {"election_type": election.upper()}
    if topic is not None:
        if partition is not None:
            ps = [partition]
        else:
            _, t = admin.request("GET", admin.v3(f"/topics/{topic}/partitions"))
            ps = [int(p["partition_id"]) for p in t["data"]]
        body["partitions"] = [{"topic_name": topic, "partition_id": p} for p in ps]
    _, ans = admin.request("POST", admin.v3("/elections"), body)
    if as_json:
        emit_json(ans)
        return
    rows = []
    for r in ans["data"]:
        rows.append(
            [
                r["topic_name"],
                r["partition_id"],
                r["leader_id"],
                "elected" if r["error_code"] is None else r["error_code"],
            ]
        )
    if not rows:
        click.echo("no partition needed an election")
        return
    print_table(rows, ["TOPIC", "PARTITION", "LEADER", "RESULT"])
