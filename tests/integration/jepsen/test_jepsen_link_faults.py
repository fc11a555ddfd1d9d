"""One-way partitions and the intercepting proxy, in a real namespace with nftables."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from jepsen_support import echo_argv, require_netns, round_trip, wait_listening

from jepsen_tests.history import Recorder
from jepsen_tests.nemesis import Fault
from jepsen_tests.nemesis.net import NetNamespace, NetNemesis, client_address, node_address
from jepsen_tests.nemesis.process import NodeProcess
from jepsen_tests.nemesis.proxy import InterceptNet, ProxyNemesis


def _recv(s: socket.socket, n: int = 16) -> bytes | str:
    try:
        return s.recv(n)
    except TimeoutError:
        return "stalled"


def test_one_way_partition_drops_one_direction_of_an_open_connection(tmp_path: Path) -> None:
    require_netns()
    ns = NetNamespace.create()
    a, b = node_address(1), node_address(2)
    try:
        nem = NetNemesis(ns, {"a": a, "b": b}, ["a", "b"], Recorder())
        with ns.inside():
            srv = socket.socket()
            srv.bind((a, 7100))
            srv.listen()
            from_b = socket.create_connection((a, 7100), timeout=0.5, source_address=(b, 0))
            at_a, _ = srv.accept()
            at_a.settimeout(0.5)

            # a stops hearing b; b still hears a
            fault = Fault("partition-oneway", ("a",), {"shape": "deaf", "among": ["a", "b"]})
            nem.start(fault)
            from_b.sendall(b"b->a")
            assert _recv(at_a) == "stalled"
            at_a.sendall(b"a->b")
            assert _recv(from_b) == b"a->b"
            # a handshake needs both directions: no new connection either way
            assert round_trip(b, (a, 7100), timeout_s=0.3) == "timeout"

            nem.stop(fault)
            assert _recv(at_a) == b"b->a"  # retransmitted once the drop is gone
            for s in (from_b, at_a, srv):
                s.close()
    finally:
        ns.destroy()


def test_intercepted_links_delay_blackhole_and_keep_partitions(tmp_path: Path) -> None:
    require_netns()
    ns = NetNamespace.create()
    node, client = node_address(1), client_address(1)
    echo = NodeProcess("n1", ns.wrap(echo_argv(node, 7200)), tmp_path / "echo.log")
    # A second port of the same node (a secure broker's inter-broker listener).
    echo2 = NodeProcess("n1b", ns.wrap(echo_argv(node, 7201)), tmp_path / "echo2.log")
    net: InterceptNet | None = None
    try:
        echo.start()
        echo2.start()
        with ns.inside():
            wait_listening(host=node, port=7200)
            wait_listening(host=node, port=7201)
            net = InterceptNet(
                ns, {"n1": (node, 7200)}, {"n1": node, "c1": client}, {"n1": (7201,)}
            )
            net.start()
            assert "dnat to" in ns.run(["nft", "list", "table", "ip", "longboat_jepsen_nat"])
            nem = ProxyNemesis(net, ["n1", "c1"], Recorder(), nodes=["n1"])

            def rtt(port: int = 7200) -> float:
                t = time.monotonic()
                assert round_trip(client, (node, port), timeout_s=2) == "ok"
                return time.monotonic() - t

            assert rtt() < 0.2
            forwarded = net.bytes_forwarded
            assert forwarded > 0  # the client dialled the node's own port: intercepted
            delay = Fault("delay", ("n1",), {"delay_ms": 150, "jitter_ms": 0})
            nem.start(delay)
            assert 0.29 < rtt() < 1.5  # one hop each way
            assert 0.29 < rtt(7201) < 1.5  # the node's other port is on the same link
            nem.stop(delay)
            assert rtt() < 0.2 and rtt(7201) < 0.2
            # links between nodes only: the client's link is left alone
            nodes_only = Fault("delay", ("n1",), {"delay_ms": 300, "nodes_only": True})
            nem.start(nodes_only)
            assert rtt() < 0.2
            nem.stop(nodes_only)

            bh = Fault("blackhole", ("c1",))
            nem.start(bh)
            assert round_trip(client, (node, 7200), timeout_s=0.5) == "timeout"
            nem.heal_all()
            assert rtt() < 0.2

            # partition rules see the real addresses through the proxy
            part = NetNemesis(ns, {"n1": node, "c1": client}, ["n1"], Recorder())
            cut = Fault("partition-isolate", ("n1",), {"among": ["n1", "c1"]})
            part.start(cut)
            assert round_trip(client, (node, 7200), timeout_s=0.5) == "timeout"
            part.stop(cut)
            assert rtt() < 0.2
    finally:
        if net is not None:
            net.close()
        echo.destroy()
        echo2.destroy()
        ns.destroy()
