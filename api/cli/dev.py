"""``longboat dev up``: a local cluster of real processes in the foreground.

Controllers get node ids 1..C on ports 9301.., brokers ids 101.. on ports 8082..; each
process logs to ``DIR/<role>-<id>/<role>.log``. ``DIR/cluster.json`` says where everything
is, and the other commands read it for their default bootstrap. Ctrl-C (or SIGTERM) stops
the brokers first (controlled shutdown), then the controllers.

A node that exits while the cluster runs is reported (which, how: signal or exit status, and
its last log lines) and the others keep running, so failover can be tried on a laptop.
``longboat dev restart NODE`` (another terminal) drops a request file in ``DIR/control`` that
the running ``dev up`` acts on, (re)starting that node on its port and data; pressing ``r`` in
``dev up``'s terminal restarts every node that is down.

``--secure`` (issue 18) makes a CA and certificates under ``DIR/tls`` and runs every listener
with TLS and authentication (``api.node.secure_setup``): controllers on SSL with client
certificates required, brokers' client listeners on SASL_SSL (Basic, Bearer or a client
certificate) and inter-broker listeners on SSL, and brokers' Kafka listeners on SASL_SSL. The
operator is ``User:admin``, a super user, by its certificate or a bearer token the setup signs
(``DIR/tls/admin.jwt``, valid a day), or over Kafka's protocol with a SCRAM-SHA-512 password
made at start (``DIR/tls/admin.password``); the cluster file names the CA and the admin
certificate, so the CLI uses them.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
import sys
import termios
import time
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from api.cli.common import (
    DEFAULT_DIR,
    NODE_FAILED_EXIT_STATUS,
    client_security,
    cluster_file,
    main,
    override_option,
)
from common.netbind import port_free

if TYPE_CHECKING:
    from api.node.localcluster import Brokers, Quorum

CONTROL_DIR = "control"
"""Under the data directory: ``restart-<role>-<id>`` files `dev restart` drops for the
running ``dev up`` to act on, and the ``.done`` answers it writes back."""
LOG_TAIL_LINES = 8


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
@override_option
@click.option(
    "--secure",
    is_flag=True,
    help="TLS and authentication everywhere, with a CA and certificates made under DIR/tls.",
)
def dev_up(
    controllers: int,
    brokers: int,
    data_dir: str,
    controller_port: int,
    broker_port: int,
    kafka_port: int,
    overrides: tuple[str, ...],
    secure: bool,
) -> None:
    """Start C controllers and B brokers on 127.0.0.1 in the foreground (Ctrl-C stops all)."""
    from api.node.localcluster import Brokers, Quorum

    root = Path(data_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    c_ports = [controller_port + i for i in range(controllers)]
    b_ports = [broker_port + i for i in range(brokers)]
    k_ports = [kafka_port + i for i in range(brokers)] if kafka_port else []
    busy = [p for p in c_ports + b_ports + k_ports if not port_free("127.0.0.1", p)]
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
    for o in overrides:  # every node gets them (e.g. http_cors_allowed_origins=...)
        key, sep, _ = o.partition("=")
        if not sep or not key.strip():
            raise click.UsageError(f"--override {o!r}: expected KEY=VALUE")
        same_id += ["--override", o]
    setup = None
    if secure:
        from api.node.secure_setup import SecureSetup

        ids = [*range(1, controllers + 1), *range(101, 101 + brokers)]
        setup = SecureSetup.create(root, ids)
    quorum = Quorum(root, controllers, ports=c_ports, extra_args=same_id, secure=setup)
    bs = Brokers(
        root,
        quorum,
        brokers,
        first_id=101,
        ports=b_ports,
        extra_args=same_id,
        kafka_ports=k_ports or None,
    )
    sup = _Supervisor(root, quorum, bs, cluster_id)
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
        sup.write_cluster_file()
        b1, c1 = bs.url(bs.ids[0]), quorum.url(1)
        curl = "curl -s"
        secure_lines = tls_var = ""
        if setup is not None:
            tls = setup.root / "tls"
            token = tls / "admin.jwt"
            token.write_text(setup.token("admin", valid_s=86_400) + "\n")
            curl = "curl -s $TLS"
            tls_var = (
                f'\n  TLS="--cacert {setup.ca.cert} --cert {setup.admin.cert} '
                f'--key {setup.admin.key}"'
            )
            secure_lines = f"""
  # TLS everywhere; User:admin (a super user) by its certificate above, or by a token:
  curl -s --cacert {setup.ca.cert} -H "Authorization: Bearer $(cat {token})" $B/v3/clusters
  # without credentials: 401 {{"error_code":40101,...}}
  curl -s --cacert {setup.ca.cert} $B/v3/clusters
  # certificates and node configs: {tls}"""
        kafka_lines = ""
        if k_ports and setup is not None:  # the Kafka listener is SASL_SSL (secure_setup)
            kb = f"127.0.0.1:{k_ports[0]}"
            pw = setup.add_scram_admin(b1, cluster_id)
            kafka_lines = f"""
  # Kafka clients: SASL_SSL as User:admin (PLAIN here: Debian's kcat links a librdkafka
  # older than 2.6.1, whose SCRAM Kafka 4 and Longboat refuse; docs/security.md)
  KAFKA="-X security.protocol=SASL_SSL -X sasl.mechanisms=PLAIN \\
    -X sasl.username=admin -X sasl.password=$(cat {pw}) -X ssl.ca.location={setup.ca.cert}"
  kcat -b {kb} $KAFKA -L
  # confluent-kafka: {{"bootstrap.servers": "{kb}", "security.protocol": "SASL_SSL",
  #   "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
  #   "sasl.password": open("{pw}").read().strip(), "ssl.ca.location": "{setup.ca.cert}"}}"""
        elif k_ports:
            kb = f"127.0.0.1:{k_ports[0]}"
            kafka_lines = f"""
  # Kafka clients: bootstrap.servers={kb} (docs/kafka-protocol.md)
  kcat -b {kb} -L
  echo 'carol:a paddle' | kcat -b {kb} -P -t demo -K:
  kcat -b {kb} -C -t demo -o beginning -e -f '%k: %s\\n'"""
        with _keys() as keys:
            key_line = "; or press r here" if keys is not None else ""
            click.echo(f"""
Longboat is up: {controllers} controller(s) (active: node {leader}), {brokers} broker(s).
Cluster file: {meta_path}   (logs: {root}/<role>-<id>/*.log)
Console: {b1}/console/   (any broker serves it; the API: {b1}/openapi)

Try:
  B={b1} CID={cluster_id}{tls_var}
  {curl} -X POST $B/v3/clusters/$CID/topics -H 'Content-Type: application/json' \\
    -d '{{"topic_name": "demo", "partitions_count": 3, "replication_factor": 3}}'
  {curl} -X POST $B/v3/clusters/$CID/topics/demo/records -H 'Content-Type: application/json' \\
    -d '{{"partition_id": 0, "key": {{"type": "STRING", "data": "alice"}}, "value": {{"type": "JSON", "data": {{"item": "tea"}}}}}}'
  {curl} "$B/v3/clusters/$CID/topics/demo/partitions/0/records?offset=0&format=json&key_format=string&timeout_ms=0"
  {curl} $B/v3/health/ready
  {curl} {c1}/v3/quorum/status{secure_lines}

  export LONGBOAT_CLUSTER_FILE={meta_path}   # the CLI finds the cluster through it
  echo 'bob:an oar' | longboat produce demo --key-separator :
  longboat consume demo --from-beginning --max-messages 2 --print-key
  longboat cluster status; longboat topics describe demo; longboat quorum status
{kafka_lines}

A node that dies leaves the others running (try: kill -9 a broker's pid from {meta_path}).
Bring it back with `longboat dev restart broker-{bs.ids[0]}`{key_line}.
Ctrl-C stops the cluster.""")
            while not stopping:
                sup.report_exits()
                sup.handle_requests()
                if keys is not None and "r" in keys(0.5):
                    sup.restart_dead()
                elif keys is None:
                    time.sleep(0.5)
    finally:
        click.echo("stopping brokers (controlled shutdown), then controllers ...", err=True)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        bs.stop_all()
        quorum.stop_all()
        sup.forget()
        click.echo("stopped.", err=True)


