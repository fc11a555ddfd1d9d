"""Shared helpers for the fault-injection integration tests.

Tests that need root, ``ip`` and ``nft`` (or libfaketime) call `require_netns()` /
`require_faketime()`, which fail the test with the reason: a missing capability must show up
red, never as a quiet skip. ``scripts/setup-jepsen.sh`` installs the tools.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from api.client import AsyncConsumer, AsyncProducer, TopicPartition
from jepsen_tests.longboat import LongboatCluster
from jepsen_tests.nemesis.clock import faketime_unavailable_reason
from jepsen_tests.nemesis.net import netns_unavailable_reason

# A line-echo server: python ECHO HOST PORT
ECHO = """
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)
print("listening", flush=True)
def serve(c):
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                return
            c.sendall(d)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def require_netns() -> None:
    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.fail(f"cannot test network faults on this machine: {reason}")


def require_faketime() -> None:
    reason = faketime_unavailable_reason()
    if reason is not None:
        pytest.fail(f"cannot test clock faults on this machine: {reason}")


def echo_argv(host: str, port: int) -> list[str]:
    return [sys.executable, "-c", ECHO, host, str(port)]


def wait_listening(
    proc: subprocess.Popen[bytes] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    timeout_s: float = 5.0,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listening on {host}:{port} after {timeout_s}s")


def round_trip(src: str, dst: tuple[str, int], timeout_s: float = 0.5) -> str:
    """'ok', 'timeout' or 'refused': one connect + echo from address src to dst."""
    s = socket.socket()
    s.settimeout(timeout_s)
    try:
        s.bind((src, 0))
        s.connect(dst)
        s.sendall(b"ping\n")
        return "ok" if s.recv(16) == b"ping\n" else "bad"
    except TimeoutError:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    finally:
        s.close()


def produce_to_partition0(c: LongboatCluster, values: range) -> None:
    """acks=all writes of ``values`` (as decimal text) to partition 0, all acknowledged."""

    async def go() -> None:
        async with AsyncProducer(c.broker_urls(), acks=-1, linger_ms=2) as p:
            futs = [await p.send(c.topic, str(v).encode(), partition=0) for v in values]
            for f in futs:
                await f

    asyncio.run(go())


def read_partition0(c: LongboatCluster, timeout_s: float = 30) -> set[int]:
    """Every value in partition 0, from offset 0 to its end offset now."""

    async def go() -> set[int]:
        tp = TopicPartition(c.topic, 0)
        async with AsyncConsumer(c.broker_urls(), auto_offset_reset="earliest") as k:
            k.assign([tp])
            k.seek(tp, 0)
            end = (await k.end_offsets([tp]))[tp]
            out: list[int] = []
            deadline = time.monotonic() + timeout_s
            while len(out) < end and time.monotonic() < deadline:
                out += [int(r.value) for r in await k.poll(1000) if r.value is not None]
            return set(out)

    return asyncio.run(go())


def no_leftover_nodes(out: Path) -> None:
    """No node process of the run in `out` (their argv names its config dir) still runs."""
    marker = str(out / "config")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        assert marker not in cmd, f"node process left running: {pid} {cmd}"
