"""A secure cluster of real processes (issue 18): TLS on every listener, node routes only on
node listeners, plaintext and untrusted or expired certificates refused."""

from __future__ import annotations

import datetime
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.node.localcluster import Brokers, Quorum, running_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Quorum, Brokers]]:
    root = tmp_path_factory.mktemp("secure")
    with running_cluster(root, controllers=1, brokers=2, secure=True, ready_timeout_s=90) as qb:
        yield qb


def _request(
    url: str,
    ctx: ssl.SSLContext | None,
    *,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 5,
) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_brokers_replicate_and_answer_over_tls(cluster: tuple[Quorum, Brokers]) -> None:
    q, b = cluster
    md = b.metadata(101)
    assert {br["broker_id"] for br in md["brokers"]} == {101, 102}
    names = {ep[0] for br in md["brokers"] for ep in br["endpoints"]}
    assert {"https", "CLIENT", "BROKER"} <= names
    assert q.status(1)["role"] == "leader"


def test_node_routes_are_not_found_on_the_client_listener(cluster: tuple[Quorum, Brokers]) -> None:
    _q, b = cluster
    for path in ("/internal/broker/v1/replicas", "/internal/raft/v1/messages"):
        status, _ = _request(b.url(101) + path, b.ssl)
        assert status == 404, path
    # ... and a client route is not served on the inter-broker listener.
    status, _ = _request(b.broker_url(101) + "/v3/clusters", b.ssl)
    assert status == 404
    status, body = _request(b.broker_url(101) + "/internal/broker/v1/replicas", b.ssl)
    assert status == 200, body


def test_plaintext_to_a_tls_listener_is_refused(cluster: tuple[Quorum, Brokers]) -> None:
    q, b = cluster
    for url in (b.url(101), b.broker_url(101), q.url(1)):
        plain = url.replace("https://", "http://")
        with pytest.raises((urllib.error.URLError, ConnectionError, http_client_errors())):
            urllib.request.urlopen(plain + "/v3/health", timeout=5)


def http_client_errors() -> type[Exception]:
    import http.client

    return http.client.HTTPException


def test_an_untrusted_certificate_is_refused(
    cluster: tuple[Quorum, Brokers], tmp_path: Path
) -> None:
    from api.node.certs import make_ca

    q, b = cluster
    assert q.secure is not None
    rogue = make_ca(tmp_path / "rogue").issue("node-1", tmp_path / "rogue")
    ctx = ssl.create_default_context(cafile=str(q.secure.ca.cert))
    ctx.load_cert_chain(rogue.cert, rogue.key)
    # The inter-broker listener requires a certificate of the cluster's CA.
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        _request(b.broker_url(101) + "/internal/broker/v1/replicas", ctx)
    # A client that does not trust the server's CA refuses the server too.
    with pytest.raises(urllib.error.URLError):
        _request(b.url(101) + "/v3/health", ssl.create_default_context())


def test_an_expired_certificate_is_refused(cluster: tuple[Quorum, Brokers]) -> None:
    q, b = cluster
    assert q.secure is not None
    old = q.secure.ca.issue(
        "expired",
        q.secure.root / "tls",
        valid_days=1,
        not_before=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=10),
    )
    ctx = ssl.create_default_context(cafile=str(q.secure.ca.cert))
    ctx.load_cert_chain(old.cert, old.key)
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        _request(b.broker_url(101) + "/internal/broker/v1/replicas", ctx)


def _token(q: Quorum, sub: str, *, exp_s: int = 300, aud: str = "longboat") -> str:
    import time

    import jwt

    assert q.secure is not None
    key = q.secure.jwt_issuer.key.read_text()
    now = int(time.time())
    return jwt.encode({"sub": sub, "aud": aud, "exp": now + exp_s}, key, algorithm="ES256")