def describe_exit(code: int) -> str:
    """Why a node process ended, from its exit status as ``Popen.returncode`` gives it."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    if code == NODE_FAILED_EXIT_STATUS:
        return f"exit status {code}: an essential task failed (the log says which)"
    if code == 0:
        return "exit status 0 (a clean stop)"
    return f"exit status {code}"


def _tail(path: Path, lines: int) -> list[str]:
    if not path.exists():
        return []
    return [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()][-lines:]


class _Supervisor:
    """What ``dev up`` does while the cluster runs: notice a node that exited (say which,
    how, and its last log lines, once), and (re)start nodes on request, the others running
    on. Requests come from `dev restart` through files in ``DIR/control`` (another terminal
    has no other way in) or from a key press."""

    def __init__(self, root: Path, quorum: Quorum, bs: Brokers, cluster_id: str) -> None:
        self.root = root
        self.quorum = quorum
        self.bs = bs
        self.cluster_id = cluster_id
        self.control = root / CONTROL_DIR
        self.reported: set[str] = set()
        self.control.mkdir(exist_ok=True)
        for stale in self.control.iterdir():  # from a dev up that did not stop cleanly
            stale.unlink()

    def _procs(self) -> dict[str, tuple[str, int, subprocess.Popen[bytes] | None]]:
        out: dict[str, tuple[str, int, subprocess.Popen[bytes] | None]] = {}
        for i in range(1, self.quorum.n + 1):
            out[f"controller-{i}"] = ("controller", i, self.quorum.procs.get(i))
        for b in self.bs.ids:
            out[f"broker-{b}"] = ("broker", b, self.bs.procs.get(b))
        return out

    def write_cluster_file(self) -> None:
        def pid(p: subprocess.Popen[bytes] | None) -> int | None:
            return p.pid if p is not None and p.poll() is None else None

        desc = {
            "cluster_id": self.cluster_id,
            "data_dir": str(self.root),
            "supervisor_pid": os.getpid(),
            "brokers": [
                {
                    "id": b,
                    "url": self.bs.url(b),
                    "pid": pid(self.bs.procs.get(b)),
                    **(
                        {"kafka": f"127.0.0.1:{self.bs.kafka_ports[b]}"}
                        if b in self.bs.kafka_ports
                        else {}
                    ),
                }
                for b in self.bs.ids
            ],
            "controllers": [
                {"id": i, "url": self.quorum.url(i), "pid": pid(self.quorum.procs.get(i))}
                for i in range(1, self.quorum.n + 1)
            ],
        }
        setup = self.quorum.secure
        if setup is not None:  # the CLI's TLS files (api.cli.common.client_security)
            desc["tls"] = {
                "ssl_cafile": str(setup.ca.cert),
                "ssl_certfile": str(setup.admin.cert),
                "ssl_keyfile": str(setup.admin.key),
            }
        tmp = self.root / "cluster.json.tmp"
        tmp.write_text(json.dumps(desc, indent=2) + "\n")
        tmp.replace(self.root / "cluster.json")

    def forget(self) -> None:
        """After the stop: the cluster file no longer names a supervisor to ask."""
        path = self.root / "cluster.json"
        try:
            desc = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        desc.pop("supervisor_pid", None)
        for n in desc.get("brokers", []) + desc.get("controllers", []):
            n["pid"] = None
        path.write_text(json.dumps(desc, indent=2) + "\n")

    def report_exits(self) -> None:
        newly = False
        for name, (role, _, p) in self._procs().items():
            if p is None or p.poll() is None or name in self.reported:
                continue
            self.reported.add(name)
            newly = True
            log = self.root / name / f"{role}.log"
            lines = "\n".join(f"    {ln}" for ln in _tail(log, LOG_TAIL_LINES))
            alive = sum(
                1 for _, _, q in self._procs().values() if q is not None and q.poll() is None
            )
            click.echo(
                f"\n{name} exited: {describe_exit(p.returncode)}; the other {alive} node(s) "
                f"keep running.\nlast lines of {log}:\n{lines or '    (empty)'}\n"
                f"bring it back: longboat dev restart {name}   (or press r here)",
                err=True,
            )
        if newly:  # the cluster file shows it without a pid
            self.write_cluster_file()

    def restart(self, name: str) -> dict[str, Any]:
        """Stop ``name`` if it runs (SIGTERM, then SIGKILL after 10 s), start it again on the
        same port and data; what happened, for the requester."""
        procs = self._procs()
        if name not in procs:
            return {"ok": False, "message": f"no node {name} (nodes: {', '.join(procs)})"}
        from api.node.localcluster import stop_processes

        role, node_id, p = procs[name]
        group: dict[int, subprocess.Popen[bytes]] = (
            self.quorum.procs if role == "controller" else self.bs.procs
        )
        was = "stopped and restarted"
        if p is None or p.poll() is not None:
            was = "restarted"
            group.pop(node_id, None)
        else:
            stop_processes({node_id: group.pop(node_id)})
        if role == "controller":
            self.quorum.start(node_id)
        else:
            self.bs.start(node_id)
        self.reported.discard(name)
        self.write_cluster_file()
        pid = group[node_id].pid
        click.echo(f"{name} {was} (pid {pid})", err=True)
        return {"ok": True, "message": f"{name} {was}", "pid": pid}

    def restart_dead(self) -> None:
        dead = [n for n, (_, _, p) in self._procs().items() if p is None or p.poll() is not None]
        if not dead:
            click.echo("every node is running; nothing to restart", err=True)
        for name in dead:
            self.restart(name)

    def handle_requests(self) -> None:
        for req in sorted(self.control.glob("restart-*")):
            if req.suffix in (".done", ".tmp"):
                continue
            name = req.name.removeprefix("restart-")
            req.unlink()
            answer = self.restart(name)
            tmp = req.with_suffix(".tmp")
            tmp.write_text(json.dumps(answer))
            tmp.replace(req.with_suffix(".done"))


@contextmanager
def _keys() -> Iterator[Any]:
    """A ``read(timeout_s) -> str`` of the keys pressed, when ``dev up`` runs in the
    foreground of a terminal (cbreak mode: keys arrive unbuffered, Ctrl-C still signals);
    None otherwise (a pipe, a background job, a test)."""
    fd = sys.stdin.fileno() if sys.stdin is not None else -1
    try:
        usable = fd >= 0 and os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        usable = False
    if not usable:
        yield None
        return
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read(timeout_s: float) -> str:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return os.read(fd, 64).decode(errors="replace").lower() if ready else ""

    try:
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _node_name(spec: str, desc: dict[str, Any]) -> str:
    """``broker-102``, ``controller-1``, or a bare id (ids are unique across roles)."""
    if "-" in spec:
        return spec
    for role in ("broker", "controller"):
        for n in desc.get(f"{role}s", []):
            if str(n["id"]) == spec:
                return f"{role}-{spec}"
    known = [f"broker-{n['id']}" for n in desc.get("brokers", [])]
    known += [f"controller-{n['id']}" for n in desc.get("controllers", [])]
    raise click.BadParameter(f"no node {spec!r} (nodes: {', '.join(known)})", param_hint="NODE")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dev_group.command("restart")
@click.argument("node")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    help="The running dev up's data directory. Default: the cluster file's directory.",
)
@click.option("--timeout", "timeout_s", default=60.0, show_default=True, help="Seconds.")
def dev_restart(node: str, data_dir: str | None, timeout_s: float) -> None:
    """(Re)start NODE (broker-102, controller-1, or an id) of the running `longboat dev up`:
    stopped first if it runs, then started on its port and data; waits until it serves."""
    root = Path(data_dir).resolve() if data_dir else cluster_file().resolve().parent
    try:
        desc = json.loads((root / "cluster.json").read_text())
    except (OSError, ValueError):
        raise click.ClickException(
            f"no cluster file under {root} (is `longboat dev up` running?)"
        ) from None
    sup = desc.get("supervisor_pid")
    if not isinstance(sup, int) or not _alive(sup):
        raise click.ClickException(f"no `longboat dev up` is running for {root}")
    name = _node_name(node, desc)
    control = root / CONTROL_DIR
    req = control / f"restart-{name}"
    done = req.with_suffix(".done")
    done.unlink(missing_ok=True)
    tmp = req.with_suffix(".tmp")
    tmp.write_text("")
    tmp.replace(req)
    deadline = time.monotonic() + timeout_s
    while not done.exists():
        if time.monotonic() > deadline:
            req.unlink(missing_ok=True)
            raise click.ClickException(f"dev up (pid {sup}) did not act within {timeout_s} s")
        time.sleep(0.1)
    answer = json.loads(done.read_text())
    done.unlink()
    if not answer.get("ok"):
        raise click.ClickException(str(answer.get("message")))
    role, _, node_id = name.partition("-")
    url = next(n["url"] for n in desc[f"{role}s"] if str(n["id"]) == node_id)
    path = "/v3/health/ready" if role == "broker" else "/v3/quorum/status"
    from api.node.localcluster import wait_for

    # A secure cluster's nodes answer over TLS, and a controller's status only to a
    # principal it knows: the CLI's security (the cluster file names the CA and the admin
    # certificate). Credentials go only without a certificate: a controller's SSL listener
    # refuses an Authorization header.
    security = client_security()
    ctx = None if security is None else security.ssl_context()
    auth = None if security is None or security.ssl_certfile else security.authorization()
    headers = {"Authorization": auth} if auth is not None else {}

    def serves() -> bool:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(url + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=2, context=ctx) as r:
                return r.status == 200
        except urllib.error.HTTPError:
            return False

    try:
        wait_for(f"{name} serving at {url}", serves, max(1.0, deadline - time.monotonic()))
    except AssertionError as e:
        raise click.ClickException(
            f"{answer['message']} (pid {answer.get('pid')}), but {e}"
        ) from None
    click.echo(f"{answer['message']} (pid {answer.get('pid')}); serving at {url}")
