"""Network partitions: a network namespace per run, nftables rules between loopback addresses.

Platform (Debian 12 VMs): netns and nftables are built in; netem is not (delays go through
`proxy.py`). A run creates one named namespace, ``ip netns add lbjt-<pid>-<n>``, brings its
``lo`` up, and runs every node and every client inside it. Node i binds its own address
``127.0.0.(i+1)`` (all of 127/8 is local on ``lo``, so no address needs adding; 127.0.0.1 is
left to tools that do not bind); clients use ``127.0.0.100+``. **Nodes must also bind their outgoing connections to their own address**
(aiohttp: ``TCPConnector(local_addr=(host, 0))``), or the kernel picks 127.0.0.1 as the
source and the rules below cannot tell who is talking.

A partition is a *grudge*: for each node, the set of nodes it does not hear from. It becomes
one nftables table, ``inet longboat_jepsen``, whose input chain drops packets from the
grudged source address to the holder's address. Dropped, not refused: connects time out and
open connections stall, as on a real cut network. Every change rewrites the table in one
``nft -f`` transaction; heal deletes it. Deleting the namespace deletes everything in it.

Commands run through ``ip netns exec NAME`` so they land in the namespace whatever thread
calls them; the harness's own client sockets are opened from a thread that entered the
namespace (`NetNamespace.enter`, setns(2) on the calling thread only).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import random
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence

from jepsen_tests import cleanup
from jepsen_tests.history import Recorder
from jepsen_tests.nemesis import Fault, FaultInjectionUnavailable, Nemesis

Grudge = dict[str, set[str]]  # node -> the nodes whose packets it drops
TABLE = "longboat_jepsen"
CLONE_NEWNET = 0x40000000
_counter = itertools.count()


def node_address(i: int) -> str:
    """The loopback address of node i (1-based)."""
    if not 1 <= i <= 99:
        raise ValueError("node index must be 1..99; 127.0.0.100+ are for clients")
    return f"127.0.0.{i + 1}"  # 127.0.0.1 is left to tools that do not bind


def client_address(i: int) -> str:
    if not 0 <= i <= 150:
        raise ValueError("client index must be 0..150")
    return f"127.0.0.{100 + i}"


def _run(argv: Sequence[str], input: str | None = None) -> str:
    r = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def netns_unavailable_reason() -> str | None:
    """Why this machine cannot create namespaces and nft rules, or None if it can."""
    if os.geteuid() != 0:
        return f"network namespaces and nftables need root (running as uid {os.geteuid()})"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed: run scripts/setup-jepsen.sh"
    return None


class NetNamespace:
    """A named network namespace owned by this process, with loopback up."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._token: int | None = None
        self._saved: list[int] = []

    @staticmethod
    def create(prefix: str = "lbjt") -> NetNamespace:
        reason = netns_unavailable_reason()
        if reason is not None:
            raise FaultInjectionUnavailable(reason)
        sweep_stale(prefix)
        ns = NetNamespace(f"{prefix}-{os.getpid()}-{next(_counter)}")
        _run(["ip", "netns", "add", ns.name])
        ns._token = cleanup.register(f"netns {ns.name}", ns.destroy)
        _run(["ip", "-n", ns.name, "link", "set", "lo", "up"])
        return ns

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """argv run inside the namespace (`ip netns exec` execs it: same pid)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: Sequence[str], input: str | None = None) -> str:
        return _run(self.wrap(argv), input)

    def pids(self) -> list[int]:
        out = _run(["ip", "netns", "pids", self.name])
        return [int(x) for x in out.split()]

    def enter(self) -> None:
        """Move the calling thread (only) into the namespace; `leave` moves it back."""
        libc = ctypes.CDLL(None, use_errno=True)
        self._saved.append(os.open("/proc/thread-self/ns/net", os.O_RDONLY))
        fd = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {self.name}")
        finally:
            os.close(fd)

    def leave(self) -> None:
        if not self._saved:
            return  # already out (cleanup got here first)
        libc = ctypes.CDLL(None, use_errno=True)
        fd = self._saved.pop()
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def inside(self) -> Iterator[NetNamespace]:
        self.enter()
        try:
            yield self
        finally:
            self.leave()

    def destroy(self) -> None:
        """Kill whatever still runs inside, then delete the namespace."""
        while self._saved:  # a thread of ours is inside (cleanup on a signal): come out
            with contextlib.suppress(OSError):
                self.leave()
        if not os.path.exists(f"/run/netns/{self.name}"):
            return
        with contextlib.suppress(Exception):
            for pid in self.pids():
                if pid == os.getpid():
                    continue  # a thread of this process is inside; never kill ourselves
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=20)
        if self._token is not None:
            cleanup.unregister(self._token)
            self._token = None


def sweep_stale(prefix: str = "lbjt") -> list[str]:
    """Delete namespaces left by runs whose process is gone (e.g. a SIGKILLed harness)."""
    removed: list[str] = []
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return removed
    for name in names:
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != prefix or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        if pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            NetNamespace(name).destroy()
            removed.append(name)
    return removed


# ---- grudges (pure) -----------------------------------------------------------------------


def split(parts: Sequence[set[str] | Sequence[str]]) -> Grudge:
    """Complete partition between the components: nobody hears anyone in another part."""
    sets = [set(p) for p in parts]
    g: Grudge = {}
    for i, p in enumerate(sets):
        others = set().union(*(q for j, q in enumerate(sets) if j != i))
        for n in p:
            g[n] = set(others)
    return g


def majority_minority(nodes: Sequence[str], rng: random.Random) -> tuple[list[str], list[str]]:
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    k = len(shuffled) // 2 + 1
    return sorted(shuffled[:k]), sorted(shuffled[k:])


def isolate(node: str, nodes: Sequence[str]) -> Grudge:
    return split([{node}, set(nodes) - {node}])


def ring(nodes: Sequence[str]) -> Grudge:
    """Each node hears only its two neighbours in the given order."""
    n = len(nodes)
    g: Grudge = {}
    for i, a in enumerate(nodes):
        keep = {nodes[(i - 1) % n], nodes[(i + 1) % n], a}
        g[a] = set(nodes) - keep
    return g


def cut(node: str, cut_from: Sequence[str]) -> Grudge:
    """`node` and each of `cut_from` stop hearing each other; everyone else is untouched."""
    g: Grudge = {node: set(cut_from)}
    for o in cut_from:
        g.setdefault(o, set()).add(node)
    return g


def one_way(deaf: Sequence[str], unheard: Sequence[str]) -> Grudge:
    """Every node of `deaf` stops hearing every node of `unheard`; not the reverse.

    On the wire: packets from `unheard` to `deaf` are dropped, packets the other way pass. A
    TCP handshake needs both ways, so no new connection between the two sides opens in either
    direction; on connections already open, bytes from `deaf` still reach `unheard` (whose
    acknowledgements are lost, so the sender retransmits until it gives up), and nothing
    `unheard` sends arrives: requests `unheard` makes on such connections are delivered and
    their answers never come back.
    """
    g: Grudge = {}
    for d in deaf:
        others = set(unheard) - {d}
        if others:
            g[d] = others
    return g


ONE_WAY_SHAPES = ("deaf", "mute", "split")
"""``deaf``: one node hears nobody, everybody hears it; ``mute``: nobody hears one node, it
hears everybody; ``split``: one half of the nodes does not hear the other half, the other
half hears them."""


def one_way_shape(shape: str, node: str, among: Sequence[str], half: Sequence[str] = ()) -> Grudge:
    """The grudge of a one-way partition of `shape` (`ONE_WAY_SHAPES`): around `node` for
    ``deaf`` and ``mute``, `half` not hearing the rest of `among` for ``split``."""
    others = [n for n in among if n != node]
    if shape == "deaf":
        return one_way([node], others)
    if shape == "mute":
        return one_way(others, [node])
    if shape == "split":
        return one_way(list(half), [n for n in among if n not in half])
    raise ValueError(f"unknown one-way shape {shape!r}; known: {ONE_WAY_SHAPES}")


def merge(grudges: Sequence[Grudge]) -> Grudge:
    out: Grudge = {}
    for g in grudges:
        for k, v in g.items():
            out.setdefault(k, set()).update(v)
    return out


def nft_script(grudge: Grudge, addresses: Mapping[str, str]) -> str:
    """One atomic nft transaction that replaces the table with the grudge's drop rules."""
    lines = [
        f"table inet {TABLE}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        "  chain input {",
        "    type filter hook input priority 0; policy accept;",
    ]
    for dst in sorted(grudge):
        for src in sorted(grudge[dst]):
            lines.append(f"    ip saddr {addresses[src]} ip daddr {addresses[dst]} drop")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def grudge_for(fault: Fault, nodes: Sequence[str]) -> Grudge:
    """The grudge a partition fault stands for; its params were fixed when it was drawn."""
    p = fault.params
    if fault.kind == "partition-majority":
        return split([p["majority"], p["minority"]])
    if fault.kind == "partition-isolate":
        return isolate(fault.targets[0], p.get("among") or nodes)
    if fault.kind == "partition-ring":
        return ring(p.get("order") or list(nodes))
    if fault.kind == "partition-cut":
        return cut(p["node"], p["cut_from"])
    if fault.kind == "partition-oneway":
        among = p.get("among") or list(nodes)
        node = fault.targets[0] if fault.targets else p.get("node", "")
        return one_way_shape(p["shape"], node, among, p.get("half") or ())
    raise ValueError(f"not a partition: {fault.kind}")


class NetNemesis(Nemesis):
    """Partitions as nftables drop rules inside the run's namespace.

    `addresses` maps every party that can be partitioned (nodes, and clients if the run wants
    them cut off too) to its 127.0.0.N address.
    """

    kinds = (
        "partition-majority",
        "partition-isolate",
        "partition-ring",
        "partition-cut",
        "partition-oneway",
    )

    def __init__(
        self,
        netns: NetNamespace,
        addresses: Mapping[str, str],
        nodes: Sequence[str],
        recorder: Recorder | None = None,
    ) -> None:
        super().__init__(recorder)
        self.netns = netns
        self.addresses = dict(addresses)
        self.nodes = list(nodes)
        self._grudges: dict[str, Grudge] = {}

    def _apply(self) -> None:
        g = merge(list(self._grudges.values()))
        self.netns.run(["nft", "-f", "-"], input=nft_script(g, self.addresses))

    def _start(self, fault: Fault) -> None:
        self._grudges[fault.id] = grudge_for(fault, self.nodes)
        self._apply()

    def _stop(self, fault: Fault) -> None:
        self._grudges.pop(fault.id, None)
        self._apply()

    def _heal(self) -> None:
        self._grudges.clear()
        with contextlib.suppress(RuntimeError):
            self.netns.run(["nft", "delete", "table", "inet", TABLE])

    def rules(self) -> str:
        return self.netns.run(["nft", "list", "ruleset"])
