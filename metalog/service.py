"""``ControllerService``: the quorum controller running on a Raft node (the asyncio glue).

Owns the asyncio side of the binding between ``raft.aio.RaftNode`` and
``metalog.controller.QuorumController``: it moves entries, proposals, read-index barriers and
snapshots between the node and ``metalog.driver.ControllerDriver``, which makes every decision
(how records map onto Raft entries and metadata offsets, when the controller activates and
stands by, what a command proposes and answers; see its docstring). It owns no state of its
own that matters for correctness: everything is rebuilt by replaying the committed log (or a
snapshot plus the log after it).

When the node loses leadership (seen on the next poll, or as ``NotLeaderError`` from a
proposal) the controller stands by, dropping pending records; callers waiting on them get
``NotControllerError`` naming the new leader when known.

Snapshots: every ``snapshot_records`` records the image is written as a Raft snapshot
(``<index>-<term>.checkpoint``), which also moves the Raft log start forward.

Metadata fetch for observers (brokers follow the metadata log as KRaft observers do: by
fetching, without joining the Raft configuration). The service keeps, in memory, the
committed entries since its latest snapshot as ``MetadataBatch`` values (base offset, Raft term,
record count, the entry's bytes as committed) and the latest snapshot's bytes.
``fetch_metadata(offset)`` answers the batches from ``offset`` on, long-polling until there
are some, or the snapshot (and the batches after it) when ``offset`` is older than what is
retained. Every controller answers, followers too: what they have committed is committed;
a follower may only be behind, and then the fetcher sees a lower ``high_watermark``. Each
fetching broker's id, fetch offset and time are remembered for ``quorum status``.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from common.waits import join_task, wait_event
from metalog.client import MetadataBatch, MetadataFetchResponse
from metalog.commands import Command
from metalog.controller import QuorumController
from metalog.delta import encode_snapshot
from metalog.driver import ControllerDriver
from metalog.errors import MetadataError, NotControllerError
from metalog.records import FenceBrokerRecord, MetadataRecord, decode_records, encode_records
from raft.aio.node import NodeStoppedError, NotLeaderError, RaftNode, RaftNodeConfig
from raft.core import ProposalDroppedError
from raft.types import Entry, EntryKind, Role
from storage.fileio import FileLayer

log = logging.getLogger(__name__)


def monotonic_ms() -> int:
    """The controller's clock: broker sessions, NoOp and rebalance deadlines are intervals,
    and none reaches a record, so a step of the wall clock (NTP, an operator) must move none
    of them: a step forward on the active controller would have fenced every broker at once."""
    return int(time.monotonic() * 1000)


@dataclass(frozen=True)
class ObserverFetch:
    """A broker's latest metadata fetch here: it holds every record below ``fetch_offset``."""

    fetch_offset: int
    at_monotonic_s: float


OBSERVER_FORGET_S = 600.0
"""An observer that has not fetched here for this long is no longer listed."""

FETCH_BYTES_MAX = 4 << 20
"""Batch bytes per fetch response (at least one batch is always sent)."""

ENCODE_IN_THREAD_RECORDS = 1_000
"""A command's records, this many or more, are encoded off the event loop (~3.5 ms a
thousand on an idle core)."""

DECODE_IN_THREAD_BYTES = 64 << 10
"""Committed entries this big or bigger are decoded off the event loop (~1,400 partition
records, ~15 ms of decoding on an idle core)."""


