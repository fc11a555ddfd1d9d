"""Real Longboat processes on 127.0.0.1: start, kill, restart and query them.

Used by the integration tests, the benchmarks and (later) ``longboat dev up``. Each process
runs ``python -m api ...`` in its own session (so a signal reaches exactly it), logs to a
file under its data directory, and is found again by node id. ``Quorum`` runs the
controllers, ``Brokers`` the brokers beside them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from api.node.secure_setup import SecureSetup


_ISSUED_PORTS: set[int] = set()
"""Every port ``free_ports`` has handed out in this process: the kernel may give a port
freed a moment ago to the next ``bind(0)``, and one cluster asks several times (client,
inter-broker and Kafka listeners), so a repeat would put two of its listeners on one port
(the second process fails to bind and the first one's listener answers for it)."""


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now and never handed out before in this
    process."""
    socks = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            port = s.getsockname()[1]
            if port not in _ISSUED_PORTS:
                _ISSUED_PORTS.add(port)
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def wait_for(
    what: str,
    cond: Callable[[], Any],
    timeout_s: float,
    *,
    interval_s: float = 0.2,
    context: Callable[[], str] | None = None,
) -> Any:
    """Poll ``cond`` until it returns something truthy (returned) or ``timeout_s`` passes
    (AssertionError naming ``what``, the last value, and ``context()`` such as log tails).
    An ``OSError`` from ``cond`` (a process not listening yet) counts as not yet."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            done = bool(last)
        except OSError as e:
            # Not yet; and an exception object is truthy, so it must not reach the check.
            last, done = e, False
        if done:
            return last
        time.sleep(interval_s)
    extra = f"\n{context()}" if context is not None else ""
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r}){extra}")


def stop_processes(procs: dict[int, subprocess.Popen[bytes]], timeout_s: float = 10) -> None:
    """SIGTERM each process (SIGCONT first: a paused one cannot handle it), wait, SIGKILL
    whatever outlives ``timeout_s``; empties ``procs``."""
    for key in list(procs):
        p = procs.pop(key)
        p.send_signal(signal.SIGCONT)
        p.terminate()
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _spawn_node(
    role: str,
    node_id: int,
    port: int,
    node_dir: Path,
    quorum: str,
    extra_args: list[str],
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``python -m api <role> start`` for one node, in a session of its own, its data under
    ``node_dir/data``, its output appended to ``node_dir/<role>.log`` and ``env`` added to
    its environment."""
    node_dir.mkdir(parents=True, exist_ok=True)
    log = open(node_dir / f"{role}.log", "ab")  # noqa: SIM115 (owned by the process)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "api",
            role,
            "start",
            "--node-id",
            str(node_id),
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(node_dir / "data"),
            "--controller-quorum",
            quorum,
            *extra_args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def _get_json(url: str, context: ssl.SSLContext | None = None) -> Any:
    with urllib.request.urlopen(url, timeout=2, context=context) as r:
        return json.loads(r.read())


def _tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a node's log ("" before it exists)."""
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class Quorum:
    """N controller processes; ``start(i)``, ``kill(i)``, ``status(i)``, ``metadata(i)``."""

    def __init__(
        self,
        root: Path,
        n: int = 3,
        extra_args: list[str] | None = None,
        ports: list[int] | None = None,
        secure: SecureSetup | None = None,
    ) -> None:
        self.root = root
        self.extra_args = extra_args or []
        self.secure = secure
        """TLS and authentication everywhere (``api.node.secure_setup``); None: plaintext."""
        self.ssl = None if secure is None else secure.client_ssl()
        self.n = n
        self.ports = ports if ports is not None else free_ports(n)
        if len(self.ports) != n:
            raise ValueError(f"{n} controllers need {n} ports, got {self.ports}")
        self.quorum = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.ports))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def url(self, i: int) -> str:
        scheme = "http" if self.secure is None else "https"
        return f"{scheme}://127.0.0.1:{self.ports[i - 1]}"

    @property
    def urls(self) -> list[str]:
        return [self.url(i) for i in range(1, self.n + 1)]

    def start(self, i: int) -> None:
        config = (
            []
            if self.secure is None
            else [
                "--config",
                str(self.secure.node_config("controller", i, self.ports[i - 1], self.quorum)),
            ]
        )
        self.procs[i] = _spawn_node(
            "controller",
            i,
            self.ports[i - 1],
            self.root / f"controller-{i}",
            self.quorum,
            [*config, *self.extra_args],
        )

    def start_all(self) -> None:
        for i in range(1, self.n + 1):
            self.start(i)

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        p = self.procs.pop(i)
        p.send_signal(sig)
        p.wait(timeout=10)

    def stop_all(self) -> None:
        stop_processes(self.procs)

    def get(self, i: int, path: str) -> Any:
        return _get_json(self.url(i) + path, self.ssl)

    def status(self, i: int) -> Any:
        return self.get(i, "/v3/quorum/status")

    def metadata(self, i: int) -> Any:
        return self.get(i, "/v3/quorum/metadata")

    def wait_active_leader(self, timeout_s: float = 20.0, exclude: int | None = None) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in self.procs:
                if i == exclude:
                    continue
                try:
                    st = self.status(i)
                except OSError:
                    continue
                if st["role"] == "leader" and st["active_controller"]:
                    return i
            time.sleep(0.1)
        raise TimeoutError(f"no active controller within {timeout_s} s")

    def log_tail(self, i: int, lines: int = 30) -> str:
        return _tail(self.root / f"controller-{i}" / "controller.log", lines)