def _json_call(
    url: str,
    ctx: ssl.SSLContext | None,
    *,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    h = {"Content-Type": "application/json", **(headers or {})}
    status, raw = _request(url, ctx, method=method, body=data, headers=h)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


@pytest.fixture(scope="module")
def topic(cluster: tuple[Quorum, Brokers]) -> str:
    _q, b = cluster
    _, clusters = _json_call(b.url(101) + "/v3/clusters", b.ssl)
    cid = clusters["data"][0]["cluster_id"]
    status, body = _json_call(
        f"{b.url(101)}/v3/clusters/{cid}/topics",
        b.ssl,
        method="POST",
        body={"topic_name": "secret", "partitions_count": 1, "replication_factor": 2},
    )
    assert status in (200, 201), body
    for i in range(3):
        status, body = _json_call(
            f"{b.url(101)}/topics/secret",
            b.ssl,
            method="POST",
            body={"records": [{"value": {"n": i}}]},
        )
        assert status == 200, body
    return cid


def test_missing_or_bad_credentials_get_401(cluster: tuple[Quorum, Brokers]) -> None:
    q, b = cluster
    anon = q.secure.client_ssl(admin=False) if q.secure else None
    status, body = _json_call(b.url(101) + "/v3/clusters", anon)
    assert status == 401 and body["error_code"] == 40101, body
    bad_basic = {"Authorization": "Basic " + __import__("base64").b64encode(b"eve:guess").decode()}
    status, body = _json_call(b.url(101) + "/v3/clusters", anon, headers=bad_basic)
    assert status == 401 and body["error_code"] == 40101
    assert "guess" not in b.log_tail(101, 200)  # the secret never reaches the log
    assert "eve" in b.log_tail(101, 200)  # the principal it claimed does
    expired = {"Authorization": f"Bearer {_token(q, 'alice', exp_s=-60)}"}
    status, body = _json_call(b.url(101) + "/v3/clusters", anon, headers=expired)
    assert status == 401 and "expired" in body["message"].lower(), body
    wrong_aud = {"Authorization": f"Bearer {_token(q, 'alice', aud='other')}"}
    status, body = _json_call(b.url(101) + "/v3/clusters", anon, headers=wrong_aud)
    assert status == 401
    # The probes need no credentials.
    status, _ = _json_call(b.url(101) + "/v3/health", anon)
    assert status == 200


def test_a_principal_without_describe_cannot_tell_a_topic_exists(
    cluster: tuple[Quorum, Brokers], topic: str
) -> None:
    q, b = cluster
    anon = q.secure.client_ssl(admin=False) if q.secure else None
    alice = {"Authorization": f"Bearer {_token(q, 'alice')}"}
    base = f"{b.url(101)}/v3/clusters/{topic}/topics"
    status, body = _json_call(base, anon, headers=alice)
    assert status == 200 and body["data"] == [], body  # the list is filtered
    hidden = _json_call(base + "/secret", anon, headers=alice)
    missing = _json_call(base + "/nosuch", anon, headers=alice)
    assert hidden[0] == missing[0] == 404
    assert hidden[1]["error_code"] == missing[1]["error_code"] == 40401
    status, body = _json_call(
        f"{b.url(101)}/topics/secret",
        anon,
        method="POST",
        headers=alice,
        body={"records": [{"value": 1}]},
    )
    assert status == 404, body
    status, body = _json_call(base, b.ssl)  # the admin sees it
    assert [t["topic_name"] for t in body["data"]] == ["secret"]


def test_a_forged_follower_fetch_does_not_move_the_high_watermark(
    cluster: tuple[Quorum, Brokers], topic: str
) -> None:
    import msgpack

    q, b = cluster
    assert q.secure is not None
    md = b.metadata(101)
    part = next(t for t in md["topics"] if t["name"] == "secret")["partitions"][0]
    leader, follower = part["leader"], next(r for r in part["replicas"] if r != part["leader"])

    def hw() -> int:
        _, body = _json_call(
            f"{b.url(leader)}/v3/clusters/{topic}/topics/secret/partitions/0/offset", b.ssl
        )
        return int(body["latest_offset"])  # latest = the high watermark

    before = hw()
    forged = msgpack.packb(
        {"topic": "secret", "partition": 0, "replica_id": follower, "fetch_offset": before + 1000}
    )
    mallory = q.secure.ca.issue("mallory", q.secure.root / "tls")
    ctx = ssl.create_default_context(cafile=str(q.secure.ca.cert))
    ctx.load_cert_chain(mallory.cert, mallory.key)
    h = {"Content-Type": "application/x-msgpack"}
    # On the client listener the node route does not exist; the public fetch is a consumer's.
    status, _ = _request(
        f"{b.url(leader)}/internal/broker/v1/fetch", ctx, method="POST", body=forged, headers=h
    )
    assert status == 404
    status, raw = _request(
        f"{b.url(leader)}/binary/v1/fetch", b.ssl, method="POST", body=forged, headers=h
    )
    assert status == 400 and msgpack.unpackb(raw)["error"] == "INVALID_REQUEST"
    # On the inter-broker listener a certificate that is not a node's lacks CLUSTER_ACTION.
    status, raw = _request(
        f"{b.broker_url(leader)}/internal/broker/v1/fetch",
        ctx,
        method="POST",
        body=forged,
        headers=h,
    )
    assert status == 403, raw
    assert hw() == before


SUBST = {
    "{topic}": "secret",
    "{group}": "g1",
    "{partition}": "0",
    "{broker_id}": "101",
    "{subject}": "secret-value",
    "{version}": "1",
    "{id}": "1",
    "{name}": "retention.ms",
    "{consumer}": "c1",
    "{instance}": "i1",
    "{user}": "nobody",
}


def _all_routes(tmp: Path) -> set[tuple[str, str]]:
    import logging

    from api.node.broker_app import build_broker
    from api.node.config import load_config
    from api.node.controller_app import build_controller

    logging.disable(logging.CRITICAL)
    try:
        quorum = "1@h:1"
        b, _ = build_broker(
            load_config(
                None, {"node_id": 101, "data_dir": str(tmp / "b"), "controller_quorum": quorum}
            ),
            autostart=False,
        )
        c, _ = build_controller(
            load_config(
                None,
                {
                    "node_id": 1,
                    "roles": "controller",
                    "data_dir": str(tmp / "c"),
                    "controller_quorum": quorum,
                },
            )
        )
    finally:
        logging.disable(logging.NOTSET)
    return {
        (r.method, r.resource.canonical)
        for app in (b, c)
        for r in app.router.routes()
        if r.resource is not None and r.method != "HEAD"
    }


def test_route_matrix(cluster: tuple[Quorum, Brokers], topic: str, tmp_path: Path) -> None:
    """Every route x {no credentials, bad credentials, a principal without ACLs, a node
    principal}: 401/403/hidden as Kafka's rules say, and the refused calls change nothing."""
    import base64

    import msgpack

    from api.http.authz import AUTHENTICATED, rule_for
    from api.node.certs import make_ca
    from api.node.listeners import route_kind
    from metalog.security import ResourceType

    q, b = cluster
    assert q.secure is not None
    offsets_before = b.get(101, f"/v3/clusters/{topic}/topics/secret/partitions/0/offset")
    plain = q.secure.client_ssl(admin=False)
    alice_cert = q.secure.ca.issue("alice", tmp_path)
    alice_tls = ssl.create_default_context(cafile=str(q.secure.ca.cert))
    alice_tls.load_cert_chain(alice_cert.cert, alice_cert.key)
    rogue = make_ca(tmp_path / "rogue").issue("node-101", tmp_path / "rogue")
    rogue_tls = ssl.create_default_context(cafile=str(q.secure.ca.cert))
    rogue_tls.load_cert_chain(rogue.cert, rogue.key)
    node_tls = ssl.create_default_context(cafile=str(q.secure.ca.cert))
    node_tls.load_cert_chain(q.secure.nodes[102].cert, q.secure.nodes[102].key)
    bad = {"Authorization": "Basic " + base64.b64encode(b"mallory:nope").decode()}
    alice = {"Authorization": f"Bearer {_token(q, 'alice')}"}

    def call(
        base: str, method: str, path: str, ctx: ssl.SSLContext, h: dict[str, str]
    ) -> int | str:
        msgpack_route = path.startswith(("/binary/", "/internal/"))
        body = msgpack.packb({}) if msgpack_route else b'{"topic_name": "secret2"}'
        ctype = "application/x-msgpack" if msgpack_route else "application/json"
        data = None if method in ("GET", "DELETE") else body
        try:
            status, raw = _request(
                base + path, ctx, method=method, body=data, headers={"Content-Type": ctype, **h}
            )
        except (urllib.error.URLError, ssl.SSLError, ConnectionError, OSError) as e:
            return f"refused: {type(e).__name__}"
        if status == 200 and path.startswith("/binary/"):
            err = msgpack.unpackb(raw).get("error")
            return f"200 {err}"
        return status

    problems: list[str] = []
    routes = sorted(_all_routes(tmp_path))
    assert len(routes) > 100
    for method, pattern in routes:
        path = pattern.replace("{cluster_id}", topic)
        if pattern == "/console/static":  # a directory of files: ask for one
            path = "/console/static/console.js"
        for k, v in SUBST.items():
            path = path.replace(k, v)
        kind = route_kind(pattern)
        if pattern in ("/v3/health", "/v3/health/ready"):
            continue
        rule = rule_for(method, pattern)
        assert rule is not None, pattern
        controller_only = pattern.startswith("/v3/quorum/")  # any listener, controllers'
        if controller_only:
            got = call(q.url(1), method, path, alice_tls, {})
            if got != 403:
                problems.append(f"{method} {pattern}: alice's certificate got {got}")
            if call(q.url(1), method, path, node_tls, {}) != 200:
                problems.append(f"{method} {pattern}: a node was refused")
        elif kind is None or kind.value in ("client", "schema_registry"):  # both on CLIENT
            base = b.url(101)
            got_none = call(base, method, path, plain, {})
            got_bad = call(base, method, path, plain, bad)
            if got_none != 401 or got_bad != 401:
                problems.append(f"{method} {pattern}: no creds {got_none}, bad {got_bad}")
            got = call(base, method, path, plain, alice)
            if rule is AUTHENTICATED:
                ok = got not in (401, 403)
            elif rule.resource_type is ResourceType.TOPIC and rule.operation.value != "CREATE":
                ok = got in (404, "200 UNKNOWN_TOPIC_OR_PARTITION", 400)
            else:
                # 400/422: the body names no resource (this probe's body is for topic
                # creation), so the route refuses the body itself and does nothing; a body
                # that names one is checked (the transactions route checks every topic too).
                ok = got == 403 or (rule.operation is not None and got in (400, 422))
            if not ok:
                problems.append(f"{method} {pattern}: alice got {got}")
            if method == "GET":
                got = call(base, method, path, node_tls, {})
                if got in (401, 403):
                    problems.append(f"{method} {pattern}: a node got {got}")
        else:
            base = b.broker_url(101) if kind.value == "broker" else q.url(1)
            for who, ctx in (("no cert", plain), ("rogue", rogue_tls)):
                got = call(base, method, path, ctx, {})
                if not str(got).startswith("refused"):
                    problems.append(f"{method} {pattern}: {who} got {got}")
            got = call(base, method, path, alice_tls, {})
            if got != 403:
                problems.append(f"{method} {pattern}: alice's certificate got {got}")
            got = call(base, method, path, node_tls, {})
            if got in (401, 403, 404):
                problems.append(f"{method} {pattern}: a node got {got}")
    assert problems == [], "\n".join(problems)
    # Nothing refused did anything.
    assert b.get(101, f"/v3/clusters/{topic}/topics/secret/partitions/0/offset") == offsets_before
    topics = b.get(101, f"/v3/clusters/{topic}/topics")["data"]
    # (a node's group read may create __consumer_offsets: nodes may)
    assert [t["topic_name"] for t in topics if not t["topic_name"].startswith("__")] == ["secret"]
    metrics = _request(b.url(101) + "/metrics", b.ssl)[1].decode()
    assert 'longboat_failed_logins{listener="CLIENT"}' in metrics


def _basic_h(user: str, password: str) -> dict[str, str]:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_users_and_acls_from_the_metadata_log(
    cluster: tuple[Quorum, Brokers], topic: str, tmp_path: Path
) -> None:
    """A SCRAM user and an ACL made through the admin API reach every broker through the
    log: Basic logs in on both, exactly the granted operation is allowed, through HTTP and
    the Python client."""
    import asyncio
    import time

    from api.client import AsyncConsumer, AsyncProducer, ClientError, TopicPartition
    from api.client.security import ClientSecurity
    from api.node.certs import make_ca

    q, b = cluster
    assert q.secure is not None
    cid = topic
    status, body = _json_call(
        f"{b.url(101)}/v3/clusters/{cid}/users",
        b.ssl,
        method="POST",
        body={"user_name": "bob", "password": "an oar", "mechanism": "SCRAM-SHA-512"},
    )
    assert status == 200, body
    acl = {
        "resource_type": "TOPIC",
        "resource_name": "secret",
        "pattern_type": "LITERAL",
        "principal": "User:bob",
        "host": "*",
        "operation": "WRITE",
        "permission": "ALLOW",
    }
    status, body = _json_call(
        f"{b.url(101)}/v3/clusters/{cid}/acls", b.ssl, method="POST", body=acl
    )
    assert status == 201, body
    plain = q.secure.client_ssl(admin=False)
    bob = _basic_h("bob", "an oar")
    for broker in (101, 102):  # every broker follows the log
        deadline = __import__("time").monotonic() + 20
        while True:
            status, body = _json_call(
                f"{b.url(broker)}/topics/secret",
                plain,
                method="POST",
                headers=bob,
                body={"records": [{"value": {"from": "bob"}}]},
            )
            if status == 200 or __import__("time").monotonic() > deadline:
                break
        assert status == 200, (broker, body)
    # WRITE implies DESCRIBE: reading is refused 403, not hidden.
    status, body = _json_call(
        f"{b.url(101)}/v3/clusters/{cid}/topics/secret/partitions/0/records?offset=0",
        plain,
        headers=bob,
    )
    assert (status, body["error_code"]) == (403, 40301), body
    assert _json_call(f"{b.url(101)}/v3/clusters", plain, headers=_basic_h("bob", "x"))[0] == 401

    async def client() -> None:
        sec = ClientSecurity(ssl_cafile=str(q.secure.ca.cert), username="bob", password="an oar")
        async with AsyncProducer(b.url(101), security=sec, enable_idempotence=False) as p:
            md = await p.send_and_wait("secret", b"v", key=b"k")
            assert md.offset >= 0
        async with AsyncConsumer(b.url(101), security=sec, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("secret", 0)])
            with pytest.raises(ClientError) as e:
                for _ in range(20):
                    await c.poll(timeout_ms=500)
            assert e.value.code == "TOPIC_AUTHORIZATION_FAILED", e.value
        nobody = ClientSecurity(ssl_cafile=str(q.secure.ca.cert))
        with pytest.raises(ClientError) as e:
            async with AsyncProducer(b.url(101), security=nobody, enable_idempotence=False):
                pass
        assert e.value.code == "SASL_AUTHENTICATION_FAILED", e.value
        # A client trusting another CA is refused at once, not after its metadata retries
        # (Kafka's SslAuthenticationException is not retriable either).
        rogue_ca = make_ca(tmp_path / "rogue").cert
        untrusting = ClientSecurity(ssl_cafile=str(rogue_ca), username="bob", password="an oar")
        t0 = time.monotonic()
        with pytest.raises(ClientError) as e:
            async with AsyncProducer(b.url(101), security=untrusting, enable_idempotence=False):
                pass
        assert e.value.code == "SSL_AUTHENTICATION_FAILED", e.value
        assert time.monotonic() - t0 < 10

    asyncio.run(client())


