"""Real Longboat processes on 127.0.0.1: start, kill, restart and query them.

Used by the integration tests, the benchmarks and (later) ``longboat dev up``. Each process
runs ``python -m api ...`` in its own session (so a signal reaches exactly it), logs to a
file under its data directory, and is found again by node id.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Quorum:
    """N controller processes; ``start(i)``, ``kill(i)``, ``status(i)``, ``metadata(i)``."""

    def __init__(self, root: Path, n: int = 3, extra_args: list[str] | None = None) -> None:
        self.root = root
        self.extra_args = extra_args or []
        self.n = n
        self.ports = free_ports(n)
        self.quorum = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.ports))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i - 1]}"

    @property
    def urls(self) -> list[str]:
        return [self.url(i) for i in range(1, self.n + 1)]

    def start(self, i: int) -> None:
        d = self.root / f"controller-{i}"
        d.mkdir(parents=True, exist_ok=True)
        log = open(d / "controller.log", "ab")  # noqa: SIM115 (owned by the process)
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", "api", "controller", "start", "--node-id", str(i),
             "--listen", f"127.0.0.1:{self.ports[i - 1]}", "--data-dir", str(d / "data"),
             "--controller-quorum", self.quorum, *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def start_all(self) -> None:
        for i in range(1, self.n + 1):
            self.start(i)

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        p = self.procs.pop(i)
        p.send_signal(sig)
        p.wait(timeout=10)

    def stop_all(self) -> None:
        for i in list(self.procs):
            p = self.procs.pop(i)
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def get(self, i: int, path: str) -> Any:
        with urllib.request.urlopen(self.url(i) + path, timeout=2) as r:
            return json.loads(r.read())

    def status(self, i: int) -> Any:
        return self.get(i, "/v3/quorum/status")

    def metadata(self, i: int) -> Any:
        return self.get(i, "/v3/quorum/metadata")

    def wait_active_leader(self, timeout_s: float = 20.0, exclude: int | None = None) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in self.procs:
                if i == exclude:
                    continue
                try:
                    st = self.status(i)
                except OSError:
                    continue
                if st["role"] == "leader" and st["active_controller"]:
                    return i
            time.sleep(0.1)
        raise TimeoutError(f"no active controller within {timeout_s} s")

    def log_tail(self, i: int, lines: int = 30) -> str:
        p = self.root / f"controller-{i}" / "controller.log"
        return "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) if p.exists() else ""
