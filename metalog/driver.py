"""``ControllerDriver``: the quorum controller's side of a Raft node, without the I/O.

Owns the glue between a Raft node and ``metalog.controller.QuorumController``: turning
committed entries into replayed records, commands into entries to propose and committed
proposals into responses, and the controller's role into the Raft leader's. It makes every
decision and performs none of them; its callers move the bytes and the events:
``metalog.service.ControllerService`` on a real ``raft.aio.RaftNode`` (asyncio), and
``tests/sim/metadata_sim.py`` on a simulated Raft core, so the simulator checks the glue that
ships.

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
* On every node (voters and observers alike) ``apply_entry`` replays each committed record
  into the controller's image: the image is built only from committed records.

Activation (KIP-595): a node that becomes Raft leader of term T serves commands only once it
has applied everything committed before T. ``tick`` asks the caller to start an activation
(a read-index barrier, which needs T's no-op committed); ``on_read_index`` turns the barrier's
index into the index to have applied (``activation_index``: that index and every entry already
in the leader's log); ``maybe_activate`` then calls ``become_active(T)`` if the node still
leads T. Losing leadership (seen by ``tick``, or a failed proposal: ``on_proposal_failed``), or
leading a term other than the controller's epoch (``stale_controller``), calls
``become_standby()``, which drops pending records; callers waiting on them get
``NotControllerError``.

Driving it::

    driver = ControllerDriver(QuorumController(node_id))
    # For every committed entry, in log order; when Raft installs a snapshot: restore().
    driver.apply_entry(entry)
    # Every poll interval (100 ms):
    t = driver.tick(now_ms, is_leader=..., term=...)
    if t.activate_term is not None: read_index() ... driver.on_read_index(term, index, last)
    if t.data is not None: raft.propose(t.data)
    # Once the barrier's index is applied: driver.maybe_activate(now_ms, is_leader, term)
    # A command, if driver.serving(is_leader, term):
    p = driver.handle(command, now_ms)          # may raise a MetadataError
    reply(p.result.response) if p.data is None else reply(driver.response(p, raft.propose(p.data)))

Pure: no I/O, no clock (time comes in as ``now_ms``).
"""

from __future__ import annotations

import collections
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from metalog.commands import Command
from metalog.controller import ControllerResult, QuorumController
from metalog.delta import decode_snapshot
from metalog.errors import InvalidRequestError, MetadataError
from metalog.image import MetadataImage
from metalog.records import MetadataRecord, MetadataRecordError, decode_records, encode_records
from raft.types import Entry, EntryKind


class MetadataApplyError(Exception):
    """A committed entry that this node cannot decode or replay: a bug or corruption, never a
    client's mistake (the encoder refuses what the decoder would). It names the Raft entry, the
    metadata offset and the record, and ends the node's Raft loop, so the process stops loudly
    (``common.essential``) rather than serve an image that skipped a committed record."""


def activation_index(read_index: int, last_index: int) -> int:
    """What a leader must have applied before its controller serves commands.

    The read-index barrier covers everything committed before the term. The leader's whole
    log must be covered too: after a ``ProposalDroppedError`` (a leadership transfer) the
    node stands by and re-activates *in the same term*, and the entries its earlier
    activation proposed are still in the log, uncommitted, while ``become_standby`` forgot
    them. Activating before they are applied decides on an image without them (found by the
    metadata simulation: an ``UnfenceBrokerRecord`` of an older broker epoch committed after
    the broker's re-registration, an ``InvariantError`` on every node that replays it).
    """
    return max(read_index, last_index)


def decode_entry(entry: Entry, base_offset: int) -> list[MetadataRecord]:
    """The records of a committed entry whose first record is at ``base_offset``; raises
    ``MetadataApplyError`` naming both when it does not decode. Pure: safe in a worker thread."""
    try:
        return decode_records(entry.data)
    except Exception as e:
        raise MetadataApplyError(
            f"committed Raft entry {int(entry.index)} (term {int(entry.term)}, metadata offset "
            f"{base_offset}) does not decode: {type(e).__name__}: {e}; its first bytes: "
            f"{entry.data[:64].hex()}"
        ) from e


