"""Real network namespace + nftables partitions between two TCP endpoints."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from jepsen_support import echo_argv, require_netns, round_trip, wait_listening

from jepsen_tests.history import Recorder
from jepsen_tests.nemesis import Fault
from jepsen_tests.nemesis.net import NetNamespace, NetNemesis, node_address
from jepsen_tests.nemesis.process import NodeProcess, wait_until


def test_partition_times_out_connects_and_stalls_open_connections_until_heal(
    tmp_path: Path,
) -> None:
    require_netns()
    ns = NetNamespace.create()
    a, b = node_address(1), node_address(2)
    procs = [
        NodeProcess(n, ns.wrap(echo_argv(h, 7000)), tmp_path / f"{n}.log")
        for n, h in (("a", a), ("b", b))
    ]
    rec = Recorder()
    try:
        for p in procs:
            p.start()
        nem = NetNemesis(ns, {"a": a, "b": b}, ["a", "b"], rec)
        with ns.inside():
            wait_listening(host=a, port=7000)
            wait_listening(host=b, port=7000)
            assert round_trip(a, (b, 7000)) == "ok"
            assert round_trip(b, (a, 7000)) == "ok"
            open_conn = socket.create_connection((b, 7000), timeout=0.5, source_address=(a, 0))

            fault = Fault("partition-isolate", ("a",), {"among": ["a", "b"]})
            nem.start(fault)
            assert "ip saddr 127.0.0.3 ip daddr 127.0.0.2 drop" in nem.rules()
            assert round_trip(a, (b, 7000)) == "timeout"  # dropped, not refused
            assert round_trip(b, (a, 7000)) == "timeout"
            open_conn.sendall(b"x\n")
            try:
                got = open_conn.recv(4)
            except TimeoutError:
                got = b"stalled"
            assert got == b"stalled"
            # a third address outside the grudge still reaches both
            assert round_trip(node_address(3), (b, 7000)) == "ok"

            nem.stop(fault)
            assert round_trip(a, (b, 7000)) == "ok"
            assert open_conn.recv(4) == b"x\n"  # the stalled bytes arrive after heal
            open_conn.close()

            nem.start(Fault("partition-cut", ("a",), {"node": "a", "cut_from": ["b"]}))
            assert round_trip(a, (b, 7000)) == "timeout"
            nem.heal_all()
            assert round_trip(a, (b, 7000)) == "ok"
            assert "longboat_jepsen" not in nem.rules()
        windows = rec.history().fault_windows()
        assert [w.kind for w in windows] == ["partition-isolate", "partition-cut"]
    finally:
        for p in procs:
            p.destroy()
        ns.destroy()
    assert not os.path.exists(f"/run/netns/{ns.name}")


def test_namespace_is_isolated_from_the_host_and_destroy_kills_what_runs_inside() -> None:
    require_netns()
    ns = NetNamespace.create()
    try:
        out = ns.run(["ip", "-o", "link"])
        assert "lo" in out and "UP" in out.split("lo", 1)[1].split("\n")[0].upper()
        assert len([line for line in out.splitlines() if line.strip()]) == 1  # only lo
        sleeper = subprocess.Popen(ns.wrap(["sleep", "60"]), start_new_session=True)
        # `ip netns exec` enters the namespace and then execs: give it a moment under load
        assert wait_until(lambda: sleeper.pid in ns.pids(), 5)
    finally:
        ns.destroy()
    assert sleeper.wait(timeout=5) != 0
