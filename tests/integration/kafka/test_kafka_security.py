"""The Kafka listener's security (issue 18) with a real client, confluent-kafka (librdkafka).

One secure cluster for the module (1 controller, 1 broker; ``running_cluster(secure=True)``)
whose broker serves three Kafka listeners: ``KAFKA`` (SASL_SSL: PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER), ``KAFKA_SASL_PLAINTEXT`` and ``KAFKA_SSL`` (client certificate required). Users
and ACLs are made through the HTTP API with the admin certificate, so both front doors check
the same metadata log. Pinned: produce and consume with the right ACLs over each SASL
mechanism and protocol; a wrong password is an authentication error, counted and logged
without the password; a user without WRITE gets TOPIC_AUTHORIZATION_FAILED and nothing is
written; a topic the user may not DESCRIBE is hidden from Metadata; a group it may not READ
is GROUP_AUTHORIZATION_FAILED; a client certificate maps to its principal on SSL; Metadata
names the listener the client came in on; a plaintext client is refused by a TLS listener;
and a request before authentication closes the connection.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import (  # noqa: E402
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient  # noqa: E402

from api.node.certs import Issued  # noqa: E402
from api.node.localcluster import Brokers, Quorum, running_cluster, wait_for  # noqa: E402

pytestmark = pytest.mark.slow

B = 101
USERS = {"alice": "alice-pw", "bob": "bob-pw"}


class Secure:
    def __init__(self, q: Quorum, b: Brokers) -> None:
        self.q, self.b = q, b
        assert q.secure is not None
        self.setup = q.secure
        self.ports = b.kafka_listener_ports[B]
        self.cid = self.call("GET", "/v3/clusters")["data"][0]["cluster_id"]

    def call(self, method: str, path: str, body: Any = None) -> Any:
        req = urllib.request.Request(
            self.b.url(B) + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10, context=self.b.ssl) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def v3(self, path: str, body: Any = None, method: str = "POST") -> Any:
        return self.call(method, f"/v3/clusters/{self.cid}{path}", body)

    def acl(
        self, principal: str, rtype: str, name: str, *ops: str, pattern: str = "LITERAL"
    ) -> None:
        for op in ops:
            self.v3(
                "/acls",
                {
                    "resource_type": rtype,
                    "resource_name": name,
                    "pattern_type": pattern,
                    "principal": principal,
                    "host": "*",
                    "operation": op,
                    "permission": "ALLOW",
                },
            )

    def end_offset(self, topic: str) -> int:
        body = self.v3(f"/topics/{topic}/partitions/0/offset", method="GET")
        return int(body["latest_offset"])

    def conf(self, listener: str = "KAFKA", **extra: Any) -> dict[str, Any]:
        proto = {"KAFKA": "SASL_SSL", "KAFKA_SASL_PLAINTEXT": "SASL_PLAINTEXT"}.get(listener, "SSL")
        c: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{self.ports[listener]}",
            "security.protocol": proto,
            "socket.timeout.ms": 10000,
        }
        if "SSL" in proto:
            c["ssl.ca.location"] = str(self.setup.ca.cert)
        c.update(extra)
        return c

    def sasl(
        self, user: str, mechanism: str, listener: str = "KAFKA", password: str | None = None
    ) -> dict[str, Any]:
        return self.conf(
            listener,
            **{
                "sasl.mechanism": mechanism,
                "sasl.username": user,
                "sasl.password": password if password is not None else USERS[user],
            },
        )


@pytest.fixture(scope="module")
def sec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    root: Path = tmp_path_factory.mktemp("kafka-secure")
    with running_cluster(
        root,
        controllers=1,
        brokers=1,
        secure=True,
        kafka=True,
        kafka_listener_names=("KAFKA", "KAFKA_SASL_PLAINTEXT", "KAFKA_SSL"),
        ready_timeout_s=90,
    ) as (q, b):
        s = Secure(q, b)
        for user, pw in USERS.items():
            for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                s.v3("/users", {"user_name": user, "password": pw, "mechanism": mech})
        for topic in ("orders", "secret"):
            s.v3("/topics", {"topic_name": topic, "partitions_count": 1, "replication_factor": 1})
        s.acl("User:alice", "TOPIC", "orders", "WRITE", "READ", "DESCRIBE")
        s.acl("User:alice", "GROUP", "g-alice", "READ", pattern="PREFIXED")
        s.acl("User:bob", "TOPIC", "orders", "READ", "DESCRIBE")
        s.acl("User:carol", "TOPIC", "orders", "DESCRIBE")
        yield s


def produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[Any]:
    """Produce and flush; the delivery errors (None for a delivered record)."""
    errors: list[Any] = []
    p = Producer({**conf, "message.timeout.ms": 5000, "retries": 0})
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(30) == 0
    return errors


def consume(conf: dict[str, Any], topic: str, group: str, n: int) -> list[bytes]:
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                raise KafkaException(m.error())
            got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def read_assigned(conf: dict[str, Any], topic: str, n: int) -> list[bytes]:
    c = Consumer({**conf, "group.id": "g-alice-assign", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(n - len(got), timeout=0.5):
                if m.error() is not None:
                    raise KafkaException(m.error())
                got.append(m.value())
    finally:
        c.close()
    return got


@pytest.mark.parametrize(
    ("mechanism", "listener", "by_group"),
    [
        ("PLAIN", "KAFKA", True),
        ("SCRAM-SHA-256", "KAFKA", False),
        ("SCRAM-SHA-512", "KAFKA", False),
        ("SCRAM-SHA-512", "KAFKA_SASL_PLAINTEXT", True),
    ],
)
def test_produce_and_consume_with_the_right_acls(
    sec: Secure, mechanism: str, listener: str, by_group: bool
) -> None:
    conf = sec.sasl("alice", mechanism, listener)
    before = sec.end_offset("orders")
    tag = f"{mechanism}-{listener}".encode()
    assert produce(conf, "orders", [tag + b"-0", tag + b"-1"]) == [None, None]
    assert sec.end_offset("orders") == before + 2
    # A group (JoinGroup, SyncGroup, OffsetCommit: READ on the group) costs the group's
    # initial rebalance delay, so two of the four read by assignment (Fetch: READ on the topic).
    got = (
        consume(conf, "orders", f"g-alice-{mechanism}-{listener}", before + 2)
        if by_group
        else read_assigned(conf, "orders", before + 2)
    )
    assert got[-2:] == [tag + b"-0", tag + b"-1"]


def test_oauthbearer_with_a_token_of_the_clusters_issuer(sec: Secure) -> None:
    token = sec.setup.token("alice")
    conf = {
        **sec.conf("KAFKA"),
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": lambda _config: (token, time.time() + 3600),
    }
    before = sec.end_offset("orders")
    assert produce(conf, "orders", [b"by-token"]) == [None]
    assert sec.end_offset("orders") == before + 1


def test_a_user_without_write_gets_a_topic_authorization_error(sec: Secure) -> None:
    before = sec.end_offset("orders")
    errors = produce(sec.sasl("bob", "SCRAM-SHA-512"), "orders", [b"forbidden"])
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert sec.end_offset("orders") == before  # nothing was written
    # acks=0 gets no answer; the refusal closes the connection, as Kafka does.
    produce({**sec.sasl("bob", "SCRAM-SHA-512"), "acks": 0}, "orders", [b"forbidden"])
    assert sec.end_offset("orders") == before
    wait_for(
        "the acks=0 refusal closes the connection",
        lambda: (
            "after acks=0 errors: orders-0: topic_authorization_failed" in sec.b.log_tail(B, 80)
        ),
        15,
    )
    assert sec.end_offset("orders") == before


def test_metadata_hides_what_the_user_may_not_describe(sec: Secure) -> None:
    admin = AdminClient(sec.sasl("bob", "SCRAM-SHA-256"))
    md = admin.list_topics(timeout=10)
    assert "orders" in md.topics and "secret" not in md.topics
    one = admin.list_topics("secret", timeout=10).topics["secret"]
    assert one.error is not None and one.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Metadata names the listener the client came in on.
    assert {b.port for b in md.brokers.values()} == {sec.ports["KAFKA"]}


def test_a_group_the_user_may_not_read_is_refused(sec: Secure) -> None:
    with pytest.raises(KafkaException) as e:
        consume(sec.sasl("bob", "PLAIN"), "orders", "g-alice", 1)
    assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_acls_administered_over_kafkas_protocol(sec: Secure) -> None:
    """CreateAcls/DescribeAcls/DeleteAcls through confluent-kafka's AdminClient: the same
    bindings the HTTP API shows, and only for a principal with ALTER on the CLUSTER."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient(sec.sasl("bob", "PLAIN"))
    grant = AclBinding(
        ResourceType.TOPIC,
        "audit-",
        ResourcePatternType.PREFIXED,
        "User:dave",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException) as e:  # bob has no ALTER on the CLUSTER
        admin.create_acls([grant])[grant].result(timeout=10)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    sec.acl("User:bob", "CLUSTER", "kafka-cluster", "ALTER", "DESCRIBE")
    assert admin.create_acls([grant])[grant].result(timeout=10) is None
    dave = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:dave",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert admin.describe_acls(dave).result(timeout=10) == [grant]
    http = sec.v3("/acls?principal=User:dave", method="GET")["data"]
    assert [(a["resource_name"], a["pattern_type"], a["operation"]) for a in http] == [
        ("audit-", "PREFIXED", "READ")
    ]
    assert admin.delete_acls([dave])[dave].result(timeout=10) == [grant]
    assert admin.describe_acls(dave).result(timeout=10) == []
    bob_on_cluster = AclBindingFilter(
        ResourceType.BROKER,  # confluent-kafka's name for Kafka's CLUSTER resource type (4)
        None,
        ResourcePatternType.ANY,
        "User:bob",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert len(admin.delete_acls([bob_on_cluster])[bob_on_cluster].result(timeout=10)) == 2


def test_scram_users_administered_over_kafkas_protocol(sec: Secure) -> None:
    """KIP-554 through confluent-kafka's AdminClient as User:admin (its certificate on the SSL
    listener): a user made with AlterUserScramCredentials logs in with SCRAM and shows in
    DescribeUserScramCredentials and in the HTTP API; deleting it removes it."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(
        sec.conf(
            "KAFKA_SSL",
            **{
                "ssl.certificate.location": str(sec.setup.admin.cert),
                "ssl.key.location": str(sec.setup.admin.key),
            },
        )
    )
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    up = UserScramCredentialUpsertion("erin", info, b"erin-pw")
    assert admin.alter_user_scram_credentials([up])["erin"].result(timeout=10) is None
    described = admin.describe_user_scram_credentials(["erin"])["erin"].result(timeout=10)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    assert sec.v3("/users/erin", method="GET")["credentials"] == [
        {"mechanism": "SCRAM-SHA-256", "iterations": 8192}
    ]
    erin = sec.sasl("erin", "SCRAM-SHA-256", password="erin-pw")
    AdminClient(erin).list_topics(timeout=10)  # logs in
    gone = UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256)
    assert admin.alter_user_scram_credentials([gone])["erin"].result(timeout=10) is None
    with pytest.raises(KafkaException) as e:
        admin.describe_user_scram_credentials(["erin"])["erin"].result(timeout=10)
    assert e.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def _cert(sec: Secure, cn: str) -> Issued:
    return sec.setup.ca.issue(cn, sec.setup.root / "tls")


def test_a_client_certificate_is_the_principal_on_ssl(sec: Secure) -> None:
    carol, dan = _cert(sec, "carol"), _cert(sec, "dan")
    for cert, visible in ((carol, {"orders"}), (dan, set())):
        conf = sec.conf(
            "KAFKA_SSL",
            **{"ssl.certificate.location": str(cert.cert), "ssl.key.location": str(cert.key)},
        )
        md = AdminClient(conf).list_topics(timeout=10)
        assert {t for t in md.topics if not t.startswith("__")} == visible
        assert {b.port for b in md.brokers.values()} == {sec.ports["KAFKA_SSL"]}
    # carol may describe but not write.
    before = sec.end_offset("orders")
    conf = sec.conf(
        "KAFKA_SSL",
        **{"ssl.certificate.location": str(carol.cert), "ssl.key.location": str(carol.key)},
    )
    assert [e.code() for e in produce(conf, "orders", [b"x"])] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    assert sec.end_offset("orders") == before


def _frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    client = b"raw"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client
    return struct.pack(">i", len(header) + len(body)) + header + body


def _answer(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _read(sock, 4))[0]
    return _read(sock, size)


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def test_plaintext_to_a_tls_kafka_listener_is_refused(sec: Secure) -> None:
    errors: list[KafkaError] = []
    conf = {**sec.sasl("alice", "PLAIN"), "security.protocol": "SASL_PLAINTEXT"}
    with pytest.raises(KafkaException):
        AdminClient({**conf, "error_cb": errors.append}).list_topics(timeout=2)
    # A raw ApiVersions in the clear gets no Kafka answer: the TLS handshake fails first.
    with socket.create_connection(("127.0.0.1", sec.ports["KAFKA"]), timeout=10) as s:
        s.sendall(_frame(18, 0, 1))
        with pytest.raises((ConnectionError, OSError, struct.error)):
            _answer(s)


def test_requests_before_authentication_close_the_connection(sec: Secure) -> None:
    with socket.create_connection(
        ("127.0.0.1", sec.ports["KAFKA_SASL_PLAINTEXT"]), timeout=10
    ) as s:
        s.sendall(_frame(18, 0, 7))  # ApiVersions is served
        assert struct.unpack_from(">ih", _answer(s)) == (7, 0)
        s.sendall(_frame(3, 1, 8, struct.pack(">i", -1)))  # Metadata v1, all topics
        with pytest.raises(ConnectionError):
            _answer(s)
    # Over TLS without a client certificate the SSL listener refuses the handshake.
    ctx = ssl.create_default_context(cafile=str(sec.setup.ca.cert))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection(("127.0.0.1", sec.ports["KAFKA_SSL"]), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(_frame(18, 0, 1))
                _answer(s)


def test_http_still_refuses_what_kafka_refuses(sec: Secure) -> None:
    """The two front doors share users: bob's password works over HTTP Basic too."""
    import base64

    req = urllib.request.Request(
        sec.b.url(B) + "/topics/orders",
        method="POST",
        data=json.dumps({"records": [{"value": 1}]}).encode(),
        headers={
            "Content-Type": "application/vnd.kafka.json.v2+json",
            "Authorization": "Basic " + base64.b64encode(b"bob:bob-pw").decode(),
        },
    )
    anon = sec.setup.client_ssl(admin=False)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10, context=anon)
    assert e.value.code == 403


