"""Reading one offset range of one partition as Arrow record batches (runs in Spark's workers).

Everything it needs travels in a ``RangeTask`` (pickled into Spark's input partition); the
HTTP connections are opened here, inside ``read()``, because reader objects are pickled and a
socket does not pickle.

Two ways to fetch, chosen per task:

* ``arrow`` (when the planner found the HTTP API's ``/v3/clusters``): ``GET
  /v3/clusters/{cid}/topics/{t}/partitions/{p}/records`` with ``Accept:
  application/vnd.apache.arrow.stream``. The broker builds the Arrow IPC stream from the batch
  bodies (``api.client.arrow``); the worker only reads it (no per-record Python work here at all).
* ``batches``: the raw batches from the brokers' data route (``POST
  /binary/v1/fetch``, the one the Python client uses) converted here by
  ``api.client.arrow.records_to_arrow``. The fallback when the v3 API is not served, and a way to move
  the decoding from the brokers to Spark's workers (option ``fetchFormat``).

Both go over ``https://`` with the job's truststore and client certificate when the brokers'
URLs are https, and carry its credentials (``spark.security``); a 401 or 403 fails the task
at once with Kafka's error name (``LongboatAuthError``), as no other broker would answer
differently.

Either way only offsets below the high watermark come back (the broker's fetch never returns
more), and the range stops at its end offset.
"""

from __future__ import annotations

import http.client
import logging
import ssl
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import orjson
import pyarrow as pa

from spark.options import SecurityOptions
from spark.planning import DataLossError, check_start
from spark.security import auth_error, auth_headers, connect

log = logging.getLogger("spark.longboat")

ARROW_STREAM = "application/vnd.apache.arrow.stream"
FETCH_WAIT_MS = 500
# Errors after which another broker (or the same one a moment later) may answer.
_RETRIABLE = {
    "NOT_LEADER_OR_FOLLOWER",
    "LEADER_NOT_AVAILABLE",
    "FENCED_LEADER_EPOCH",
    "UNKNOWN_LEADER_EPOCH",
    "NOT_ENOUGH_REPLICAS",
    "REQUEST_TIMED_OUT",
    "NETWORK_EXCEPTION",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "KAFKA_STORAGE_ERROR",
    "BROKER_NOT_AVAILABLE",
    "OFFSET_NOT_AVAILABLE",
}


@dataclass(frozen=True)
class RangeTask:
    topic: str
    partition: int
    start: int
    end: int
    """Exclusive; at most the high watermark when planned."""
    urls: tuple[str, ...]
    """The partition's leader first, then the other brokers."""
    cluster_id: str | None
    """None: fetch raw batches and convert here."""
    include_headers: bool
    fetch_max_bytes: int
    fail_on_data_loss: bool
    poll_timeout_ms: int
    isolation_level: str = "read_uncommitted"
    """read_committed: fetches stop at the last stable offset, aborted records left out."""
    security: SecurityOptions = field(default_factory=SecurityOptions)


