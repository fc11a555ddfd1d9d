"""Read-only inspection of a log directory: what ``longboat log dump|verify`` print.

Segments (``.log``) and their sparse indexes (``.index``: offset -> position, ``.timeindex``:
timestamp -> offset; layouts in ``storage.index``), and their aborted-transaction indexes
(``.txnindex``, ``storage.txn_index``, printed as Kafka's ``kafka-dump-log`` prints them). Reads the files directly (no ``PartitionLog``: a corrupt log must still be
inspectable, and inspecting must not recover or change anything). Each segment is walked
batch by batch; a batch with a bad CRC is reported and the walk goes on (its length field
is the only way to find the next batch); an impossible header or an incomplete batch ends
the walk of that file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from storage.batch import (
    HEADER_SIZE,
    BatchHeader,
    Record,
    compute_crc,
    decode_records,
    parse_header,
)
from storage.errors import CorruptRecordError
from storage.index import OFFSET_ENTRY, OFFSET_ENTRY_SIZE, TIME_ENTRY, TIME_ENTRY_SIZE
from storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, parse_segment_name
from storage.txn import marker_of_record
from storage.txn_index import ENTRY, ENTRY_BYTES, TXNINDEX_SUFFIX, TxnIndexError, parse_entries

_CHUNK_BYTES = 1 << 20


@dataclasses.dataclass
class BatchInfo:
    path: str
    position: int
    header: BatchHeader
    crc_computed: int
    records: list[Record] | None = None
    records_error: str | None = None

    @property
    def crc_valid(self) -> bool:
        return self.crc_computed == self.header.crc

    def to_json(self) -> dict[str, Any]:
        h = self.header
        out: dict[str, Any] = {
            "path": self.path,
            "position": self.position,
            "base_offset": h.base_offset,
            "last_offset": h.last_offset,
            "count": h.record_count,
            "size": h.size,
            "leader_epoch": h.leader_epoch,
            "magic": h.magic,
            "crc": f"{h.crc:#010x}",
            "crc_valid": self.crc_valid,
            "compression": h.compression.name.lower(),
            "first_timestamp": h.first_timestamp,
            "max_timestamp": h.max_timestamp,
            "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch,
            "base_sequence": h.base_sequence,
            "transactional": h.is_transactional,
            "control": h.is_control,
        }
        if self.records is not None:
            out["records"] = [
                {
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": _text(r.key),
                    "value": _text(r.value),
                    "headers": [[n, _text(v)] for n, v in r.headers],
                }
                for r in self.records
            ]
        if self.records_error is not None:
            out["records_error"] = self.records_error
        return out


@dataclasses.dataclass
class Problem:
    path: str
    position: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: byte {self.position}: {self.reason}"


def segment_files(dir_path: str) -> list[str]:
    """The ``.log`` files of a log directory, in offset order (or one file given directly)."""
    if os.path.isfile(dir_path):
        return [dir_path]
    names = [n for n in os.listdir(dir_path) if parse_segment_name(n) is not None]
    return [os.path.join(dir_path, n) for n in sorted(names)]


def walk_segment(path: str, *, records: bool = False) -> Iterator[BatchInfo | Problem]:
    """Every batch of one ``.log`` file, then at most one ``Problem`` that ended the walk."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        fd = f.fileno()
        pos = 0
        while pos < size:
            if size - pos < HEADER_SIZE:
                yield Problem(path, pos, f"incomplete batch: {size - pos} bytes at the end")
                return
            head = os.pread(fd, HEADER_SIZE, pos)
            try:
                h = parse_header(head)
            except CorruptRecordError as e:
                yield Problem(path, pos, e.reason)
                return
            if pos + h.size > size:
                yield Problem(
                    path,
                    pos,
                    f"incomplete batch: header says {h.size} bytes, {size - pos} left in the file",
                )
                return
            raw = os.pread(fd, h.size, pos)
            info = BatchInfo(path, pos, h, compute_crc(raw))
            if records and info.crc_valid:
                try:
                    info.records = decode_records(raw, verify=False)
                except CorruptRecordError as e:
                    info.records_error = e.reason
            yield info
            pos += h.size