def test_a_forwarded_request_is_checked_as_the_user_it_carries(
    cluster: tuple[Quorum, Brokers], topic: str
) -> None:
    """A node forwarding a request names the user (Longboat-Principal): the receiving broker
    checks that user's ACLs, not only the node's CLUSTER_ACTION; from a non-node the header
    changes nothing."""
    import msgpack

    q, b = cluster
    assert q.secure is not None
    node = ssl.create_default_context(cafile=str(q.secure.ca.cert))
    node.load_cert_chain(q.secure.nodes[102].cert, q.secure.nodes[102].key)
    body = msgpack.packb({"topic": "secret", "partition": 0, "timestamp": -1})
    h = {"Content-Type": "application/x-msgpack"}
    url = f"{b.broker_url(101)}/internal/broker/v1/list_offsets"
    status, raw = _request(url, node, method="POST", body=body, headers=h)
    assert status == 200 and "offset" in msgpack.unpackb(raw), raw  # the node itself
    as_alice = {**h, "Longboat-Principal": "User:alice"}  # alice has no ACL on secret
    status, raw = _request(url, node, method="POST", body=body, headers=as_alice)
    assert (status, msgpack.unpackb(raw)["error"]) == (200, "UNKNOWN_TOPIC_OR_PARTITION")
    # A client cannot borrow the admin's identity by naming it.
    alice_token = {"Authorization": f"Bearer {_token(q, 'alice')}"}
    plain = q.secure.client_ssl(admin=False)
    status, _ = _json_call(
        f"{b.url(101)}/v3/clusters/{topic}/topics/secret",
        plain,
        headers={**alice_token, "Longboat-Principal": "User:admin"},
    )
    assert status == 404


