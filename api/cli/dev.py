"""``longboat dev up``: a local cluster of real processes in the foreground.

Controllers get node ids 1..C on ports 9301.., brokers ids 101.. on ports 8082..; each
process logs to ``DIR/<role>-<id>/<role>.log``. ``DIR/cluster.json`` says where everything
is, and the other commands read it for their default bootstrap. Ctrl-C (or SIGTERM) stops
the brokers first (controlled shutdown), then the controllers.
"""

from __future__ import annotations

import json
import secrets
import signal
import socket
import time
from pathlib import Path

import click

from api.cli.common import DEFAULT_DIR, main


def _port_free(port: int) -> bool:
    """Whether a node could listen on ``port`` now. With SO_REUSEADDR, as the nodes bind
    (``reuse_address=True``): without it the TIME_WAIT sockets a stopped cluster leaves for a
    minute count as "in use", and a cluster could not be restarted at once."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@main.group("dev")
def dev_group() -> None:
    """Run a local development cluster."""


@dev_group.command("up")
@click.option("--controllers", default=3, show_default=True, type=click.IntRange(1, 9))
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option(
    "--data-dir", default=str(DEFAULT_DIR), show_default=True, type=click.Path(file_okay=False)
)
@click.option("--controller-port", default=9301, show_default=True)
@click.option("--broker-port", default=8082, show_default=True)
@click.option(
    "--kafka-port",
    default=9092,
    show_default=True,
    help="First broker's Kafka protocol port (the next brokers count up); 0: none.",
)
def dev_up(
    controllers: int,
    brokers: int,
    data_dir: str,
    controller_port: int,
    broker_port: int,
    kafka_port: int,
) -> None:
    """Start C controllers and B brokers on 127.0.0.1 in the foreground (Ctrl-C stops all)."""
    from api.node.localcluster import Brokers, Quorum

    root = Path(data_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    c_ports = [controller_port + i for i in range(controllers)]
    b_ports = [broker_port + i for i in range(brokers)]
    k_ports = [kafka_port + i for i in range(brokers)] if kafka_port else []
    busy = [p for p in c_ports + b_ports + k_ports if not _port_free(p)]
    if busy:
        raise click.ClickException(
            f"port(s) {busy} on 127.0.0.1 are in use (another `longboat dev up`?); "
            "stop it or pick --controller-port/--broker-port"
        )
    meta_path = root / "cluster.json"
    cluster_id = None
    if meta_path.exists():  # restarting on the same data keeps the cluster id
        try:
            cluster_id = json.loads(meta_path.read_text()).get("cluster_id")
        except ValueError:
            cluster_id = None
    while not cluster_id or cluster_id.startswith("-"):
        # Kafka's Uuid.randomUuid() also redraws ids that start with "-" (they read as
        # command-line flags).
        cluster_id = secrets.token_urlsafe(16)[:22]

    # Every node is told the cluster id, so the HTTP API's /v3/clusters and cluster.json agree.
    same_id = ["--override", f"cluster_id={cluster_id}"]
    quorum = Quorum(root, controllers, ports=c_ports, extra_args=same_id)
    bs = Brokers(
        root,
        quorum,
        brokers,
        first_id=101,
        ports=b_ports,
        extra_args=same_id,
        kafka_ports=k_ports or None,
    )
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        click.echo(
            f"starting {controllers} controller(s) and {brokers} broker(s) under {root}", err=True
        )
        quorum.start_all()
        leader = quorum.wait_active_leader(timeout_s=30)
        bs.start_all()
        bs.wait_ready(timeout_s=60)
        desc = {
            "cluster_id": cluster_id,
            "data_dir": str(root),
            "brokers": [
                {
                    "id": b,
                    "url": bs.url(b),
                    "pid": bs.procs[b].pid,
                    **({"kafka": f"127.0.0.1:{bs.kafka_ports[b]}"} if b in bs.kafka_ports else {}),
                }
                for b in bs.ids
            ],
            "controllers": [
                {"id": i, "url": quorum.url(i), "pid": quorum.procs[i].pid}
                for i in range(1, controllers + 1)
            ],
        }
        meta_path.write_text(json.dumps(desc, indent=2) + "\n")
        b1, c1 = bs.url(bs.ids[0]), quorum.url(1)
        kafka_lines = ""
        if k_ports:
            kb = f"127.0.0.1:{k_ports[0]}"
            kafka_lines = f"""
  # Kafka clients: bootstrap.servers={kb} (docs/kafka-protocol.md)
  kcat -b {kb} -L
  echo 'carol:a paddle' | kcat -b {kb} -P -t demo -K:
  kcat -b {kb} -C -t demo -o beginning -e -f '%k: %s\\n'"""
        click.echo(f"""
Longboat is up: {controllers} controller(s) (active: node {leader}), {brokers} broker(s).
Cluster file: {meta_path}   (logs: {root}/<role>-<id>/*.log)

Try:
  B={b1} CID={cluster_id}
  curl -s -X POST $B/v3/clusters/$CID/topics -H 'Content-Type: application/json' \\
    -d '{{"topic_name": "demo", "partitions_count": 3, "replication_factor": 3}}'
  curl -s -X POST $B/v3/clusters/$CID/topics/demo/records -H 'Content-Type: application/json' \\
    -d '{{"partition_id": 0, "key": {{"type": "STRING", "data": "alice"}}, "value": {{"type": "JSON", "data": {{"item": "tea"}}}}}}'
  curl -s "$B/v3/clusters/$CID/topics/demo/partitions/0/records?offset=0&format=json&key_format=string&timeout_ms=0"
  curl -s $B/v3/health/ready
  curl -s {c1}/v3/quorum/status

  export LONGBOAT_CLUSTER_FILE={meta_path}   # the CLI finds the cluster through it
  echo 'bob:an oar' | longboat produce demo --key-separator :
  longboat consume demo --from-beginning --max-messages 2 --print-key
  longboat cluster status; longboat topics describe demo; longboat quorum status
{kafka_lines}

Ctrl-C stops the cluster.""")
        while not stopping:
            dead = [f"controller {i}" for i, p in quorum.procs.items() if p.poll() is not None]
            dead += [f"broker {b}" for b, p in bs.procs.items() if p.poll() is not None]
            if dead:
                click.echo(f"warning: {', '.join(dead)} exited; see its log under {root}", err=True)
                break
            time.sleep(0.5)
    finally:
        click.echo("stopping brokers (controlled shutdown), then controllers ...", err=True)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        bs.stop_all()
        quorum.stop_all()
        click.echo("stopped.", err=True)