class Records(logging.Handler):
    """librdkafka's log lines (confluent-kafka's ``logger``)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_wrong_password_is_an_authentication_error(sec: Secure) -> None:
    """Last in the module: the failures it makes slow this source's later logins down."""
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        records = Records()
        logger = logging.getLogger(f"rdkafka-{mechanism}")
        logger.addHandler(records)
        # One attempt per mechanism: every failure from 127.0.0.1 counts toward the source's
        # throttle, which every later login from here (HTTP too) would then wait for.
        p = Producer(
            {
                **sec.sasl("alice", mechanism, password="wrong-pw-123"),
                "logger": logger,
                "reconnect.backoff.ms": 10000,
                "reconnect.backoff.max.ms": 10000,
            }
        )
        with pytest.raises(KafkaException):
            p.list_topics(timeout=2)
        p.poll(0.5)  # serves the log callback
        text = "\n".join(records.lines)
        assert "SASL authentication error" in text, text
        assert f"invalid credentials with SASL mechanism {mechanism}" in text, text
    log = sec.b.log_tail(B, 400)
    assert "User:alice" in log and "wrong-pw-123" not in log
    with urllib.request.urlopen(sec.b.url(B) + "/metrics", timeout=5, context=sec.b.ssl) as r:
        metrics = r.read().decode()
    assert 'longboat_failed_logins{listener="KAFKA"}' in metrics


