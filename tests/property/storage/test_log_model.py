"""PartitionLog against a plain list of batches, under random operations.

The model is the list of batches a reader should see, each ``(base, last, epoch,
[(offset, key, value, timestamp)])``, plus log start/end offsets, the flushed offset and
the leader epoch history. Appends, reads, truncations, rolls, retention, delete-records,
compaction, clean reopens and crashes (a lazy file layer losing, or tearing, what was not
fsynced) are applied to both; after every step the log must read back exactly the model.

Compaction and retention depend on segment boundaries the model does not track, so for
those the log's result is checked against rules and then adopted as the new model:
retention removes whole batches from the front only and never the active segment;
compaction removes only keyed records that have a later record of the same key, never
changes an offset or a kept record, and never touches the active segment. A crash must
recover a prefix of the model that keeps every flushed batch.
"""

from __future__ import annotations

import random
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from storage.batch import decode_records, encode_batch, iter_batches, stamp
from storage.config import LogConfig
from storage.fileio import LazyFileLayer
from storage.log import PartitionLog

Rec = tuple[int, bytes | None, bytes | None, int]
Batch = tuple[int, int, int, list[Rec]]

CONFIG = LogConfig.from_kafka(
    {
        "segment.bytes": "700",
        "index.interval.bytes": "150",
        "cleanup.policy": "compact,delete",
        "retention.ms": "-1",
        "delete.retention.ms": str(10**12),
        "min.compaction.lag.ms": "0",
    }
)


def _read_log(log: PartitionLog) -> list[Batch]:
    out: list[Batch] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 2000).data
        if not data:
            break
        for pos, h in iter_batches(data):
            recs = decode_records(data[pos : pos + h.size])
            out.append(
                (
                    h.base_offset,
                    h.last_offset,
                    h.leader_epoch,
                    [(r.offset, r.key, r.value, r.timestamp) for r in recs],
                )
            )
            offset = h.next_offset
    return out


class LogMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="lb-model-")
        self.files = LazyFileLayer()
        self.log = PartitionLog.open(self.dir, CONFIG, self.files)
        self.batches: list[Batch] = []
        self.lso = 0
        self.leo = 0
        self.epoch = 0
        self.epochs: list[tuple[int, int]] = []
        self.ts = 1000
        self.value_seq = 0

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.abandon()
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers

    def _model_epoch_truncate_end(self, end: int) -> None:
        self.epochs = [(e, o) for e, o in self.epochs if o < end]

    def _model_epoch_truncate_start(self, start: int) -> None:
        before = [i for i, (_, o) in enumerate(self.epochs) if o <= start]
        if before:
            i = before[-1]
            self.epochs = [(self.epochs[i][0], start), *self.epochs[i + 1 :]]

    # ------------------------------------------------------------------ rules

    @rule(
        n=st.integers(1, 6),
        keys=st.lists(st.sampled_from([b"a", b"b", b"c", None]), min_size=6, max_size=6),
        size=st.integers(0, 60),
        leader=st.booleans(),
    )
    def append(self, n: int, keys: list[bytes | None], size: int, leader: bool) -> None:
        recs = []
        for i in range(n):
            self.value_seq += 1
            recs.append((keys[i], b"%d:" % self.value_seq + b"x" * size, self.ts + i, []))
        self.ts += n
        raw = encode_batch(recs)
        base = self.leo
        if leader:
            got = self.log.append(raw, leader_epoch=self.epoch)
        else:
            b = bytearray(raw)
            stamp(b, base, self.epoch)
            got = self.log.append_as_follower(bytes(b))
        assert got == (base, base + n - 1)
        self.batches.append(
            (
                base,
                base + n - 1,
                self.epoch,
                [(base + i, k, v, ts) for i, (k, v, ts, _) in enumerate(recs)],
            )
        )
        if not self.epochs or self.epochs[-1][0] != self.epoch:
            # Kafka's assign: entries at or after the new start (no data) are replaced.
            self.epochs = [(e, o) for e, o in self.epochs if o < base and e < self.epoch]
            self.epochs.append((self.epoch, base))
        self.leo = base + n

    @rule()
    def new_leader_epoch(self) -> None:
        self.epoch += 1

    @rule(offset=st.integers(0, 200), max_bytes=st.integers(1, 1500))
    def read(self, offset: int, max_bytes: int) -> None:
        if not self.lso <= offset <= self.leo:
            return
        data = self.log.read(offset, max_bytes).data
        expect = [b for b in self.batches if b[1] >= offset]
        got = [(h.base_offset, h.last_offset) for _, h in iter_batches(data)]
        if not expect:
            assert got == []
            return
        assert got, "a read below the log end returns at least one batch"
        assert got == [(b[0], b[1]) for b in expect[: len(got)]]
        assert len(got) == 1 or len(data) <= max_bytes

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(max(0, self.lso - 2), self.leo + 1))
        self.log.truncate_to(offset)
        if offset >= self.leo:
            return
        if offset < self.lso:
            self.batches, self.lso, self.leo, self.epochs = [], offset, offset, []
            return
        new_leo = offset
        for b in self.batches:
            if b[0] < offset <= b[1]:
                new_leo = max(b[0], self.lso)
        self.batches = [b for b in self.batches if b[1] < offset]
        self.leo = new_leo
        self._model_epoch_truncate_end(new_leo)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def flush(self) -> None:
        assert self.log.flush() == self.leo

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.lso, self.leo))
        assert self.log.delete_records_before(offset) == max(offset, self.lso)
        if offset > self.lso:
            self.lso = offset
            self.batches = [b for b in self.batches if b[1] >= offset]
            self._model_epoch_truncate_start(offset)

    @rule(limit=st.integers(0, 3000))
    def retention_bytes(self, limit: int) -> None:
        self.log.update_config(LogConfig(**{**CONFIG.__dict__, "retention_bytes": limit}))
        self.log.maybe_apply_retention(now_ms=self.ts)
        self.log.update_config(CONFIG)
        got = _read_log(self.log)
        active_base = self.log.active_segment.base_offset
        dropped = self.batches[: len(self.batches) - len(got)]
        assert self.batches[len(dropped) :] == got, "retention removes a prefix only"
        assert all(b[1] < active_base for b in dropped), "never the active segment"
        self.batches = got
        assert self.log.log_start_offset >= self.lso
        self.lso = self.log.log_start_offset
        self._model_epoch_truncate_start(self.lso)

    @rule()
    def compact(self) -> None:
        active_base = self.log.active_segment.base_offset
        self.log.maybe_compact(now_ms=self.ts + 10**6)
        got = _read_log(self.log)
        before = {r[0]: r for b in self.batches for r in b[3]}
        after = {r[0]: r for b in got for r in b[3]}
        latest: dict[bytes, int] = {}
        for off in sorted(before):
            k = before[off][1]
            if k is not None:
                latest[k] = off
        for off, r in before.items():
            if off in after:
                assert after[off] == r, "a kept record is unchanged, offset included"
            else:
                assert r[1] is not None, "records without a key are kept"
                assert latest[r[1]] > off, "only superseded records go"
                assert off < active_base, "the active segment is not compacted"
        assert set(after) <= set(before)
        assert [(b[0], b[1]) for b in got] == [
            (b[0], b[1])
            for b in self.batches
            if any(r[0] in after for r in b[3]) or (b[0], b[1]) in {(g[0], g[1]) for g in got}
        ]
        self.batches = got

    @rule()
    def reopen_clean(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.dir, CONFIG, self.files)
        # Opening trims epochs that start at the log end (they hold no data), as Kafka.
        self._model_epoch_truncate_end(self.leo)

    @rule(seed=st.integers(0, 2**32 - 1), torn=st.booleans())
    def crash(self, seed: int, torn: bool) -> None:
        flushed = self.log.flushed_offset
        self.log.abandon()
        self.files.crash(random.Random(seed) if torn else None)
        self.files = LazyFileLayer()
        self.log = PartitionLog.open(self.dir, CONFIG, self.files)
        got = _read_log(self.log)
        assert got == self.batches[: len(got)], "recovery yields a prefix of the model"
        assert all(b[1] < self.log.log_end_offset for b in got)
        new_leo = self.log.log_end_offset
        assert new_leo >= flushed, "every flushed record survives"
        assert new_leo <= self.leo
        data_end = got[-1][1] + 1 if got else self.lso
        # The log ends where its data ends, or later only up to what was durable (a log
        # ending in a gap is restored from the recovery point).
        assert new_leo == data_end or new_leo <= flushed, (new_leo, data_end, flushed)
        assert self.log.log_start_offset == self.lso
        self.batches = got
        self.leo = new_leo
        self._model_epoch_truncate_end(new_leo)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def matches_model(self) -> None:
        if not hasattr(self, "log"):
            return
        assert (self.log.log_start_offset, self.log.log_end_offset) == (self.lso, self.leo)
        assert _read_log(self.log) == self.batches
        assert self.log.flushed_offset <= self.log.log_end_offset
        assert self.log.leader_epoch_cache.entries == self.epochs

    @precondition(lambda self: hasattr(self, "log"))
    @rule(epoch=st.integers(-1, 8))
    def end_offset_for_epoch(self, epoch: int) -> None:
        e, o = self.log.end_offset_for_epoch(epoch)
        if epoch == -1 or not self.epochs or epoch > self.epochs[-1][0]:
            assert (e, o) == (-1, -1)
        elif epoch == self.epochs[-1][0]:
            assert (e, o) == (epoch, self.leo)
        else:
            nxt = next(s for ep, s in self.epochs if ep > epoch)
            assert o == nxt


LogMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40)
TestPartitionLogModel = LogMachine.TestCase
