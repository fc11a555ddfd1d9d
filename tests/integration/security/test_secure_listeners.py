"""A secure cluster of real processes (issue 18): TLS on every listener, node routes only on
node listeners, plaintext and untrusted or expired certificates refused."""

from __future__ import annotations

import datetime
import json
import socket
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
    url: str, ctx: ssl.SSLContext | None, *, method: str = "GET", body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
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
