"""Errors raised by the storage layer.

Operating errors, not bugs: callers map them to protocol errors (HTTP status and
``error_code``) or CLI messages.
"""

from __future__ import annotations

from typing import ClassVar


class StorageError(Exception):
    """Base class of storage errors."""


class CorruptRecordError(StorageError):
    """A batch failed its CRC, has an impossible header, or a body that does not decode.

    ``path`` and ``position`` say where, when the batch came from a file; a corrupt batch is
    reported and never served.
    """

    def __init__(self, reason: str, *, path: str | None = None, position: int | None = None):
        self.reason = reason
        self.path = path
        self.position = position
        where = ""
        if path is not None:
            where = f" in {path}"
        if position is not None:
            where += f" at byte {position}"
        super().__init__(f"corrupt record batch{where}: {reason}")

    def at(self, path: str, position: int) -> CorruptRecordError:
        """The same error, located in a file."""
        return CorruptRecordError(self.reason, path=path, position=position)


class OffsetOutOfRangeError(StorageError):
    """A read asked for an offset below the log start or above the log end."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")


class RecordTooLargeError(StorageError):
    """A batch is larger than the log accepts (``max.message.bytes``)."""


class InvalidRecordError(StorageError):
    """A batch is well formed but not acceptable here (offsets going backwards, bad magic)."""


class CorruptCheckpointError(StorageError):
    """A checkpoint file (recovery point, log start, leader epoch cache) failed its checksum
    or does not parse. ``PartitionLog.open`` takes the safe choice for each of its own
    (docs/storage.md, "Error handling") and reports it; other callers decide."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"corrupt checkpoint {path}: {reason}")


class CorruptSegmentError(CorruptRecordError):
    """A batch in a segment file that was fsynced (below the recovery point, or in a closed
    segment) failed its CRC or header checks: on-disk corruption, not a torn write.

    ``offset`` is the first offset the bad batch may hold (the end of the last good batch
    before it): the range from there on cannot be served from this replica and must be
    fetched again from the leader (or restored). Never served to a reader.
    """

    code: ClassVar[str] = "KAFKA_STORAGE_ERROR"

    def __init__(self, reason: str, *, path: str, position: int, offset: int):
        super().__init__(reason, path=path, position=position)
        self.offset = offset
        self.args = (f"{self.args[0]} (offset {offset} onwards is unreadable)",)


class KafkaStorageError(StorageError):
    """The disk refused: the request cannot be served by this log, or by any log of its
    directory (Kafka's ``KAFKA_STORAGE_ERROR``; HTTP 507 Insufficient Storage). Nothing of
    a refused append is in the log. Retriable: leadership moves off an offline directory,
    and a full disk may get space back."""

    code: ClassVar[str] = "KAFKA_STORAGE_ERROR"
    retriable: ClassVar[bool] = True

    def __init__(self, message: str, *, dir_path: str | None = None):
        super().__init__(message)
        self.dir_path = dir_path


class LogDirOfflineError(KafkaStorageError):
    """The log directory failed (an I/O error on write, read or fsync, Kafka's "offline log
    directory"): no log in it appends, reads, flushes or acknowledges again in this
    process; what was not flushed before the failure is never reported durable.
    ``storage.logdir.LogDirectory.failure`` says what failed."""


class OutOfSpaceError(KafkaStorageError):
    """No space left on the device (ENOSPC, EDQUOT): the append was refused and whatever
    part of it reached the file was cut off again. Not a directory failure: appends work
    again once space is freed."""
