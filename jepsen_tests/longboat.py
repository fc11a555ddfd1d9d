"""`LongboatCluster`: real Longboat controllers and brokers as processes, and their clients.

Layout of a cluster of N (default 3): controllers ``q1..qN`` (node ids 1..N) and brokers
``b1..bN`` (node ids 101..), each on its own loopback address (``127.0.0.2`` upwards, see
`jepsen_tests.nemesis.net.node_address`) so nftables rules inside the run's namespace can cut
any link; the nodes bind their outgoing connections to that address too (``common.netbind``,
set by ``longboat controller|broker start`` from the listen host). Each node has a TOML config
and a data directory under the run directory, and runs ``python -m api <role> start --config``
through `NodeProcess` (its own session, log appended across restarts), wrapped in ``ip netns
exec`` when the run has a namespace. ``LONGBOAT_LAZYFS=1`` comes from the runner's ``env_for``
when lose-unsynced is in the run.

The workload's keys ``k0..k{P-1}`` are the partitions of one topic (``jepsen``, replication
factor 3, ``min.insync.replicas=2``), created through a broker's v3 HTTP API
(``POST /v3/clusters/{id}/topics``) once the brokers are up.

Leadership is read as a client would: ``GET /v3/broker/metadata`` on any broker (partition
leaders), ``GET /v3/quorum/status`` on the controllers (the active controller). These helpers
use blocking ``urllib`` with short timeouts and must run on a thread inside the namespace (the
runner's main thread is).

With ``secure=True`` (``run --secure``, issue 18) the cluster is the one ``longboat dev up
--secure`` makes, on the run's addresses: a CA and a certificate per node under
``<run>/tls`` (``api.node.secure_setup``, each naming its node's 127.0.0.N), controllers on
an SSL listener that requires client certificates, brokers on a SASL_SSL client listener and
an SSL inter-broker listener (a second port, `NodeSpec.extra` ``more_ports``, which the
intercepting proxies also cover), the authorizer on. The harness itself (health, leaders,
topic creation, the membership and reassign nemeses' commands) is ``User:admin`` by the admin
certificate; the workload's clients are ``User:jepsen``, a SCRAM user made for the run with
a random password, over TLS with HTTP Basic, holding only the ACLs the workloads need
(`jepsen_acls`).

This module starts processes and speaks HTTP: it imports no server package.
"""

from __future__ import annotations

import json
import secrets
import signal
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from api.client.security import ClientSecurity
from jepsen_tests.cluster import (
    Cluster,
    Dial,
    EnvFor,
    GroupMember,
    MetadataClient,
    NodeSpec,
    OnRebalance,
    QueueClient,
    Wrap,
)
from jepsen_tests.nemesis.net import node_address
from jepsen_tests.nemesis.process import NodeProcess, wait_until

if TYPE_CHECKING:
    from api.node.secure_setup import SecureSetup

TOPIC = "jepsen"
CONTROLLER_ID_BASE = 0  # controller i has node id i
BROKER_ID_BASE = 100  # broker i has node id 100 + i
CORRUPT_SEGMENT_BYTES = 16 << 10


TXN_STATE_TOPIC = "__transaction_state"


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (a signed 32-bit int over UTF-16 code units)."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def txn_state_partition(transactional_id: str, partitions: int) -> int:
    """Kafka's ``partitionFor``: ``Utils.abs(hashCode) % partitions`` (``abs`` of the
    smallest int is 0)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


_ISSUED_PORTS: set[tuple[str, int]] = set()
"""Ports ``free_port`` handed out in this process: the kernel may hand a just-freed port to
the next ``bind(0)``, and a cluster asks once per listener, so a repeat would put two
listeners on one port."""


def free_port(host: str) -> int:
    """A port free on ``host`` now and never handed out before in this process."""
    while True:
        with socket.socket() as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if (host, port) not in _ISSUED_PORTS:
            _ISSUED_PORTS.add((host, port))
            return port


def http_json(url: str, timeout_s: float = 1.0, context: ssl.SSLContext | None = None) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s, context=context) as r:
        return json.loads(r.read())


def http_status(url: str, timeout_s: float = 1.0, context: ssl.SSLContext | None = None) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=context) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


CLIENT_USER = "jepsen"
"""The SCRAM user the workloads' clients are on a secure cluster (``User:jepsen``)."""


