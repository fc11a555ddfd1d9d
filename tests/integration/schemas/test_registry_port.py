"""The Schema Registry on a port of its own (``schema_registry_listen``): a real broker
process serves the registry there, to Confluent's own client, and nothing of the REST API;
the client listener keeps serving the registry; on a secure cluster it has the client
listener's TLS, authentication and authorization; a bad value stops the broker at start with
a message naming the key. About 30 s."""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from api.node.localcluster import free_ports, running_cluster

pytestmark = pytest.mark.slow

USER = json.dumps(
    {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_registry_on_its_own_port_serves_confluent_and_not_the_rest_api(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    own = f"http://127.0.0.1:{port}"
    with running_cluster(
        tmp_path,
        controllers=1,
        brokers=1,
        broker_args=["--override", f"schema_registry_listen=127.0.0.1:{port}"],
    ) as (_, brokers):
        reg = SchemaRegistryClient({"url": own})
        sid = reg.register_schema("users-value", Schema(USER, "AVRO"))
        assert json.loads(reg.get_schema(sid).schema_str or "") == json.loads(USER)
        assert reg.get_latest_version("users-value").schema_id == sid
        assert reg.get_subjects() == ["users-value"]
        # The client listener serves the same registry (clients pointed at a broker).
        on_client = SchemaRegistryClient({"url": brokers.url(brokers.ids[0])})
        assert on_client.lookup_schema("users-value", Schema(USER, "AVRO")).schema_id == sid
        # The registry's port has none of the REST API, but the health probe.
        assert _status(own + "/subjects") == 200
        assert _status(own + "/v3/clusters") == 404
        assert _status(own + "/topics") == 404
        assert _status(own + "/v3/health") == 200
        assert _status(brokers.url(brokers.ids[0]) + "/v3/clusters") == 200


def test_a_bad_schema_registry_listen_is_refused_at_start(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "api",
            "broker",
            "start",
            "--node-id",
            "101",
            "--listen",
            "127.0.0.1:8082",
            "--data-dir",
            str(tmp_path / "data"),
            "--controller-quorum",
            "1@127.0.0.1:9301",
            "--override",
            "schema_registry_listen=registry.example",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "schema_registry_listen must be HOST:PORT, got 'registry.example'" in out.stderr
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def _call(
    url: str, ctx: ssl.SSLContext | None, method: str = "GET", body: Any = None, **headers: str
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            raw = r.read()
            return int(r.status), json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_registry_port_has_the_client_listeners_tls_authentication_and_acls(
    tmp_path: Path,
) -> None:
    (port,) = free_ports(1)
    own = f"https://127.0.0.1:{port}"
    with running_cluster(
        tmp_path,
        controllers=1,
        brokers=1,
        secure=True,
        ready_timeout_s=90,
        broker_args=["--override", f"schema_registry_listen=127.0.0.1:{port}"],
    ) as (_, brokers):
        setup = brokers.secure
        assert setup is not None
        admin, anonymous = setup.client_ssl(), setup.client_ssl(admin=False)
        ct = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
        reg = {"schema": USER}
        # TLS only, as the client listener (SASL_SSL).
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(own.replace("https", "http") + "/subjects", timeout=10)
        # Authentication: nobody without a certificate or credentials.
        assert _call(own + "/subjects", anonymous)[0] == 401
        # Authorization: alice (a valid token, no ACLs) may not register; admin may. Without
        # DESCRIBE on the subject's topic she gets what a missing topic gets (authz.py).
        alice = {"Authorization": f"Bearer {setup.token('alice')}"}
        path = "/subjects/users-value/versions"
        for url in (own, brokers.url(brokers.ids[0])):  # as on the client listener
            st, out = _call(url + path, anonymous, "POST", reg, **ct, **alice)
            assert (st, out["error_code"]) == (404, 40401), out
        assert _call(own + path, admin, "POST", reg, **ct) == (200, {"id": 1})
        assert _call(own + "/subjects", anonymous, **alice)[0] == 200
        # A subject's reads need DESCRIBE on its topic: none yet, so it looks missing.
        assert _call(own + path, anonymous, **alice)[0] == 404
        # WRITE on the topic (a producer's ACL) lets her register and read its subject, and
        # still nothing of another topic's.
        client = brokers.url(brokers.ids[0])
        _, clusters = _call(client + "/v3/clusters", admin)
        cid = clusters["data"][0]["cluster_id"]
        acl = {
            "resource_type": "TOPIC",
            "resource_name": "users",
            "pattern_type": "LITERAL",
            "principal": "User:alice",
            "host": "*",
            "operation": "WRITE",
            "permission": "ALLOW",
        }
        st, out = _call(
            f"{client}/v3/clusters/{cid}/acls",
            admin,
            "POST",
            acl,
            **{"Content-Type": "application/json"},
        )
        assert st == 201, out
        v2 = {
            "schema": USER.replace(
                '"fields": [', '"fields": [{"name": "age", "type": "int", "default": 0}, ', 1
            )
        }
        st, out = _call(own + path, anonymous, "POST", v2, **ct, **alice)
        assert st == 200 and out["id"] == 2, out
        assert _call(own + path, anonymous, **alice) == (200, [1, 2])
        assert _call(own + "/subjects/orders-value/versions", anonymous, **alice)[0] == 404
        # The Python client's registry client takes the same TLS and credentials.
        from api.client.schemas import SchemaRegistryClient, SchemaRegistryError
        from api.client.security import ClientSecurity

        ca = str(setup.ca.cert)
        as_alice = ClientSecurity(ssl_cafile=ca, token=setup.token("alice"))
        assert SchemaRegistryClient(own, security=as_alice).versions("users-value") == [1, 2]
        with pytest.raises(SchemaRegistryError) as e:
            SchemaRegistryClient(own, security=ClientSecurity(ssl_cafile=ca)).subjects()
        assert e.value.status == 401
        # The REST API is not on the registry's port, even for a super user.
        assert _call(own + "/v3/clusters", admin) == (
            404,
            {"error_code": 404, "message": "HTTP 404 Not Found"},
        )
