"""Small files a log keeps beside its segments, each replaced atomically.

* ``recovery-point-offset-checkpoint``: every offset below it was fsynced; recovery scans
  only segments that may hold offsets at or above it.
* ``log-start-offset-checkpoint``: the log start offset, when ``delete_records_before``
  moved it inside a segment (otherwise it is the first segment's base offset).

Both are Kafka's text format cut down to one log: a version line ``0`` then the offset::

    0
    1200

* ``clean-shutdown``: written last by ``close()``, deleted (and the deletion made durable)
  first thing after an open, before any append. Its presence means every segment's index
  files are current and the log needs no scan. JSON::

    {"version": 0, "log_end_offset": 1200, "active_base_offset": 1000,
     "active_segment_bytes": 8192}

  The active segment's size is checked against the marker; any mismatch means "not clean".
"""

from __future__ import annotations

import json
import os

from storage.errors import StorageError
from storage.fileio import FileLayer

RECOVERY_POINT_NAME = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_NAME = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_NAME = "clean-shutdown"
_VERSION = 0


def read_offset(files: FileLayer, dir_path: str, name: str) -> int | None:
    path = os.path.join(dir_path, name)
    if not files.exists(path):
        return None
    text = files.read_file(path).decode("ascii", "replace")
    try:
        version, value = text.split()
        if int(version) != _VERSION:
            raise ValueError(f"unknown version {version}")
        return int(value)
    except ValueError as e:
        raise StorageError(f"malformed {path}: {e}") from None


def write_offset(files: FileLayer, dir_path: str, name: str, offset: int) -> None:
    files.write_file_atomic(os.path.join(dir_path, name), f"{_VERSION}\n{offset}\n".encode())


def read_clean_shutdown(files: FileLayer, dir_path: str) -> dict[str, int] | None:
    path = os.path.join(dir_path, CLEAN_SHUTDOWN_NAME)
    if not files.exists(path):
        return None
    try:
        data = json.loads(files.read_file(path))
        if data.get("version") != _VERSION:
            return None
        return {k: int(data[k]) for k in
                ("log_end_offset", "active_base_offset", "active_segment_bytes")}
    except (ValueError, KeyError, TypeError):
        return None  # a damaged marker only costs a recovery scan


def write_clean_shutdown(files: FileLayer, dir_path: str, *, log_end_offset: int,
                         active_base_offset: int, active_segment_bytes: int) -> None:
    body = json.dumps({
        "version": _VERSION,
        "log_end_offset": log_end_offset,
        "active_base_offset": active_base_offset,
        "active_segment_bytes": active_segment_bytes,
    }).encode()
    files.write_file_atomic(os.path.join(dir_path, CLEAN_SHUTDOWN_NAME), body)


def remove_clean_shutdown(files: FileLayer, dir_path: str) -> None:
    path = os.path.join(dir_path, CLEAN_SHUTDOWN_NAME)
    if files.exists(path):
        files.unlink(path)
        files.fsync_dir(dir_path)
