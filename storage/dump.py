"""Read-only inspection of a log directory: what ``longboat log dump|verify`` print.

Reads the segment files directly (no ``PartitionLog``: a corrupt log must still be
inspectable, and inspecting must not recover or change anything). Each segment is walked
batch by batch; a batch with a bad CRC is reported and the walk goes on (its length field
is the only way to find the next batch); an impossible header or an incomplete batch ends
the walk of that file.
"""

from __future__ import annotations

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
from storage.segment import parse_segment_name
from storage.txn import marker_of_record

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
