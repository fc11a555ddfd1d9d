"""The userspace TCP proxy: pass, delay, blackhole and reset on a real echo server."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from jepsen_support import echo_argv, wait_listening

from jepsen_tests.history import Recorder
from jepsen_tests.nemesis import Fault
from jepsen_tests.nemesis.process import NodeProcess
from jepsen_tests.nemesis.proxy import ProxyNemesis, ProxyNet
from jepsen_tests.toy.cluster import free_port


def _rtt(addr: tuple[str, int], timeout_s: float = 1.0) -> float | str:
    try:
        s = socket.create_connection(addr, timeout=timeout_s)
    except ConnectionResetError:
        return "reset"
    try:
        t = time.monotonic()
        s.sendall(b"hello\n")
        data = b""
        while len(data) < 6:
            chunk = s.recv(16)
            if not chunk:
                return "closed"
            data += chunk
        return time.monotonic() - t
    except TimeoutError:
        return "timeout"
    except ConnectionResetError:
        return "reset"
    finally:
        s.close()


def test_proxy_delays_blackholes_and_resets(tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    echo = NodeProcess("echo", echo_argv("127.0.0.1", port), tmp_path / "echo.log")
    net = ProxyNet()
    rec = Recorder()
    try:
        echo.start()
        wait_listening(host="127.0.0.1", port=port)
        addr = net.add_link("client", "echo", ("127.0.0.1", port))
        nem = ProxyNemesis(net, ["client", "echo"], rec)

        fast = _rtt(addr)
        assert isinstance(fast, float) and fast < 0.2

        delay = Fault("delay", ("echo",), {"delay_ms": 150})
        nem.start(delay)
        slow = _rtt(addr)
        # one hop each way through the same link: at least 2 x 150 ms
        assert isinstance(slow, float) and 0.29 < slow < 1.0, slow
        nem.stop(delay)
        fast_again = _rtt(addr)
        assert isinstance(fast_again, float) and fast_again < 0.2

        bh = Fault("blackhole", ("echo",))
        nem.start(bh)
        assert _rtt(addr, timeout_s=0.5) == "timeout"  # accepted, but nothing comes back
        nem.stop(bh)
        assert isinstance(_rtt(addr), float)

        s = socket.create_connection(addr, timeout=1)
        s.sendall(b"a\n")
        assert s.recv(4) == b"a\n"
        net.set_mode([("client", "echo")], "reset")
        try:
            s.sendall(b"b\n")
            got = s.recv(4)
        except (ConnectionResetError, BrokenPipeError):
            got = b"reset"
        assert got in (b"reset", b"")  # the open connection was torn down
        s.close()
        assert _rtt(addr) in ("reset", "closed")  # new connections die at once
        nem.heal_all()
        assert isinstance(_rtt(addr), float)
        assert [w.kind for w in rec.history().fault_windows()] == ["delay", "blackhole"]
    finally:
        net.close()
        echo.destroy()
