"""CORS on a real broker process started with ``http_cors_allowed_origins``: preflights,
the headers on answers (errors and streamed bodies too), other origins, internal routes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_cluster_support import HttpCluster

from api.node.localcluster import running_cluster

UI = "http://ui.example:3000"


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpCluster]:
    root: Path = tmp_path_factory.mktemp("cors")
    origins = f"http_cors_allowed_origins={UI},https://other.example"
    with running_cluster(root, 1, 1, broker_args=["--override", origins]) as (q, b):
        yield HttpCluster(q, b)


def test_a_preflight_from_an_allowed_origin_is_answered(c: HttpCluster) -> None:
    st, h, _ = c.call(
        "OPTIONS",
        f"{c.v3()}/topics",
        headers={
            "Origin": UI,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, x-custom",
        },
    )
    assert st == 204
    assert h["access-control-allow-origin"] == UI
    assert "POST" in h["access-control-allow-methods"]
    assert h["access-control-allow-headers"] == "content-type, x-custom"
    assert int(h["access-control-max-age"]) > 0 and "Origin" in h["vary"]


def test_a_preflight_from_another_origin_is_refused_with_the_reason(c: HttpCluster) -> None:
    st, h, body = c.call(
        "OPTIONS",
        f"{c.v3()}/topics",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "DELETE"},
    )
    assert (st, body["error_code"]) == (403, 40301) and "evil.example" in body["message"]
    assert "access-control-allow-origin" not in h


def test_answers_to_an_allowed_origin_carry_the_headers_errors_and_produce_too(
    c: HttpCluster,
) -> None:
    st, h, body = c.call("GET", f"{c.urls[0]}/v3/clusters", headers={"Origin": UI})
    assert st == 200 and body["data"]
    assert h["access-control-allow-origin"] == UI and "Origin" in h["vary"]
    st, h, body = c.call("GET", f"{c.v3()}/topics/nope", headers={"Origin": UI})
    assert st == 404 and h["access-control-allow-origin"] == UI
    c.create_topic("cors", partitions=1, rf=1)
    st, h, body = c.call(
        "POST",
        f"{c.v3()}/topics/cors/records",
        chunks=[json.dumps({"value": {"type": "STRING", "data": "x"}}).encode()],
        headers={"Origin": "https://other.example", "Content-Type": "application/json"},
    )
    assert st == 200 and h["access-control-allow-origin"] == "https://other.example"


def test_other_origins_and_internal_routes_get_no_cors_headers(c: HttpCluster) -> None:
    st, h, _ = c.call("GET", f"{c.urls[0]}/v3/clusters", headers={"Origin": "http://x.example"})
    assert st == 200 and "access-control-allow-origin" not in h
    st, h, _ = c.call("GET", f"{c.urls[0]}/v3/clusters")
    assert st == 200 and "access-control-allow-origin" not in h
    st, h, _ = c.call(
        "OPTIONS",
        f"{c.urls[0]}/internal/partition/fetch",
        headers={"Origin": UI, "Access-Control-Request-Method": "POST"},
    )
    assert st != 204 and "access-control-allow-origin" not in h  # not answered as CORS


def test_the_openapi_page_is_served_and_fetches_only_the_document(c: HttpCluster) -> None:
    import re
    import urllib.request

    with urllib.request.urlopen(f"{c.urls[0]}/openapi", timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
        page = r.read().decode()
    assert 'fetch("/openapi.json")' in page
    # No CDN: nothing loaded from elsewhere (scripts, styles, fonts, images).
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "@import" not in page and "url(" not in page