def _sendfile_responses(sec: Secure) -> float:
    with urllib.request.urlopen(sec.b.url(B) + "/metrics", timeout=10, context=sec.b.ssl) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith("longboat_kafka_sendfile_responses_total "):
            return float(line.split()[1])
    raise AssertionError("longboat_kafka_sendfile_responses is not on /metrics")


def test_tls_listeners_copy_fetch_answers_and_plaintext_ones_send_them_from_the_file(
    sec: Secure,
) -> None:
    # TLS cannot sendfile (the bytes are encrypted in the process): SASL_SSL answers are
    # copied; the same records over SASL_PLAINTEXT go from the segment file (zero copy).
    tls = sec.sasl("alice", "SCRAM-SHA-512", "KAFKA")
    values = [b"zero-copy-%d" % i for i in range(20)]
    before = sec.end_offset("orders")
    assert produce(tls, "orders", values) == [None] * 20
    sent = _sendfile_responses(sec)
    assert read_assigned(tls, "orders", before + 20)[-20:] == values
    assert _sendfile_responses(sec) == sent
    plain = sec.sasl("alice", "SCRAM-SHA-512", "KAFKA_SASL_PLAINTEXT")
    assert read_assigned(plain, "orders", before + 20)[-20:] == values
    assert _sendfile_responses(sec) > sent
