"""Helpers shared by the storage unit tests: batches, logs in temp dirs, reading back."""

from __future__ import annotations

from storage.batch import Record, decode_records, encode_batch, iter_batches
from storage.config import LogConfig
from storage.fileio import FileLayer, RealFileLayer
from storage.log import PartitionLog


def batch(
    n: int = 1,
    *,
    key: bytes | None = b"k",
    ts: int = 1000,
    value_bytes: int = 10,
    keys: list[bytes | None] | None = None,
) -> bytes:
    """A batch of ``n`` records with timestamps ts..ts+n-1."""
    ks = keys if keys is not None else [key] * n
    return encode_batch([(k, b"v" * value_bytes, ts + i, []) for i, k in enumerate(ks)])


def open_log(path: str, files: FileLayer | None = None, **kafka: str) -> PartitionLog:
    return PartitionLog.open(str(path), LogConfig.from_kafka(kafka), files or RealFileLayer())


def read_all(log: PartitionLog, start: int | None = None) -> list[Record]:
    """Every record from ``start`` (default: log start) to the log end, via ``read``."""
    out: list[Record] = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).data
        if not data:
            break
        for pos, h in iter_batches(data):
            out += decode_records(data[pos : pos + h.size])
            offset = h.next_offset
    return out


def offsets(log: PartitionLog) -> list[int]:
    return [r.offset for r in read_all(log)]