class FetchError(RuntimeError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


@dataclass
class _Fetched:
    batches: list[pa.RecordBatch]
    next_offset: int
    high_watermark: int


class _Connections:
    def __init__(self, timeout_s: float, security: SecurityOptions = SecurityOptions()) -> None:
        self.timeout_s = timeout_s
        self.security = security
        self._auth = auth_headers(security)
        self._conns: dict[str, http.client.HTTPConnection] = {}

    def request(
        self, url: str, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        for attempt in (0, 1):
            conn = self._conns.get(url)
            if conn is None:
                conn = connect(url, self.security, self.timeout_s)
                self._conns[url] = conn
            try:
                conn.request(method, path, body=body, headers={**headers, **self._auth})
                resp = conn.getresponse()
                data = resp.read()
                if resp.status in (401, 403):
                    err = _json_error(data) or {}
                    raise auth_error(resp.status, str(err.get("message") or ""), url)
                return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
            except ssl.SSLError as e:
                # A certificate the job does not trust (or that the broker refuses) is no
                # network blip: say so rather than retry.
                conn.close()
                del self._conns[url]
                raise FetchError("SSL_HANDSHAKE_FAILED", f"{method} {url}{path}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                del self._conns[url]
                # A kept-alive connection the server closed meanwhile: retry once at once.
                if attempt:
                    raise FetchError("NETWORK_EXCEPTION", f"{method} {url}{path}: {e}") from e
        raise AssertionError("unreachable")

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()


class RangeReader:
    def __init__(self, task: RangeTask) -> None:
        self.task = task
        self.conns = _Connections(timeout_s=30 + FETCH_WAIT_MS / 1000, security=task.security)
        self.url_index = 0
        self.use_arrow = task.cluster_id is not None

    @property
    def url(self) -> str:
        return self.task.urls[self.url_index % len(self.task.urls)]

    def read(self) -> Iterator[pa.RecordBatch]:
        t = self.task
        offset = t.start
        deadline = time.monotonic() + t.poll_timeout_ms / 1000
        attempt = 0
        try:
            while offset < t.end:
                try:
                    got = self._fetch(offset)
                except FetchError as e:
                    if e.code == "OFFSET_OUT_OF_RANGE":
                        offset = self._after_out_of_range(offset)
                        continue
                    if e.code not in _RETRIABLE or time.monotonic() > deadline:
                        raise
                    attempt += 1
                    self.url_index += 1
                    time.sleep(min(0.05 * attempt, 1.0))
                    continue
                attempt = 0
                for b in got.batches:
                    if b.num_rows:
                        yield b
                if got.next_offset > offset:
                    offset = got.next_offset
                    deadline = time.monotonic() + t.poll_timeout_ms / 1000
                elif time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{t.topic}-{t.partition}: nothing at offset {offset} within "
                        f"{t.poll_timeout_ms} ms (high watermark {got.high_watermark}, range "
                        f"ends at {t.end}); raise kafkaConsumer.pollTimeoutMs to wait longer"
                    )
        finally:
            self.conns.close()

    def _after_out_of_range(self, offset: int) -> int:
        t = self.task
        log_start = self._list_offset(-2)
        if offset >= log_start:
            raise DataLossError(
                f"{t.topic}-{t.partition}: offset {offset} is past the partition's end "
                f"(high watermark {self._list_offset(-1)}); its log was truncated"
            )
        return min(
            t.end,
            check_start(
                t.topic,
                t.partition,
                offset,
                log_start,
                fail_on_data_loss=t.fail_on_data_loss,
                warn=log.warning,
            ),
        )

    def _fetch(self, offset: int) -> _Fetched:
        if self.use_arrow:
            got = self._fetch_arrow(offset)
            if got is not None:
                return got
            self.use_arrow = False  # the broker serves no Arrow read route: convert here
        return self._fetch_batches(offset)

    def _fetch_arrow(self, offset: int) -> _Fetched | None:
        t = self.task
        q = urllib.parse.urlencode(
            {
                "offset": offset,
                "max_bytes": t.fetch_max_bytes,
                "timeout_ms": FETCH_WAIT_MS,
                "max_offset": t.end,
                "include_headers": "true" if t.include_headers else "false",
                "isolation_level": t.isolation_level,
            }
        )
        path = (
            f"/v3/clusters/{urllib.parse.quote(str(t.cluster_id), safe='')}/topics/"
            f"{urllib.parse.quote(t.topic, safe='')}/partitions/{t.partition}/records?{q}"
        )
        status, headers, body = self.conns.request(
            self.url, "GET", path, None, {"Accept": ARROW_STREAM}
        )
        if status != 200:
            err = _json_error(body)
            if status == 404 and err is None:
                return None
            code, message = _kafka_code(status, err)
            raise FetchError(code, message)
        if not headers.get("content-type", "").startswith(ARROW_STREAM):
            return None  # an older broker answered JSON: it cannot build Arrow
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        batches = list(reader)
        nxt = int(headers.get("x-longboat-next-offset", offset))
        return _Fetched(
            batches,
            min(nxt, t.end) if nxt > offset else nxt,
            int(headers.get("x-longboat-high-watermark", -1)),
        )

    def _fetch_batches(self, offset: int) -> _Fetched:
        from api.client.arrow import records_to_arrow

        t = self.task
        ans = self._call(
            "fetch",
            {
                "topic": t.topic,
                "partition": t.partition,
                "replica_id": -1,
                "fetch_offset": offset,
                "max_bytes": t.fetch_max_bytes,
                "max_wait_ms": FETCH_WAIT_MS,
                "min_bytes": 1,
                "isolation_level": t.isolation_level,
            },
        )
        got = records_to_arrow(
            ans.get("records") or b"",
            topic=t.topic,
            partition=t.partition,
            include_headers=t.include_headers,
            min_offset=offset,
            max_offset=t.end,
        )
        return _Fetched([got.batch], got.next_offset, int(ans.get("high_watermark", -1)))

    def _list_offset(self, timestamp: int) -> int:
        t = self.task
        ans = self._call(
            "list_offsets",
            {
                "topic": t.topic,
                "partition": t.partition,
                "timestamp": timestamp,
                "isolation_level": t.isolation_level,
            },
        )
        return int(ans["offset"])

    def _call(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        status, _, data = self.conns.request(
            self.url,
            "POST",
            f"/binary/v1/{route}",
            msgpack.packb(body, use_bin_type=True),
            {"Content-Type": "application/msgpack"},
        )
        if status != 200:
            raise FetchError("UNKNOWN_SERVER_ERROR", f"{self.url} answered HTTP {status}")
        ans = msgpack.unpackb(data, raw=False)
        if not isinstance(ans, dict):
            raise FetchError("UNKNOWN_SERVER_ERROR", f"{self.url}: answer is not a map")
        if ans.get("error"):
            raise FetchError(str(ans["error"]), str(ans.get("message") or ""))
        return ans


def _json_error(body: bytes) -> dict[str, Any] | None:
    try:
        err = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return err if isinstance(err, dict) and "error_code" in err else None


def _kafka_code(status: int, err: dict[str, Any] | None) -> tuple[str, str]:
    """The Kafka error name behind an HTTP API error (kafka-rest's Errors.java codes)."""
    message = str((err or {}).get("message") or f"HTTP {status}")
    code = int((err or {}).get("error_code") or status)
    for name in _RETRIABLE | {"OFFSET_OUT_OF_RANGE"}:
        if name in message:
            return name, message
    if status == 416:
        return "OFFSET_OUT_OF_RANGE", message
    if code in (40403, 40404, 50003, 50302) or status in (421, 502, 503, 504):
        return "NOT_LEADER_OR_FOLLOWER", message
    return "UNKNOWN_SERVER_ERROR", message


def read_range(task: RangeTask) -> Iterator[pa.RecordBatch]:
    """Every record of ``task``'s range, in offset order, as Arrow record batches."""
    return RangeReader(task).read()
