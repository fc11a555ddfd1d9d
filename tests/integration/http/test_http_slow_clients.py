"""Slow and idle HTTP clients on a real broker process: a connection that never finishes its
request headers (a slowloris trickling one byte at a time) or sits idle between requests is
closed after ``http_keepalive_timeout_ms``; a request in progress is not cut by it (a
long-poll read that outlasts the timeout still answers). One controller, one broker, ~15 s."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from api.node.localcluster import running_cluster

pytestmark = pytest.mark.slow

KEEPALIVE_S = 1.5


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    root: Path = tmp_path_factory.mktemp("slow-clients")
    args = ["--override", f"http_keepalive_timeout_ms={int(KEEPALIVE_S * 1000)}"]
    with running_cluster(root, 1, 1, broker_args=args) as (_q, b):
        u = urlsplit(b.url(b.ids[0]))
        assert u.hostname is not None and u.port is not None
        yield u.hostname, u.port


def _closed_within(s: socket.socket, seconds: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closed ``s`` (recv returns b'' or the send fails), sending one
    byte of ``trickle`` every 0.2 s meanwhile; None if still open after ``seconds``."""
    t0 = time.monotonic()
    s.settimeout(0.2)
    i = 0
    while time.monotonic() - t0 < seconds:
        try:
            if s.recv(65536) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            pass
        except OSError:
            return time.monotonic() - t0
        if i < len(trickle):
            try:
                s.send(trickle[i : i + 1])
            except OSError:
                return time.monotonic() - t0
            i += 1
    return None


def test_a_request_whose_headers_trickle_in_is_cut_off(broker: tuple[str, int]) -> None:
    host, port = broker
    # Far more header bytes than the timeout lets through at 5 bytes a second.
    trickle = b"GET /v3/health HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 200
    with socket.create_connection((host, port)) as s:
        took = _closed_within(s, 10.0, trickle)
    assert took is not None, "the server kept a trickling connection open for 10 s"
    assert KEEPALIVE_S - 0.3 <= took <= KEEPALIVE_S + 3, took


def test_a_connection_that_never_sends_is_closed(broker: tuple[str, int]) -> None:
    host, port = broker
    with socket.create_connection((host, port)) as s:
        took = _closed_within(s, 10.0)
    assert took is not None and took <= KEEPALIVE_S + 3, took


def test_idle_keepalive_closes_but_a_long_request_is_not_cut(broker: tuple[str, int]) -> None:
    host, port = broker
    # One connection: find the cluster id, create a topic, then a long poll at the end of
    # its empty partition lasting twice the keep-alive timeout.
    with socket.create_connection((host, port)) as s:
        s.settimeout(10)
        s.sendall(b"GET /v3/clusters HTTP/1.1\r\nHost: x\r\n\r\n")
        body = _read_response(s)
        cid = body.split(b'"cluster_id":"', 1)[1].split(b'"', 1)[0].decode()
        topic_req = b'{"topic_name": "slowc", "partitions_count": 1, "replication_factor": 1}'
        s.sendall(
            f"POST /v3/clusters/{cid}/topics HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(topic_req)}\r\n\r\n".encode()
            + topic_req
        )
        assert b"slowc" in _read_response(s)
        t0 = time.monotonic()
        wait_ms = int(KEEPALIVE_S * 2000)
        s.sendall(
            f"GET /v3/clusters/{cid}/topics/slowc/partitions/0/records?offset=0"
            f"&timeout_ms={wait_ms} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        head = _read_response(s)
        took = time.monotonic() - t0
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        assert took >= KEEPALIVE_S * 2 - 0.2, took
        # Then idle: closed about one timeout later.
        idle = _closed_within(s, 10.0)
    assert idle is not None and idle <= KEEPALIVE_S + 3, idle


def _read_response(s: socket.socket) -> bytes:
    """One whole response (Content-Length or chunked), as bytes."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, buf
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lower = head.lower()
    if b"content-length:" in lower:
        n = int(lower.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        while len(rest) < n:
            chunk = s.recv(65536)
            assert chunk
            rest += chunk
        return head + b"\r\n\r\n" + rest
    while not rest.endswith(b"0\r\n\r\n"):
        chunk = s.recv(65536)
        assert chunk
        rest += chunk
    return head + b"\r\n\r\n" + rest
