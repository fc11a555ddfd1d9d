"""``ControllerService``: the quorum controller running on a Raft node (the asyncio glue).

Owns the binding between ``raft.aio.RaftNode`` and ``metalog.controller.QuorumController``;
owns no state of its own that matters for correctness: everything is rebuilt by replaying
the committed log (or a snapshot plus the log after it).

How records map onto Raft (the metadata log):

* One command's records travel as ONE Raft entry (``encode_records``), so they commit
  atomically, as a KRaft record batch does: a topic's ``TopicRecord`` and its
  ``PartitionRecord``\\ s are never half committed.
* Every record has a metadata *offset*: records are numbered densely in log order across
  entries (``offset = previous record's offset + 1``), so the numbering is a function of the
  committed log alone and survives snapshots (a snapshot carries the offset of its last
  record). Entries without records (the leader's no-op, membership changes) take no offset.
  A broker's epoch is the offset of its ``RegisterBrokerRecord`` (KIP-631). This differs from
  KRaft, where the metadata offset is the Raft offset, because our Raft entries are batches.
* On every node (voters and observers alike) ``on_commit`` replays each committed record
  into the controller's image: the image is built only from committed records.

Activation (KIP-595): a node that becomes Raft leader of term T serves commands only once
it has applied everything committed before T. The service waits for a read-index barrier
(which needs T's no-op committed) and for that index to be applied, and then calls
``become_active(T)``. Losing leadership (seen on the next poll, or as ``NotLeaderError`` from
a proposal) calls ``become_standby()``, which drops pending records; callers waiting on
them get ``NotControllerError`` naming the new leader when known.

Snapshots: every ``snapshot_records`` records the image is written as a Raft snapshot
(``<index>-<term>.checkpoint``), which also moves the Raft log start forward.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from metalog.controller import Command, MetadataError, NotControllerError, QuorumController
from metalog.delta import decode_snapshot, encode_snapshot
from metalog.records import decode_records, encode_records
from raft.aio.node import NodeStoppedError, NotLeaderError, RaftNode, RaftNodeConfig
from raft.core import ProposalDroppedError
from raft.types import EntryKind, Role
from storage.fileio import FileLayer

log = logging.getLogger(__name__)


def wall_ms() -> int:
    return int(time.time() * 1000)


class ControllerService:
    """See the module docstring. Create, put ``node.add_routes`` on the app, ``start()``."""

    def __init__(
        self,
        node_config: RaftNodeConfig,
        controller: QuorumController,
        *,
        file_layer: FileLayer | None = None,
        clock_ms: Callable[[], int] = wall_ms,
        poll_interval_ms: int = 100,
        snapshot_records: int = 20_000,
    ) -> None:
        self.controller = controller
        # The node calls on_commit/on_snapshot from its own task, in log order.
        self.node = RaftNode(
            node_config,
            on_commit=self.on_commit,
            on_snapshot=self.on_snapshot,
            file_layer=file_layer,
        )
        self._clock_ms = clock_ms
        self._poll_interval_s = poll_interval_ms / 1000
        self._snapshot_records = snapshot_records
        self.next_offset = 0
        """Metadata offset the next committed record will get."""
        self._records_since_snapshot = 0
        self._bases: collections.OrderedDict[int, int] = collections.OrderedDict()
        """Raft index -> metadata offset of its first record, for recent entries."""
        self._task: asyncio.Task[None] | None = None
        self._activating: int | None = None
        self._stopping = False

    # ------------------------------------------------------------------ log side

    def on_commit(self, entries: list[Any]) -> None:
        ctl = self.controller
        for e in entries:
            if e.kind is not EntryKind.NORMAL or not e.data:
                continue
            records = decode_records(e.data)
            base = self.next_offset
            for i, r in enumerate(records):
                ctl.replay(r, base + i, int(e.term))
            self.next_offset = base + len(records)
            self._records_since_snapshot += len(records)
            self._bases[int(e.index)] = base
            if len(self._bases) > 4096:
                self._bases.popitem(last=False)

    def on_snapshot(self, snap: Any) -> None:
        image = decode_snapshot(snap.data)
        self.controller.restore(image)
        self.next_offset = image.offset + 1
        self._records_since_snapshot = 0

    @property
    def metadata_offset(self) -> int:
        """Offset of the last committed record applied here (-1: none)."""
        return self.next_offset - 1

    # ------------------------------------------------------------------ commands

    async def execute(self, command: Command) -> Any:
        """Run ``command`` on the active controller; its response once committed.

        Raises ``MetadataError`` (``NotControllerError`` when this node is not active).
        """
        ctl = self.controller
        if not ctl.is_active:
            raise self._not_controller()
        result = ctl.handle(command, self._clock_ms())
        if not result.records:
            return result.response
        proposal = self.node.propose(encode_records(list(result.records)))
        try:
            index = await proposal
        except (NotLeaderError, ProposalDroppedError, NodeStoppedError) as e:
            ctl.become_standby()
            raise self._not_controller(f"leadership lost while committing: {e}") from None
        base = self._bases.get(index)
        if base is None:  # cannot happen: on_commit runs before proposals resolve
            raise MetadataError(f"committed entry {index} carried no records")
        return result.response_at(base)

    def _not_controller(self, detail: str = "") -> NotControllerError:
        leader = self.node.leader_id
        url = self.node.addresses.get(int(leader)) if leader else None
        err = NotControllerError(
            f"node {self.node.id} is not the active controller"
            + (f"; the leader is node {leader} at {url}" if url else "")
            + (f" ({detail})" if detail else "")
        )
        err.leader_id = int(leader)  # type: ignore[attr-defined]
        err.leader_url = url  # type: ignore[attr-defined]
        return err

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.node.start()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.node.stop()

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller poll failed")
            await asyncio.sleep(self._poll_interval_s)

    async def _tick(self) -> None:
        node, ctl = self.node, self.controller
        core = node.core
        term = int(core.term) if core is not None else 0
        if node.role is Role.LEADER:
            if ctl.controller_epoch != term and self._activating != term:
                self._activating = term
                asyncio.get_running_loop().create_task(self._activate(term))
        elif ctl.is_active:
            log.info("controller %d: no longer leader; standing by", node.id)
            ctl.become_standby()
        if ctl.is_active:
            records, _deadline = ctl.poll(self._clock_ms())
            if records:
                proposal = self.node.propose(encode_records(list(records)))
                asyncio.get_running_loop().create_task(self._await_internal(proposal))
        if self._records_since_snapshot >= self._snapshot_records and node.applied > 0:
            self._records_since_snapshot = 0
            try:
                await node.take_snapshot(encode_snapshot(ctl.image))
            except ValueError as e:  # nothing new applied since the last snapshot
                log.debug("snapshot skipped: %s", e)

    async def _await_internal(self, proposal: Any) -> None:
        try:
            await proposal
        except (NotLeaderError, ProposalDroppedError, NodeStoppedError):
            self.controller.become_standby()

    async def _activate(self, term: int) -> None:
        node = self.node
        try:
            index = await node.read_index(timeout_s=5.0)
            await node.wait_applied(index)
        except Exception as e:
            log.info("controller %d: activation for term %d failed: %s", node.id, term, e)
            self._activating = None
            return
        core = node.core
        if node.role is Role.LEADER and core is not None and int(core.term) == term:
            self.controller.become_active(term, self._clock_ms())
            log.info("controller %d: active in epoch %d at offset %d", node.id, term,
                     self.metadata_offset)
        self._activating = None


def error_to_wire(e: MetadataError) -> dict[str, Any]:
    return {
        "error": type(e).__name__,
        "code": e.code,
        "message": str(e),
        "leader_id": getattr(e, "leader_id", None),
        "leader_url": getattr(e, "leader_url", None),
    }