def _grant(b: Brokers, cid: str, principal: str, acls: list[tuple[str, str, str]]) -> None:
    """ALLOW ``principal`` each (resource type, name, operation), LITERAL, and wait until
    every broker shows them (a leader checks the user's ACLs in its own image)."""
    data = [
        {
            "resource_type": rt,
            "resource_name": name,
            "pattern_type": "LITERAL",
            "principal": principal,
            "host": "*",
            "operation": op,
            "permission": "ALLOW",
        }
        for rt, name, op in acls
    ]
    status, body = _json_call(
        f"{b.url(101)}/v3/clusters/{cid}/acls:batch", b.ssl, method="POST", body={"data": data}
    )
    assert status == 201, body
    import time

    for broker in b.ids:
        deadline = time.monotonic() + 20
        while True:
            _, got = _json_call(
                f"{b.url(broker)}/v3/clusters/{cid}/acls?principal={principal}", b.ssl
            )
            have = {(a["resource_type"], a["resource_name"], a["operation"]) for a in got["data"]}
            if set(acls) <= have:
                break
            assert time.monotonic() < deadline, (broker, have)
            time.sleep(0.05)


def _add_user(b: Brokers, cid: str, user: str, password: str) -> dict[str, str]:
    status, body = _json_call(
        f"{b.url(101)}/v3/clusters/{cid}/users",
        b.ssl,
        method="POST",
        body={"user_name": user, "password": password},
    )
    assert status == 200, body
    return _basic_h(user, password)