class ControllerService:
    """See the module docstring. Create, put ``node.add_routes`` on the app, ``start()``."""

    def __init__(
        self,
        node_config: RaftNodeConfig,
        controller: QuorumController,
        *,
        file_layer: FileLayer | None = None,
        clock_ms: Callable[[], int] = monotonic_ms,
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
        self.driver = ControllerDriver(controller)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # Observers' fetch window. Invariant: batches are contiguous and ascending, the first
        # starts right after the snapshot (or at 0 without one); ``_batch_bases`` mirrors them.
        self._batches: list[MetadataBatch] = []
        self._batch_bases: list[int] = []
        self._snapshot: tuple[int, bytes] | None = None
        """(offset of its last record, ``encode_snapshot`` bytes) of the latest snapshot."""
        self._deciding = asyncio.Lock()
        """Held while a command or a poll decides records and proposes them."""
        self._committed_event = asyncio.Event()
        """Set (and replaced) whenever committed records arrive: wakes long-polling fetches."""
        self.observers: dict[int, ObserverFetch] = {}

    # ------------------------------------------------------------------ log side

    async def on_commit(self, entries: list[Entry]) -> None:
        # Big entries (a CreateTopic of thousands of partitions) are decoded in a worker
        # thread first: ~10 µs a record of pure Python that would hold the event loop, and
        # with it the Raft node task's heartbeats (finding 13). The replay below stays on the
        # loop and runs without a pause, so nothing sees an entry half applied.
        decoded: dict[int, list[MetadataRecord] | None] = {}
        for e in entries:
            if e.kind is EntryKind.NORMAL and len(e.data) >= DECODE_IN_THREAD_BYTES:
                decoded[int(e.index)] = await asyncio.to_thread(_decode_or_none, e.data)
        for e in entries:
            applied = self.driver.apply_entry(e, decoded.get(int(e.index)))
            if applied is not None and applied.records:
                self._batches.append(
                    MetadataBatch(
                        applied.base_offset, applied.term, len(applied.records), applied.data
                    )
                )
                self._batch_bases.append(applied.base_offset)
                self._wake_fetchers()

    def on_snapshot(self, snap: Any) -> None:
        image = self.driver.restore(int(snap.index), snap.data)
        self._set_snapshot(image.offset, snap.data)
        self._wake_fetchers()

    def _wake_fetchers(self) -> None:
        self._committed_event.set()
        self._committed_event = asyncio.Event()

    def _set_snapshot(self, offset: int, data: bytes) -> None:
        """Retain ``data`` as the latest snapshot and drop the batches it covers."""
        self._snapshot = (offset, data)
        keep = 0
        while keep < len(self._batches) and (
            self._batches[keep].base_offset + self._batches[keep].count - 1 <= offset
        ):
            keep += 1
        if keep:
            del self._batches[:keep]
            del self._batch_bases[:keep]

    # ------------------------------------------------------------------ observers' fetch

    async def fetch_metadata(
        self,
        offset: int,
        *,
        max_wait_ms: int = 500,
        broker_id: int | None = None,
        fetch_bytes_max: int = FETCH_BYTES_MAX,
    ) -> MetadataFetchResponse:
        """Committed metadata from ``offset`` on: see the module docstring."""
        if broker_id is not None:
            self.observers[broker_id] = ObserverFetch(offset, time.monotonic())
        if offset > self.metadata_offset and max_wait_ms > 0:
            event = self._committed_event
            await wait_event(event, max_wait_ms / 1000)
        snapshot: bytes | None = None
        snapshot_offset = -1
        start = offset
        if self._snapshot is not None and offset <= self._snapshot[0]:
            snapshot_offset, snapshot = self._snapshot
            start = snapshot_offset + 1
        batches: list[MetadataBatch] = []
        i = max(0, bisect.bisect_right(self._batch_bases, start) - 1)
        size = 0
        while i < len(self._batches) and (not batches or size < fetch_bytes_max):
            b = self._batches[i]
            if b.base_offset + b.count > start:
                batches.append(b)
                size += len(b.data)
            i += 1
        leader = int(self.node.leader_id)
        return MetadataFetchResponse(
            node_id=int(self.node.id),
            high_watermark=self.metadata_offset,
            batches=tuple(batches),
            snapshot=snapshot,
            snapshot_offset=snapshot_offset,
            leader_url=self.node.addresses.get(leader) if leader else None,
        )

    def observers_status(self) -> list[dict[str, Any]]:
        """Brokers fetching metadata here: fetch offset, lag (records behind this node's
        committed offset) and ms since their last fetch."""
        now = time.monotonic()
        out = []
        for broker_id, o in sorted(self.observers.items()):
            if now - o.at_monotonic_s > OBSERVER_FORGET_S:
                del self.observers[broker_id]
                continue
            out.append(
                {
                    "broker_id": broker_id,
                    "fetch_offset": o.fetch_offset,
                    "lag": max(0, self.metadata_offset + 1 - o.fetch_offset),
                    "last_contact_ms": round((now - o.at_monotonic_s) * 1000, 1),
                }
            )
        return out

    @property
    def metadata_offset(self) -> int:
        """Offset of the last committed record applied here (-1: none)."""
        return self.driver.metadata_offset

    # ------------------------------------------------------------------ commands

    async def execute(self, command: Command) -> Any:
        """Run ``command`` on the active controller; its response once committed.

        Raises ``MetadataError`` (``NotControllerError`` when this node is not active).
        """
        # One command (or poll) at a time decides and proposes: a big one lets the loop run
        # between its steps, and nothing may propose under it (``handle_steps``).
        async with self._deciding:
            core = self.node.core
            if core is None or not self.driver.serving(
                self.node.role is Role.LEADER, int(core.term)
            ):
                raise self._not_controller()
            try:
                steps = self.driver.handle_steps(command, self._clock_ms())
                while True:
                    try:
                        next(steps)
                    except StopIteration as done:
                        result = done.value
                        break
                    await asyncio.sleep(0)
                data = None
                if len(result.records) >= ENCODE_IN_THREAD_RECORDS:
                    data = await asyncio.to_thread(_encode_or_none, result.records)
                proposal = self.driver.proposal(result, data)
            finally:
                self._log_notes()
            if proposal.data is None:
                return proposal.result.response
            # Queued now, under the lock: entries are proposed in the order they were decided.
            proposed = self.node.propose(proposal.data)
        try:
            index = await proposed
        except (NotLeaderError, ProposalDroppedError, NodeStoppedError) as e:
            self.driver.on_proposal_failed()
            err = self._not_controller(f"leadership lost while committing: {e}")
            # The proposal may still commit under the next leader (Raft keeps an old term's
            # entry that reached a majority): the caller must not take this for "not done".
            err.after_uncertain_attempt = True
            raise err from None
        return self.driver.response(proposal, index)

    def _log_notes(self) -> None:
        for note in self.controller.drain_notes():
            log.info("controller %d: %s", self.node.id, note)

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

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The service's apply loop, once started (watched: ``common.essential``)."""
        return self._task

    async def start(self) -> None:
        await self.node.start()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await join_task(self._task, cancel=True)
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
        node, driver = self.node, self.driver
        core = node.core
        term = int(core.term) if core is not None else 0
        async with self._deciding:  # no command is between its steps (``execute``)
            tick = driver.tick(self._clock_ms(), is_leader=node.role is Role.LEADER, term=term)
            if tick.stood_by_from is not None:
                log.info(
                    "controller %d: no longer leader of epoch %s; standing by",
                    node.id,
                    tick.stood_by_from,
                )
            if tick.activate_term is not None:
                asyncio.get_running_loop().create_task(self._activate(tick.activate_term))
            for r in tick.records:
                if isinstance(r, FenceBrokerRecord):
                    log.info(
                        "controller %d: broker %d missed its session timeout; fencing it",
                        node.id,
                        r.broker_id,
                    )
            self._log_notes()
            if tick.data is not None:
                proposal = node.propose(tick.data)
                asyncio.get_running_loop().create_task(self._await_internal(proposal))
        if node.applied > 0 and driver.snapshot_due(self._snapshot_records):
            # The image is immutable: encode it in a worker thread (80 ms of the event loop
            # at 10,000 partitions), as of the index it was taken at.
            image, index = self.controller.image, node.applied
            data = await asyncio.to_thread(encode_snapshot, image)
            try:
                await node.take_snapshot(data, index)
            except ValueError as e:  # nothing new applied since the last snapshot
                log.debug("snapshot skipped: %s", e)
            else:
                self._set_snapshot(image.offset, data)

    async def _await_internal(self, proposal: Any) -> None:
        try:
            await proposal
        except (NotLeaderError, ProposalDroppedError, NodeStoppedError):
            self.driver.on_proposal_failed()

    async def _activate(self, term: int) -> None:
        node, driver = self.node, self.driver
        try:
            index = await node.read_index(timeout_s=5.0)
            core = node.core
            if core is not None:
                index = driver.on_read_index(term, index, int(core.log.last_index()))
            await node.wait_applied(index)
        except Exception as e:
            log.info("controller %d: activation for term %d failed: %s", node.id, term, e)
            driver.abandon_activation(term)
            return
        core = node.core
        if core is not None and driver.maybe_activate(
            self._clock_ms(), is_leader=node.role is Role.LEADER, term=int(core.term)
        ):
            log.info(
                "controller %d: active in epoch %d at offset %d",
                node.id,
                term,
                self.metadata_offset,
            )
        driver.abandon_activation(term)


def _encode_or_none(records: Sequence[MetadataRecord]) -> bytes | None:
    """``encode_records``, or None if it fails: ``ControllerDriver.proposal`` then encodes
    again on the loop, withdraws the records and raises the client's error."""
    try:
        return encode_records(tuple(records))
    except Exception:
        return None


def _decode_or_none(data: bytes) -> list[MetadataRecord] | None:
    """``decode_records``, or None if it fails: ``apply_entry`` then decodes again on the loop
    and stops the node with the entry's exact metadata offset."""
    try:
        return decode_records(data)
    except Exception:
        return None


def error_to_wire(e: MetadataError) -> dict[str, Any]:
    return {
        "error": type(e).__name__,
        "code": e.code,
        "message": str(e),
        "leader_id": getattr(e, "leader_id", None),
        "leader_url": getattr(e, "leader_url", None),
        "maybe_applied": e.after_uncertain_attempt,
    }
