"""Apache Kafka 4.4 itself, on 127.0.0.1: the peer Longboat is measured against
(``scripts/bench/kafka_protocol.py``) and checked against (``test_kafka_oracle.py``).

Owns: fetching Kafka's jars (``scripts/setup-kafka-java.sh``, from Maven Central, once per
machine) and starting a cluster of 1 or 3 nodes in KRaft combined mode
(``process.roles=broker,controller``), each formatted with ``StorageTool format`` and run as
``kafka.Kafka`` in its own JVM under a temporary directory; stopping it. Nothing here starts
Longboat (``api.node.localcluster`` does).

A missing Java or Maven is installed by the setup script, or it fails saying what: a test
that needs Kafka fails without it, never skips (CI must not pass by running nothing).
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from api.node.localcluster import Brokers, free_ports, running_cluster

REPO = Path(__file__).resolve().parents[3]

# Short-lived JVMs (a test's cluster) start faster with only the C1 compiler and the serial
# collector; a benchmark's cluster wants C2's compiled hot paths and passes none of these.
QUICK_START_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def kafka_jars() -> Path:
    """The directory of Kafka 4.4's jars, fetched by the setup script if missing."""
    out = subprocess.run(
        [str(REPO / "scripts" / "setup-kafka-java.sh")],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class KafkaCluster:
    """``nodes`` Apache Kafka nodes in KRaft combined mode on 127.0.0.1, under ``root``.

    ``props`` are added to (or override) every node's ``server.properties``. The internal
    topics' replication follows the node count. Topic auto-creation is off, as in Longboat
    (a Metadata or Produce for an unknown topic must not create it).
    """

    def __init__(
        self,
        root: Path,
        jars: Path,
        nodes: int = 3,
        *,
        heap: str = "-Xmx512m",
        jvm_opts: tuple[str, ...] = (),
        props: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.jars = jars
        self.nodes = nodes
        self.heap = heap
        self.jvm_opts = jvm_opts
        self.props = props or {}
        ports = free_ports(2 * nodes)
        self.broker_ports, self.controller_ports = ports[:nodes], ports[nodes:]
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.broker_ports)

    def _java(self, heap: str, main: str, *args: str) -> list[str]:
        return ["java", heap, *self.jvm_opts, "-cp", f"{self.jars}/*", main, *args]

    def _properties(self, i: int, voters: str) -> str:
        rf = min(self.nodes, 3)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(i + 1),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.broker_ports[i]},"
            f"CONTROLLER://127.0.0.1:{self.controller_ports[i]}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.broker_ports[i]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.root / f"node{i + 1}" / "data"),
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min(rf, 2)),
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            **self.props,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start(self, timeout_s: float = 120) -> None:
        # Imported here: the module is also read by code that only wants kafka_jars().
        from confluent_kafka.admin import AdminClient

        # As Kafka's Uuid.randomUuid: never an id that starts with "-", which StorageTool's
        # argument parser takes for an option (1 run in 64 failed to format).
        cluster_id = "-"
        while cluster_id.startswith("-"):
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.controller_ports))
        for i in range(self.nodes):
            node = self.root / f"node{i + 1}"
            node.mkdir(parents=True)
            props = node / "server.properties"
            props.write_text(self._properties(i, voters))
            subprocess.run(
                self._java(
                    "-Xmx256m",
                    "kafka.tools.StorageTool",
                    "format",
                    "--cluster-id",
                    cluster_id,
                    "--config",
                    str(props),
                    "--ignore-formatted",
                ),
                check=True,
                capture_output=True,
                timeout=120,
            )
        for i in range(self.nodes):
            node = self.root / f"node{i + 1}"
            with open(node / "kafka.out", "wb") as log:
                self.procs.append(
                    subprocess.Popen(
                        self._java(self.heap, "kafka.Kafka", str(node / "server.properties")),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env={**os.environ, "KAFKA_HEAP_OPTS": self.heap},
                    )
                )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a Kafka node exited: see {self.root}/node*/kafka.out")
            if all(_listening(port) for port in self.broker_ports):
                try:
                    admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                    if len(admin.list_topics(timeout=5).brokers) == self.nodes:
                        return
                except Exception:
                    pass  # listening, not yet answering Metadata with every broker
            time.sleep(0.2)
        raise RuntimeError(f"Kafka did not start within {timeout_s:.0f} s: see {self.root}")

    @property
    def node_ports(self) -> dict[int, int]:
        """Node id -> its broker listener's port."""
        return {i + 1: port for i, port in enumerate(self.broker_ports)}

    def send_signal(self, node_id: int, sig: int) -> None:
        """As ``Brokers.send_signal``: SIGSTOP pauses a node, SIGCONT resumes it."""
        self.procs[node_id - 1].send_signal(sig)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []

    def __enter__(self) -> KafkaCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def beside_longboat(
    ak: KafkaCluster, root: Path, *, kafka_timeout_s: float, **longboat: Any
) -> Iterator[Brokers]:
    """Start ``ak`` in a thread while a Longboat cluster (``running_cluster(root,
    **longboat)``) starts, as both take tens of seconds on a loaded machine; yield Longboat's
    brokers once both are up (Kafka's start error raised here); stop Kafka at the end."""
    failed: list[BaseException] = []

    def start_kafka() -> None:
        try:
            ak.start(timeout_s=kafka_timeout_s)
        except BaseException as e:  # re-raised in the caller's thread
            failed.append(e)

    th = threading.Thread(target=start_kafka)
    th.start()
    try:
        with running_cluster(root, **longboat) as (_, b):
            th.join()
            if failed:
                raise failed[0]
            yield b
    finally:
        th.join()
        ak.stop()
