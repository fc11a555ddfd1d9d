"""Errors raised by the storage layer.

Operating errors, not bugs: callers map them to protocol errors (HTTP status and
``error_code``) or CLI messages.
"""

from __future__ import annotations


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
        super().__init__(
            f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]"
        )


class RecordTooLargeError(StorageError):
    """A batch is larger than the log accepts (``max.message.bytes``)."""


class InvalidRecordError(StorageError):
    """A batch is well formed but not acceptable here (offsets going backwards, bad magic)."""