class Brokers:
    """Broker processes following ``quorum``; ids ``first_id``, ``first_id + 1``, ...

    ``start(b)``, ``send_signal(b, sig)`` (SIGSTOP/SIGCONT leave the process in place),
    ``kill(b, sig)`` (waits for the exit, returns the exit code), ``ready(b)``,
    ``metadata(b)``.
    """

    def __init__(
        self,
        root: Path,
        quorum: Quorum,
        n: int = 3,
        first_id: int = 101,
        extra_args: list[str] | None = None,
        ports: list[int] | None = None,
        kafka_ports: list[int] | None = None,
        kafka_listener_names: tuple[str, ...] = ("KAFKA",),
    ) -> None:
        self.root = root
        self.quorum = quorum
        self.secure = quorum.secure
        self.ssl = quorum.ssl
        self.ids = list(range(first_id, first_id + n))
        self.ports = dict(zip(self.ids, ports if ports is not None else free_ports(n), strict=True))
        self.extra_args = extra_args or []
        self.kafka_ports = (
            dict(zip(self.ids, kafka_ports, strict=True)) if kafka_ports is not None else {}
        )
        """Each broker's Kafka listener port (``kafka_listen``); none when not given."""
        self.kafka_listener_ports: dict[int, dict[str, int]] = {
            b: {
                name: (port if i == 0 else free_ports(1)[0])
                for i, name in enumerate(kafka_listener_names if self.secure else ("KAFKA",))
            }
            for b, port in self.kafka_ports.items()
        }
        """A secure cluster's brokers' Kafka listeners (``secure_setup.KAFKA_PROTOCOLS``),
        name -> port; the first is ``kafka_ports``."""
        self.broker_ports = dict(zip(self.ids, free_ports(n), strict=True))
        """Each broker's inter-broker listener port (secure clusters only)."""
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.env: dict[int, dict[str, str]] = {}
        """Extra environment of a broker's process, by id (e.g. ``LONGBOAT_LAZYFS``)."""

    def url(self, b: int) -> str:
        scheme = "http" if self.secure is None else "https"
        return f"{scheme}://127.0.0.1:{self.ports[b]}"

    def broker_url(self, b: int) -> str:
        """The inter-broker listener of a secure cluster's broker ``b``."""
        return f"https://127.0.0.1:{self.broker_ports[b]}"

    def start(self, b: int) -> None:
        kafka = (
            ["--kafka-listen", f"127.0.0.1:{self.kafka_ports[b]}"] if b in self.kafka_ports else []
        )
        config = []
        if self.secure is not None:
            path = self.secure.node_config(
                "broker",
                b,
                self.ports[b],
                self.quorum.quorum,
                broker_port=self.broker_ports[b],
                kafka=self.kafka_listener_ports.get(b),
            )
            config = ["--config", str(path)]
            kafka = []  # the config names them, each with its protocol
        self.procs[b] = _spawn_node(
            "broker",
            b,
            self.ports[b],
            self.root / f"broker-{b}",
            self.quorum.quorum,
            [*config, *kafka, *self.extra_args],
            self.env.get(b, {}),
        )

    def start_all(self) -> None:
        for b in self.ids:
            self.start(b)

    def send_signal(self, b: int, sig: int) -> None:
        self.procs[b].send_signal(sig)

    def kill(self, b: int, sig: int = signal.SIGKILL, timeout_s: float = 40) -> int:
        p = self.procs.pop(b)
        p.send_signal(sig)
        return p.wait(timeout=timeout_s)

    def restart(self, b: int, sig: int = signal.SIGTERM) -> int:
        """Stop broker ``b`` with ``sig`` and start it again; the old process's exit code."""
        code = self.kill(b, sig)
        self.start(b)
        return code

    def stop_all(self) -> None:
        stop_processes(self.procs)

    def get(self, b: int, path: str) -> Any:
        return _get_json(self.url(b) + path, self.ssl)

    def ready(self, b: int) -> tuple[int, Any]:
        """(HTTP status, body) of ``/v3/health/ready``."""
        try:
            with urllib.request.urlopen(
                self.url(b) + "/v3/health/ready", timeout=2, context=self.ssl
            ) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def metadata(self, b: int) -> Any:
        return self.get(b, "/v3/broker/metadata")

    def wait_ready(self, ids: list[int] | None = None, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        pending = set(ids if ids is not None else self.procs)
        last: dict[int, Any] = {}
        while pending:
            for b in sorted(pending):
                code = self.procs[b].poll() if b in self.procs else None
                if code is not None:
                    # A broker that exited (a port taken, a bad config) must not pass as
                    # ready because something else answers on its port.
                    raise RuntimeError(
                        f"broker {b} exited with {code} before it was ready:\n" + self.log_tail(b)
                    )
                try:
                    code, body = self.ready(b)
                except OSError as e:
                    last[b] = str(e)
                    continue
                last[b] = body
                if code == 200:
                    pending.discard(b)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"brokers {sorted(pending)} not ready in {timeout_s} s: {last}")
            time.sleep(0.1)

    def log_tail(self, b: int, lines: int = 30) -> str:
        return _tail(self.root / f"broker-{b}" / "broker.log", lines)


