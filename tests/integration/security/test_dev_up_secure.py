"""``longboat dev up --secure`` as a user runs it: TLS and credentials everywhere, the CA
and admin certificate in the cluster file (the CLI uses them: topics, ``quorum status``,
``quorum remove-voter``/``add-voter``, ``dev restart`` of a controller),
Ctrl-C stops it."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from api.node.localcluster import free_ports

pytestmark = pytest.mark.slow


def _status(url: str, ctx: ssl.SSLContext, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers or {}), timeout=5, context=ctx
        ) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _cli(env: dict[str, str], *args: str, timeout_s: float = 90) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "api", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert r.returncode == 0, f"longboat {' '.join(args)}:\n{r.stdout}{r.stderr}"
    return r.stdout


def _voters(said: str) -> list[int]:
    """The voters `quorum add-voter|remove-voter` print: ``voters: [1, 2]  observers: []``."""
    return sorted(json.loads(said.split("voters:", 1)[1].split("observers:")[0]))


def _ports_free(base: int, n: int) -> bool:
    from common.netbind import port_free

    return all(port_free("127.0.0.1", base + i) for i in range(n))


def test_dev_up_secure(tmp_path: Path) -> None:
    # dev up numbers controller ports up from --controller-port: two in a row.
    b_port, k_port, c_port = free_ports(3)
    while not _ports_free(c_port, 2) or {b_port, k_port} & {c_port, c_port + 1}:
        c_port = free_ports(1)[0]
    data = tmp_path / "dev"
    cmd = [sys.executable, "-m", "api", "dev", "up", "--secure", "--controllers", "2"]
    cmd += ["--brokers", "1", "--data-dir", str(data), "--controller-port", str(c_port)]
    cmd += ["--broker-port", str(b_port), "--kafka-port", str(k_port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            out.append(line)
            if "Ctrl-C stops the cluster" in line or not line:
                break
        text = "".join(out)
        assert "Longboat is up" in text, text
        assert f"B=https://127.0.0.1:{b_port}" in text and "--cacert" in text, text
        desc = json.loads((data / "cluster.json").read_text())
        tls = desc["tls"]
        b = desc["brokers"][0]["url"]
        admin = ssl.create_default_context(cafile=tls["ssl_cafile"])
        admin.load_cert_chain(tls["ssl_certfile"], tls["ssl_keyfile"])
        anon = ssl.create_default_context(cafile=tls["ssl_cafile"])
        assert _status(f"{b}/v3/clusters", admin) == 200
        assert _status(f"{b}/v3/clusters", anon) == 401
        token = (data / "tls" / "admin.jwt").read_text().strip()
        assert _status(f"{b}/v3/clusters", anon, {"Authorization": f"Bearer {token}"}) == 200
        assert _status(f"https://127.0.0.1:{c_port}/v3/quorum/status", admin) == 200
        # The CLI finds the CA and the admin certificate through the cluster file.
        env = {"LONGBOAT_CLUSTER_FILE": str(data / "cluster.json")}
        _cli(env, "topics", "create", "t1", "--partitions", "1")
        status = json.loads(_cli(env, "quorum", "status", "--json"))
        assert sorted(status["voters"]) == [1, 2], status
        # A voter out and back in, over the controllers' TLS listeners (node routes: the
        # admin certificate is a super user). The leader is never the one removed here.
        gone = next(i for i in (1, 2) if i != status["leader_id"])
        said = _cli(env, "quorum", "remove-voter", "--node-id", str(gone))
        assert _voters(said) == sorted({1, 2} - {gone}), said
        url = f"https://127.0.0.1:{c_port + gone - 1}"
        said = _cli(env, "quorum", "add-voter", "--node-id", str(gone), "--url", url)
        assert _voters(said) == [1, 2], said
        # dev restart waits for the node to serve, over TLS with the admin certificate (a
        # controller's status wants both; a broker's readiness only the CA).
        said = _cli(env, "dev", "restart", f"controller-{gone}")
        assert "stopped and restarted" in said and "serving at https://" in said, said
        # The Kafka listener is SASL_SSL; the admin's SCRAM password is made at start.
        assert "security.protocol=SASL_SSL" in text, text
        ck = pytest.importorskip("confluent_kafka.admin")
        md = ck.AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{k_port}",
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "admin",
                "sasl.password": (data / "tls" / "admin.password").read_text().strip(),
                "ssl.ca.location": tls["ssl_cafile"],
            }
        ).list_topics(timeout=20)
        assert "t1" in md.topics
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
