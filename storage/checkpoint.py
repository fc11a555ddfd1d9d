"""Small files a log keeps beside its segments, each replaced atomically.

* ``recovery-point-offset-checkpoint``: every offset below it was fsynced; recovery scans
  only segments that may hold offsets at or above it.
* ``log-start-offset-checkpoint``: the log start offset, when ``delete_records_before``
  moved it inside a segment (otherwise it is the first segment's base offset).

Both are Kafka's text format cut down to one log, plus a checksum: a version line ``1``,
the offset, then the CRC-32C (8 hex digits) of the lines before it::

    1
    1200
    5c1e4a2b

A flipped bit in a digit would still parse, and a recovery point or log start that jumps
is not harmless (the log end follows a recovery point above the data; a log start above the
log end empties the log), so a file whose checksum fails is ``CorruptCheckpointError``.
Version ``0`` files (no checksum line) written before the checksum are still read.

* ``clean-shutdown``: written last by ``close()``, deleted (and the deletion made durable)
  first thing after an open, before any append. Its presence means every segment's index
  files are current and the log needs no scan. JSON::

    {"version": 0, "log_end_offset": 1200, "active_base_offset": 1000,
     "active_segment_bytes": 8192}

  The active segment's size is checked against the marker; any mismatch means "not clean".
  Version 1 adds ``"crc"``: the CRC-32C of the same object without it (``sort_keys``); a
  marker that fails it is ignored (a recovery scan follows), as a missing one.
"""

from __future__ import annotations

import json
import os

import crc32c

from storage.errors import CorruptCheckpointError
from storage.fileio import FileLayer

RECOVERY_POINT_NAME = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_NAME = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_NAME = "clean-shutdown"
_VERSION = 1
SEALED_VERSION = 1
"""Text checkpoints from this version on end with a CRC-32C line (``seal``)."""
_MARKER_FIELDS = ("log_end_offset", "active_base_offset", "active_segment_bytes")


def seal(lines: list[str]) -> bytes:
    """``lines`` (the first is the version, at least ``SEALED_VERSION``) and a last line
    holding the CRC-32C of everything before it."""
    body = "".join(line + "\n" for line in lines).encode("ascii")
    return body + f"{crc32c.crc32c(body):08x}\n".encode("ascii")


def unseal(data: bytes, path: str) -> list[str]:
    """The lines of a text checkpoint, checksum checked and removed (version 0 files have
    none); ``CorruptCheckpointError`` if it fails or the text is not ASCII lines."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise CorruptCheckpointError(path, "not ASCII text") from None
    lines = text.splitlines()
    if not lines or not text.endswith("\n"):
        raise CorruptCheckpointError(path, "empty or cut short")
    try:
        version = int(lines[0])
    except ValueError:
        raise CorruptCheckpointError(path, f"bad version line {lines[0][:20]!r}") from None
    if version == 0:
        return lines
    if version < 0 or version > SEALED_VERSION:
        raise CorruptCheckpointError(path, f"unknown version {version}")
    body = data[: len(data) - len(lines[-1]) - 1]
    if lines[-1] != f"{crc32c.crc32c(body):08x}" or len(lines) < 2:
        raise CorruptCheckpointError(path, "checksum mismatch")
    return lines[:-1]


def read_offset(files: FileLayer, dir_path: str, name: str) -> int | None:
    """The offset in checkpoint ``name``, None if there is none; ``CorruptCheckpointError``
    if the file fails its checksum or does not parse."""
    path = os.path.join(dir_path, name)
    if not files.exists(path):
        return None
    lines = unseal(files.read_file(path), path)
    try:
        (value,) = lines[1:]
        offset = int(value)
    except ValueError:
        raise CorruptCheckpointError(path, f"expected one offset, got {lines[1:]!r:.60}") from None
    if offset < 0:
        raise CorruptCheckpointError(path, f"negative offset {offset}")
    return offset


def write_offset(files: FileLayer, dir_path: str, name: str, offset: int) -> None:
    files.write_file_atomic(os.path.join(dir_path, name), seal([str(_VERSION), str(offset)]))


def _marker_crc(fields: dict[str, int]) -> int:
    return crc32c.crc32c(json.dumps(fields, sort_keys=True).encode())


def read_clean_shutdown(files: FileLayer, dir_path: str) -> dict[str, int] | None:
    path = os.path.join(dir_path, CLEAN_SHUTDOWN_NAME)
    if not files.exists(path):
        return None
    try:
        data = json.loads(files.read_file(path))
        version = data.get("version")
        fields = {k: data[k] for k in _MARKER_FIELDS}
        if not all(type(v) is int and v >= 0 for v in fields.values()):
            return None
        if version == 1:
            if data.get("crc") != _marker_crc({"version": 1, **fields}):
                return None
        elif version != 0:
            return None
        return fields
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # a damaged marker only costs a recovery scan


def write_clean_shutdown(
    files: FileLayer,
    dir_path: str,
    *,
    log_end_offset: int,
    active_base_offset: int,
    active_segment_bytes: int,
) -> None:
    fields = {
        "version": 1,
        "log_end_offset": log_end_offset,
        "active_base_offset": active_base_offset,
        "active_segment_bytes": active_segment_bytes,
    }
    body = json.dumps({**fields, "crc": _marker_crc(fields)}).encode()
    files.write_file_atomic(os.path.join(dir_path, CLEAN_SHUTDOWN_NAME), body)


def remove_clean_shutdown(files: FileLayer, dir_path: str) -> None:
    path = os.path.join(dir_path, CLEAN_SHUTDOWN_NAME)
    if files.exists(path):
        files.unlink(path)
        files.fsync_dir(dir_path)