def jepsen_acls(topics: list[str]) -> list[dict[str, str]]:
    """What ``User:jepsen`` may do, as REST v3 ACL bindings: produce to and read the
    workload's topics, produce idempotently, consume in any group, use any transactional id;
    create, describe, reconfigure and delete the metadata workload's topics (``topic-*``);
    register schemas under the schemas workload's subjects (``jepsen-N-value`` names topic
    ``jepsen-N``). Nothing on the cluster beyond ``IDEMPOTENT_WRITE``, and no node route."""

    def acl(rtype: str, name: str, op: str, pattern: str = "LITERAL") -> dict[str, str]:
        return {
            "resource_type": rtype,
            "resource_name": name,
            "pattern_type": pattern,
            "principal": f"User:{CLIENT_USER}",
            "host": "*",
            "operation": op,
            "permission": "ALLOW",
        }

    out = [acl("TOPIC", t, op) for t in topics for op in ("WRITE", "READ")]
    out += [acl("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")]
    out += [acl("GROUP", "*", "READ"), acl("TRANSACTIONAL_ID", "*", "WRITE")]
    out += [
        acl("TOPIC", "topic-", op, "PREFIXED")
        for op in ("CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS")
    ]
    out += [acl("TOPIC", "jepsen-", "WRITE", "PREFIXED")]
    return out


