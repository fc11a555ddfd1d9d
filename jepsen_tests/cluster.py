"""The cluster adapter: how the harness starts a cluster of processes and talks to it.

A `Cluster` knows its nodes (name, address, data directory, roles), builds one `NodeProcess`
per node with the environment the nemeses need (``LONGBOAT_LAZYFS=1``, libfaketime), starts
them inside the run's network namespace, says which node leads what, and hands out clients.
The harness never imports server code: it starts processes and speaks to them as clients do.

Implementations:

* `jepsen_tests.toy.cluster.ToyCluster`, a tiny partitioned log with a plantable bug, used by
  the harness's own tests and by ``run --cluster toy``;
* `jepsen_tests.longboat.LongboatCluster`, the real one: controllers and brokers as
  processes, each on its own loopback address.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from jepsen_tests.nemesis.process import NodeProcess, wait_until

Wrap = Callable[[list[str]], list[str]]  # argv -> argv run inside the namespace
EnvFor = Callable[[str], dict[str, str]]  # node name -> extra environment
Dial = Callable[[str, str], tuple[str, int]]  # (client name, node name) -> address to dial


class DefiniteError(Exception):
    """The operation certainly did not happen (refused, rejected before any effect): fail."""


class IndefiniteError(Exception):
    """The operation may or may not have happened (timeout, reset after sending): info."""


class QueueClient(Protocol):
    """What the queue workload needs from a client. Raise DefiniteError / IndefiniteError."""

    async def send(self, key: str, value: int) -> tuple[int, str | None]:
        """Append; return (offset, name of the node that acknowledged as leader)."""
        ...

    async def poll(self, key: str, offset: int, max_records: int) -> list[tuple[int, Any]]:
        """Read up to max_records records of key from offset: [(offset, value), ...]."""
        ...

    async def close(self) -> None: ...


OnRebalance = Callable[[str, list[str]], None]
"""(event, keys): ``assigned``, ``revoked`` or ``lost``, and the keys it concerns. Called
synchronously at the moment the member's assignment changes, so the caller can record it in
the history in the order it happened relative to the member's polls."""


class GroupMember(Protocol):
    """A consumer-group member of the queue workload's group: it subscribes to the
    workload's topic and consumes what the group's coordinator hands it."""

    async def start(self) -> None:
        """Start and subscribe. Raise DefiniteError if it could not start."""
        ...

    async def poll(self, max_records: int) -> dict[str, list[tuple[int, Any]]]:
        """Records of the assigned keys: {key: [(offset, value), ...]} (maybe empty).
        Raise DefiniteError: a failed poll returned nothing and moved no position."""
        ...

    async def commit(self, offsets: dict[str, int]) -> None:
        """Commit the next offsets to read. DefiniteError if certainly not committed,
        IndefiniteError if unknown."""
        ...

    async def close(self) -> None: ...


class MetadataClient(Protocol):
    """What the metadata workload needs: topic create/delete/describe on the controller."""

    async def create_topic(self, topic: str, definition: dict[str, Any]) -> bool:
        """True if created, False if it already existed."""
        ...

    async def delete_topic(self, topic: str) -> bool:
        """True if deleted, False if it did not exist."""
        ...

    async def describe_topic(self, topic: str) -> dict[str, Any] | None:
        """The definition (with its server-assigned topic_id), or None if absent."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class NodeSpec:
    name: str
    host: str
    port: int
    data_dir: Path
    roles: tuple[str, ...] = ("broker",)
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


class Cluster(ABC):
    """Processes with addresses, data dirs and environments; leadership; clients."""

    nodes: list[NodeSpec]
    processes: dict[str, NodeProcess]
    keys: list[str]
    dials_through_proxies = True
    """Whether clients reach nodes at the addresses `client`'s ``dial`` gives (so the
    harness's proxies can delay or cut them)."""

    @abstractmethod
    def setup(self, run_dir: Path, env_for: EnvFor, wrap: Wrap) -> None:
        """Create (not start) the node processes; logs go to run_dir/logs/<node>.log."""

    @abstractmethod
    def ready(self) -> bool:
        """Every node answers."""

    @abstractmethod
    def leaders(self) -> dict[str, str]:
        """Partition key -> the node that leads it now (as far as the cluster says)."""

    @abstractmethod
    def client(self, name: str, host: str, dial: Dial) -> QueueClient:
        """A client named `name` whose sockets bind `host`, dialling nodes through `dial`."""

    def metadata_client(self, name: str, host: str, dial: Dial) -> MetadataClient:
        raise NotImplementedError(f"{type(self).__name__} has no metadata client")

    supports_groups = False
    """Whether `group_member` exists: the cluster has consumer groups."""

    def group_member(
        self, name: str, host: str, *, group: str, assignor: str, on_rebalance: OnRebalance
    ) -> GroupMember:
        """A member of consumer group `group` named `name`, whose sockets bind `host`."""
        raise NotImplementedError(f"{type(self).__name__} has no consumer groups")

    async def prepare_group(self, group: str, host: str) -> None:
        """Before the load starts: wait until `group` can be served (its coordinator up)."""
        raise NotImplementedError(f"{type(self).__name__} has no consumer groups")

    def preflight(self) -> None:  # noqa: B027 - optional hook
        """Raise before anything is created if this cluster cannot run here."""

    def configure_for(self, kinds: list[str]) -> None:  # noqa: B027 - optional hook
        """Adjust to the run's fault kinds, before `setup` (default: nothing)."""

    def healthy(self) -> bool:
        """After the faults heal: recovered enough for the final reads (default: ready)."""
        return self.ready()

    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def start(self, timeout_s: float = 20.0) -> None:
        for p in self.processes.values():
            p.start()
        if not wait_until(self.ready, timeout_s):
            tails = "\n".join(f"--- {n}:\n{p.log_tail()}" for n, p in self.processes.items())
            raise RuntimeError(f"cluster not ready after {timeout_s}s\n{tails}")

    def stop(self) -> None:
        for p in self.processes.values():
            p.stop()
            p.destroy()

    def leader_of_something(self, pick: int = 0) -> str | None:
        """One of the nodes that lead some key now; `pick` chooses which (modulo)."""
        leaders = sorted(set(self.leaders().values()))
        return leaders[pick % len(leaders)] if leaders else None

    def active_controller(self) -> str | None:
        """The node that writes the metadata now, if the cluster has such a role."""
        return None

    def cli_env(self) -> dict[str, str]:
        """Environment a ``longboat`` command run against this cluster needs (a secure
        cluster's TLS files); empty by default."""
        return {}

    def voters(self) -> dict[str, tuple[int, str]]:
        """Metadata quorum voters: name -> (node id, URL); empty without a Raft quorum."""
        return {}

    def reassignable(
        self,
    ) -> tuple[str, list[int], list[str], Callable[[], dict[int, dict[str, Any]]]] | None:
        """What the reassign nemesis moves: (topic, broker ids, broker URLs, a reader of the
        topic's partitions as ``{p: {"replicas": [...], ...}}``); None if nothing can move."""
        return None

    def leader_and_followers(self, pick: int = 0) -> tuple[str, list[str]] | None:
        """A key's leader and the nodes that replicate it, if the cluster replicates."""
        return None
