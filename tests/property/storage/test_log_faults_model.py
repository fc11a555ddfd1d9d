"""PartitionLog against a list of batches, with disk faults injected by the lazy file layer.

Faults: fsync errors (with Linux's fsyncgate semantics: the lost bytes are gone, the next
fsync succeeds), write errors after a partial write, a full disk (a short write, then
ENOSPC), and crashes that lose or tear what was not fsynced. Rules checked after every step:

* an operation that raises changed nothing a reader can see: the log reads back exactly the
  model (no half-written batch, ever);
* ``OutOfSpaceError`` leaves the directory online, and appends work once space is freed;
  any other I/O error takes it offline, and from then on every append, read, flush and
  truncation refuses, and ``flushed_offset`` never moves again;
* after a crash, every batch below the last ``flushed_offset`` the log reported survives,
  and the log is a prefix of the model: nothing an error refused comes back.
"""

from __future__ import annotations

import errno
import random
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from storage.batch import decode_records, encode_batch, iter_batches, stamp
from storage.config import LogConfig
from storage.errors import KafkaStorageError, LogDirOfflineError, OutOfSpaceError
from storage.fileio import LazyFileLayer
from storage.log import PartitionLog

CONFIG = LogConfig.from_kafka({"segment.bytes": "600", "index.interval.bytes": "120"})

Batch = tuple[int, int, list[bytes | None]]


def _read_log(log: PartitionLog) -> list[Batch]:
    out: list[Batch] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 2000).data
        if not data:
            break
        for pos, h in iter_batches(data):
            out.append(
                (
                    h.base_offset,
                    h.last_offset,
                    [r.value for r in decode_records(data[pos : pos + h.size])],
                )
            )
            offset = h.next_offset
    return out


class FaultyLogMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="lb-faults-")
        self.files = LazyFileLayer()
        self.log = PartitionLog.open(self.dir, CONFIG, self.files)
        self.batches: list[Batch] = []
        self.leo = 0
        self.durable = 0  # flushed_offset as last seen: a crash must keep everything below
        self.offline = False
        self.seq = 0
        self.epoch = 0

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.abandon()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _expect_refusal(self, e: KafkaStorageError) -> None:
        """An operation raised: a full disk keeps the directory online, anything else
        takes it offline for good."""
        if isinstance(e, OutOfSpaceError):
            assert self.log.log_dir.online and not self.offline
        else:
            assert isinstance(e, LogDirOfflineError)
            assert not self.log.log_dir.online
            if not self.offline:
                self.durable = self.log.flushed_offset  # frozen from now on
            self.offline = True

    # ------------------------------------------------------------------ faults

    @rule(free=st.one_of(st.none(), st.integers(0, 400)))
    def disk_space(self, free: int | None) -> None:
        self.files.set_free_bytes(free)

    @rule(nth=st.integers(1, 4), any_file=st.booleans(), enospc=st.booleans())
    def arm_fsync_error(self, nth: int, any_file: bool, enospc: bool) -> None:
        self.files.fail_fsync(
            nth, error=errno.ENOSPC if enospc else errno.EIO, match="" if any_file else ".log"
        )

    @rule(nth=st.integers(1, 4), partial=st.integers(0, 80), any_file=st.booleans())
    def arm_write_error(self, nth: int, partial: int, any_file: bool) -> None:
        self.files.fail_write(nth, partial_bytes=partial, match="" if any_file else ".log")

    # ------------------------------------------------------------------ operations

    @rule(
        n=st.integers(1, 4), size=st.integers(0, 90), leader=st.booleans(), new_epoch=st.booleans()
    )
    def append(self, n: int, size: int, leader: bool, new_epoch: bool) -> None:
        self.epoch += new_epoch
        values = []
        for _ in range(n):
            self.seq += 1
            values.append(b"%d:" % self.seq + b"x" * size)
        raw = encode_batch([(b"k", v, 1000 + i, []) for i, v in enumerate(values)])
        base = self.leo
        try:
            if leader:
                got = self.log.append(raw, leader_epoch=self.epoch)
            else:
                b = bytearray(raw)
                stamp(b, base, self.epoch)
                got = self.log.append_as_follower(bytes(b))
        except KafkaStorageError as e:
            self._expect_refusal(e)
            return
        assert not self.offline, "an offline directory appended"
        assert got == (base, base + n - 1)
        self.batches.append((base, base + n - 1, list(values)))
        self.leo = base + n

    @rule()
    def flush(self) -> None:
        try:
            flushed = self.log.flush()
        except KafkaStorageError as e:
            self._expect_refusal(e)
            return
        assert not self.offline, "an offline directory flushed"
        assert flushed == self.leo

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.leo + 1))
        try:
            self.log.truncate_to(offset)
        except KafkaStorageError as e:
            self._expect_refusal(e)
            return
        assert not self.offline
        if offset < self.leo:
            kept = [b for b in self.batches if b[1] < offset]
            self.leo = next((b[0] for b in self.batches if b[0] < offset <= b[1]), offset)
            self.batches = kept

    @rule(seed=st.integers(0, 2**32 - 1), torn=st.booleans())
    def crash(self, seed: int, torn: bool) -> None:
        self.log.abandon()
        self.files.crash(random.Random(seed) if torn else None)
        self.files = LazyFileLayer()  # a fresh disk, faults disarmed, a fresh directory
        self.log = PartitionLog.open(self.dir, CONFIG, self.files)
        got = _read_log(self.log)
        assert got == self.batches[: len(got)], "recovery yields a prefix of the model"
        assert self.log.log_end_offset >= self.durable, "every flushed batch survives"
        self.batches = got
        self.leo = self.log.log_end_offset
        self.offline = False

    # ------------------------------------------------------------------ invariants

    @invariant()
    def reads_back_the_model(self) -> None:
        if not hasattr(self, "log"):
            return
        if self.offline:
            # (A truncation that failed half way may have moved the log end: the model
            # keeps the longer history, of which a crash must leave a prefix.)
            assert self.log.flushed_offset == self.durable, "flushed moved after the failure"
            try:
                self.log.read(0, 10)
            except LogDirOfflineError:
                pass
            else:
                raise AssertionError("an offline directory served a read")
            return
        assert self.log.log_end_offset == self.leo
        assert _read_log(self.log) == self.batches
        assert self.log.flushed_offset <= self.leo
        self.durable = self.log.flushed_offset
        for seg in self.log.segments:
            # Nothing half-written behind the end of any segment.
            assert seg.log.size() == seg.size_bytes


FaultyLogMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestFaultyPartitionLog = FaultyLogMachine.TestCase