def verify_dir(dir_path: str) -> tuple[int, list[Problem]]:
    """``(batches checked, problems)``: CRCs, headers, bodies, and offsets increasing."""
    problems: list[Problem] = []
    count = 0
    next_offset = -1
    for path in segment_files(dir_path):
        for item in walk_segment(path, records=True):
            if isinstance(item, Problem):
                problems.append(item)
                continue
            count += 1
            h = item.header
            if not item.crc_valid:
                problems.append(
                    Problem(
                        path,
                        item.position,
                        f"crc mismatch: stored {h.crc:#010x}, computed {item.crc_computed:#010x}",
                    )
                )
            elif item.records_error is not None:
                problems.append(Problem(path, item.position, item.records_error))
            if h.base_offset < next_offset:
                problems.append(
                    Problem(
                        path,
                        item.position,
                        f"offset {h.base_offset} goes back (expected >= {next_offset})",
                    )
                )
            next_offset = max(next_offset, h.next_offset)
    return count, problems


def format_batch(info: BatchInfo) -> str:
    """One line per batch, after kafka-dump-log's."""
    h = info.header
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.leader_epoch} isTransactional: "
        f"{str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
        f"position: {info.position} CreateTime: {h.max_timestamp} size: {h.size} "
        f"magic: {h.magic} compresscodec: {h.compression.name.lower()} "
        f"crc: {h.crc:#010x} isvalid: {str(info.crc_valid).lower()}"
    )


def format_record(r: Record, *, control: bool = False) -> str:
    """One line per record; a control record (``control``) shows its transaction marker as
    kafka-dump-log does (``endTxnMarker: COMMIT coordinatorEpoch: 3``)."""
    sizes = (
        f"| offset: {r.offset} CreateTime: {r.timestamp} "
        f"keySize: {-1 if r.key is None else len(r.key)} "
        f"valueSize: {-1 if r.value is None else len(r.value)} "
    )
    if control:
        try:
            m = marker_of_record(r.key, r.value)
        except CorruptRecordError as e:
            return sizes + f"control record: {e.reason}"
        kind = "COMMIT" if m.commit else "ABORT"
        return sizes + f"endTxnMarker: {kind} coordinatorEpoch: {m.coordinator_epoch}"
    return (
        sizes + f"key: {_text(r.key)} payload: {_text(r.value)} "
        f"headerKeys: [{','.join(n for n, _ in r.headers)}]"
    )


def _text(b: bytes | None) -> str | None:
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + b.hex()


# ------------------------------------------------------------------ index files


@dataclasses.dataclass
class IndexEntry:
    """One entry of a ``.index`` (``timestamp`` None) or ``.timeindex`` (``position``
    None) file, with absolute offsets."""

    path: str
    slot: int
    offset: int
    position: int | None = None
    timestamp: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "slot": self.slot, "offset": self.offset}
        if self.position is not None:
            out["position"] = self.position
        if self.timestamp is not None:
            out["timestamp"] = self.timestamp
        return out

    def __str__(self) -> str:
        if self.timestamp is not None:
            return f"timestamp: {self.timestamp} offset: {self.offset}"
        return f"offset: {self.offset} position: {self.position}"


_INDEX_SUFFIXES = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)


def index_files(dir_path: str) -> list[str]:
    """The ``.index``, ``.timeindex`` and ``.txnindex`` files of a log directory, in offset
    order (or the one given directly)."""
    if os.path.isfile(dir_path):
        return [dir_path]
    names = [
        n
        for n in os.listdir(dir_path)
        if n.endswith(_INDEX_SUFFIXES) and n.partition(".")[0].isdigit()
    ]
    return [os.path.join(dir_path, n) for n in sorted(names)]


def is_index_file(path: str) -> bool:
    return path.endswith(_INDEX_SUFFIXES)


