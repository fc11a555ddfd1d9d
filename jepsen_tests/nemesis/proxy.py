"""A userspace TCP proxy per directed link: delay, blackhole, reset.

netem is absent from these machines' kernels, so delays are made here; the same proxies
are the fallback for partitions where namespaces are unavailable (no root). A *link* is a
directed pair (src, dst): src connects to the link's listen address instead of dst's, and the
proxy forwards to dst. The link's mode applies to both directions of the connections src opens:

* ``pass``       forward bytes as they come;
* ``delay``      hold each chunk ``delay_ms`` before forwarding (order preserved);
* ``blackhole``  accept connections and read bytes, forward nothing (a cut network: the
                 sender's writes succeed, its reads time out);
* ``reset``      abort every open connection with RST (SO_LINGER 0) and reset new ones at once.

All proxies of a `ProxyNet` run on one asyncio loop in a daemon thread; the control methods
are synchronous and thread-safe. Bounded: every task ends when the connection or the proxy
closes; `close()` stops the loop and joins the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from jepsen_tests import cleanup
from jepsen_tests.history import Recorder
from jepsen_tests.nemesis import Fault, Nemesis
from jepsen_tests.nemesis.net import grudge_for

T = TypeVar("T")
Link = tuple[str, str]
MODES = ("pass", "delay", "blackhole", "reset")


@dataclass
class LinkState:
    mode: str = "pass"
    delay_ms: float = 0.0


class _Conn:
    def __init__(self, down: asyncio.StreamWriter, up: asyncio.StreamWriter) -> None:
        self.down = down
        self.up = up

    def reset(self) -> None:
        for w in (self.down, self.up):
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
            w.transport.abort()


class LinkProxy:
    """One directed link's listener and its connections (lives on the ProxyNet loop)."""

    def __init__(self, link: Link, listen: tuple[str, int], upstream: tuple[str, int],
                 bind_upstream: str | None) -> None:
        self.link = link
        self.listen = listen
        self.upstream = upstream
        self.bind_upstream = bind_upstream
        self.state = LinkState()
        self.conns: set[_Conn] = set()
        self.server: asyncio.Server | None = None
        self.bytes_forwarded = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, *self.listen)
        self.listen = self.server.sockets[0].getsockname()[:2]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for c in list(self.conns):
            c.reset()
        self.conns.clear()

    def set_mode(self, mode: str, delay_ms: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        self.state = LinkState(mode, delay_ms)
        if mode == "reset":
            for c in list(self.conns):
                c.reset()
            self.conns.clear()

    async def _accept(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if self.state.mode == "reset":
            _Conn(w, w).reset()
            return
        try:
            local = (self.bind_upstream, 0) if self.bind_upstream else None
            async with asyncio.timeout(10):  # not wait_for: it can swallow a cancel on 3.11
                ur, uw = await asyncio.open_connection(*self.upstream, local_addr=local)
        except (OSError, TimeoutError):
            _Conn(w, w).reset()
            return
        conn = _Conn(w, uw)
        self.conns.add(conn)
        try:
            await asyncio.gather(self._pipe(r, uw), self._pipe(ur, w), return_exceptions=True)
        finally:
            self.conns.discard(conn)
            for x in (w, uw):
                x.close()

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        q: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def writer() -> None:
            while True:
                due, data = await q.get()
                if not data:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if self.state.mode == "blackhole":
                    continue
                w.write(data)
                self.bytes_forwarded += len(data)
                await w.drain()
            with contextlib.suppress(OSError):
                if w.can_write_eof():
                    w.write_eof()

        wt = asyncio.ensure_future(writer())
        try:
            while True:
                data = await r.read(65536)
                st = self.state
                if not data:
                    break
                if st.mode == "blackhole":
                    continue
                delay = st.delay_ms / 1000 if st.mode == "delay" else 0.0
                q.put_nowait((loop.time() + delay, data))
        finally:
            q.put_nowait((0.0, b""))
            with contextlib.suppress(Exception):
                await wt


class ProxyNet:
    """A set of directed-link proxies on one background loop.

    `add_link(src, dst, upstream)` returns the address src should dial to reach dst.
    """

    def __init__(self, listen_host: str = "127.0.0.1") -> None:
        self.listen_host = listen_host
        self.links: dict[Link, LinkProxy] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxynet",
                                        daemon=True)
        self._thread.start()
        self._token: int | None = cleanup.register("tcp proxies", self.close)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 15) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    def _call_soon(self, fn: Callable[[], T]) -> T:
        async def wrap() -> T:
            return fn()
        return self._call(wrap())

    def add_link(self, src: str, dst: str, upstream: tuple[str, int],
                 bind_upstream: str | None = None, listen_port: int = 0) -> tuple[str, int]:
        p = LinkProxy((src, dst), (self.listen_host, listen_port), upstream, bind_upstream)
        self._call(p.start())
        self.links[(src, dst)] = p
        host, port = p.listen
        return str(host), int(port)

    def address(self, src: str, dst: str) -> tuple[str, int]:
        host, port = self.links[(src, dst)].listen
        return str(host), int(port)

    def set_mode(self, links: Iterable[Link], mode: str, delay_ms: float = 0.0) -> None:
        ls = [self.links[link] for link in links if link in self.links]

        def apply() -> None:
            for p in ls:
                p.set_mode(mode, delay_ms)

        self._call_soon(apply)

    def links_touching(self, nodes: Iterable[str]) -> list[Link]:
        ns = set(nodes)
        return [link for link in self.links if link[0] in ns or link[1] in ns]

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        async def close_all() -> None:
            await asyncio.gather(*(p.close() for p in self.links.values()))

        with contextlib.suppress(Exception):
            self._call(close_all(), timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if self._token is not None:
            cleanup.unregister(self._token)
            self._token = None


class ProxyNemesis(Nemesis):
    """delay / blackhole on links touching the targets; partitions as blackholed links."""

    kinds: tuple[str, ...] = ("delay", "blackhole", "partition-majority", "partition-isolate",
             "partition-ring", "partition-cut")

    def __init__(self, net: ProxyNet, nodes: Sequence[str], recorder: Recorder | None = None,
                 partitions: bool = False) -> None:
        super().__init__(recorder)
        self.net = net
        self.nodes = list(nodes)
        if not partitions:
            self.kinds = ("delay", "blackhole")
        self._by_fault: dict[str, list[Link]] = {}

    def _links(self, fault: Fault) -> list[Link]:
        if fault.kind.startswith("partition-"):
            g = grudge_for(fault, self.nodes)
            return [(src, dst) for dst, srcs in g.items() for src in srcs
                    if (src, dst) in self.net.links] + \
                   [(dst, src) for dst, srcs in g.items() for src in srcs
                    if (dst, src) in self.net.links]
        return self.net.links_touching(fault.targets)

    def _start(self, fault: Fault) -> None:
        links = self._links(fault)
        self._by_fault[fault.id] = links
        if fault.kind == "delay":
            self.net.set_mode(links, "delay", float(fault.params.get("delay_ms", 200)))
        else:
            self.net.set_mode(links, "blackhole")

    def _stop(self, fault: Fault) -> None:
        self.net.set_mode(self._by_fault.pop(fault.id, []), "pass")

    def _heal(self) -> None:
        self.net.set_mode(list(self.net.links), "pass")


def proxy_mesh(net: ProxyNet, sources: Sequence[str], targets: Mapping[str, tuple[str, int]],
               bind: Mapping[str, str] | None = None) -> dict[Link, tuple[str, int]]:
    """A proxy for every (source, target) pair; returns where each source should dial."""
    out = {}
    for s in sources:
        for t, up in targets.items():
            if s != t:
                out[(s, t)] = net.add_link(s, t, up, (bind or {}).get(s))
    return out
