"""Userspace TCP proxies: delay (with jitter), blackhole and reset, per directed link.

netem is absent from these machines' kernels, so delays are made here. A *link* is a directed
pair (src, dst): the connections src opens to dst. A link's mode applies to both directions of
those connections:

* ``pass``       forward bytes as they come;
* ``delay``      hold each chunk ``delay_ms`` plus a uniform draw from ``[0, jitter_ms]``
                 before forwarding. Order within a connection is kept (a chunk never leaves
                 before the one read before it: TCP is a byte stream, and reordering inside it
                 would only corrupt it); different connections draw their own delays, so with
                 a jitter larger than the gaps between messages, requests sent on different
                 connections (aiohttp's pool, a Raft node's concurrent RPCs) arrive out of order;
* ``blackhole``  accept connections and read bytes, forward nothing (a cut network: the
                 sender's writes succeed, its reads time out);
* ``reset``      abort every open connection with RST (SO_LINGER 0) and reset new ones at once.

Two ways to put proxies on the path:

* `ProxyNet.add_link`: one listener per link; the source must dial the address it returns
  (the toy cluster's clients do; Longboat's go to the addresses brokers advertise). It is also
  the fallback for partitions where namespaces are unavailable (no root).
* `InterceptNet`: transparent, inside the run's network namespace. An nftables ``nat`` table
  (``ip longboat_jepsen_nat``) redirects every new TCP connection to a node's address and port
  to a listener of that node on another port (DNAT in the output hook, where locally made
  connections are translated); the listener learns the source from the peer address (DNAT
  leaves it alone), so one listener per node serves every link into it, and connects onward
  from that same source address, marked (``SO_MARK``) so the rule lets it through. Nodes,
  clients and their configs are unchanged, and partition rules still see the real source and
  destination on both legs. Connections opened before the table existed are not proxied, so
  it is installed before any node starts.

All proxies of a net run on one asyncio loop in a daemon thread (started from the thread that
entered the namespace, so its sockets live there); the control methods are synchronous and
thread-safe. Bounded: every task ends when the connection or the proxy closes; `close()`
stops the loop and joins the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import random
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
from jepsen_tests.nemesis.net import NetNamespace, grudge_for

T = TypeVar("T")
Link = tuple[str, str]
MODES = ("pass", "delay", "blackhole", "reset")
MARK = 0x4C42  # "LB": the interceptor's own onward connections, which DNAT must not catch
NAT_TABLE = "longboat_jepsen_nat"
UNKNOWN = "?"  # a source address no party has (a probe from 127.0.0.1)


@dataclass
class LinkState:
    mode: str = "pass"
    delay_ms: float = 0.0
    jitter_ms: float = 0.0


def chunk_due(now: float, last_due: float, state: LinkState, rng: random.Random) -> float:
    """When a chunk read at `now` may be forwarded: after its delay and jitter, and never
    before the chunk read before it on the same connection (`last_due`)."""
    if state.mode != "delay":
        return max(now, last_due)
    extra = rng.uniform(0.0, state.jitter_ms) if state.jitter_ms > 0 else 0.0
    return max(now + (state.delay_ms + extra) / 1000.0, last_due)


class _Conn:
    def __init__(self, down: asyncio.StreamWriter, up: asyncio.StreamWriter) -> None:
        self.down = down
        self.up = up

    def reset(self) -> None:
        for w in (self.down, self.up):
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            w.transport.abort()


async def _pipe(
    r: asyncio.StreamReader,
    w: asyncio.StreamWriter,
    state_of: Callable[[], LinkState],
    rng: random.Random,
    count: Callable[[int], None],
) -> None:
    """Copy r to w under the link's current state, read again for every chunk."""
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
            if state_of().mode == "blackhole":
                continue
            w.write(data)
            count(len(data))
            await w.drain()
        with contextlib.suppress(OSError):
            if w.can_write_eof():
                w.write_eof()

    wt = asyncio.ensure_future(writer())
    last_due = 0.0
    try:
        while True:
            data = await r.read(65536)
            st = state_of()
            if not data:
                break
            if st.mode == "blackhole":
                continue
            last_due = chunk_due(loop.time(), last_due, st, rng)
            q.put_nowait((last_due, data))
    finally:
        q.put_nowait((0.0, b""))
        with contextlib.suppress(Exception):
            await wt


