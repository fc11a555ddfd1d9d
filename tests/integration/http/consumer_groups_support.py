"""Curl-like calls for the v2 consumer instances and the v3 consumer groups, on top of
``HttpCluster.call``; shared by the HTTP and the CLI tests of consumer groups.

``cluster_with_groups(root, instance_timeout_ms)`` starts 3 controllers and 3 brokers whose
group coordinators start rebalances quickly (``group_initial_rebalance_delay_ms``) and whose
consumer instances expire after ``instance_timeout_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from http_cluster_support import HttpCluster

from api.node.localcluster import running_cluster

V2 = "application/vnd.kafka.v2+json"


@contextmanager
def cluster_with_groups(root: Path, instance_timeout_ms: int = 300_000) -> Iterator[HttpCluster]:
    args = [
        "--override",
        f"consumer_instance_timeout_ms={instance_timeout_ms}",
        "--override",
        "group_initial_rebalance_delay_ms=300",
    ]
    with running_cluster(root, broker_args=args) as (q, brokers):
        yield HttpCluster(q, brokers)


class Consumers:
    """v2 consumer instances on broker ``i`` of the cluster."""

    def __init__(self, c: HttpCluster, i: int = 0) -> None:
        self.c = c
        self.url = c.urls[i]

    def inst(self, group: str, name: str) -> str:
        return f"{self.url}/consumers/{group}/instances/{name}"

    def create(self, group: str, name: str, **config: Any) -> tuple[int, Any]:
        st, _, body = self.c.call(
            "POST",
            f"{self.url}/consumers/{group}",
            {"name": name, **config},
            headers={"Content-Type": V2},
        )
        return st, body

    def call(
        self,
        method: str,
        group: str,
        name: str,
        path: str = "",
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        hdrs = {"Content-Type": V2, **(headers or {})}
        st, _, out = self.c.call(method, self.inst(group, name) + path, body, headers=hdrs)
        return st, out

    def records(
        self,
        group: str,
        name: str,
        fmt: str = "json",
        timeout_ms: int = 1000,
        max_bytes: int | None = None,
    ) -> tuple[int, Any]:
        q = f"?timeout={timeout_ms}" + (f"&max_bytes={max_bytes}" if max_bytes else "")
        st, _, out = self.c.call(
            "GET",
            self.inst(group, name) + "/records" + q,
            headers={"Accept": f"application/vnd.kafka.{fmt}.v2+json"},
        )
        return st, out

    def poll_until(
        self, group: str, name: str, n: int, fmt: str = "json", timeout_s: float = 30
    ) -> list[dict[str, Any]]:
        """Records until at least ``n`` arrived."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n:
            assert time.monotonic() < deadline, f"{len(out)} of {n} records: {out[-3:]}"
            st, recs = self.records(group, name, fmt, timeout_ms=1000)
            assert st == 200, recs
            out += recs
        return out

    def committed_member(
        self, group: str, name: str, topic: str, n: int, offsets: dict[int, int]
    ) -> None:
        """Member ``name`` of ``group`` (JSON, from the earliest offset, no auto-commit) on
        ``topic``, once it has read ``n`` records and committed ``offsets`` (partition ->
        offset) by hand."""
        assert (
            self.create(
                group,
                name,
                format="json",
                **{"auto.offset.reset": "earliest", "auto.commit.enable": False},
            )[0]
            == 200
        )
        assert self.call("POST", group, name, "/subscription", {"topics": [topic]})[0] == 204
        self.poll_until(group, name, n)
        assert (
            self.call(
                "POST",
                group,
                name,
                "/offsets",
                {
                    "offsets": [
                        {"topic": topic, "partition": p, "offset": o} for p, o in offsets.items()
                    ]
                },
            )[0]
            == 200
        )

    def assignment(self, group: str, name: str) -> set[tuple[str, int]]:
        st, body = self.call("GET", group, name, "/assignments")
        assert st == 200, body
        return {(p["topic"], p["partition"]) for p in body["partitions"]}


def produce(c: HttpCluster, topic: str, records: list[dict[str, Any]]) -> list[Any]:
    """v3 produce of several records in one body; every report must be a success."""
    st, _, reports = c.call("POST", f"{c.v3()}/topics/{topic}/records", records)
    assert st == 200, reports
    if isinstance(reports, dict):
        reports = [reports]
    assert all(r["error_code"] == 200 for r in reports), reports
    return reports


def group(c: HttpCluster, name: str, path: str = "", i: int = 0) -> tuple[int, Any]:
    st, _, body = c.call("GET", f"{c.v3(i)}/consumer-groups/{name}{path}")
    return st, body


def wait_group(c: HttpCluster, name: str, cond: Any, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        st, body = group(c, name)
        if st == 200 and cond(body):
            return body
        assert time.monotonic() < deadline, (st, body)
        time.sleep(0.2)
