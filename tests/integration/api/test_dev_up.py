"""``longboat dev up`` as a user runs it: real processes, the cluster file, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from api.node.localcluster import free_ports


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not alive for our purpose: check its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _free_run(n: int) -> int:
    import socket

    for _ in range(50):
        base = free_ports(1)[0]
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no run of {n} free ports")


def test_dev_up_starts_a_cluster_writes_the_cluster_file_and_ctrl_c_stops_it(
    tmp_path: Path,
) -> None:
    # dev up takes consecutive ports from each base: search for two free runs.
    c_port, b_port, k_port = _free_run(3), _free_run(2), _free_run(2)
    data = tmp_path / "dev"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "api",
            "dev",
            "up",
            "--controllers",
            "3",
            "--brokers",
            "2",
            "--data-dir",
            str(data),
            "--controller-port",
            str(c_port),
            "--broker-port",
            str(b_port),
            "--kafka-port",
            str(k_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    cluster_file = data / "cluster.json"
    try:
        deadline = time.monotonic() + 90
        while not cluster_file.exists():
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "dev up never wrote cluster.json"
            time.sleep(0.2)
        desc = json.loads(cluster_file.read_text())
        assert [b["url"] for b in desc["brokers"]] == [
            f"http://127.0.0.1:{b_port}",
            f"http://127.0.0.1:{b_port + 1}",
        ]
        assert len(desc["controllers"]) == 3 and desc["cluster_id"]
        # Each broker serves Kafka's protocol too, and Metadata names both listeners.
        assert [b["kafka"] for b in desc["brokers"]] == [
            f"127.0.0.1:{k_port}",
            f"127.0.0.1:{k_port + 1}",
        ]
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{k_port}"}).list_topics(timeout=10)
        assert sorted(b.port for b in md.brokers.values()) == [k_port, k_port + 1]
        for b in desc["brokers"]:
            with urllib.request.urlopen(b["url"] + "/v3/health/ready", timeout=5) as r:
                assert json.loads(r.read())["ready"] is True
            # The HTTP API names the cluster as the cluster file does.
            with urllib.request.urlopen(b["url"] + "/v3/clusters", timeout=5) as r:
                assert [c["cluster_id"] for c in json.loads(r.read())["data"]] == [
                    desc["cluster_id"]
                ]
        # Other commands find the cluster through the cluster file.
        out = subprocess.run(
            [sys.executable, "-m", "api", "quorum", "status", "--json"],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "LONGBOAT_CLUSTER_FILE": str(cluster_file)},
        )
        assert out.returncode == 0, out.stderr
        assert sorted(json.loads(out.stdout)["voters"]) == [1, 2, 3]
        pids = [p["pid"] for p in desc["brokers"] + desc["controllers"]]
        assert all(_alive(p) for p in pids)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    assert "stopped." in output, output
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], "dev up left processes behind"


def test_dev_up_refuses_busy_ports(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "api",
                "dev",
                "up",
                "--data-dir",
                str(tmp_path / "d"),
                "--controller-port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert out.returncode == 1
    assert str(port) in out.stderr and "in use" in out.stderr
