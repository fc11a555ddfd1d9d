"""The aborted-transaction index of one segment, ``<base>.txnindex`` (Kafka's
``TransactionIndex``), and the rules that derive its entries from a log.

Layout, byte for byte Kafka's: entries of 34 bytes back to back, big-endian, in the order
their abort markers are in the log::

    version            int16   0
    producer_id        int64
    first_offset       int64   the producer's first batch of the transaction
    last_offset        int64   the abort marker (in this segment)
    last_stable_offset int64   the partition's LSO just after the marker

A segment holds the entries of the abort markers it holds. A read_committed fetch of
``[start, end)`` collects every entry with ``first_offset < end`` and ``last_offset >=
start`` from the segment holding ``start`` onwards, and stops at the first entry whose
``last_stable_offset >= end`` (Kafka's ``collectAbortedTxns``: no transaction still open
then started before ``end``, so no later marker can abort data of the range).

Checks (``parse_entries``): the size is a multiple of 34; every entry is version 0, has a
producer id and offsets >= 0, ``first_offset <= last_offset``, ``last_offset`` inside the
segment, ``last_stable_offset <= last_offset + 1``, and markers in strictly increasing
order. The log also checks that each ``last_offset`` is a control batch of the producer
(``storage.log``). A file that fails is ``TxnIndexError``; the log rebuilds it from the
segments, and never serves it.

``AbortTracker`` is the rule that turns a log's batches into entries, from its first batch:
a transactional data batch opens its producer's transaction if none is open; a
transaction marker closes it, and an abort marker that closes one makes an entry. It is
the same rule as the partition's producer state (``broker.producer_state``) applies when
the log is written, so an index rebuilt from the log equals the one written live.

Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from storage.batch import BatchHeader
from storage.txn import AbortedTxn, ControlMarker

TXNINDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = ENTRY.size  # 34
_VERSION = 0


class TxnIndexError(ValueError):
    """A ``.txnindex`` that fails its checks (see the module docstring)."""


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(
        ENTRY.pack(_VERSION, a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset)
        for a in entries
    )


def parse_entries(raw: bytes, base_offset: int, end_offset: int) -> list[AbortedTxn]:
    """The entries of a segment's ``.txnindex``, the segment holding offsets
    ``[base_offset, end_offset)``; ``TxnIndexError`` if any check fails."""
    if len(raw) % ENTRY_BYTES:
        raise TxnIndexError(f"{len(raw)} bytes is not a whole number of {ENTRY_BYTES}-byte entries")
    out: list[AbortedTxn] = []
    prev = -1
    for i in range(0, len(raw), ENTRY_BYTES):
        version, pid, first, last, lso = ENTRY.unpack_from(raw, i)
        where = f"entry {i // ENTRY_BYTES}"
        if version != _VERSION:
            raise TxnIndexError(f"{where}: version {version}")
        if pid < 0 or first < 0 or lso < 0:
            raise TxnIndexError(f"{where}: negative producer id or offset")
        if not first <= last:
            raise TxnIndexError(f"{where}: first offset {first} after the marker at {last}")
        if not base_offset <= last < end_offset:
            raise TxnIndexError(
                f"{where}: marker at {last}, outside the segment [{base_offset}, {end_offset})"
            )
        if last <= prev:
            raise TxnIndexError(f"{where}: marker at {last} does not follow {prev}")
        if lso > last + 1:
            raise TxnIndexError(f"{where}: last stable offset {lso} past the marker at {last}")
        prev = last
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def collect(
    entries: Iterable[AbortedTxn], start_offset: int, end_offset: int, out: list[AbortedTxn]
) -> bool:
    """Append to ``out`` the entries with data in ``[start_offset, end_offset)``; True once
    an entry shows that no later one can have any (Kafka's ``TxnIndexSearchResult``)."""
    for a in entries:
        if a.last_offset >= start_offset and a.first_offset < end_offset:
            out.append(a)
        if a.last_stable_offset >= end_offset:
            return True
    return False


class AbortTracker:
    """The open transactions of a log being read from its first batch, and the entries its
    abort markers make (see the module docstring)."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}
        """producer id -> first offset of its open transaction."""

    def on_batch(self, h: BatchHeader, marker: ControlMarker | None) -> AbortedTxn | None:
        """One batch, in log order; a control batch with the marker it holds (None: not a
        transaction marker). Returns the entry an abort marker makes."""
        pid = h.producer_id
        if pid < 0:
            return None
        if h.is_control:
            if marker is None:
                return None
            first = self.open.pop(pid, None)
            if first is None or marker.commit:
                return None
            return AbortedTxn(
                pid, first, h.base_offset, min([*self.open.values(), h.base_offset + 1])
            )
        if h.is_transactional:
            self.open.setdefault(pid, h.base_offset)
        return None
