"""``longboat broker start``: a broker process (registration, heartbeats, metadata)."""

from __future__ import annotations

import click

from api.cli.common import (
    main,
    node_options,
    override_option,
    run_node,
    setup_logging,
    with_overrides,
)
from api.node.config import ConfigError, load_config


@main.group("broker")
def broker_group() -> None:
    """Run a broker: hosts partitions and follows the metadata log."""


@broker_group.command("start")
@node_options
@click.option("--rack", help="Overrides rack.")
@click.option(
    "--kafka-listen",
    metavar="HOST:PORT",
    help="Serve Kafka's protocol there too (overrides kafka_listen; off when unset).",
)
@click.option(
    "--replica-lag-time-max-ms", type=int, help="Overrides replica_lag_time_max_ms (default 30000)."
)
@override_option
@click.option("--log-level", default="INFO", show_default=True)
def broker_start(
    config_path: str | None,
    node_id: int | None,
    listen: str | None,
    data_dir: str | None,
    controller_quorum: str | None,
    rack: str | None,
    kafka_listen: str | None,
    replica_lag_time_max_ms: int | None,
    overrides: tuple[str, ...],
    log_level: str,
) -> None:
    """Start a broker in the foreground. SIGTERM or Ctrl-C shuts it down in a controlled
    way (its partition leaderships move away first); it exits 0 once done."""
    try:
        cfg = load_config(
            config_path,
            with_overrides(
                {
                    "node_id": node_id,
                    "listen": listen,
                    "data_dir": data_dir,
                    "controller_quorum": controller_quorum,
                    "rack": rack,
                    "roles": ["broker"],
                    "kafka_listen": kafka_listen,
                    "replica_lag_time_max_ms": replica_lag_time_max_ms,
                },
                overrides,
            ),
        )
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    setup_logging(f"broker-{cfg.node_id}", log_level)
    from api.node.broker_app import serve_broker
    from common.malloc import keep_large_buffers
    from common.netbind import set_source_host

    set_source_host(cfg.host)  # partitions between 127.0.0.N tell nodes apart by source
    keep_large_buffers()  # request-sized buffers reused, not page-faulted in anew
    try:
        run_node(serve_broker(cfg))
    except OSError as e:  # the port is taken, or the address is not ours
        where = cfg.listen if cfg.kafka_listen is None else f"{cfg.listen} or {cfg.kafka_listen}"
        raise click.ClickException(f"cannot listen on {where}: {e}") from None