class LongboatCluster(Cluster):
    """N controllers + N brokers; the queue workload's keys are partitions of one topic."""

    dials_through_proxies = False  # api.client goes to the URLs brokers advertise

    def __init__(
        self,
        n: int = 3,
        partitions: int = 6,
        replication_factor: int = 3,
        min_insync_replicas: int = 2,
        idempotence: bool = True,
        topic: str = TOPIC,
        acks_require_fsync: bool = False,
        extra_topics: tuple[str, ...] = (),
        kafka_clients: bool = False,
        secure: bool = False,
    ) -> None:
        if n < 1 or replication_factor > n:
            raise ValueError(f"{n} brokers cannot hold replication factor {replication_factor}")
        self.n = n
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self.idempotence = idempotence
        self.acks_require_fsync = acks_require_fsync
        """Brokers' ``acks_require_fsync``: every ISR member fsyncs before a write is acked."""
        self.topic = topic
        self.topic_configs: dict[str, str] = {"min.insync.replicas": str(min_insync_replicas)}
        self.extra_topics = extra_topics
        self.kafka_clients = kafka_clients
        """The queue workload's clients are confluent-kafka's, over each broker's Kafka
        listener (``jepsen_tests.kafka_client``), instead of Longboat's Python client."""
        self.kafka_ports: dict[str, int] = {}
        """More topics like `topic` (the txn-ctp workload's output topic), created with it."""
        self.start_timeout_s = 60.0
        self.metadata_timeout_s = max(0.5, partitions / 1000)
        """How long a broker's metadata (every partition's leader and ISR) may take: 0.5 s
        keeps checks between faults quick; a loaded broker of 10,000 partitions took longer
        to answer the 2 MB of it, and every check then saw no partitions at all."""
        self.keys = [f"k{p}" for p in range(partitions)]
        self.controllers = [f"q{i + 1}" for i in range(n)]  # quorum voters
        self.brokers = [f"b{i + 1}" for i in range(n)]
        self.node_ids = {
            **{c: CONTROLLER_ID_BASE + i + 1 for i, c in enumerate(self.controllers)},
            **{b: BROKER_ID_BASE + i + 1 for i, b in enumerate(self.brokers)},
        }
        self.by_id = {v: k for k, v in self.node_ids.items()}
        self.secure = secure
        """TLS, authentication and ACLs everywhere (module docstring)."""
        self.client_security: ClientSecurity | None = None
        """What the workload's clients connect with (set up by `setup` when secure)."""
        self.admin_ssl: ssl.SSLContext | None = None
        """The harness's own TLS context: the CA, and the admin certificate (a super user)."""
        self.tls_files: dict[str, str] = {}
        """The CA and the admin certificate and key, by ``ClientSecurity`` field name."""
        names = self.controllers + self.brokers
        # Ports are chosen in setup, inside the namespace; 0 until then.
        self.nodes = [
            NodeSpec(
                name,
                node_address(i + 1),
                0,
                Path(),
                ("controller",) if name in self.controllers else ("broker",),
            )
            for i, name in enumerate(names)
        ]
        self.processes = {}

    # ---- topology

    def spec(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)

    def url(self, name: str) -> str:
        n = self.spec(name)
        return f"{'https' if self.secure else 'http'}://{n.host}:{n.port}"

    def cli_env(self) -> dict[str, str]:
        """What a ``longboat`` command run by a nemesis needs in its environment: the admin
        certificate on a secure cluster (``LONGBOAT_SSL_*``), nothing otherwise."""
        return {f"LONGBOAT_{k.upper()}": v for k, v in self.tls_files.items()}

    def _json(self, url: str, timeout_s: float) -> Any:
        return http_json(url, timeout_s, self.admin_ssl)

    def broker_urls(self) -> list[str]:
        return [self.url(b) for b in self.brokers]

    def controller_urls(self) -> list[str]:
        return [self.url(c) for c in self.controllers]

    def kafka_bootstrap(self) -> str:
        return ",".join(f"{self.spec(b).host}:{self.kafka_ports[b]}" for b in self.brokers)

    def configure_for(self, kinds: list[str]) -> None:
        if "disk-corrupt" in kinds:
            # Closed segments, and so index files, for the nemesis to damage: segments roll
            # at 16 KiB instead of 1 GiB (a run writes tens of KiB per partition).
            self.topic_configs["segment.bytes"] = str(CORRUPT_SEGMENT_BYTES)

    def key_partition(self, key: str) -> int:
        return int(key[1:])

    def setup(self, run_dir: Path, env_for: EnvFor, wrap: Wrap) -> None:
        nodes = []
        for n in self.nodes:
            more = (
                {"more_ports": (free_port(n.host),)} if self.secure and "broker" in n.roles else {}
            )
            nodes.append(
                NodeSpec(
                    n.name, n.host, free_port(n.host), run_dir / "data" / n.name, n.roles, more
                )
            )
        self.nodes = nodes
        quorum = ",".join(
            f"{self.node_ids[c]}@{self.spec(c).host}:{self.spec(c).port}" for c in self.controllers
        )
        secure = self._secure_setup(run_dir) if self.secure else None
        conf_dir = run_dir / "config"
        conf_dir.mkdir(parents=True, exist_ok=True)
        if self.kafka_clients:
            self.kafka_ports = {b: free_port(self.spec(b).host) for b in self.brokers}
        for n in self.nodes:
            n.data_dir.mkdir(parents=True, exist_ok=True)
            conf = conf_dir / f"{n.name}.toml"
            # Top-level keys first: the secure part ends in [listener_settings.*] tables.
            listeners = f'listen = "{n.host}:{n.port}"\n'
            if secure is not None:
                listeners = secure.node_config(
                    n.roles[0],
                    self.node_ids[n.name],
                    n.port,
                    quorum,
                    broker_port=(n.extra.get("more_ports") or (None,))[0],
                    host=n.host,
                ).read_text()
            conf.write_text(
                f"node_id = {self.node_ids[n.name]}\n"
                f'roles = ["{n.roles[0]}"]\n'
                f'controller_quorum = "{quorum}"\n'
                f'data_dir = "{n.data_dir}"\n'
                + (
                    "acks_require_fsync = true\n"
                    if self.acks_require_fsync and "broker" in n.roles
                    else ""
                )
                + (
                    f'kafka_listen = "{n.host}:{self.kafka_ports[n.name]}"\n'
                    if n.name in self.kafka_ports
                    else ""
                )
                + listeners
            )
            argv = [sys.executable, "-m", "api", n.roles[0], "start", "--config", str(conf)]
            self.processes[n.name] = NodeProcess(
                n.name,
                wrap(argv),
                run_dir / "logs" / f"{n.name}.log",
                {"PYTHONUNBUFFERED": "1", **env_for(n.name)},
            )

    def _secure_setup(self, run_dir: Path) -> SecureSetup:
        """The CA, the node and admin certificates (``longboat dev up --secure``'s code, each
        node's certificate naming its own address), and the clients' credentials."""
        from api.node.secure_setup import SecureSetup

        hosts = {self.node_ids[n.name]: n.host for n in self.nodes}
        setup = SecureSetup.create(run_dir, sorted(hosts), hosts)
        self.tls_files = {
            "ssl_cafile": str(setup.ca.cert),
            "ssl_certfile": str(setup.admin.cert),
            "ssl_keyfile": str(setup.admin.key),
        }
        self.admin_ssl = setup.client_ssl()
        # A fresh password per run, kept in memory only (never in the run directory's logs).
        self.client_security = ClientSecurity(
            ssl_cafile=str(setup.ca.cert),
            username=CLIENT_USER,
            password=secrets.token_urlsafe(18),
        )
        return setup

    # ---- state, as a client sees it

    def active_controller(self) -> str | None:
        for c in self.controllers:
            try:
                st = self._json(self.url(c) + "/v3/quorum/status", 0.5)
            except (OSError, ValueError):
                continue
            if st.get("role") == "leader" and st.get("active_controller"):
                return c
        return None

    def broker_metadata(self) -> dict[str, Any] | None:
        for b in self.brokers:
            try:
                md: dict[str, Any] = self._json(
                    self.url(b) + "/v3/broker/metadata", self.metadata_timeout_s
                )
                return md
            except (OSError, ValueError):
                continue
        return None

    def partition_table(self, md: dict[str, Any] | None = None) -> dict[int, dict[str, Any]]:
        md = md if md is not None else self.broker_metadata()
        if md is None:
            return {}
        for t in md.get("topics", []):
            if t["name"] == self.topic:
                return {int(p["partition"]): p for p in t["partitions"]}
        return {}

    def leaders(self) -> dict[str, str]:
        out = {}
        for p, info in self.partition_table().items():
            name = self.by_id.get(int(info["leader"]))
            if name is not None:
                out[f"k{p}"] = name
        return out

    transactional_ids: list[str] = []
    """The run's transactional ids (set by the runner for the txn workloads)."""

    def txn_coordinator(self, pick: int = 0) -> str | None:
        """A broker that coordinates one of `transactional_ids` now: the leader of its
        ``__transaction_state`` partition (``abs(javaHashCode(id)) % partitions``, Kafka's
        ``partitionFor``). None before the topic exists."""
        md = self.broker_metadata()
        if md is None:
            return None
        table = next((t for t in md.get("topics", []) if t["name"] == TXN_STATE_TOPIC), None)
        if table is None or not table["partitions"] or not self.transactional_ids:
            return None
        leaders = {int(p["partition"]): int(p["leader"]) for p in table["partitions"]}
        n = len(leaders)
        chosen = sorted(
            {
                self.by_id[leaders[p]]
                for p in (txn_state_partition(i, n) for i in self.transactional_ids)
                if leaders.get(p, -1) in self.by_id
            }
        )
        return chosen[pick % len(chosen)] if chosen else None

    def schemas_leader(self) -> str | None:
        """The broker leading the Schema Registry's ``_schemas`` partition (every
        registration is written through it); None before the topic exists."""
        md = self.broker_metadata()
        table = next((t for t in (md or {}).get("topics", []) if t["name"] == "_schemas"), None)
        if table is None or not table["partitions"]:
            return None
        return self.by_id.get(int(table["partitions"][0]["leader"]))

    def schema_client(self, name: str, host: str) -> Any:
        """The schemas workload's client (`jepsen_tests.workloads.schemas.SchemaClient`)."""
        from jepsen_tests.longboat_schemas import LongboatSchemaClient

        return LongboatSchemaClient(self, name, host)

    def voters(self) -> dict[str, tuple[int, str]]:
        return {c: (self.node_ids[c], self.url(c)) for c in self.controllers}

    def reassignable(
        self,
    ) -> tuple[str, list[int], list[str], Callable[[], dict[int, dict[str, Any]]]] | None:
        return (
            self.topic,
            [self.node_ids[b] for b in self.brokers],
            self.broker_urls(),
            self.partition_table,
        )

    def leader_and_followers(self, pick: int = 0) -> tuple[str, list[str]] | None:
        table = self.partition_table()
        led = [
            (p, info)
            for p, info in sorted(table.items())
            if self.by_id.get(int(info["leader"])) is not None
        ]
        if not led:
            return None
        _, info = led[pick % len(led)]
        leader = self.by_id[int(info["leader"])]
        followers = [
            self.by_id[r] for r in info["replicas"] if r in self.by_id and self.by_id[r] != leader
        ]
        return leader, followers

    def ready(self) -> bool:
        return all(self._broker_ready(b) for b in self.brokers)

    def _broker_ready(self, b: str) -> bool:
        try:
            return http_status(self.url(b) + "/v3/health/ready", 0.5, self.admin_ssl) == 200
        except OSError:
            return False

    def all_led(self) -> bool:
        """Every partition of the topic has a leader (ISRs may still be short)."""
        table = self.partition_table()
        return len(table) == self.partitions and all(int(p["leader"]) >= 0 for p in table.values())

    def healthy(self) -> bool:
        """Every broker ready and every partition led with a full ISR."""
        if not self.ready():
            return False
        table = self.partition_table()
        return len(table) == self.partitions and all(
            int(p["leader"]) >= 0 and len(p["isr"]) == self.replication_factor
            for p in table.values()
        )

    # ---- lifecycle

    def start(self, timeout_s: float | None = None, *, full_isr: bool = True) -> None:
        """Controllers, an active one, brokers, the topic; then every partition led with a
        full ISR (or, with ``full_isr=False``, just led)."""
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        for c in self.controllers:
            self.processes[c].start()
        self._wait("an active controller", lambda: self.active_controller() is not None, deadline)
        for b in self.brokers:
            self.processes[b].start()
        self._wait("every broker ready", self.ready, deadline)
        if self.client_security is not None:
            self._create_client_user(deadline)
        for topic in (self.topic, *self.extra_topics):
            self.create_topic(deadline, topic)
        if self.client_security is not None:
            self._wait(
                f"User:{CLIENT_USER} known and allowed on every broker",
                self._client_user_everywhere,
                deadline,
            )
        if full_isr:
            self._wait(f"topic {self.topic}: every partition led, full ISR", self.healthy, deadline)
        else:
            self._wait(f"topic {self.topic}: every partition led", self.all_led, deadline)

    def stop(self) -> None:
        """SIGTERM every node at once (brokers' controlled shutdowns overlap), SIGKILL what
        is left after a few seconds: the run's data has been read by then."""
        procs = list(self.processes.values())
        for p in procs:
            if p.alive():
                p.resume()
                p.signal(signal.SIGTERM)
        wait_until(lambda: not any(p.alive() for p in procs), 5.0, 0.1)
        for p in procs:
            p.destroy()

    def _wait(self, what: str, cond: Any, deadline: float) -> None:
        if not wait_until(cond, max(0.0, deadline - time.monotonic()), 0.1):
            tails = "\n".join(f"--- {n}:\n{p.log_tail(1500)}" for n, p in self.processes.items())
            raise RuntimeError(f"cluster: not {what} in time\n{tails}")

    def _admin_post(
        self,
        deadline: float,
        path: str,
        body: Any,
        what: str,
        done_already: Callable[[int, str], bool] = lambda _code, _answer: False,
    ) -> None:
        """POST ``body`` to ``/v3/clusters/<id><path>`` of some broker as the admin, until
        one accepts it (a broker answers once its own image shows the change), or answers
        an error ``done_already(status, body)`` says means it was done before."""
        data = json.dumps(body).encode()
        last = "no broker tried"
        while time.monotonic() < deadline:
            for b in self.brokers:
                try:
                    cid = self._json(self.url(b) + "/v3/clusters", 2.0)["data"][0]["cluster_id"]
                    req = urllib.request.Request(
                        f"{self.url(b)}/v3/clusters/{cid}{path}",
                        data=data,
                        method="POST",
                        headers={"Content-Type": "application/json"},
                    )
                    with urllib.request.urlopen(req, timeout=30, context=self.admin_ssl):
                        return
                except urllib.error.HTTPError as e:
                    answer = e.read().decode(errors="replace")
                    if done_already(e.code, answer):
                        return
                    last = f"HTTP {e.code}: {answer[:300]}"
                except (OSError, ValueError, KeyError, IndexError) as e:
                    last = repr(e)
            time.sleep(0.2)
        raise RuntimeError(f"cluster: could not {what}: {last}")

    def _create_client_user(self, deadline: float) -> None:
        """``User:jepsen``'s SCRAM credential and its ACLs (`jepsen_acls`)."""
        sec = self.client_security
        assert sec is not None and sec.password is not None
        self._admin_post(
            deadline,
            "/users",
            {"user_name": CLIENT_USER, "password": sec.password},
            f"create user {CLIENT_USER}",
        )
        topics = [self.topic, *self.extra_topics]
        self._admin_post(
            deadline, "/acls:batch", {"data": jepsen_acls(topics)}, "create the client's ACLs"
        )

    def _client_user_everywhere(self) -> bool:
        """Every broker authenticates the client user and lets it describe the topic: the
        credential and the ACLs reached every broker's image (a client dials any of them)."""
        sec = self.client_security
        assert sec is not None
        auth = sec.authorization() or ""
        ctx = sec.ssl_context()
        for b in self.brokers:
            try:
                cid = self._json(self.url(b) + "/v3/clusters", 2.0)["data"][0]["cluster_id"]
                req = urllib.request.Request(
                    f"{self.url(b)}/v3/clusters/{cid}/topics/{self.topic}",
                    headers={"Authorization": auth},
                )
                with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                    if r.status != 200:
                        return False
            except (OSError, ValueError, KeyError, IndexError):
                return False
        return True

    def create_topic(self, deadline: float, topic: str | None = None) -> None:
        """Create the workload's topic (or `topic`, configured alike) through a broker's v3
        HTTP API, as a user would."""
        topic = topic or self.topic
        self._admin_post(
            deadline,
            "/topics",
            {
                "topic_name": topic,
                "partitions_count": self.partitions,
                "replication_factor": self.replication_factor,
                "configs": [{"name": k, "value": v} for k, v in sorted(self.topic_configs.items())],
            },
            f"create topic {topic}",
            done_already=lambda code, answer: code == 400 and "already exists" in answer,
        )

    # ---- clients

    def client(self, name: str, host: str, dial: Dial) -> QueueClient:
        # `dial` is not used: the client goes to the addresses brokers advertise (see
        # `dials_through_proxies`).
        if self.kafka_clients:
            from jepsen_tests.kafka_client import KafkaQueueClient

            return KafkaQueueClient(self, name)
        from jepsen_tests.longboat_client import LongboatQueueClient

        return LongboatQueueClient(self, name, host)

    def metadata_client(self, name: str, host: str, dial: Dial) -> MetadataClient:
        from jepsen_tests.longboat_client import LongboatMetadataClient

        return LongboatMetadataClient(self, name, host)

    supports_groups = True

    def group_member(
        self, name: str, host: str, *, group: str, assignor: str, on_rebalance: OnRebalance
    ) -> GroupMember:
        from jepsen_tests.longboat_client import LongboatGroupMember

        return LongboatGroupMember(
            self, name, host, group=group, assignor=assignor, on_rebalance=on_rebalance
        )

    def txn_client(self, name: str, host: str, transactional_id: str) -> Any:
        """The txn workloads' client (`jepsen_tests.workloads.txn.TxnClient`)."""
        from jepsen_tests.longboat_txn import LongboatTxnClient

        return LongboatTxnClient(self, name, host, transactional_id)

    def ctp_processor(self, name: str, host: str, transactional_id: str) -> Any:
        """A txn-ctp processor (`jepsen_tests.workloads.txn.CtpProcessor`)."""
        from jepsen_tests.longboat_txn import LongboatCtpProcessor

        return LongboatCtpProcessor(self, name, host, transactional_id)

    async def prepare_group(self, group: str, host: str) -> None:
        from jepsen_tests.longboat_client import wait_for_group_coordinator

        await wait_for_group_coordinator(self, group, host)
