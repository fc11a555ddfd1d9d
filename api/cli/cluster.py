"""``longboat cluster status``: brokers (fenced or not), the active controller, and the
partitions that are under-replicated or offline, from one broker's view over HTTP."""

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


@main.group("cluster")
def cluster_group() -> None:
    """The cluster as a broker sees it."""


def cluster_status(admin: HttpAdmin) -> dict[str, Any]:
    _, cl = admin.request("GET", admin.v3())
    _, meta = admin.request("GET", "/v3/broker/metadata")
    under, offline = [], []
    for t in meta["topics"]:
        for p in t["partitions"]:
            row = {
                "topic": t["name"],
                "partition": p["partition"],
                "leader": p["leader"],
                "replicas": p["replicas"],
                "isr": p["isr"],
            }
            if p["leader"] < 0:
                offline.append(row)
            elif len(p["isr"]) < len(p["replicas"]):
                under.append(row)
    return {
        "cluster_id": cl["cluster_id"],
        "controller": cl["controller"],
        "metadata_offset": cl["metadata_offset"],
        "brokers": [
            {
                k: b[k]
                for k in ("broker_id", "host", "port", "rack", "fenced", "in_controlled_shutdown")
            }
            for b in cl["brokers"]
        ],
        "topics": len(meta["topics"]),
        "partitions": sum(len(t["partitions"]) for t in meta["topics"]),
        "under_replicated_partitions": under,
        "offline_partitions": offline,
        "answered_by": admin.url,
    }


@cluster_group.command("status")
@bootstrap_option
@json_option
def cluster_status_cmd(bootstrap: str | None, as_json: bool) -> None:
    """Brokers, controller, under-replicated and offline partitions."""
    st = cluster_status(HttpAdmin(resolve_bootstrap(bootstrap)))
    if as_json:
        emit_json(st)
        return
    ctl = st["controller"]
    click.echo(
        f"Cluster {st['cluster_id']} (as broker {st['answered_by']} sees it, metadata "
        f"offset {st['metadata_offset']})"
    )
    click.echo(
        "Active controller: "
        + (
            f"node {ctl['controller_id']} ({ctl['url']}), term {ctl['term']}"
            if ctl
            else "none reachable"
        )
    )
    print_table(
        [
            [
                b["broker_id"],
                f"{b['host']}:{b['port']}",
                b["rack"],
                "fenced"
                if b["fenced"]
                else "shutting down"
                if b["in_controlled_shutdown"]
                else "ok",
            ]
            for b in st["brokers"]
        ],
        ["BROKER", "ADDRESS", "RACK", "STATE"],
    )
    click.echo(
        f"Topics: {st['topics']}  partitions: {st['partitions']}  under-replicated: "
        f"{len(st['under_replicated_partitions'])}  offline: "
        f"{len(st['offline_partitions'])}"
    )
    bad = st["offline_partitions"] + st["under_replicated_partitions"]
    if bad:
        print_table(
            [
                [
                    r["topic"],
                    r["partition"],
                    r["leader"],
                    ",".join(map(str, r["replicas"])),
                    ",".join(map(str, r["isr"])),
                ]
                for r in bad
            ],
            ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"],
        )
