"""The web console in a real headless Chromium against a real cluster (3 controllers, 3 brokers).

Each page is opened in the browser and checked to show what the cluster holds: brokers and the
quorum, a topic's partitions and offsets and configs and throughput, a produced message's key,
value and headers decoded, a consumer group's members and lag, the fault-injection runs found
in ``console_reports_dir``. Every page is also saved as a screenshot
(``console_browser_support.artifacts_dir``). The last test measures how long the overview and
the topics pages take to draw with 1,000 more partitions in the cluster and prints it.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_browser_support import (
    artifacts_dir,
    browser,
    drawn_route,
    open_page,
    timings,
    wait_drawn,
    wait_redrawn,
)
from consumer_groups_support import Consumers, produce, wait_group
from http_cluster_support import HttpCluster
from playwright.sync_api import BrowserContext, Page

from api.node.localcluster import running_cluster
from jepsen_tests.history import History
from jepsen_tests.runner import write_results

pytestmark = pytest.mark.slow

CLUSTER = "console"


def _write_run(d: Path, valid: bool, seed: int) -> None:
    """A fault-injection run directory as ``jepsen_tests.runner`` writes it."""
    d.mkdir(parents=True)
    results = {
        "config": {"workload": "queue", "nemeses": ["kill", "partition"], "seed": seed},
        "warnings": ["a warning kept for the page"] if not valid else [],
        "ops": 1234,
        "wall_time_s": 61.5,
        "result": {
            "valid": valid,
            "anomaly_types": [] if valid else ["lost"],
            "counts": {"ok": 1200} if valid else {"ok": 1198, "lost": 2},
            "anomalies": {},
            "stats": {"sends": {"ok": 600}},
        },
    }
    write_results(d, results, History([]))
    schedule = [{"at_s": 3.5, "duration_s": 5.0, "spec": "one", "id": "0.0", "kind": "kill"}]
    schedule[0]["targets"] = ["b2"]
    (d / "schedule.json").write_text(json.dumps(schedule))


@pytest.fixture(scope="module")
def reports_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jepsen-runs")
    _write_run(root / "queue-kill-seed1", valid=True, seed=1)
    _write_run(root / "sweep" / "queue-partition-seed7", valid=False, seed=7)
    return root


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, reports_dir: Path) -> Iterator[HttpCluster]:
    args = [
        "--override",
        "group_initial_rebalance_delay_ms=300",
        "--override",
        f"console_reports_dir={reports_dir}",
    ]
    with running_cluster(tmp_path_factory.mktemp(CLUSTER), broker_args=args) as (q, brokers):
        yield HttpCluster(q, brokers)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    with browser(tmp_path_factory.mktemp("chromium-profile")) as c:
        yield c


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = artifacts_dir(tmp_path_factory.mktemp("console-screenshots"))
    print(f"console screenshots: {d}")
    return d


@pytest.fixture
def page(ctx: BrowserContext) -> Iterator[Page]:
    p = ctx.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    # The console must work under its own Content-Security-Policy: a refused inline style or
    # script is a bug even when the page still draws.
    p.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
    )
    yield p
    p.close()
    assert not errors, f"the page raised: {errors}"


def console(c: HttpCluster, route: str = "", i: int = 0) -> str:
    return f"{c.urls[i]}/console/#/{route}"


def cells(page: Page, table: str) -> list[list[str]]:
    rows: list[list[str]] = page.eval_on_selector_all(
        f"#{table} tbody tr",
        "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText.trim()))",
    )
    return rows


def test_overview_shows_brokers_quorum_and_partition_health(
    cluster: HttpCluster, page: Page, shots: Path
) -> None:
    cluster.create_topic("overview-topic", partitions=4, rf=3)
    open_page(page, console(cluster), "overview")
    brokers = cells(page, "brokers")
    assert [r[0].split()[0] for r in brokers] == ["101", "102", "103"]
    assert all("running" in r[3] for r in brokers), brokers
    quorum = cells(page, "quorum")
    assert [r[0] for r in quorum] == ["1", "2", "3"]
    assert sum("leader" in r[1] for r in quorum) == 1, quorum
    assert all(r[6] not in ("", "?") for r in quorum), quorum  # every voter's lag is known
    parts = int(page.inner_text("#card-partitions .n").replace(",", ""))
    assert parts >= 4
    assert page.inner_text("#card-urp .n") == "0"
    assert page.inner_text("#card-offline .n") == "0"
    page.screenshot(path=shots / "overview.png", full_page=True)


def test_overview_shows_a_stopped_broker_and_its_partitions(
    cluster: HttpCluster, page: Page, shots: Path
) -> None:
    cluster.create_topic("urp-topic", partitions=3, rf=3)
    cluster.brokers.kill(103)
    try:
        deadline = time.monotonic() + 60
        while True:
            open_page(page, console(cluster), "overview")
            b103 = next(r for r in cells(page, "brokers") if r[0].startswith("103"))
            urp = int(page.inner_text("#card-urp .n"))
            if "unreachable" in b103[3] and urp > 0:
                break
            assert time.monotonic() < deadline, (b103, urp)
            time.sleep(1)
        unhealthy = cells(page, "unhealthy")
        assert any(r[0] == "urp-topic" and "under-replicated" in r[5] for r in unhealthy)
        page.screenshot(path=shots / "overview-broker-down.png", full_page=True)
    finally:
        cluster.brokers.start(103)
        cluster.brokers.wait_ready([103], timeout_s=60)


def _plot_rises(page: Page, selector: str) -> bool:
    """Whether the first line of the plot at ``selector`` leaves its baseline anywhere."""
    ys: list[float] = page.eval_on_selector(
        selector,
        "el => { const pl = el.querySelector('polyline'); if (!pl) return [];"
        " return pl.getAttribute('points').split(' ').map(p => Number(p.split(',')[1])); }",
    )
    return len(ys) >= 2 and min(ys) < max(ys)


def test_topics_and_topic_page_show_partitions_offsets_configs_and_throughput(
    cluster: HttpCluster, page: Page, shots: Path
) -> None:
    cluster.create_topic("orders", partitions=3, rf=3, configs={"retention.ms": "7654321"})
    # Produce over several throughput samples (2 s each) so the plot has a rise to draw.
    for _ in range(4):
        produce(
            cluster,
            "orders",
            [{"partition_id": 0, "value": {"type": "JSON", "data": {"n": i}}} for i in range(10)],
        )
        time.sleep(1.2)
    produce(cluster, "orders", [{"partition_id": 2, "value": {"type": "STRING", "data": "x"}}])
    time.sleep(2.5)  # one more sample after the last produce

    open_page(page, console(cluster, "topics"), "topics")
    row = next(r for r in cells(page, "topics") if r[0] == "orders")
    assert row[1:4] == ["3", "3", "41"], row  # partitions, replication, records
    page.screenshot(path=shots / "topics.png", full_page=True)

    page.click("#topics a:text-is('orders')")
    wait_drawn(page, "topic")
    parts = cells(page, "partitions")
    assert [r[0] for r in parts] == ["0", "1", "2"]
    assert [r[5] for r in parts] == ["40", "0", "1"]  # end offsets (high watermarks)
    for r in parts:
        assert len(r[2].split(", ")) == 3 and len(r[3].split(", ")) == 3, r  # replicas, ISR
    configs = {r[0]: r[1] for r in cells(page, "configs")}
    assert configs["retention.ms"] == "7654321"
    assert configs["cleanup.policy"] == "delete"
    assert _plot_rises(page, "#throughput .plot"), "the records/s plot stays flat"
    page.screenshot(path=shots / "topic.png", full_page=True)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def test_message_browser_decodes_json_text_and_binary_with_keys_and_headers(
    cluster: HttpCluster, page: Page, shots: Path
) -> None:
    cluster.create_topic("messages", partitions=2, rf=3)
    produce(
        cluster,
        "messages",
        [
            {
                "partition_id": 1,
                "key": {"type": "STRING", "data": "alice"},
                "value": {"type": "JSON", "data": {"item": "tea", "qty": 2}},
                "headers": [{"name": "trace-id", "value": _b64(b"abc-123")}],
                "timestamp": "2026-01-01T00:00:00Z",
            },
            {
                "partition_id": 1,
                "key": {"type": "STRING", "data": "bob"},
                "value": {"type": "STRING", "data": "plain words"},
                "timestamp": "2026-01-02T00:00:00Z",
            },
            {
                "partition_id": 1,
                "value": {"type": "BINARY", "data": _b64(b"\x00\x01\xfe\xff")},
                "timestamp": "2026-01-03T00:00:00Z",
            },
        ],
    )
    open_page(page, console(cluster, "messages?topic=messages&partition=1"), "messages")
    rows = cells(page, "messages")
    assert [r[0] for r in rows] == ["0", "1", "2"]
    assert rows[0][1].startswith("2026-01-01 00:00:00")
    assert "alice" in rows[0][2]
    assert json.loads(rows[0][3].removeprefix("json").strip()) == {"item": "tea", "qty": 2}
    assert "trace-id" in rows[0][4] and "abc-123" in rows[0][4]
    assert "bob" in rows[1][2] and "plain words" in rows[1][3] and rows[1][3].startswith("text")
    assert rows[2][3].startswith("binary") and _b64(b"\x00\x01\xfe\xff") in rows[2][3]
    assert rows[2][2].startswith("null")
    page.screenshot(path=shots / "messages.png", full_page=True)

    # From a time: the first record at or after it.
    page.fill("#browse input[name=time]", "2026-01-02T00:00:00")
    before = drawn_route(page)
    page.click("#browse button[type=submit]")
    wait_redrawn(page, "messages", before)
    assert "time=" in page.url
    assert [r[0] for r in cells(page, "messages")] == ["1", "2"]

    # From an offset, one at a time, then the link to the next.
    open_page(
        page, console(cluster, "messages?topic=messages&partition=1&offset=1&limit=1"), "messages"
    )
    assert [r[0] for r in cells(page, "messages")] == ["1"]
    before = drawn_route(page)
    page.click("#next")
    wait_redrawn(page, "messages", before)
    assert "offset=2" in page.url
    assert [r[0] for r in cells(page, "messages")] == ["2"]

    # Markup in a record is shown as text, never run.
    evil = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>'
    produce(
        cluster,
        "messages",
        [
            {
                "partition_id": 0,
                "key": {"type": "STRING", "data": "<b>k</b>"},
                "value": {"type": "STRING", "data": evil},
            }
        ],
    )
    open_page(page, console(cluster, "messages?topic=messages&partition=0"), "messages")
    [row] = cells(page, "messages")
    assert "<b>k</b>" in row[2] and evil in row[3]
    assert page.evaluate("window.pwned") is None
    assert page.query_selector("#messages img, #messages script, #messages b") is None

    # A partition the topic lacks: said on the page, nothing breaks.
    open_page(page, console(cluster, "messages?topic=messages&partition=7"), "messages")
    assert "has partitions 0 to 1" in page.inner_text("main")


def test_message_browser_decodes_schema_values_through_the_registry(
    cluster: HttpCluster, page: Page, shots: Path
) -> None:
    cluster.create_topic("avro-orders", partitions=1, rf=3)
    schema = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "id", "type": "int"}, {"name": "item", "type": "string"}],
    }
    produce(
        cluster,
        "avro-orders",
        [
            {
                "partition_id": 0,
                "key": {"type": "STRING", "data": "o-1"},
                "value": {
                    "type": "AVRO",
                    "schema": json.dumps(schema),
                    "data": {"id": 7, "item": "tea"},
                },
            }
        ],
    )
    # Read as bytes, the value is named by its schema id (Confluent's wire format).
    open_page(page, console(cluster, "messages?topic=avro-orders&partition=0"), "messages")
    [row] = cells(page, "messages")
    assert re.match(r"schema \d+", row[3]), row
    # Through the registry, it is the record produced.
    open_page(
        page, console(cluster, "messages?topic=avro-orders&partition=0&values=registry"), "messages"
    )
    [row] = cells(page, "messages")
    assert "o-1" in row[2]
    assert json.loads(row[3].removeprefix("schema registry").strip()) == {"id": 7, "item": "tea"}
    page.screenshot(path=shots / "messages-registry.png", full_page=True)


def test_consumer_group_page_shows_members_assignment_and_lag(
    cluster: HttpCluster, page: Page, shots: Path
) -> None:
    cluster.create_topic("lagged", partitions=1, rf=3)
    produce(
        cluster,
        "lagged",
        [{"partition_id": 0, "value": {"type": "JSON", "data": i}} for i in range(10)],
    )
    # A v2 commit names the last offset consumed: the group's committed offset is 5.
    Consumers(cluster).committed_member("console-group", "m1", "lagged", 10, {0: 4})

    open_page(page, console(cluster, "groups"), "groups")
    row = next(r for r in cells(page, "groups") if r[0] == "console-group")
    assert row[4] == "5", row  # total lag: 10 produced, 5 committed
    page.screenshot(path=shots / "groups.png", full_page=True)

    page.click("#groups a:text-is('console-group')")
    wait_drawn(page, "group")
    lags = cells(page, "lags")
    assert lags[0][:5] == ["lagged", "0", "5", "10", "5"], lags
    members = cells(page, "members")
    assert len(members) == 1 and members[0][2] == "lagged-0", members
    assert page.inner_text("#card-lag .n") == "5"

    # The lag plot follows the group while the page is open: more records, more lag.
    produce(
        cluster,
        "lagged",
        [{"partition_id": 0, "value": {"type": "JSON", "data": i}} for i in range(5)],
    )
    page.wait_for_selector("#card-lag .n:text-is('10')", timeout=20_000)
    assert _plot_rises(page, "#lag-plot .plot")
    page.screenshot(path=shots / "group.png", full_page=True)


def test_reports_page_lists_runs_and_shows_one(
    cluster: HttpCluster, page: Page, shots: Path
) -> None:
    open_page(page, console(cluster, "reports"), "reports")
    runs = {r[0]: r for r in cells(page, "runs")}
    assert set(runs) == {"queue-kill-seed1", "sweep/queue-partition-seed7"}
    assert runs["queue-kill-seed1"][1] == "valid"
    assert runs["sweep/queue-partition-seed7"][1] == "INVALID"
    assert "lost 2" in runs["sweep/queue-partition-seed7"][6]
    page.screenshot(path=shots / "reports.png", full_page=True)

    page.click("#runs a:text-is('sweep/queue-partition-seed7')")
    wait_drawn(page, "report")
    assert page.inner_text("#card-verdict .n") == "INVALID"
    assert ["lost", "2"] in cells(page, "anomalies")
    assert cells(page, "schedule")[0][2:4] == ["kill", "b2"]
    assert "a warning kept for the page" in page.inner_text("main")
    page.screenshot(path=shots / "report.png", full_page=True)
    href = page.get_attribute("#html-report", "href")
    assert href is not None
    st, hdrs, body = cluster.call("GET", cluster.urls[0] + href)
    assert st == 200 and b"<html" in body.lower()
    assert "sandbox" in hdrs["content-security-policy"]


def test_console_api_refuses_what_it_does_not_have(cluster: HttpCluster, page: Page) -> None:
    st, _, body = cluster.call("GET", cluster.urls[0] + "/console/api/topics/no-such-topic")
    assert st == 404 and body["error_code"] == 40401, body  # as the v3 API
    for bad in ("..", "../..", "queue-kill-seed1/../..", "%2e%2e/etc", "nope"):
        st, _, body = cluster.call("GET", cluster.urls[0] + f"/console/api/reports/{bad}")
        assert st == 404, (bad, st, body)
    open_page(page, console(cluster, "topic/no-such-topic"), "error")
    assert "no-such-topic" in page.inner_text("#page-error")
    # ... and the broker still serves.
    assert cluster.call("GET", cluster.urls[0] + "/console/api/topics")[0] == 200


@pytest.fixture(scope="module")
def admin_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpCluster]:
    """A small second cluster (1 controller, 1 broker) whose console has admin actions on."""
    args = [
        "--override",
        "console_admin_enabled=true",
        "--override",
        "group_initial_rebalance_delay_ms=300",
    ]
    with running_cluster(tmp_path_factory.mktemp("console-admin"), 1, 1, broker_args=args) as (
        q,
        brokers,
    ):
        yield HttpCluster(q, brokers)


def _writes(page: Page) -> list[str]:
    """Every request the page makes other than a GET, as "METHOD url" (filled as it goes)."""
    out: list[str] = []
    page.on("request", lambda r: out.append(f"{r.method} {r.url}") if r.method != "GET" else None)
    return out


def test_read_only_console_shows_no_admin_action_and_writes_nothing(
    cluster: HttpCluster, page: Page
) -> None:
    cluster.create_topic("ro-topic", partitions=1, rf=3)
    produce(cluster, "ro-topic", [{"partition_id": 0, "value": {"type": "JSON", "data": 1}}])
    Consumers(cluster).committed_member("ro-group", "m1", "ro-topic", 1, {0: 0})
    writes = _writes(page)
    st, _, body = cluster.call("GET", cluster.urls[0] + "/console/api/settings")
    assert st == 200 and body == {"admin_enabled": False}, body
    for route, name in (
        ("topics", "topics"),
        ("topic/ro-topic", "topic"),
        ("group/ro-group", "group"),
    ):
        open_page(page, console(cluster, route), name)
        assert page.query_selector_all("section.admin") == [], route
        assert page.query_selector_all("button:text-is('Create'), button:text-is('Delete')") == []
    assert "Read-only" in page.inner_text("footer")
    assert writes == [], writes


def test_admin_creates_alters_and_deletes_a_topic(
    admin_cluster: HttpCluster, page: Page, shots: Path
) -> None:
    c = admin_cluster
    writes = _writes(page)
    open_page(page, console(c, "topics"), "topics")
    page.fill("#create-topic input[name=name]", "made-in-console")
    page.fill("#create-topic input[name=partitions]", "3")
    page.click("#create-topic button")
    page.wait_for_selector("#create-topic .admin-result.done", timeout=20_000)
    page.wait_for_selector("#topics a:text-is('made-in-console')", timeout=20_000)
    row = next(r for r in cells(page, "topics") if r[0] == "made-in-console")
    assert row[1:3] == ["3", "1"], row
    st, _, t = c.call("GET", f"{c.v3()}/topics/made-in-console")
    assert st == 200 and t["partitions_count"] == 3, t
    page.screenshot(path=shots / "admin-topics.png", full_page=True)

    open_page(page, console(c, "topic/made-in-console"), "topic")
    page.select_option("#alter-config select", "retention.ms")
    page.fill("#alter-config input[name=value]", "3600000")
    page.click("#alter-config button")
    page.wait_for_selector("#alter-config .admin-result.done", timeout=20_000)
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#configs tbody tr')).some("
        "r => r.cells[0].innerText === 'retention.ms' && r.cells[1].innerText === '3600000')",
        timeout=20_000,
    )
    st, _, cfg = c.call("GET", f"{c.v3()}/topics/made-in-console/configs/retention.ms")
    assert st == 200 and cfg["value"] == "3600000", cfg

    # Deleting asks for the topic's name typed out: a near miss leaves the button off.
    button = "#delete-topic button"
    assert page.is_disabled(button)
    page.fill("#delete-topic input", "made-in-consol")
    assert page.is_disabled(button)
    page.fill("#delete-topic input", "made-in-console")
    assert page.is_enabled(button)
    page.screenshot(path=shots / "admin-topic.png", full_page=True)
    page.click(button)
    page.wait_for_selector("#delete-topic .admin-result.done", timeout=20_000)
    assert c.call("GET", f"{c.v3()}/topics/made-in-console")[0] == 404
    open_page(page, console(c, "topics"), "topics")
    assert all(r[0] != "made-in-console" for r in cells(page, "topics"))
    assert [w.split()[0] for w in writes] == ["POST", "PUT", "DELETE"], writes


def test_admin_resets_an_empty_groups_offsets(
    admin_cluster: HttpCluster, page: Page, shots: Path
) -> None:
    c = admin_cluster
    c.create_topic("reset-me", partitions=1, rf=1)
    produce(
        c,
        "reset-me",
        [{"partition_id": 0, "value": {"type": "JSON", "data": i}} for i in range(10)],
    )
    consumers = Consumers(c)
    consumers.committed_member("reset-group", "m1", "reset-me", 10, {0: 4})
    open_page(page, console(c, "group/reset-group"), "group")
    # A group with a member is refused, said on the page, and keeps its offsets.
    page.select_option("#reset-offsets select", "latest")
    page.click("#reset-offsets button")
    page.wait_for_selector("#reset-offsets .admin-result.error", timeout=20_000)
    assert "409" in page.inner_text("#reset-offsets .admin-result")
    assert cells(page, "lags")[0][2] == "5"

    assert consumers.call("DELETE", "reset-group", "m1")[0] == 204
    wait_group(c, "reset-group", lambda g: g["state"] == "EMPTY")
    page.click("#reset-offsets button")
    page.wait_for_selector("#reset-offsets .admin-result.done", timeout=20_000)
    assert "Reset 1 partition(s) to latest" in page.inner_text("#reset-offsets .admin-result")
    page.wait_for_selector("#card-lag .n:text-is('0')", timeout=20_000)
    assert cells(page, "lags")[0][2] == "10"
    page.screenshot(path=shots / "admin-group.png", full_page=True)


def test_admin_refusal_is_shown_and_changes_nothing(admin_cluster: HttpCluster, page: Page) -> None:
    """A 403 from the create route, answered by the browser's route hook (as the broker's
    ACLs answer a principal without CREATE; test_console_secure.py gets it from a secure
    cluster), is shown as such and the page keeps working."""
    c = admin_cluster

    def refuse(route: Any) -> None:
        if route.request.method != "POST":
            route.continue_()
            return
        route.fulfill(
            status=403,
            content_type="application/json",
            body=json.dumps(
                {
                    "error_code": 40301,
                    "message": "User:bob is not authorized to CREATE on TOPIC refused-topic",
                }
            ),
        )

    page.route(re.compile(r".*/v3/clusters/[^/]+/topics$"), refuse)
    open_page(page, console(c, "topics"), "topics")
    page.fill("#create-topic input[name=name]", "refused-topic")
    page.click("#create-topic button")
    page.wait_for_selector("#create-topic .admin-result.error", timeout=20_000)
    text = page.inner_text("#create-topic .admin-result")
    assert "Not allowed (403)" in text and "not authorized to CREATE" in text, text
    assert "Nothing was changed" in text, text
    assert c.call("GET", f"{c.v3()}/topics/refused-topic")[0] == 404
    assert page.is_enabled("#create-topic button")


@pytest.mark.extended  # a 1,000-partition cluster: minutes on 2 cores (docs/testing.md)
def test_pages_draw_fast_with_1000_partitions(
    cluster: HttpCluster, page: Page, shots: Path
) -> None:
    _create_big_topic(cluster, "big", 1000)
    figures: dict[str, Any] = {}
    for route, name in (("", "overview"), ("topics", "topics"), ("topic/big", "topic")):
        best = None
        for _ in range(3):  # the first load warms the broker's caches and the browser's
            page.goto("about:blank")
            t0 = time.monotonic()
            open_page(page, console(cluster, route), name)
            wall_ms = (time.monotonic() - t0) * 1000
            t = timings(page)[-1]
            assert t["page"] == name
            if best is None or wall_ms < best[0]:
                best = (wall_ms, t["ms"])
        assert best is not None
        figures[name] = {"load_ms": round(best[0]), "route_to_drawn_ms": round(best[1])}
        page.screenshot(path=shots / f"big-{name}.png", full_page=False)
    print(f"console with {_partitions(page, cluster)} partitions: {figures}")
    # "Well under a second" is the goal (the figures above); the bound leaves room for a
    # loaded 2-core CI machine and still fails on a page that does per-partition requests.
    for name, f in figures.items():
        assert f["load_ms"] < 3000, (name, figures)
    # The topic page draws one page of partitions, not 1,000 rows.
    assert len(cells(page, "partitions")) == 100
    assert re.search(r"page 1 of 10", page.inner_text("main"))


def _create_big_topic(cluster: HttpCluster, name: str, partitions: int) -> None:
    """Like ``HttpCluster.create_topic`` with a deadline for a loaded machine: 1,000 leaders
    took over 20 s to reach every broker once with the load average at 15 on 2 cores."""
    st, _, body = cluster.call(
        "POST",
        f"{cluster.v3()}/topics",
        {"topic_name": name, "partitions_count": partitions, "replication_factor": 1},
    )
    assert st == 201, body
    deadline = time.monotonic() + 180
    for url in cluster.urls:
        while True:
            s, _, t = cluster.call("GET", f"{url}/console/api/topics/{name}")
            if s == 200 and t["partitions"] == partitions and t["offsets_unknown"] == 0:
                break
            assert time.monotonic() < deadline, (s, t if s != 200 else t["offsets_unknown"])
            time.sleep(0.5)


def _partitions(page: Page, cluster: HttpCluster) -> int:
    _, _, c = cluster.call("GET", cluster.urls[0] + "/console/api/cluster")
    return int(c["health"]["partitions"])
