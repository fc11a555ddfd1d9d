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

import crc32c
import msgpack

from raft.types import EMPTY_HARD_STATE, HardState, LogIndex, NodeId, Term
from storage.errors import StorageError
from storage.fileio import FileLayer, default_file_layer

FILE_NAME = "quorum-state"
MAGIC = b"LBQS"
VERSION = 1
_HEAD = struct.Struct(">4sBII")


class CorruptQuorumStateError(StorageError):
    """The quorum-state file exists but cannot be trusted."""


EMPTY = EMPTY_HARD_STATE


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
        raise CorruptQuorumStateError(
            f"{path}: payload is {len(payload)} bytes, header says {length}"
        )
    if crc32c.crc32c(payload) != crc:
        raise CorruptQuorumStateError(f"{path}: crc mismatch")
    try:
        d = msgpack.unpackb(payload, raw=False)
        return HardState(
            term=Term(int(d["term"])),
            vote=NodeId(int(d["vote"])),
            commit=LogIndex(int(d["commit"])),
        )
    except Exception as e:
        raise CorruptQuorumStateError(f"{path}: payload does not decode: {e}") from e


class QuorumStateFile:
    """Loads and atomically saves the ``HardState`` of one node in ``directory``.

    Blocking (file I/O and fsync): the node calls it from a worker thread. All file access
    goes through the storage ``FileLayer``, so the fault-injecting layer sees it too.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: bool = True,
        file_layer: FileLayer | None = None,
    ) -> None:
        self.directory = str(directory)
        self.path = os.path.join(self.directory, FILE_NAME)
        self.fsync = fsync
        self.files = file_layer or default_file_layer()
        self.saves = 0

    def load(self) -> HardState:
        self.files.mkdir(self.directory)
        if not self.files.exists(self.path):
            return EMPTY
        return decode(self.files.read_file(self.path), path=self.path)

    def save(self, state: HardState) -> None:
        data = encode(state)
        if self.fsync:
            self.files.write_file_atomic(self.path, data)  # tmp, fsync, rename, fsync dir
        else:
            tmp = self.path + ".tmp"
            if self.files.exists(tmp):
                self.files.unlink(tmp)
            f = self.files.open(tmp)
            try:
                f.write(data)
            finally:
                f.close()
            self.files.replace(tmp, self.path)
        self.saves += 1