def _create_topic(b: Brokers, cid: str, name: str, partitions: int = 1) -> None:
    status, body = _json_call(
        f"{b.url(101)}/v3/clusters/{cid}/topics",
        b.ssl,
        method="POST",
        body={"topic_name": name, "partitions_count": partitions, "replication_factor": 2},
    )
    assert status in (201, 400), body  # 400: exists (a rerun)


def _committed_values(b: Brokers, cid: str, topic: str) -> list[Any]:
    status, body = _json_call(
        f"{b.url(101)}/v3/clusters/{cid}/topics/{topic}/partitions/0/records"
        "?offset=earliest&isolation_level=read_committed&format=json&timeout_ms=0",
        b.ssl,
    )
    assert status == 200, body
    return [r["value"] for r in body["records"]]


def test_http_transactions_act_as_the_calling_user(
    cluster: tuple[Quorum, Brokers], topic: str
) -> None:
    """POST /transactions on a secure cluster: the broker's transactional producer acts for
    the caller (Longboat-Principal from the node's certificate), so the caller's ACLs
    apply: WRITE on every topic, WRITE on the transactional id it names, IDEMPOTENT_WRITE
    (here implied by WRITE on a topic, KIP-679) without one. A caller short of WRITE on one
    topic is refused 403 and nothing of the request becomes visible."""
    q, b = cluster
    assert q.secure is not None
    cid = topic
    for t in ("txa", "txb"):
        _create_topic(b, cid, t)
    carol = _add_user(b, cid, "carol", "pw-carol")
    dave = _add_user(b, cid, "dave", "pw-dave")
    _grant(
        b,
        cid,
        "User:carol",
        [
            ("TOPIC", "txa", "WRITE"),
            ("TOPIC", "txb", "WRITE"),
            ("TRANSACTIONAL_ID", "c-tx", "WRITE"),
        ],
    )
    # dave may write txa and read txb (so he learns txb exists: 403, not 404).
    _grant(
        b,
        cid,
        "User:dave",
        [
            ("TOPIC", "txa", "WRITE"),
            ("TOPIC", "txb", "READ"),
            ("TRANSACTIONAL_ID", "d-tx", "WRITE"),
        ],
    )
    plain = q.secure.client_ssl(admin=False)
    url = f"{b.url(101)}/v3/clusters/{cid}/transactions"

    def body(tag: str, tid: str | None, topics: tuple[str, ...] = ("txa", "txb")) -> Any:
        out: dict[str, Any] = {
            "records": [{"topic": t, "value": {"type": "JSON", "data": tag}} for t in topics]
        }
        if tid is not None:
            out["transactional_id"] = tid
            out["request_id"] = f"r-{tag}"
        return out

    for tag, tid in (("named", "c-tx"), ("pooled", None)):
        status, ans = _json_call(url, plain, method="POST", headers=carol, body=body(tag, tid))
        assert status == 200, (tag, ans)
        assert [r["topic_name"] for r in ans["records"]] == ["txa", "txb"]
    assert _committed_values(b, cid, "txa") == ["named", "pooled"]
    assert _committed_values(b, cid, "txb") == ["named", "pooled"]
    # A retry of the named request is answered from the bookkeeping group (the node's).
    status, ans = _json_call(url, plain, method="POST", headers=carol, body=body("named", "c-tx"))
    assert status == 200 and ans["duplicate"] is True, ans

    refusals = [
        (dave, body("d1", "d-tx"), 403),  # no WRITE on txb
        (dave, body("d2", None), 403),  # the same through the broker's own id
        (dave, body("d3", "c-tx", ("txa",)), 403),  # carol's transactional id
        (carol, body("c4", "d-tx"), 403),  # dave's
    ]
    for who, req, want in refusals:
        status, ans = _json_call(url, plain, method="POST", headers=who, body=req)
        assert (status, ans["error_code"]) == (want, 40301), (req, ans)
    # dave's own id, on the topic he may write: allowed (the refusals were his rights).
    status, ans = _json_call(
        url, plain, method="POST", headers=dave, body=body("d5", "d-tx", ("txa",))
    )
    assert status == 200, ans
    assert _committed_values(b, cid, "txa") == ["named", "pooled", "d5"]
    assert _committed_values(b, cid, "txb") == ["named", "pooled"]


