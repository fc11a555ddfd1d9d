"""The partition side of transactions against a reference model of one partition: interleaved
transactional and plain appends by three producers, commit and abort markers, a moving high
watermark, truncation of the unreplicated tail, and restarts (from a snapshot, or rebuilt from
the log's headers and markers).

The model keeps the log as a list of entries (offset, producer, kind, value) and derives
everything from it. After every step:

* the LSO equals min(first offset of the oldest open transaction, HW);
* the aborted transactions in the log's index equal the model's (producer, first offset,
  marker offset, and the LSO just after the marker);
* a read_committed read of the real batches up to the LSO, through
  ``storage.txn.read_committed_view`` with the aborted transactions of the range, yields
  exactly the model's committed records below the LSO (plain ones, and those of transactions
  not aborted), in offset order, control batches never among them;
* the live state equals the state rebuilt from the log (headers plus markers);
* the log is a real ``storage.log.PartitionLog`` (small segments) fed the abort entries the
  producer state makes, as the partition leader does: its per-segment ``.txnindex`` is what
  the aborted transactions are read from, through rolls, truncation and restarts (clean, or
  a kill that leaves the active segment's entries to be rebuilt).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.producer_state import ProducerState
from storage.batch import decode_records, encode_batch, iter_batches, parse_header, stamp
from storage.config import LogConfig
from storage.fileio import LazyFileLayer
from storage.log import PartitionLog
from storage.txn import ControlMarker, encode_marker_batch, read_committed_view

PIDS = (1, 2, 3)


@dataclass
class Entry:
    offset: int
    pid: int  # -1: plain
    kind: str  # "data" | "commit" | "abort"
    value: bytes | None
    raw: bytes


@dataclass
class Model:
    entries: list[Entry] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.entries[-1].offset + 1 if self.entries else 0

    def txns(self) -> tuple[dict[int, int], list[tuple[int, int, int]], set[int]]:
        """(open: pid -> first offset, aborted [(pid, first, marker)], aborted data offsets)"""
        open_: dict[int, int] = {}
        members: dict[int, list[int]] = {}
        aborted: list[tuple[int, int, int]] = []
        aborted_offsets: set[int] = set()
        for e in self.entries:
            if e.pid < 0:
                continue
            if e.kind == "data":
                open_.setdefault(e.pid, e.offset)
                members.setdefault(e.pid, []).append(e.offset)
            else:
                first = open_.pop(e.pid, None)
                offs = members.pop(e.pid, [])
                if first is not None and e.kind == "abort":
                    aborted.append((e.pid, first, e.offset))
                    aborted_offsets.update(offs)
        return open_, aborted, aborted_offsets


class TxnPartition(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.model = Model()
        self.state = ProducerState()
        self.hw = 0
        self.seq = dict.fromkeys(PIDS, 0)
        self.ts = 0
        self.dir = tempfile.mkdtemp(prefix="txn-model-")
        self.files = LazyFileLayer()  # no real fsyncs: a kill keeps what was written
        self.log = self._open_log()

    def _open_log(self) -> PartitionLog:
        config = LogConfig.from_kafka({"segment.bytes": "800"})
        return PartitionLog.open(self.dir, config, self.files)

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.abandon()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _append(self, raw: bytes, pid: int, kind: str, value: bytes | None, marker=None) -> None:
        off = self.model.end
        buf = bytearray(raw)
        stamp(buf, off, 0)
        h = parse_header(buf)
        if kind == "data":
            self.state.check_and_plan(h._replace(base_offset=0))
        base, _ = self.log.append(raw, leader_epoch=0)
        assert base == off
        aborted = self.state.on_append(h, off, marker)
        if aborted is not None:
            self.log.append_aborted_txn(aborted)
        self.model.entries.append(Entry(off, pid, kind, value, bytes(buf)))

    @rule(value=st.binary(max_size=3))
    def plain(self, value: bytes) -> None:
        self.ts += 1
        self._append(encode_batch([(None, value, self.ts, ())]), -1, "data", value)

    @rule(pid=st.sampled_from(PIDS), value=st.binary(max_size=3))
    def transactional(self, pid: int, value: bytes) -> None:
        self.ts += 1
        raw = encode_batch(
            [(None, value, self.ts, ())],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=self.seq[pid],
            transactional=True,
        )
        self.seq[pid] += 1
        self._append(raw, pid, "data", value)

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans())
    def end_txn(self, pid: int, commit: bool) -> None:
        self.ts += 1
        m = ControlMarker(commit, 0)
        self.state.check_marker(pid, 0, 0)
        raw = encode_marker_batch(pid, 0, m, timestamp_ms=self.ts)
        self._append(raw, pid, "commit" if commit else "abort", None, m)

    @rule(data=st.data())
    def advance_hw(self, data: st.DataObject) -> None:
        self.hw = data.draw(st.integers(self.hw, self.model.end))
        self.state.on_high_watermark(self.hw)

    @rule(data=st.data())
    def truncate_tail(self, data: st.DataObject) -> None:
        # A follower cuts what was never committed (at or above the HW, KIP-101).
        cut = data.draw(st.integers(self.hw, self.model.end))
        self.model.entries = [e for e in self.model.entries if e.offset < cut]
        self.log.truncate_to(cut)
        if self.state.can_truncate_to(cut):
            self.state.truncate_to(cut)
        else:  # as ReplicaManager.truncate: rebuild from what is left of the log
            self.state = self._rebuilt()
            self.state.on_high_watermark(self.hw)
        # Sequences after the cut are gone too: the producer resends from there.
        for pid in PIDS:
            self.seq[pid] = sum(1 for e in self.model.entries if e.pid == pid and e.kind == "data")

    @rule(from_snapshot=st.booleans(), crash=st.booleans())
    def restart(self, from_snapshot: bool, crash: bool) -> None:
        if crash:
            self.log.abandon()  # killed: the active segment's entries were only in memory
        else:
            self.log.close()
        self.log = self._open_log()
        assert self.log.recovery.txn_indexes_rebuilt == []
        if from_snapshot:
            self.state = ProducerState.from_snapshot(self.state.encode_snapshot())
        else:
            self.state = self._rebuilt()
        self.state.on_high_watermark(self.hw)

    def _rebuilt(self) -> ProducerState:
        headers = [parse_header(e.raw) for e in self.model.entries]
        markers = {
            e.offset: ControlMarker(e.kind == "commit", 0)
            for e in self.model.entries
            if e.kind != "data"
        }
        return ProducerState.rebuild(headers, markers=markers)

    @invariant()
    def lso_and_aborted_index_match_the_model(self) -> None:
        open_, aborted, _ = self.model.txns()
        lso = min([*open_.values(), self.hw])
        assert self.state.last_stable_offset(self.hw) == lso
        got = self.log.aborted_txns_in(0, self.model.end + 1)
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in got] == aborted
        # Each entry's LSO: the oldest transaction open just after its marker.
        for a in got:
            still_open = Model([e for e in self.model.entries if e.offset <= a.last_offset])
            assert a.last_stable_offset == min([*still_open.txns()[0].values(), a.last_offset + 1])

    @invariant()
    def read_committed_sees_exactly_the_committed_records(self) -> None:
        _, _, aborted_offsets = self.model.txns()
        lso = self.state.last_stable_offset(self.hw)
        want = [
            (e.offset, e.value)
            for e in self.model.entries
            if e.offset < lso and e.kind == "data" and e.offset not in aborted_offsets
        ]
        data = b"".join(e.raw for e in self.model.entries if e.offset < lso)
        view = read_committed_view(data, self.log.aborted_txns_in(0, lso))
        got = []
        next_offset = 0
        for pos, h in iter_batches(view):
            assert h.base_offset == next_offset  # every offset accounted for
            next_offset = h.next_offset
            if not h.is_control:
                got += [(r.offset, r.value) for r in decode_records(view[pos : pos + h.size])]
        assert next_offset == lso
        assert got == want

    @invariant()
    def live_state_equals_the_state_rebuilt_from_the_log(self) -> None:
        rebuilt = self._rebuilt()
        assert rebuilt.producers == self.state.producers
        assert rebuilt.first_unstable_offset == self.state.first_unstable_offset


TxnPartition.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
test_txn_partition_model = TxnPartition.TestCase
