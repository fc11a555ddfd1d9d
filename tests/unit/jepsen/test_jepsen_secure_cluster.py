"""What ``jepsen_tests run --secure`` gives its nodes and clients, without starting them: the
configs a node accepts (listeners on the node's own 127.0.0.N, TLS files, the authorizer),
certificates naming that address, the clients' credentials and their ACLs, which allow the
workloads' operations and nothing on the cluster or on other topics."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509

from api.node.config import SecurityProtocol, load_config
from jepsen_tests.longboat import CLIENT_USER, LongboatCluster, jepsen_acls
from metalog.security import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
)


def _setup(tmp_path: Path) -> LongboatCluster:
    cluster = LongboatCluster(secure=True)
    cluster.setup(tmp_path, lambda _node: {}, lambda argv: argv)
    return cluster


def test_secure_nodes_listen_with_tls_on_their_own_address_and_name_it_in_their_certificate(
    tmp_path: Path,
) -> None:
    cluster = _setup(tmp_path)
    for n in cluster.nodes:
        cfg = load_config(tmp_path / "config" / f"{n.name}.toml")
        assert cfg.authorizer_enable and cfg.host == n.host
        specs = {s.name: s for s in cfg.listener_specs()}
        if "broker" in n.roles:
            assert specs["CLIENT"].protocol is SecurityProtocol.SASL_SSL
            assert specs["CLIENT"].port == n.port
            assert specs["BROKER"].protocol is SecurityProtocol.SSL
            assert (specs["BROKER"].port,) == n.extra["more_ports"]
        else:
            assert specs["CONTROLLER"].protocol is SecurityProtocol.SSL
            assert specs["CONTROLLER"].port == n.port
        assert all(s.host == n.host for s in specs.values())
        cert = x509.load_pem_x509_certificate(
            (tmp_path / "tls" / f"node-{cluster.node_ids[n.name]}.pem").read_bytes()
        )
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert ipaddress.ip_address(n.host) in san.get_values_for_type(x509.IPAddress)
    assert cluster.url("b1").startswith("https://127.0.0.")
    # The clients: the CA and a user with a password; the harness's commands: the admin.
    sec = cluster.client_security
    assert sec is not None and sec.username == CLIENT_USER and sec.password
    assert sec.ssl_certfile is None and Path(str(sec.ssl_cafile)).exists()
    assert sec.password not in repr(sec)
    env = cluster.cli_env()
    assert Path(env["LONGBOAT_SSL_CERTFILE"]).name == "admin.pem"
    assert not LongboatCluster().cli_env()


def _allowed(acls: list[AclBinding], op: Operation, rtype: ResourceType, name: str) -> bool:
    return authorize(acls, f"User:{CLIENT_USER}", "127.0.0.101", op, rtype, name)


def test_the_clients_acls_allow_the_workloads_and_nothing_more() -> None:
    acls = [
        AclBinding(
            a["principal"],
            a["host"],
            ResourceType(a["resource_type"]),
            a["resource_name"],
            PatternType(a["pattern_type"]),
            Operation(a["operation"]),
            Permission(a["permission"]),
        )
        for a in jepsen_acls(["jepsen", "jepsen-out"])
    ]
    T, G, C, X = (
        ResourceType.TOPIC,
        ResourceType.GROUP,
        ResourceType.CLUSTER,
        ResourceType.TRANSACTIONAL_ID,
    )
    for topic in ("jepsen", "jepsen-out"):
        for op in (Operation.WRITE, Operation.READ, Operation.DESCRIBE):
            assert _allowed(acls, op, T, topic), (op, topic)
    assert _allowed(acls, Operation.IDEMPOTENT_WRITE, C, "kafka-cluster")
    assert _allowed(acls, Operation.READ, G, "jepsen-group")
    assert _allowed(acls, Operation.WRITE, X, "jepsen-txn-0")
    for op in (Operation.CREATE, Operation.DELETE, Operation.DESCRIBE):  # metadata workload
        assert _allowed(acls, op, T, "topic-3"), op
    assert _allowed(acls, Operation.WRITE, T, "jepsen-4")  # schemas: subject jepsen-4-value
    # Nothing a node or an administrator does, and no other topic.
    for op in (Operation.CLUSTER_ACTION, Operation.ALTER, Operation.CREATE, Operation.DESCRIBE):
        assert not _allowed(acls, op, C, "kafka-cluster"), op
    assert not _allowed(acls, Operation.DELETE, T, "jepsen")
    assert not _allowed(acls, Operation.READ, T, "__consumer_offsets")
    assert not _allowed(acls, Operation.DESCRIBE, T, "orders")