async def _splice(
    down_r: asyncio.StreamReader,
    down_w: asyncio.StreamWriter,
    up_r: asyncio.StreamReader,
    up_w: asyncio.StreamWriter,
    state_of: Callable[[], LinkState],
    rng: random.Random,
    count: Callable[[int], None],
) -> None:
    try:
        await asyncio.gather(
            _pipe(down_r, up_w, state_of, rng, count),
            _pipe(up_r, down_w, state_of, rng, count),
            return_exceptions=True,
        )
    finally:
        for x in (down_w, up_w):
            x.close()


class LinkProxy:
    """One directed link's listener and its connections (lives on the ProxyNet loop)."""

    def __init__(
        self,
        link: Link,
        listen: tuple[str, int],
        upstream: tuple[str, int],
        bind_upstream: str | None,
    ) -> None:
        self.link = link
        self.listen = listen
        self.upstream = upstream
        self.bind_upstream = bind_upstream
        self.state = LinkState()
        self.conns: set[_Conn] = set()
        self.server: asyncio.Server | None = None
        self.bytes_forwarded = 0
        self.rng = random.Random(f"{link[0]}>{link[1]}")

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, *self.listen)
        self.listen = self.server.sockets[0].getsockname()[:2]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for c in list(self.conns):
            c.reset()
        self.conns.clear()

    def set_mode(self, mode: str, delay_ms: float = 0.0, jitter_ms: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        self.state = LinkState(mode, delay_ms, jitter_ms)
        if mode == "reset":
            for c in list(self.conns):
                c.reset()
            self.conns.clear()

    def _count(self, n: int) -> None:
        self.bytes_forwarded += n

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
            await _splice(r, w, ur, uw, lambda: self.state, self.rng, self._count)
        finally:
            self.conns.discard(conn)


class _ProxyLoop:
    """The background asyncio loop proxies run on, and the calls into it."""

    links: Mapping[Link, Any]

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxynet", daemon=True)
        self._thread.start()
        self._token: int | None = cleanup.register("tcp proxies", self.close)

    @property
    def closed(self) -> bool:
        """Closed (by `close`, or by `cleanup` on a signal): nothing is proxied any more."""
        return not self._thread.is_alive()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 15) -> T:
        if self.closed:  # the loop would never run it: fail now, not after the timeout
            coro.close()
            raise RuntimeError("the proxies are closed")
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    def _call_soon(self, fn: Callable[[], T]) -> T:
        async def wrap() -> T:
            return fn()

        return self._call(wrap())

    def set_mode(
        self, links: Iterable[Link], mode: str, delay_ms: float = 0.0, jitter_ms: float = 0.0
    ) -> None:
        raise NotImplementedError

    def links_touching(self, nodes: Iterable[str]) -> list[Link]:
        ns = set(nodes)
        return [link for link in self.links if link[0] in ns or link[1] in ns]

    async def _close_all(self) -> None:
        """Close listeners and connections (on the loop)."""

    async def _cancel_the_rest(self) -> None:
        """Cancel and await every task still on the loop (connections being copied), so
        that none is destroyed pending when the loop stops."""
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in rest:
            t.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._close_all(), timeout=5)
        with contextlib.suppress(Exception):
            self._call(self._cancel_the_rest(), timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if self._token is not None:
            cleanup.unregister(self._token)
            self._token = None


class ProxyNet(_ProxyLoop):
    """A set of directed-link proxies on one background loop.

    `add_link(src, dst, upstream)` returns the address src should dial to reach dst.
    """

    def __init__(self, listen_host: str = "127.0.0.1") -> None:
        self.listen_host = listen_host
        self.links: dict[Link, LinkProxy] = {}
        super().__init__()

    def add_link(
        self,
        src: str,
        dst: str,
        upstream: tuple[str, int],
        bind_upstream: str | None = None,
        listen_port: int = 0,
    ) -> tuple[str, int]:
        p = LinkProxy((src, dst), (self.listen_host, listen_port), upstream, bind_upstream)
        self._call(p.start())
        self.links[(src, dst)] = p
        host, port = p.listen
        return str(host), int(port)

    def address(self, src: str, dst: str) -> tuple[str, int]:
        host, port = self.links[(src, dst)].listen
        return str(host), int(port)

    def set_mode(
        self, links: Iterable[Link], mode: str, delay_ms: float = 0.0, jitter_ms: float = 0.0
    ) -> None:
        ls = [self.links[link] for link in links if link in self.links]
        if self.closed:  # healing after a signal closed them: nothing left to set
            return

        def apply() -> None:
            for p in ls:
                p.set_mode(mode, delay_ms, jitter_ms)

        self._call_soon(apply)

    async def _close_all(self) -> None:
        await asyncio.gather(*(p.close() for p in self.links.values()))


def nat_script(redirects: Mapping[tuple[str, int], int]) -> str:
    """One nft transaction: new TCP connections to (host, port) go to (host, listen port),
    unless made by the interceptor itself (marked)."""
    lines = [
        f"table ip {NAT_TABLE}",
        f"delete table ip {NAT_TABLE}",
        f"table ip {NAT_TABLE} {{",
        "  chain output {",
        "    type nat hook output priority -100; policy accept;",
    ]
    for (host, port), listen_port in sorted(redirects.items()):
        lines.append(
            f"    meta mark != {MARK:#x} ip daddr {host} tcp dport {port} "
            f"dnat to {host}:{listen_port}"
        )
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


class InterceptNet(_ProxyLoop):
    """Transparent proxies on every TCP connection to the nodes (module docstring).

    `nodes`: node name -> the (host, port) it listens on; `parties`: every name that can be
    the source of a link (nodes and clients) -> its address; `more_ports`: node name -> the
    other ports it listens on, on the same host (a secure broker's inter-broker listener),
    whose connections belong to the same links. Links are all (source, node) pairs; each
    starts in ``pass``.
    """

    def __init__(
        self,
        netns: NetNamespace,
        nodes: Mapping[str, tuple[str, int]],
        parties: Mapping[str, str],
        more_ports: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        self.netns = netns
        self.nodes = dict(nodes)
        self.targets = [
            (name, (host, p))
            for name, (host, port) in self.nodes.items()
            for p in (port, *(more_ports or {}).get(name, ()))
        ]
        self.by_address = {host: name for name, host in parties.items()}
        self.states: dict[Link, LinkState] = {
            (src, dst): LinkState() for src in parties for dst in nodes if src != dst
        }
        self.conns: dict[Link, set[_Conn]] = {}
        self.listeners: dict[tuple[str, int], asyncio.Server] = {}
        self.redirects: dict[tuple[str, int], int] = {}
        self.links = self.states
        self.bytes_forwarded = 0
        self._rngs = itertools.count()
        super().__init__()

    def start(self) -> None:
        """Listen for every node and install the redirects (before any node starts)."""

        async def listen_all() -> None:
            for name, (host, port) in self.targets:
                srv = await asyncio.start_server(
                    functools.partial(self._accept, name, (host, port)), host, 0
                )
                self.listeners[(host, port)] = srv
                self.redirects[(host, port)] = int(srv.sockets[0].getsockname()[1])

        self._call(listen_all())
        self.netns.run(["nft", "-f", "-"], input=nat_script(self.redirects))

    def set_mode(
        self, links: Iterable[Link], mode: str, delay_ms: float = 0.0, jitter_ms: float = 0.0
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        ls = [link for link in links if link in self.states]
        if self.closed:
            return

        def apply() -> None:
            for link in ls:
                self.states[link] = LinkState(mode, delay_ms, jitter_ms)
                if mode == "reset":
                    for c in list(self.conns.get(link, ())):
                        c.reset()
                    self.conns.pop(link, None)

        self._call_soon(apply)

    def _count(self, n: int) -> None:
        self.bytes_forwarded += n

    async def _accept(
        self,
        dst: str,
        address: tuple[str, int],
        r: asyncio.StreamReader,
        w: asyncio.StreamWriter,
    ) -> None:
        src_host = str(w.get_extra_info("peername")[0])
        link = (self.by_address.get(src_host, UNKNOWN), dst)

        def state() -> LinkState:
            return self.states.get(link) or LinkState()

        if state().mode == "reset":
            _Conn(w, w).reset()
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
            sock.setblocking(False)
            with contextlib.suppress(OSError):  # keep the real source on the second leg
                sock.bind((src_host, 0))
            async with asyncio.timeout(10):  # not wait_for: it can swallow a cancel on 3.11
                await asyncio.get_running_loop().sock_connect(sock, address)
            ur, uw = await asyncio.open_connection(sock=sock)
        except (OSError, TimeoutError):
            sock.close()
            _Conn(w, w).reset()
            return
        conn = _Conn(w, uw)
        self.conns.setdefault(link, set()).add(conn)
        rng = random.Random(f"{link[0]}>{link[1]}/{next(self._rngs)}")
        try:
            await _splice(r, w, ur, uw, state, rng, self._count)
        finally:
            self.conns.get(link, set()).discard(conn)

    async def _close_all(self) -> None:
        for srv in self.listeners.values():
            srv.close()
        for conns in self.conns.values():
            for c in list(conns):
                c.reset()
        self.conns.clear()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.netns.run(["nft", "delete", "table", "ip", NAT_TABLE])
        super().close()


class ProxyNemesis(Nemesis):
    """delay / reorder / blackhole on links touching the targets; partitions as blackholed
    links (the fallback without a namespace).

    ``delay``: ``params.delay_ms`` plus up to ``params.jitter_ms``; ``reorder``: the same
    with a jitter much larger than the delay, so messages on different connections overtake
    each other. ``params.nodes_only``: only links between nodes (not clients')."""

    kinds: tuple[str, ...] = (
        "delay",
        "reorder",
        "blackhole",
        "partition-majority",
        "partition-isolate",
        "partition-ring",
        "partition-cut",
    )

    def __init__(
        self,
        net: _ProxyLoop,
        parties: Sequence[str],
        recorder: Recorder | None = None,
        partitions: bool = False,
        nodes: Sequence[str] | None = None,
    ) -> None:
        super().__init__(recorder)
        self.net = net
        self.parties = list(parties)
        self.node_names = set(nodes if nodes is not None else parties)
        if not partitions:
            self.kinds = ("delay", "reorder", "blackhole")
        self._by_fault: dict[str, list[Link]] = {}

    def _links(self, fault: Fault) -> list[Link]:
        if fault.kind.startswith("partition-"):
            g = grudge_for(fault, self.parties)
            return [
                (src, dst)
                for dst, srcs in g.items()
                for src in srcs
                if (src, dst) in self.net.links
            ] + [
                (dst, src)
                for dst, srcs in g.items()
                for src in srcs
                if (dst, src) in self.net.links
            ]
        links = self.net.links_touching(fault.targets)
        if fault.params.get("nodes_only"):
            links = [(a, b) for a, b in links if a in self.node_names and b in self.node_names]
        return links

    def _start(self, fault: Fault) -> None:
        links = self._links(fault)
        self._by_fault[fault.id] = links
        if fault.kind in ("delay", "reorder"):
            self.net.set_mode(
                links,
                "delay",
                float(fault.params.get("delay_ms", 200)),
                float(fault.params.get("jitter_ms", 0)),
            )
        else:
            self.net.set_mode(links, "blackhole")

    def _stop(self, fault: Fault) -> None:
        self.net.set_mode(self._by_fault.pop(fault.id, []), "pass")

    def _heal(self) -> None:
        self.net.set_mode(list(self.net.links), "pass")


def proxy_mesh(
    net: ProxyNet,
    sources: Sequence[str],
    targets: Mapping[str, tuple[str, int]],
    bind: Mapping[str, str] | None = None,
) -> dict[Link, tuple[str, int]]:
    """A proxy for every (source, target) pair; returns where each source should dial."""
    out = {}
    for s in sources:
        for t, up in targets.items():
            if s != t:
                out[(s, t)] = net.add_link(s, t, up, (bind or {}).get(s))
    return out