def _binary(
    url: str, ctx: ssl.SSLContext, route: str, body: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    import msgpack

    status, raw = _request(
        f"{url}/binary/v1/{route}",
        ctx,
        method="POST",
        body=msgpack.packb(body),
        headers={"Content-Type": "application/msgpack", **headers},
    )
    assert status == 200, (route, status, raw)
    out: dict[str, Any] = msgpack.unpackb(raw)
    return out


def test_group_offsets_are_checked_per_topic(cluster: tuple[Quorum, Brokers], topic: str) -> None:
    """Kafka's per-topic rules inside group requests, on every HTTP path to them: a commit
    (binary, v2 consumer instance) commits the topics the user may READ and answers the
    others TOPIC_AUTHORIZATION_FAILED; offset reads leave out topics the user may not
    DESCRIBE; v3 offset changes of a topic the user may not READ are refused whole."""
    q, b = cluster
    assert q.secure is not None
    cid = topic
    for t in ("oa", "ob", "oc"):
        _create_topic(b, cid, t)
        for i in range(3):
            status, body = _json_call(
                f"{b.url(101)}/topics/{t}", b.ssl, method="POST", body={"records": [{"value": i}]}
            )
            assert status == 200, body
    erin = _add_user(b, cid, "erin", "pw-erin")
    _grant(
        b,
        cid,
        "User:erin",
        [("GROUP", "eg", "READ"), ("TOPIC", "oa", "READ"), ("TOPIC", "ob", "DESCRIBE")],
    )
    plain = q.secure.client_ssl(admin=False)
    import time

    deadline = time.monotonic() + 30
    while True:  # the group's coordinator (the first ask creates __consumer_offsets)
        found = _binary(b.url(101), b.ssl, "group/find_coordinator", {"group": "eg"}, {})
        if found["error"] == "NONE" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    url = str(found["url"])

    def committed(who: dict[str, str], ctx: ssl.SSLContext) -> dict[str, int]:
        ans = _binary(url, ctx, "group/fetch_offsets", {"group": "eg"}, who)
        return {str(r[0]): int(r[2]) for r in ans["offsets"] if r[2] is not None and r[2] >= 0}

    def commit(who: dict[str, str], ctx: ssl.SSLContext, offsets: dict[str, int]) -> Any:
        body = {
            "group": "eg",
            "member_id": "",
            "generation": -1,
            "offsets": [[t, 0, o, ""] for t, o in offsets.items()],
        }
        return _binary(url, ctx, "group/commit", body, who)

    # The client library's route: oa committed, ob (DESCRIBE only) and oc (nothing) refused.
    ans = commit(erin, plain, {"oa": 1, "ob": 1, "oc": 1})
    assert ans["error"] == "NONE", ans
    assert sorted(map(tuple, ans["partition_errors"])) == [
        ("ob", 0, "TOPIC_AUTHORIZATION_FAILED"),
        ("oc", 0, "TOPIC_AUTHORIZATION_FAILED"),
    ]
    assert committed({}, b.ssl) == {"oa": 1}  # the admin sees what was committed
    ans = commit(erin, plain, {"oc": 2})  # nothing it may commit: nothing done
    assert ans["partition_errors"] == [["oc", 0, "TOPIC_AUTHORIZATION_FAILED"]], ans
    assert committed({}, b.ssl) == {"oa": 1}
    assert commit({}, b.ssl, {"ob": 2, "oc": 2})["error"] == "NONE"
    # Reads leave out what erin may not DESCRIBE (oc), asked for or not.
    assert committed(erin, plain) == {"oa": 1, "ob": 2}
    ans = _binary(
        url, plain, "group/fetch_offsets", {"group": "eg", "partitions": [["oc", 0]]}, erin
    )
    assert ans["offsets"] == [], ans
    lag = _binary(url, plain, "group/lag", {"group": "eg"}, erin)
    assert sorted(r[0] for r in lag["partitions"]) == ["oa", "ob"], lag
    # A v2 consumer instance (the broker's own client, acting for erin).
    base = f"{url}/consumers/eg"
    status, inst = _json_call(
        base,
        plain,
        method="POST",
        headers=erin,
        body={"name": "e1", "auto.commit.enable": "false"},  # its close commits nothing
    )
    assert status == 200, inst
    ib = f"{base}/instances/e1"
    parts = [{"topic": t, "partition": 0} for t in ("oa", "ob")]
    status, ans = _json_call(
        ib + "/assignments", plain, method="POST", headers=erin, body={"partitions": parts}
    )
    assert status == 204, ans
    status, ans = _json_call(
        ib + "/offsets",
        plain,
        method="POST",
        headers=erin,
        body={"offsets": [{**p, "offset": 2} for p in parts]},
    )
    assert (status, ans["error_code"]) == (403, 40301), ans
    assert "ob" in ans["message"], ans
    assert committed({}, b.ssl) == {"oa": 3, "ob": 2, "oc": 2}  # oa committed, ob not
    oc = [{"topic": "oc", "partition": 0}]
    status, ans = _json_call(
        ib + "/offsets",
        plain,
        method="GET",
        headers=erin,
        body={"partitions": [*parts, *oc]},
    )
    assert status == 200, ans
    assert sorted(o["topic"] for o in ans["offsets"]) == ["oa", "ob"], ans
    _json_call(ib, plain, method="DELETE", headers=erin)
    # v3: offset changes of a topic erin may not READ are refused whole.
    g = f"{url}/v3/clusters/{cid}/consumer-groups/eg"
    status, ans = _json_call(
        g + "/offsets:delete", plain, method="POST", headers=erin, body={"topics": ["oa", "ob"]}
    )
    assert (status, ans["error_code"]) == (403, 40301), ans
    status, ans = _json_call(
        g + "/offsets:reset",
        plain,
        method="POST",
        headers=erin,
        body={"to": "earliest", "topics": ["ob"], "execute": True},
    )
    assert (status, ans["error_code"]) == (403, 40301), ans
    assert committed({}, b.ssl) == {"oa": 3, "ob": 2, "oc": 2}
    status, ans = _json_call(
        g + "/offsets:reset",
        plain,
        method="POST",
        headers=erin,
        body={"to": "earliest", "topics": ["oa"], "execute": True},
    )
    assert status == 200, ans
    assert committed({}, b.ssl) == {"oa": 0, "ob": 2, "oc": 2}


# Kafka's operations per resource type (docs/security.md, ACLs) and what implies what.
_OPS = {
    "TOPIC": (
        "READ",
        "WRITE",
        "CREATE",
        "DESCRIBE",
        "DELETE",
        "ALTER",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
    ),
    "GROUP": ("READ", "DESCRIBE", "DELETE"),
    "CLUSTER": (
        "CREATE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
        "ALTER",
        "DESCRIBE",
    ),
    "TRANSACTIONAL_ID": ("DESCRIBE", "WRITE"),
}
_IMPLYING = {
    "DESCRIBE": {"READ", "WRITE", "DELETE", "ALTER"},
    "DESCRIBE_CONFIGS": {"ALTER_CONFIGS"},
}
# The resources the probes below name (paths, JSON and msgpack bodies).
_MX = {"TOPIC": "mx", "GROUP": "mg", "CLUSTER": "kafka-cluster", "TRANSACTIONAL_ID": "mtx"}
_MX_SUBST = {**SUBST, "{topic}": "mx", "{group}": "mg", "{subject}": "mx-value"}


def test_route_matrix_with_exactly_the_needed_acl(
    cluster: tuple[Quorum, Brokers], topic: str, tmp_path: Path
) -> None:
    """Every public route whose rule names an ACL, called by a principal holding exactly
    that ACL (2xx or an error that is not about rights: the body, a missing instance, ...)
    and by one holding every other operation on the resource but not that one, nor any
    that implies it (403; hidden as missing where the operation is DESCRIBE on a topic).
    The refused pass runs first, and changes nothing."""
    import msgpack

    from api.http.authz import AUTHENTICATED, rule_for
    from api.node.listeners import route_kind

    q, b = cluster
    assert q.secure is not None
    cid = topic
    _create_topic(b, cid, "mx")
    status, body = _json_call(
        f"{b.url(101)}/topics/mx", b.ssl, method="POST", body={"records": [{"value": 1}]}
    )
    assert status == 200, body
    # Two versions of its value subject, so that the subject's reads find it, and one
    # version can be deleted before the subject is.
    fields = [{"name": "a", "type": "int"}]
    for extra in ([], [{"name": "b", "type": "int", "default": 0}]):
        schema = {"type": "record", "name": "r", "fields": fields + extra}
        status, body = _json_call(
            f"{b.url(101)}/subjects/mx-value/versions",
            b.ssl,
            method="POST",
            body={"schema": json.dumps(schema)},
        )
        assert status == 200, body

    calls: list[tuple[str, str, str, Any]] = []  # method, path, pattern, rule
    for method, pattern in sorted(_all_routes(tmp_path)):
        kind = route_kind(pattern)
        if pattern.startswith(("/internal/", "/v3/quorum/", "/v3/health")):
            continue  # node routes and the controllers' (the matrix above)
        if kind is not None and kind.value not in ("client", "schema_registry"):
            continue
        rule = rule_for(method, pattern)
        assert rule is not None, pattern
        if rule is AUTHENTICATED:
            continue  # no ACL: any principal (the matrix above)
        path = pattern.replace("{cluster_id}", cid)
        if pattern == "/console/static":
            path = "/console/static/console.js"
        for k, v in _MX_SUBST.items():
            path = path.replace(k, v)
        calls.append((method, path, pattern, rule))
    # Deletions last, the subject's and the topic's very last, so the other routes find them.
    calls.sort(
        key=lambda c: (
            c[0] == "DELETE",
            c[2] == "/subjects/{subject}",
            c[2].endswith("/topics/{topic}"),
            c[2],
        )
    )

    def need(rule: Any) -> tuple[str, str, str]:
        op, rtype = rule.operation.value, rule.resource_type.value
        return op, rtype, _MX[rtype]

    needs = sorted({need(r) for *_, r in calls})
    assert len(needs) >= 15, needs

    def sub(kind: str, n: tuple[str, str, str]) -> str:
        return f"{kind}-{n[0]}-{n[1]}".lower()

    acls: list[tuple[str, str, str, str]] = []  # principal, type, name, operation
    for n in needs:
        op, rtype, name = n
        acls.append((f"User:{sub('x', n)}", rtype, name, op))
        for other in _OPS[rtype]:
            if other != op and other not in _IMPLYING.get(op, ()):
                acls.append((f"User:{sub('s', n)}", rtype, name, other))
    data = [
        {
            "resource_type": rt,
            "resource_name": name,
            "pattern_type": "LITERAL",
            "principal": p,
            "host": "*",
            "operation": op,
            "permission": "ALLOW",
        }
        for p, rt, name, op in acls
    ]
    status, body = _json_call(
        f"{b.url(101)}/v3/clusters/{cid}/acls:batch", b.ssl, method="POST", body={"data": data}
    )
    assert status == 201, body
    import time

    for broker in b.ids:  # a forwarded call is checked in the leader's image
        deadline = time.monotonic() + 20
        while len(_json_call(f"{b.url(broker)}/v3/clusters/{cid}/acls", b.ssl)[1]["data"]) < len(
            acls
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)

    plain = q.secure.client_ssl(admin=False)
    tokens = {n: {k: _token(q, sub(k, n)) for k in ("x", "s")} for n in needs}
    json_body = orjson_dumps({"topic_name": "mx", "transactional_id": "mtx", "records": []})
    bin_body = msgpack.packb(
        {"topic": "mx", "partition": 0, "group": "mg", "transactional_id": "mtx"}
    )

    def call(method: str, path: str, token: str) -> tuple[int | str, Any]:
        binary = path.startswith("/binary/")
        data = None if method in ("GET", "DELETE") else bin_body if binary else json_body
        ctype = "application/msgpack" if binary else "application/json"
        h = {"Content-Type": ctype, "Authorization": f"Bearer {token}"}
        try:
            # (a join waits out the group's initial rebalance delay, 3 s)
            status, raw = _request(
                b.url(101) + path, plain, method=method, body=data, headers=h, timeout_s=20
            )
        except TimeoutError:
            return "timed out", None
        if status == 200 and binary:
            return f"200 {msgpack.unpackb(raw).get('error')}", None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, None

    def hidden(got: int | str, body: Any) -> bool:
        return got == "200 UNKNOWN_TOPIC_OR_PARTITION" or (
            got == 404 and isinstance(body, dict) and body.get("error_code") == 40401
        )

    def state() -> Any:
        return (
            b.get(101, f"/v3/clusters/{cid}/topics/mx/partitions/0/offset")["latest_offset"],
            b.get(101, f"/v3/clusters/{cid}/topics/mx/configs/retention.ms")["value"],
            sorted(t["topic_name"] for t in b.get(101, f"/v3/clusters/{cid}/topics")["data"]),
            len(b.get(101, f"/v3/clusters/{cid}/acls")["data"]),
        )

    problems: list[str] = []
    before = state()
    for method, path, pattern, rule in calls:
        n = need(rule)
        got, body = call(method, path, tokens[n]["s"])
        want_hidden = n[0] == "DESCRIBE" and n[1] == "TOPIC"
        if not (hidden(got, body) if want_hidden else got == 403):
            problems.append(f"{method} {pattern}: without {n} got {got} {body}")
    assert state() == before, "a refused call changed something"
    for method, path, pattern, rule in calls:
        n = need(rule)
        got, body = call(method, path, tokens[n]["x"])
        # (a subject deleted by an earlier call of the pass answers missing too)
        gone = "{subject}" in pattern and method == "DELETE"
        if got in (401, 403) or (n[1] == "TOPIC" and hidden(got, body) and not gone):
            problems.append(f"{method} {pattern}: with exactly {n} got {got} {body}")
    assert problems == [], "\n".join(problems)
    # The broker's own bookkeeping behind a user's call runs as the node: a registry read
    # syncs with _schemas (asked as the user, its leader hid the topic and the read timed out).
    assert "answered without a sync" not in b.log_tail(101, 5000)


def orjson_dumps(v: Any) -> bytes:
    return json.dumps(v).encode()


def test_a_broker_asks_another_over_tls_for_the_user(
    cluster: tuple[Quorum, Brokers], topic: str
) -> None:
    """Routes a broker answers by asking another (a broker's configs, the console's
    overview) dial its https endpoint with the node's certificate (they dialled http://,
    which a TLS listener refuses), and a forwarded config read is checked as the user."""
    q, b = cluster
    assert q.secure is not None
    cid = topic
    frank = _add_user(b, cid, "frank", "pw-frank")
    _grant(b, cid, "User:frank", [("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS")])
    plain = q.secure.client_ssl(admin=False)
    url = f"{b.url(101)}/v3/clusters/{cid}/brokers/102/configs"
    for who, ctx in ((frank, plain), ({}, b.ssl)):
        status, body = _json_call(url, ctx, headers=who)
        assert status == 200, body
        assert {c["broker_id"] for c in body["data"]} == {102}, body
    grace = _add_user(b, cid, "grace", "pw-grace")
    status, body = _json_call(url, plain, headers=grace)
    assert (status, body["error_code"]) == (403, 40301), body
    status, body = _json_call(f"{b.url(101)}/console/api/cluster", b.ssl)
    assert status == 200, body
    other = next(x for x in body["brokers"] if x["broker_id"] == 102)
    assert other["reachable"] is True and other["replicas"] > 0, other
    assert other["port"] == b.ports[102], other


def test_a_transactional_producer_reaches_its_coordinator_over_tls(
    cluster: tuple[Quorum, Brokers],
) -> None:
    """find_coordinator answers the coordinator's client URL with its scheme (https here):
    it answered http://, and every transaction of a secure cluster failed (found by
    ``jepsen_tests run --secure --workload txn-ctp``). Last in the module: it creates
    ``__transaction_state``, which the admin's topic lists above must not show."""
    import asyncio

    from api.client import AsyncProducer
    from api.client.security import ClientSecurity

    q, b = cluster
    assert q.secure is not None
    security = ClientSecurity(
        ssl_cafile=str(q.secure.ca.cert),
        ssl_certfile=str(q.secure.admin.cert),
        ssl_keyfile=str(q.secure.admin.key),
    )

    async def init() -> None:
        p = AsyncProducer(
            [b.url(101)], transactional_id="tls-txn", security=security, request_timeout_ms=5000
        )
        try:
            await p.init_transactions()
            p.begin_transaction()
            await p.commit_transaction()
        finally:
            await p.close()

    asyncio.run(init())
