"""The durable part of a Raft node's state that is not the log: term, vote, commit.

Owns one file, ``<dir>/quorum-state``, always replaced whole and atomically::

    off  size  field
      0     4  magic        b"LBQS"
      4     1  version      1
      5     4  crc          CRC-32C of the payload
      9     4  length       payload bytes
     13     *  payload      msgpack map {"term": int, "vote": int, "commit": int}

Write: the new contents go to ``quorum-state.tmp``, which is fsynced, renamed over
``quorum-state``, and the directory is fsynced, so a crash leaves either the old or the new
state, never a mix (KRaft's ``quorum-state`` file is written the same way). Load: a missing
file is the empty state (term 0, no vote); a file that fails its magic, length or CRC raises
``CorruptQuorumStateError``: a node must not guess its term or vote (Raft §5.1, §5.2: a node
that forgot its vote could vote twice in one term).

The node calls ``save`` (through a worker thread) before it sends any message that depends on
the new term or vote; ``save`` returns only after both fsyncs.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c
import msgpack

from storage.errors import StorageError

FILE_NAME = "quorum-state"
MAGIC = b"LBQS"
VERSION = 1
_HEAD = struct.Struct(">4sBII")


class CorruptQuorumStateError(StorageError):
    """The quorum-state file exists but cannot be trusted."""


@dataclass(frozen=True, slots=True)
class HardState:
    """What must survive a restart besides the log (etcd's ``HardState``).

    ``vote`` is 0 for "voted for nobody in ``term``" (node ids start at 1).
    Invariant: commit never decreases across saves of one node (checked by the node).
    """

    term: int = 0
    vote: int = 0
    commit: int = 0


EMPTY = HardState()


def encode(state: HardState) -> bytes:
    payload = msgpack.packb(
        {"term": state.term, "vote": state.vote, "commit": state.commit}, use_bin_type=True
    )
    return _HEAD.pack(MAGIC, VERSION, crc32c.crc32c(payload), len(payload)) + payload


def decode(buf: bytes, *, path: str = FILE_NAME) -> HardState:
    if len(buf) < _HEAD.size:
        raise CorruptQuorumStateError(f"{path}: {len(buf)} bytes, shorter than its header")
    magic, version, crc, length = _HEAD.unpack_from(buf)
    if magic != MAGIC or version != VERSION:
        raise CorruptQuorumStateError(f"{path}: bad magic {magic!r} or version {version}")
    payload = buf[_HEAD.size :]
    if len(payload) != length:
        raise CorruptQuorumStateError(f"{path}: payload is {len(payload)} bytes, header says {length}")
    if crc32c.crc32c(payload) != crc:
        raise CorruptQuorumStateError(f"{path}: crc mismatch")
    try:
        d = msgpack.unpackb(payload, raw=False)
        return HardState(term=int(d["term"]), vote=int(d["vote"]), commit=int(d["commit"]))
    except Exception as e:
        raise CorruptQuorumStateError(f"{path}: payload does not decode: {e}") from e


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class QuorumStateFile:
    """Loads and atomically saves the ``HardState`` of one node in ``directory``.

    Blocking (file I/O and fsync): the node calls it from a worker thread.
    """

    def __init__(self, directory: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        self.fsync = fsync
        self.saves = 0

    def load(self) -> HardState:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            buf = self.path.read_bytes()
        except FileNotFoundError:
            return EMPTY
        return decode(buf, path=str(self.path))

    def save(self, state: HardState) -> None:
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, encode(state))
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        if self.fsync:
            fsync_dir(self.directory)
        self.saves += 1
