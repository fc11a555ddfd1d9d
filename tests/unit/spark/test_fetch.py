"""spark.fetch.RangeReader against a fake broker on 127.0.0.1 (a real socket, a thread).

The fake serves the three routes a Spark task uses (the v3 Arrow read, the raw fetch, and
list_offsets) from an in-memory log whose start can be moved, as retention would, and can
refuse requests as a broker that lost leadership does. What no real cluster can do yet
(brokers do not delete records) is pinned here: data loss fails the task or is skipped.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgpack
import orjson
import pyarrow as pa
import pytest

from api.client.arrow import arrow_response_headers, records_to_arrow_ipc
from spark.fetch import RangeReader, RangeTask
from spark.planning import DataLossError
from storage.batch import encode_batch, iter_batches, stamp


@dataclass
class FakeLog:
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base offset, batch)
    log_start: int = 0
    high_watermark: int = 0
    refuse: int = 0  # answer the next N requests NOT_LEADER_OR_FOLLOWER
    arrow_route: bool = True
    requests: list[str] = field(default_factory=list)

    def append(self, n: int, per_batch: int = 10) -> None:
        for base in range(self.high_watermark, self.high_watermark + n, per_batch):
            recs = [
                (None, f"v{o}".encode(), 1000 + o, [])
                for o in range(base, min(base + per_batch, self.high_watermark + n))
            ]
            b = bytearray(encode_batch(recs))
            stamp(b, base, 0)
            self.batches.append((base, bytes(b)))
        self.high_watermark += n

    def fetch(self, offset: int, max_bytes: int) -> bytes | str:
        if offset < self.log_start or offset > self.high_watermark:
            return "OFFSET_OUT_OF_RANGE"
        out = b""
        for base, b in self.batches:
            if base + 10 <= offset or base < self.log_start - 9:
                continue
            if out and len(out) + len(b) > max_bytes:
                break
            out += b
        return out


def _handler(log: FakeLog) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = msgpack.unpackb(self.rfile.read(int(self.headers["Content-Length"])))
            log.requests.append(self.path)
            if log.refuse:
                log.refuse -= 1
                ans: dict[str, Any] = {"error": "NOT_LEADER_OR_FOLLOWER", "message": "moved"}
            elif self.path.endswith("/list_offsets"):
                ts = body["timestamp"]
                ans = {"offset": log.log_start if ts == -2 else log.high_watermark}
            else:
                got = log.fetch(body["fetch_offset"], body["max_bytes"])
                ans = (
                    {"error": got}
                    if isinstance(got, str)
                    else {
                        "records": got,
                        "high_watermark": log.high_watermark,
                        "log_start_offset": log.log_start,
                    }
                )
            self._send(
                200, msgpack.packb(ans, use_bin_type=True), {"Content-Type": "application/msgpack"}
            )

        def do_GET(self) -> None:
            log.requests.append(self.path)
            u = urllib.parse.urlsplit(self.path)
            if not log.arrow_route:
                self._send(404, b"404: Not Found", {"Content-Type": "text/plain"})
                return
            if log.refuse:
                log.refuse -= 1
                self._send(
                    503,
                    orjson.dumps({"error_code": 50302, "message": "NOT_LEADER_OR_FOLLOWER: moved"}),
                    {},
                )
                return
            q = dict(urllib.parse.parse_qsl(u.query))
            offset = int(q["offset"])
            got = log.fetch(offset, int(q["max_bytes"]))
            if isinstance(got, str):
                self._send(
                    416,
                    orjson.dumps({"error_code": 416, "message": f"{got}: gone"}),
                    {"Content-Type": "application/json"},
                )
                return
            body = records_to_arrow_ipc(
                got,
                topic="t",
                partition=0,
                include_headers=q["include_headers"] == "true",
                min_offset=offset,
                max_offset=int(q["max_offset"]),
            )
            nxt = max([offset] + [h.next_offset for _, h in iter_batches(got)])
            self._send(
                200,
                body,
                arrow_response_headers(
                    next_offset=nxt,
                    high_watermark=log.high_watermark,
                    log_start_offset=log.log_start,
                ),
            )

    return H


@pytest.fixture
def broker() -> Iterator[tuple[FakeLog, str]]:
    log = FakeLog()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(log))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield log, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _task(url: str, start: int, end: int, **kw: Any) -> RangeTask:
    base = RangeTask(
        topic="t",
        partition=0,
        start=start,
        end=end,
        urls=(url,),
        cluster_id="c",
        include_headers=False,
        fetch_max_bytes=1500,
        fail_on_data_loss=True,
        poll_timeout_ms=2000,
    )
    return replace(base, **kw)


def _offsets(task: RangeTask) -> list[int]:
    r = RangeReader(task)
    batches = list(r.read())
    return [o for b in batches for o in b.column("offset").to_pylist()]


@pytest.mark.parametrize("cluster_id", ["c", None])
def test_a_range_is_read_whole_in_order_across_many_fetches(broker, cluster_id) -> None:
    log, url = broker
    log.append(200)
    got = _offsets(_task(url, 13, 187, cluster_id=cluster_id, fetch_max_bytes=300))
    assert got == list(range(13, 187))
    assert len(log.requests) > 5, "fetchMaxBytes should have forced several requests"


def test_without_the_arrow_route_the_worker_converts(broker) -> None:
    log, url = broker
    log.append(50)
    log.arrow_route = False
    r = RangeReader(_task(url, 0, 50))
    assert pa.Table.from_batches(list(r.read())).num_rows == 50
    assert not r.use_arrow
    assert any(p.endswith("/fetch") for p in log.requests)


@pytest.mark.parametrize("cluster_id", ["c", None])
def test_deleted_records_fail_the_task_or_are_skipped(broker, cluster_id) -> None:
    log, url = broker
    log.append(100)
    log.log_start = 40
    with pytest.raises(DataLossError, match=r"offsets 10 to 39 were deleted.*failOnDataLoss"):
        _offsets(_task(url, 10, 100, cluster_id=cluster_id))
    got = _offsets(_task(url, 10, 100, cluster_id=cluster_id, fail_on_data_loss=False))
    assert got == list(range(40, 100))
    # A whole range that is gone reads nothing (and does not spin).
    assert _offsets(_task(url, 0, 30, cluster_id=cluster_id, fail_on_data_loss=False)) == []


@pytest.mark.parametrize("cluster_id", ["c", None])
def test_a_broker_that_lost_leadership_is_retried_on_the_next_url(broker, cluster_id) -> None:
    log, url = broker
    log.append(30)
    log.refuse = 2
    assert _offsets(_task(url, 0, 30, cluster_id=cluster_id, urls=(url, url))) == list(range(30))


def test_a_range_past_the_high_watermark_times_out_with_a_clear_error(broker) -> None:
    log, url = broker
    log.append(20)
    with pytest.raises(TimeoutError, match=r"nothing at offset 20 within 300 ms.*pollTimeoutMs"):
        _offsets(_task(url, 0, 25, cluster_id=None, poll_timeout_ms=300))
