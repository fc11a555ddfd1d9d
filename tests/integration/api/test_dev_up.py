"""``longboat dev up`` as a user runs it: real processes, the cluster file, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
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


def _dev_up(data: Path, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    """``dev up`` with ``args``, its output collected line by line by a thread (so a test
    can wait for a message while the cluster runs)."""
    import threading

    proc = subprocess.Popen(
        [sys.executable, "-m", "api", "dev", "up", "--data-dir", str(data), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def _json(url: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def _wait(what: str, cond: object, timeout_s: float, lines: list[str]) -> object:
    from api.node.localcluster import wait_for

    return wait_for(what, cond, timeout_s, context=lambda: "".join(lines[-40:]))  # type: ignore[arg-type]


def test_dev_up_keeps_running_when_a_broker_dies_and_dev_restart_brings_it_back(
    tmp_path: Path,
) -> None:
    c_port, b_port = _free_run(1), _free_run(3)
    data = tmp_path / "dev"
    proc, lines = _dev_up(
        data,
        "--controllers",
        "1",
        "--brokers",
        "3",
        "--controller-port",
        str(c_port),
        "--broker-port",
        str(b_port),
        "--kafka-port",
        "0",
    )
    cluster_file = data / "cluster.json"
    env = {**os.environ, "LONGBOAT_CLUSTER_FILE": str(cluster_file)}
    pids: list[int] = []
    try:
        _wait("dev up is up", lambda: "Ctrl-C stops the cluster" in "".join(lines), 90, lines)
        desc = json.loads(cluster_file.read_text())
        pids = [n["pid"] for n in desc["brokers"] + desc["controllers"]]
        urls = {b["id"]: b["url"] for b in desc["brokers"]}
        topics = f"{urls[101]}/v3/clusters/{desc['cluster_id']}/topics"
        _json(topics, {"topic_name": "t", "partitions_count": 1, "replication_factor": 3})
        victim = next(b for b in desc["brokers"] if b["id"] == 102)
        os.kill(victim["pid"], signal.SIGKILL)

        # dev up says which node died and how, and keeps the others.
        out = _wait("the death report", lambda: "broker-102 exited" in "".join(lines), 30, lines)
        text = "".join(lines)
        assert out and "killed by SIGKILL" in text and "the other 3 node(s) keep running" in text
        assert "longboat dev restart broker-102" in text
        assert proc.poll() is None, text
        assert all(_alive(p) for p in pids if p != victim["pid"])
        assert json.loads(cluster_file.read_text())["brokers"][1]["pid"] is None

        # The others serve: a record is acknowledged (once leadership left 102, if it had it).
        def produced() -> bool:
            try:
                _json(f"{topics}/t/records", {"value": {"type": "STRING", "data": "after"}})
            except urllib.error.HTTPError:
                return False
            return True

        _wait("a produce without broker 102", produced, 60, lines)

        # Another terminal brings it back; it serves and rejoins the ISR.
        r = subprocess.run(
            [sys.executable, "-m", "api", "dev", "restart", "102"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert r.returncode == 0, r.stdout + r.stderr + "".join(lines)
        assert "broker-102 restarted" in r.stdout and "serving at" in r.stdout
        new_pid = json.loads(cluster_file.read_text())["brokers"][1]["pid"]
        assert new_pid and new_pid != victim["pid"] and _alive(new_pid)
        pids.append(new_pid)

        def back_in_isr() -> bool:
            part = _json(f"{topics}/t/partitions/0")
            return 102 in part["isr"]  # type: ignore[index]

        _wait("broker 102 back in the ISR", back_in_isr, 60, lines)

        # Bad requests are refused with a message and change nothing.
        bad = subprocess.run(
            [sys.executable, "-m", "api", "dev", "restart", "broker-999"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert bad.returncode == 1 and "no node broker-999" in bad.stderr, bad.stderr
        assert _alive(new_pid)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    time.sleep(0.2)
    assert "stopped." in "".join(lines), "".join(lines)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], "dev up left processes behind"
    # The controller's metadata log, decoded, holds the topic and both of 102's registrations.
    meta_log = data / "controller-1" / "data" / "__cluster_metadata-0" / "log"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "api",
            "log",
            "dump",
            "--cluster-metadata-decoder",
            "--json",
            str(meta_log),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    decoded = [
        rec["decoded"]
        for line in r.stdout.splitlines()
        for rec in json.loads(line).get("records", [])
    ]
    recs = [x for d in decoded if isinstance(d, list) for x in d]
    assert {"name": "t"}.items() <= next(x for x in recs if x["type"] == "TopicRecord")[
        "data"
    ].items()
    assert [x["data"]["broker_id"] for x in recs if x["type"] == "RegisterBrokerRecord"].count(
        102
    ) >= 2
    # With dev up gone, dev restart says so.
    r = subprocess.run(
        [sys.executable, "-m", "api", "dev", "restart", "101", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "no `longboat dev up` is running" in r.stderr, r.stderr
