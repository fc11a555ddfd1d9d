"""A real local cluster (3 controllers, 3 brokers) for the HTTP API tests, and a tiny client.

``HttpCluster.call(method, url, body=..., headers=...)`` returns ``(status, headers, body)``
with the body parsed by content type (JSON, NDJSON as a list, msgpack), never raising on an
HTTP error status, so tests assert on status and error body alike.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack

from api.node.localcluster import Brokers, Quorum, running_cluster


class HttpCluster:
    def __init__(self, quorum: Quorum, brokers: Brokers) -> None:
        self.quorum = quorum
        self.brokers = brokers
        self.urls = [brokers.url(b) for b in brokers.ids]
        self.cluster_id = str(
            self.call("GET", self.urls[0] + "/v3/clusters")[2]["data"][0]["cluster_id"]
        )

    def v3(self, i: int = 0) -> str:
        return f"{self.urls[i]}/v3/clusters/{self.cluster_id}"

    def call(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        chunks: list[bytes] | None = None,
        timeout_s: float = 40,
    ) -> tuple[int, dict[str, str], Any]:
        u = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout_s)
        hdrs = dict(headers or {})
        data: Any = raw
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        path = u.path + (f"?{u.query}" if u.query else "")
        try:
            if chunks is not None:
                hdrs["Transfer-Encoding"] = "chunked"
                conn.putrequest(method, path)
                for k, v in hdrs.items():
                    conn.putheader(k, v)
                conn.endheaders()
                for c in chunks:
                    conn.send(f"{len(c):x}\r\n".encode() + c + b"\r\n")
                conn.send(b"0\r\n\r\n")
            else:
                conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            payload = resp.read()
            rh = {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()
        ct = rh.get("content-type", "")
        parsed: Any = payload
        if "ndjson" in ct:
            parsed = [json.loads(line) for line in payload.splitlines() if line.strip()]
        elif "json" in ct and payload:
            parsed = json.loads(payload)
        elif "msgpack" in ct:
            parsed = msgpack.unpackb(payload, raw=False)
        return resp.status, rh, parsed

    def create_topic(
        self, name: str, partitions: int = 3, rf: int = 3, configs: dict[str, str] | None = None
    ) -> Any:
        st, _, body = self.call(
            "POST",
            f"{self.v3()}/topics",
            {
                "topic_name": name,
                "partitions_count": partitions,
                "replication_factor": rf,
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            },
        )
        assert st == 201, body
        # Every broker sees the topic with leaders before the test uses it.
        deadline = time.monotonic() + 20
        for i in range(len(self.urls)):
            while True:
                s, _, parts = self.call("GET", f"{self.v3(i)}/topics/{name}/partitions")
                if (
                    s == 200
                    and len(parts["data"]) == partitions
                    and all(p["leader_id"] >= 0 for p in parts["data"])
                ):
                    break
                assert time.monotonic() < deadline, (s, parts)
                time.sleep(0.05)
        return body

    def leader_index(self, topic: str, partition: int) -> int:
        _, _, p = self.call("GET", f"{self.v3()}/topics/{topic}/partitions/{partition}")
        return self.brokers.ids.index(p["leader_id"])

    def read_all(
        self,
        topic: str,
        partition: int,
        i: int = 0,
        fmt: str = "binary",
        key_fmt: str | None = None,
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        offset = 0
        while True:
            st, _, body = self.call(
                "GET",
                f"{self.v3(i)}/topics/{topic}/partitions/{partition}/records"
                f"?offset={offset}&timeout_ms=0&format={fmt}&key_format={key_fmt or fmt}",
            )
            assert st == 200, body
            if not body["records"]:
                return out
            out += body["records"]
            offset = body["next_offset"]


@contextmanager
def http_cluster(root: Path) -> Iterator[HttpCluster]:
    with running_cluster(root) as (q, brokers):
        yield HttpCluster(q, brokers)