@dataclasses.dataclass
class TxnIndexEntry:
    """One entry of a ``.txnindex``."""

    path: str
    slot: int
    version: int
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return (
            f"version: {self.version} producerId: {self.producer_id} firstOffset: "
            f"{self.first_offset} lastOffset: {self.last_offset} lastStableOffset: "
            f"{self.last_stable_offset}"
        )


def walk_txn_index(path: str, base: int) -> Iterator[TxnIndexEntry | Problem]:
    """Every entry of a ``.txnindex``, then what its checks find (``storage.txn_index``;
    the segment's end is not known here, so a marker past it is not caught)."""
    with open(path, "rb") as f:
        data = f.read()
    for slot in range(len(data) // ENTRY_BYTES):
        yield TxnIndexEntry(path, slot, *ENTRY.unpack_from(data, slot * ENTRY_BYTES))
    try:
        parse_entries(data, base, 1 << 62)
    except TxnIndexError as e:
        yield Problem(path, 0, str(e))


def walk_index(path: str) -> Iterator[IndexEntry | TxnIndexEntry | Problem]:
    """Every entry of an index file, each checked as kafka-dump-log checks them: offsets
    (and positions, timestamps) increasing, and an offset index entry pointing at the start
    of a batch with that base offset in the segment's ``.log`` (when it is there)."""
    name = os.path.basename(path)
    stem, _, _ = name.partition(".")
    if len(stem) != 20 or not stem.isdigit():
        yield Problem(path, 0, f"not a segment index name (expected <20 digits>{INDEX_SUFFIX})")
        return
    base = int(stem)
    if name.endswith(TXNINDEX_SUFFIX):
        yield from walk_txn_index(path, base)
        return
    timed = name.endswith(TIMEINDEX_SUFFIX)
    entry, size = (TIME_ENTRY, TIME_ENTRY_SIZE) if timed else (OFFSET_ENTRY, OFFSET_ENTRY_SIZE)
    with open(path, "rb") as f:
        data = f.read()
    log_path = os.path.join(os.path.dirname(path), stem + LOG_SUFFIX)
    log_size = os.path.getsize(log_path) if os.path.exists(log_path) else None
    last: IndexEntry | None = None
    with contextlib.ExitStack() as stack:
        log_fd = None
        if log_size is not None and not timed:
            log_fd = stack.enter_context(open(log_path, "rb")).fileno()
        for slot in range(len(data) // size):
            a, b = entry.unpack_from(data, slot * size)
            e = (
                IndexEntry(path, slot, base + b, timestamp=a)
                if timed
                else IndexEntry(path, slot, base + a, position=b)
            )
            yield e
            pos = slot * size
            if last is not None and (
                e.offset < last.offset
                or (not timed and e.offset == last.offset)
                or (timed and (e.timestamp or 0) < (last.timestamp or 0))
                or (not timed and (e.position or 0) <= (last.position or 0))
            ):
                yield Problem(path, pos, f"entry {slot} ({e}) does not increase after ({last})")
            if log_fd is not None and log_size is not None:
                yield from _check_against_log(path, pos, e, log_fd, log_size)
            last = e
    if len(data) % size:
        yield Problem(
            path,
            len(data) - len(data) % size,
            f"{len(data) % size} trailing bytes (entries are {size} bytes)",
        )


def _check_against_log(
    path: str, pos: int, e: IndexEntry, log_fd: int, log_size: int
) -> Iterator[Problem]:
    assert e.position is not None
    if e.position + HEADER_SIZE > log_size:
        yield Problem(path, pos, f"entry {e.slot} ({e}) points past the log's {log_size} bytes")
        return
    try:
        h = parse_header(os.pread(log_fd, HEADER_SIZE, e.position))
    except CorruptRecordError as err:
        yield Problem(path, pos, f"entry {e.slot} ({e}): no batch starts there ({err.reason})")
        return
    if h.base_offset != e.offset:
        yield Problem(
            path, pos, f"entry {e.slot} ({e}): the batch there starts at offset {h.base_offset}"
        )