@contextmanager
def running_cluster(
    root: Path,
    controllers: int = 3,
    brokers: int = 3,
    *,
    controller_args: list[str] | None = None,
    broker_args: list[str] | None = None,
    ready_timeout_s: float = 60.0,
    kafka: bool = False,
    secure: bool = False,
    kafka_listener_names: tuple[str, ...] = ("KAFKA",),
) -> Iterator[tuple[Quorum, Brokers]]:
    """Controllers and brokers as processes under ``root``, every broker ready; all stopped
    on exit (brokers first, so their controlled shutdowns reach a controller). ``kafka``:
    each broker also serves Kafka's protocol on a free port (``Brokers.kafka_ports``).
    ``secure``: TLS and authentication everywhere (``api.node.secure_setup``; the cluster's
    ``ssl`` context trusts its CA and presents the admin certificate); with ``kafka`` too, each
    broker serves the Kafka listeners ``kafka_listener_names`` (``KAFKA`` is SASL_SSL,
    ``secure_setup.KAFKA_PROTOCOLS``)."""
    setup = None
    if secure:
        from api.node.secure_setup import SecureSetup

        ids = [*range(1, controllers + 1), *range(101, 101 + brokers)]
        setup = SecureSetup.create(root, ids)
    q = Quorum(root, controllers, extra_args=controller_args, secure=setup)
    b = Brokers(
        root,
        q,
        brokers,
        extra_args=broker_args,
        kafka_ports=free_ports(brokers) if kafka else None,
        kafka_listener_names=kafka_listener_names,
    )
    q.start_all()
    b.start_all()
    try:
        b.wait_ready(timeout_s=ready_timeout_s)
        yield q, b
    finally:
        b.stop_all()
        q.stop_all()
