"""A node listening on 127.0.0.N opens its outgoing connections from 127.0.0.N.

Real ``longboat controller start`` / ``broker start`` processes on 127.0.0.2 and 127.0.0.3,
whose quorum names a "peer" that is a plain listening socket of this test on 127.0.0.5: the
socket records the source address of every connection it accepts. Without the binding the
kernel would pick 127.0.0.1, and the fault-injection suite's nftables rules could not tell
nodes apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest

from api.node.localcluster import stop_processes
from common import netbind

PEER_HOST = "127.0.0.5"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class SourceRecorder:
    """Accepts connections on (host, port) and records each one's source host."""

    def __init__(self, host: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.sources: list[str] = []
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                c, (src, _) = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.sources.append(src)
            c.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=2)
        self.sock.close()


def _wait_sources(rec: SourceRecorder, timeout_s: float, log: Path) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not rec.sources:
        time.sleep(0.1)
    assert rec.sources, f"no connection reached the fake peer; log:\n{log.read_text()[-2000:]}"
    return list(rec.sources)


@pytest.mark.parametrize("role,host", [("controller", "127.0.0.2"), ("broker", "127.0.0.3")])
def test_node_on_its_own_loopback_address_connects_from_it(
    tmp_path: Path, role: str, host: str
) -> None:
    rec = SourceRecorder(PEER_HOST)
    port = _free_port(host)
    if role == "controller":
        # node 1 is us; node 2 is the recorder, to which the controller sends (pre)votes
        quorum = f"1@{host}:{port},2@{PEER_HOST}:{rec.port}"
        node_id = "1"
    else:
        # the broker registers with / fetches metadata from the "controller" at the recorder
        quorum = f"1@{PEER_HOST}:{rec.port}"
        node_id = "101"
    log = tmp_path / "node.log"
    procs: dict[int, subprocess.Popen[bytes]] = {}
    with open(log, "ab") as out:
        procs[0] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "api",
                role,
                "start",
                "--node-id",
                node_id,
                "--listen",
                f"{host}:{port}",
                "--data-dir",
                str(tmp_path / "data"),
                "--controller-quorum",
                quorum,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        sources = _wait_sources(rec, 30, log)
    finally:
        stop_processes(procs)
        rec.close()
    assert set(sources) == {host}, sources


def test_bindable_only_specific_loopback_addresses_other_than_127_0_0_1() -> None:
    assert netbind.bindable("127.0.0.2") == "127.0.0.2"
    assert netbind.bindable("127.1.2.3") == "127.1.2.3"
    for h in ("127.0.0.1", "0.0.0.0", "localhost", "10.0.0.5", "::1", "", None):
        assert netbind.bindable(h) is None, h


def test_connector_binds_the_process_host_or_an_explicit_one() -> None:
    rec = SourceRecorder(PEER_HOST)
    url = f"http://{PEER_HOST}:{rec.port}/"

    async def source_of(connector: aiohttp.TCPConnector | None) -> str:
        n = len(rec.sources)
        async with aiohttp.ClientSession(connector=connector) as s:
            with contextlib.suppress(aiohttp.ClientError):
                await s.get(url)  # the recorder closes at once: only the source matters
        for _ in range(50):
            if len(rec.sources) > n:
                return rec.sources[n]
            await asyncio.sleep(0.02)
        raise AssertionError("no connection recorded")

    async def go() -> None:
        netbind.set_source_host("127.0.0.1")
        assert netbind.connector() is None  # aiohttp's default connector, as before
        assert await source_of(netbind.connector(limit_per_host=2)) == "127.0.0.1"
        netbind.set_source_host("127.0.0.7")
        assert netbind.local_addr() == ("127.0.0.7", 0)
        assert await source_of(netbind.connector()) == "127.0.0.7"
        assert await source_of(netbind.connector("127.0.0.101")) == "127.0.0.101"

    try:
        asyncio.run(go())
    finally:
        netbind.set_source_host(None)
        rec.close()
