"""``longboat records delete --offset-json-file F``: Kafka's kafka-delete-records.

The file is Kafka's: ``{"version": 1, "partitions": [{"topic": "t", "partition": 0,
"offset": 10}]}``; every record before ``offset`` (-1: the high watermark) is deleted, the
partition's log start offset (its low watermark) moving there on every in-sync replica.
"""

from __future__ import annotations

import click

from api.cli.common import (
    AdminError,
    HttpAdmin,
    bootstrap_option,
    confirm_unless_yes,
    emit_json,
    json_option,
    main,
    resolve_bootstrap,
    yes_option,
)
from api.cli.placement_admin import read_json_file


@main.group("records")
def records_group() -> None:
    """Records of partitions."""


@records_group.command("delete")
@click.option("--offset-json-file", type=click.Path(dir_okay=False), required=True)
@bootstrap_option
@json_option
@yes_option
def delete(offset_json_file: str, bootstrap: str | None, as_json: bool, yes: bool) -> None:
    """Delete records before the given offsets."""
    data = read_json_file(offset_json_file, "--offset-json-file")
    parts = data.get("partitions") if isinstance(data, dict) else None
    if (
        not isinstance(parts, list)
        or not parts
        or not all(
            isinstance(e, dict)
            and isinstance(e.get("topic"), str)
            and type(e.get("partition")) is int
            and e["partition"] >= 0
            and type(e.get("offset")) is int
            and e["offset"] >= -1
            for e in parts
        )
    ):
        raise click.BadParameter(
            'expected {"version": 1, "partitions": [{"topic", "partition", "offset"}]} '
            "with offsets >= -1",
            param_hint="--offset-json-file",
        )
    confirm_unless_yes(yes, f"delete records of {len(parts)} partition(s)?")
    admin = HttpAdmin(resolve_bootstrap(bootstrap))
    results = []
    failed = 0
    for e in parts:
        name = f"{e['topic']}-{e['partition']}"
        try:
            _, ans = admin.request(
                "POST",
                admin.v3(f"/topics/{e['topic']}/partitions/{e['partition']}/records:delete"),
                {"offset": e["offset"]},
            )
            results.append({"partition": name, "low_watermark": ans["low_watermark"]})
        except AdminError as err:
            failed += 1
            results.append({"partition": name, "error": err.message})
    if as_json:
        emit_json({"partitions": results})
    else:
        click.echo("Records delete operation completed:")
        for r in results:
            if "error" in r:
                click.echo(f"partition: {r['partition']}\terror: {r['error']}")
            else:
                click.echo(f"partition: {r['partition']}\tlow_watermark: {r['low_watermark']}")
    if failed:
        raise AdminError(f"{failed} partition(s) failed")