def stale_controller(is_leader: bool, term: int, controller_epoch: int | None) -> bool:
    """True when an active controller must stand by: its node no longer leads, or leads a
    newer term than the controller's epoch (leadership lost and regained between two polls;
    the image may miss what the leaders in between committed). The controller epoch is the
    Raft term."""
    return controller_epoch is not None and (not is_leader or controller_epoch != term)


@dataclass(frozen=True, slots=True)
class AppliedEntry:
    """A committed entry that carried records, as replayed: the first at ``base_offset``."""

    index: int
    term: int
    base_offset: int
    records: list[MetadataRecord]
    data: bytes
    """The entry's bytes as committed (``encode_records``)."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """A command's outcome: the entry to propose, or None when nothing is to be committed
    (answer ``result.response`` at once)."""

    result: ControllerResult[Any]
    data: bytes | None


@dataclass(frozen=True, slots=True)
class Tick:
    """What one ``tick`` asks of the caller, in this order."""

    stood_by_from: int | None
    """The epoch of a controller that stood by (its node lost leadership, or leads a newer
    term); None if it did not."""
    activate_term: int | None
    """Start activating for this term: a read-index barrier, then ``on_read_index``."""
    records: tuple[MetadataRecord, ...]
    """Records ``poll`` decided (fences of expired sessions, NoOps, rebalances)."""
    data: bytes | None
    """Those records as the entry to propose; the caller calls ``on_proposal_failed`` if
    proposing fails."""


class ControllerDriver:
    """See the module docstring."""

    RECENT_ENTRIES_MAX = 4096
    """Committed entries whose base offset is remembered, for ``response``."""

    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller
        self.next_offset = 0
        """Metadata offset the next committed record will get."""
        self.applied_index = 0
        """Raft index of the last entry applied (or of the snapshot restored)."""
        self.records_since_snapshot = 0
        self.activating_term: int | None = None
        """The term an activation is under way for (None: none)."""
        self.activation_index: int | None = None
        """What must be applied before it completes; None until the barrier returned."""
        self._bases: collections.OrderedDict[int, int] = collections.OrderedDict()
        """Raft index -> metadata offset of its first record, for recent entries."""

    @property
    def metadata_offset(self) -> int:
        """Offset of the last committed record applied (-1: none)."""
        return self.next_offset - 1

    # ------------------------------------------------------------------ log side

    def apply_entry(
        self, entry: Entry, records: Sequence[MetadataRecord] | None = None
    ) -> AppliedEntry | None:
        """Replay a committed entry's records (every node, in log order); the entry as
        applied if it carried records. ``records``: the entry already decoded
        (``decode_entry``, which a caller may run off its event loop)."""
        self.applied_index = int(entry.index)
        if entry.kind is not EntryKind.NORMAL or not entry.data:
            return None
        base = self.next_offset
        term = int(entry.term)
        if records is None:
            records = decode_entry(entry, base)
        records = list(records)
        for i, r in enumerate(records):
            try:
                self.controller.replay(r, base + i, term)
            except Exception as e:
                raise MetadataApplyError(
                    f"committed record at metadata offset {base + i} (Raft entry "
                    f"{int(entry.index)}, term {term}) does not apply: {r!r}: "
                    f"{type(e).__name__}: {e}"
                ) from e
        self.next_offset = base + len(records)
        self.records_since_snapshot += len(records)
        self._bases[int(entry.index)] = base
        if len(self._bases) > self.RECENT_ENTRIES_MAX:
            self._bases.popitem(last=False)
        return AppliedEntry(int(entry.index), term, base, records, entry.data)

    def restore(self, index: int, data: bytes) -> MetadataImage:
        """Start over from a snapshot (``encode_snapshot`` bytes) standing for Raft index
        ``index``; its image."""
        image = decode_snapshot(data)
        self.controller.restore(image)
        self.next_offset = image.offset + 1
        self.applied_index = index
        self.records_since_snapshot = 0
        return image

    def snapshot_due(self, records_max: int) -> bool:
        """True (once) when ``records_max`` records were applied since the last snapshot."""
        if self.records_since_snapshot < records_max:
            return False
        self.records_since_snapshot = 0
        return True

    # ------------------------------------------------------------------ role

    def serving(self, is_leader: bool, term: int) -> bool:
        """Whether commands may be handled: active, and leading the controller's epoch."""
        ctl = self.controller
        return ctl.is_active and not stale_controller(is_leader, term, ctl.controller_epoch)

    def tick(self, now_ms: int, *, is_leader: bool, term: int) -> Tick:
        """The periodic step: stand by if stale, start an activation if due, poll."""
        ctl = self.controller
        stood_by_from = None
        if stale_controller(is_leader, term, ctl.controller_epoch):
            stood_by_from = ctl.controller_epoch
            ctl.become_standby()
        activate = None
        if is_leader and ctl.controller_epoch != term and self.activating_term != term:
            self.activating_term, self.activation_index = term, None
            activate = term
        records: tuple[MetadataRecord, ...] = ()
        data = None
        if ctl.is_active:
            records, _deadline = ctl.poll(now_ms)
            if records:
                data = self._encode(records)
        return Tick(stood_by_from, activate, records, data)

    def on_read_index(self, term: int, read_index: int, last_index: int) -> int:
        """The activation barrier for ``term`` returned ``read_index`` on a leader whose log
        ends at ``last_index``: the index to have applied before activating."""
        index = activation_index(read_index, last_index)
        if self.activating_term == term:
            self.activation_index = index
        return index

    def maybe_activate(self, now_ms: int, *, is_leader: bool, term: int) -> bool:
        """Once the activation's index is applied: complete it, and make the controller
        active if this node still leads the term it was started for. True if it did."""
        target = self.activation_index
        if target is None or self.applied_index < target:
            return False
        started = self.activating_term
        self.activating_term = self.activation_index = None
        if not is_leader or term != started or started is None:
            return False
        self.controller.become_active(started, now_ms)
        return True

    def abandon_activation(self, term: int) -> None:
        """The activation for ``term`` failed or ended (a timeout, a lost leadership): the
        next ``tick`` may start another."""
        if self.activating_term == term:
            self.activating_term = self.activation_index = None

    def on_proposal_failed(self) -> None:
        """A proposal of this controller's records failed (leadership lost or handed over):
        its pending records may never commit, so it stands by."""
        self.controller.become_standby()

    # ------------------------------------------------------------------ commands

    def handle(self, command: Command, now_ms: int) -> Proposal:
        """``command`` on the active controller (check ``serving`` first). Raises the
        command's ``MetadataError``; ``InvalidRequestError`` when its records cannot be
        encoded (a field of the wrong type), which are then withdrawn, never proposed."""
        return self.proposal(self.controller.handle(command, now_ms))

    def handle_steps(
        self, command: Command, now_ms: int
    ) -> Generator[None, None, ControllerResult[Any]]:
        """``handle`` in steps (``QuorumController.handle_steps``, whose rules the caller
        keeps); the generator returns the result, which ``proposal`` makes an entry of."""
        return self.controller.handle_steps(command, now_ms)

    def proposal(self, result: ControllerResult[Any], data: bytes | None = None) -> Proposal:
        """``result`` as the entry to propose. ``data``: its records already encoded
        (``encode_records`` is pure: a caller may run it off its event loop); None: encoded
        here, and if they cannot be, withdrawn with ``InvalidRequestError``."""
        if not result.records:
            return Proposal(result, None)
        return Proposal(result, data if data is not None else self._encode(result.records))

    def response(self, proposal: Proposal, index: int) -> Any:
        """The response to ``proposal`` once committed as the entry at Raft ``index``."""
        base = self._bases.get(index)
        if base is None:  # cannot happen: entries are applied before proposals resolve
            raise MetadataError(f"committed entry {index} carried no records")
        return proposal.result.response_at(base)

    def _encode(self, records: Sequence[MetadataRecord]) -> bytes:
        try:
            return encode_records(tuple(records))
        except MetadataRecordError as e:
            # Committed, such a record would stop every node's replay (each would fail to
            # decode it): refuse it here, and forget it as pending.
            self.controller.withdraw(records)
            raise InvalidRequestError(f"the command's records cannot be encoded: {e}") from None
