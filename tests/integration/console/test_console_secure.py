"""The console's admin actions on a secure cluster (TLS, authentication, the authorizer on),
in a real headless Chromium: the page writes through the public REST routes as the
browser's user, so a principal without the ACL is refused (403), the page says so, and
nothing changes; the same action by a principal holding the ACL goes through."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_browser_support import browser, open_page

from api.node.localcluster import Brokers, Quorum, running_cluster
from api.node.secure_setup import SecureSetup

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Quorum, Brokers]]:
    root = tmp_path_factory.mktemp("console-secure")
    args = ["--override", "console_admin_enabled=true"]
    with running_cluster(root, 1, 1, secure=True, broker_args=args, ready_timeout_s=90) as qb:
        yield qb


def _call(url: str, ctx: ssl.SSLContext | None, method: str = "GET", body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _allow(v3: str, ctx: ssl.SSLContext | None, user: str, operation: str) -> None:
    st, body = _call(
        f"{v3}/acls",
        ctx,
        "POST",
        {
            "resource_type": "CLUSTER",
            "resource_name": "kafka-cluster",
            "pattern_type": "LITERAL",
            "principal": f"User:{user}",
            "host": "*",
            "operation": operation,
            "permission": "ALLOW",
        },
    )
    assert st in (200, 201), body


def test_a_principal_without_the_acl_is_refused_on_the_page_and_one_with_it_is_not(
    cluster: tuple[Quorum, Brokers], tmp_path: Path
) -> None:
    q, b = cluster
    setup: SecureSetup | None = q.secure
    assert setup is not None
    base = b.url(101)
    st, body = _call(base + "/v3/clusters", b.ssl)  # b.ssl presents the admin certificate
    assert st == 200, body
    v3 = f"{base}/v3/clusters/{body['data'][0]['cluster_id']}"
    for user in ("bob", "carol"):  # both may look at the console
        _allow(v3, b.ssl, user, "DESCRIBE")
    _allow(v3, b.ssl, "carol", "CREATE")  # only carol may create topics

    for user, topic, expect in (
        ("bob", "bobs-topic", "error"),
        ("carol", "carols-topic", "done"),
    ):
        with browser(tmp_path / f"profile-{user}", ignore_https_errors=True) as ctx:
            ctx.set_extra_http_headers({"Authorization": f"Bearer {setup.token(user)}"})
            page = ctx.new_page()
            open_page(page, base + "/console/#/topics", "topics")
            page.fill("#create-topic input[name=name]", topic)
            page.click("#create-topic button")
            page.wait_for_selector(f"#create-topic .admin-result.{expect}", timeout=20_000)
            text = page.inner_text("#create-topic .admin-result")
            if expect == "error":
                assert "Not allowed (403)" in text and "Nothing was changed" in text, text
                page.screenshot(path=tmp_path / "refused.png", full_page=True)
            else:
                assert f"Created topic {topic}" in text, text
        st, _ = _call(f"{v3}/topics/{topic}", b.ssl)
        assert st == (404 if expect == "error" else 200), (user, st)
