"""DurableLog on real files: what persist writes, open reads back."""

from __future__ import annotations

import os

import pytest

from raft.aio.durable_log import (
    CorruptSnapshotError,
    DurableLog,
    decode_snapshot,
    encode_snapshot,
)
from raft.aio.quorum_state import CorruptQuorumStateError
from raft.types import (
    ConfState,
    Entry,
    EntryKind,
    HardState,
    LogIndex,
    NodeId,
    Snapshot,
    SnapshotMetadata,
    Term,
)
from storage.batch import LEADER_EPOCH_OFFSET
from storage.errors import CorruptSegmentError

CS = ConfState(frozenset({NodeId(1), NodeId(2), NodeId(3)}))


def ents(lo: int, hi: int, term: int, tag: bytes = b"") -> list[Entry]:
    return [
        Entry(LogIndex(i), Term(term), EntryKind.NORMAL, tag + b"%d" % i) for i in range(lo, hi + 1)
    ]


def reopen(path) -> DurableLog:  # type: ignore[no-untyped-def]
    d = DurableLog(path)
    d.open(CS)
    return d


def persist(d: DurableLog, entries: list[Entry], hs: HardState | None = None) -> None:
    if hs is None and entries:
        # A node's term is never below its entries' (Raft §5.1), so a real Ready with entries
        # of a new term carries it; open refuses a log whose terms pass quorum-state's.
        cur, _ = d.memory.initial_state()
        top = max(e.term for e in entries)
        if top > cur.term:
            hs = HardState(Term(top), cur.vote, cur.commit)
    d.persist(hs, entries, None, True)
    d.mirror_ready(hs, entries, None)


def test_entries_terms_and_hard_state_survive_a_restart(tmp_path) -> None:
    d = reopen(tmp_path)
    persist(d, ents(1, 5, 1), HardState(Term(1), NodeId(2), LogIndex(0)))
    persist(d, ents(6, 9, 2), HardState(Term(2), NodeId(3), LogIndex(4)))
    d.close()
    d2 = reopen(tmp_path)
    m = d2.memory
    assert (m.first_index(), m.last_index()) == (1, 9)
    assert m.entries(LogIndex(1), LogIndex(10), None) == [*ents(1, 5, 1), *ents(6, 9, 2)]
    hs, cs = m.initial_state()
    assert (hs.term, hs.vote) == (2, 3) and cs == CS
    # entry i is at offset i - 1; one batch per term run
    assert d2.log_end_offset() == 9


def test_conflicting_suffix_inside_a_batch_is_replaced_and_the_prefix_kept(tmp_path) -> None:
    d = reopen(tmp_path)
    persist(d, ents(1, 10, 1))  # one batch, offsets 0..9
    persist(d, ents(8, 12, 2, b"new"))  # conflict at 8: the batch is cut, 1..7 re-appended
    assert d.stats.rewrites == 1
    want = [*ents(1, 7, 1), *ents(8, 12, 2, b"new")]
    assert d.memory.entries(LogIndex(1), LogIndex(13), None) == want
    d.close()
    assert reopen(tmp_path).memory.entries(LogIndex(1), LogIndex(13), None) == want


def snapshot_at(d: DurableLog, index: int, data: bytes) -> Snapshot:
    snap = Snapshot(SnapshotMetadata(LogIndex(index), Term(1), CS), data)
    d.save_snapshot(snap)
    d.memory.create_snapshot(LogIndex(index), CS, data)
    d.memory.compact(LogIndex(index))
    return snap


def test_snapshot_moves_log_start_to_the_previous_one_and_restart_resumes_after_it(
    tmp_path,
) -> None:
    d = reopen(tmp_path)
    persist(d, ents(1, 20, 1))
    snap = snapshot_at(d, 15, b"state@15")
    # The previous snapshot is the bootstrap one at 0: the log keeps every entry after it.
    assert d.log_start_offset() == 0
    persist(d, ents(21, 30, 1))
    snap = snapshot_at(d, 25, b"state@25")
    assert d.log_start_offset() == 15
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == [
        "00000000000000000015-0000000001.checkpoint",
        "00000000000000000025-0000000001.checkpoint",
    ]
    d.close()
    d2 = reopen(tmp_path)
    assert d2.memory.snapshot() == snap
    assert d2.memory.entries(LogIndex(26), LogIndex(31), None) == ents(26, 30, 1)


def corrupt_newest_snapshot(tmp_path) -> str:  # type: ignore[no-untyped-def]
    newest = max((tmp_path / "snapshots").iterdir())
    raw = bytearray(newest.read_bytes())
    raw[-3] ^= 0x20
    newest.write_bytes(bytes(raw))
    return str(newest)


def test_a_corrupt_newest_snapshot_falls_back_to_the_previous_one_and_keeps_the_log(
    tmp_path,
) -> None:
    d = reopen(tmp_path)
    persist(d, ents(1, 20, 1), HardState(Term(1), NodeId(1), LogIndex(20)))
    snapshot_at(d, 10, b"state@10")
    persist(d, ents(21, 30, 1))
    snapshot_at(d, 25, b"state@25")
    d.close()
    path = corrupt_newest_snapshot(tmp_path)
    d2 = reopen(tmp_path)
    assert d2.memory.snapshot().metadata.index == 10 and d2.memory.snapshot().data == b"state@10"
    assert d2.memory.entries(LogIndex(11), LogIndex(31), None) == ents(11, 30, 1)
    assert not os.path.exists(path) and os.path.exists(path + ".corrupt")
    # The next snapshot keeps the good one, never the corrupt one.
    persist(d2, ents(31, 35, 1))
    snapshot_at(d2, 33, b"state@33")
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == [
        "00000000000000000010-0000000001.checkpoint",
        "00000000000000000025-0000000001.checkpoint.corrupt",
        "00000000000000000033-0000000001.checkpoint",
    ]


def test_a_corrupt_installed_snapshot_refuses_to_start_and_discards_nothing(tmp_path) -> None:
    d = reopen(tmp_path)
    persist(d, ents(1, 20, 1), HardState(Term(1), NodeId(1), LogIndex(20)))
    snapshot_at(d, 10, b"state@10")
    # The leader installs a newer snapshot: the log is replaced by it.
    installed = Snapshot(SnapshotMetadata(LogIndex(40), Term(3), CS), b"leader@40")
    d.persist(None, [], installed, True)
    d.mirror_ready(None, [], installed)
    persist(d, ents(41, 45, 3))
    d.close()
    path = corrupt_newest_snapshot(tmp_path)

    def segments() -> list[tuple[str, bytes]]:
        return sorted((p.name, p.read_bytes()) for p in (tmp_path / "log").glob("*.log"))

    before = segments()
    with pytest.raises(CorruptSnapshotError) as ei:
        reopen(tmp_path)
    msg = str(ei.value)
    assert path in msg and "Refusing to start" in msg and "does not reach index 40" in msg
    assert segments() == before
    assert os.path.exists(path)  # left for the operator to restore


def test_a_node_whose_only_snapshot_is_corrupt_refuses_to_start(tmp_path) -> None:
    d = reopen(tmp_path)  # writes the bootstrap snapshot at index 0
    persist(d, ents(1, 5, 1), HardState(Term(1), NodeId(1), LogIndex(5)))
    d.close()
    corrupt_newest_snapshot(tmp_path)
    with pytest.raises(CorruptSnapshotError, match="Refusing to start"):
        reopen(tmp_path)


def test_installed_snapshot_replaces_the_log_even_after_a_crash_before_the_reset(tmp_path) -> None:
    d = reopen(tmp_path)
    persist(d, ents(1, 30, 1))
    snap = Snapshot(SnapshotMetadata(LogIndex(40), Term(3), CS), b"leader-state")
    # a crash right after the snapshot file, before the log was reset
    d._write_snapshot_file(snap)
    d.plog.abandon()  # type: ignore[union-attr]
    d2 = reopen(tmp_path)
    assert d2.memory.snapshot() == snap
    assert (d2.memory.first_index(), d2.memory.last_index()) == (41, 40)
    persist(d2, ents(41, 42, 3))
    d2.close()
    assert reopen(tmp_path).memory.entries(LogIndex(41), LogIndex(43), None) == ents(41, 42, 3)


def test_snapshot_and_quorum_state_files_are_crc_checked(tmp_path) -> None:
    snap = Snapshot(SnapshotMetadata(LogIndex(7), Term(2), CS), b"abc")
    buf = bytearray(encode_snapshot(snap))
    assert decode_snapshot(bytes(buf)) == snap
    d = reopen(tmp_path)
    persist(d, ents(1, 3, 1), HardState(Term(1), NodeId(1), LogIndex(0)))
    d.close()
    raw = bytearray((tmp_path / "quorum-state").read_bytes())
    raw[-2] ^= 0x01
    (tmp_path / "quorum-state").write_bytes(bytes(raw))
    with pytest.raises(CorruptQuorumStateError):
        reopen(tmp_path)


def test_entry_batches_are_byte_identical_to_the_storage_codec() -> None:
    """encode_entries builds batches without encode_batch's generality; same bytes."""
    from raft.aio.durable_log import decode_entries, encode_entries
    from storage.batch import encode_batch

    run = [
        Entry(
            LogIndex(i),
            Term(4),
            EntryKind.CONF_CHANGE if i % 5 == 0 else EntryKind.NORMAL,
            b"v" * (i % 7),
        )
        for i in range(11, 40)
    ]
    (batch,) = encode_entries(run, 1_700_000_000_000)
    ref = encode_batch(
        [(bytes([int(e.kind)]), e.data, 1_700_000_000_000, ()) for e in run],
        base_offset=10,
        leader_epoch=4,
    )
    assert batch == ref
    assert decode_entries(batch) == run
    assert len(encode_entries([*run, *ents(40, 42, 5)], 0)) == 2  # one batch per term run


class _TruncateReachesDisk:
    """An rng for LazyFileLayer.crash: the unsynced truncate reaches the disk, no appended
    byte does (the worst case for a mid-batch cut)."""

    def random(self) -> float:
        return 0.9

    def randrange(self, n: int) -> int:
        return 0


def test_a_crash_inside_a_mid_batch_cut_keeps_the_acknowledged_prefix(
    tmp_path, monkeypatch
) -> None:
    from storage.fileio import LazyFileLayer

    files = LazyFileLayer()
    d = DurableLog(tmp_path, file_layer=files)
    d.open(CS)
    persist(d, ents(1, 10, 1))  # fsynced: 1..10 may all have been acknowledged

    calls = {"n": 0}
    real_append = DurableLog._append

    def crash_on_reappend(self, plog, entries):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("power cut right after the batch was cut")
        return real_append(self, plog, entries)

    monkeypatch.setattr(DurableLog, "_append", crash_on_reappend)
    with pytest.raises(RuntimeError, match="power cut"):
        d.persist(None, ents(8, 12, 2, b"new"), None, True)
    files.crash(_TruncateReachesDisk())  # type: ignore[arg-type]
    monkeypatch.setattr(DurableLog, "_append", real_append)

    d2 = DurableLog(tmp_path, file_layer=files)
    d2.open(CS)
    # 1..7 were acknowledged and do not conflict: they must survive; 8..10 may go.
    assert d2.memory.entries(LogIndex(1), LogIndex(8), None) == ents(1, 7, 1)
    assert d2.memory.last_index() == 7
    assert d2.stats.rewrites == 1  # the journal was replayed on open
    assert not (tmp_path / "truncation-intent").exists()


def test_the_truncation_intent_is_gone_once_persist_returns(tmp_path) -> None:
    d = reopen(tmp_path)
    persist(d, ents(1, 10, 1))
    persist(d, ents(8, 12, 2, b"new"))
    assert not (tmp_path / "truncation-intent").exists()
    persist(d, ents(13, 14, 2))
    d.close()
    want = [*ents(1, 7, 1), *ents(8, 12, 2, b"new"), *ents(13, 14, 2)]
    assert reopen(tmp_path).memory.entries(LogIndex(1), LogIndex(15), None) == want


def test_a_damaged_truncation_journal_refuses_to_start(tmp_path) -> None:
    d = reopen(tmp_path)
    persist(d, ents(1, 10, 1))
    d._write_truncation_intent(4, ents(5, 7, 1))  # as if a mid-batch cut was interrupted
    d.plog.abandon()  # type: ignore[union-attr]
    intent = tmp_path / "truncation-intent"
    raw = bytearray(intent.read_bytes())
    raw[2] ^= 0x01  # the base offset: 4 -> 5
    intent.write_bytes(bytes(raw))
    with pytest.raises(CorruptSnapshotError, match="truncation is damaged"):
        reopen(tmp_path)
    assert intent.exists()


def _flip_term(d: DurableLog, index: int, bit: int) -> str:
    """Flip a bit of the low byte of the leader epoch (the term) of the batch holding
    entry ``index``; returns the segment's path."""
    assert d.plog is not None
    seg = d.plog.segments[-1]
    where = seg.locate(index - 1)
    assert where is not None
    with open(seg.log_path, "r+b") as f:
        f.seek(where[0] + LEADER_EPOCH_OFFSET + 3)
        b = f.read(1)
        f.seek(where[0] + LEADER_EPOCH_OFFSET + 3)
        f.write(bytes([b[0] ^ (1 << bit)]))
    return seg.log_path


def test_a_term_above_quorum_state_refuses_to_start_with_the_segment_named(tmp_path) -> None:
    # Finding 9 in the Raft log: the term is the batch's leader epoch, outside the CRC.
    d = reopen(tmp_path)
    persist(d, ents(1, 3, 1), HardState(Term(1), NodeId(1), LogIndex(0)))
    persist(d, ents(4, 6, 2), HardState(Term(2), NodeId(1), LogIndex(3)))
    path = _flip_term(d, 4, 0)  # term 2 read as 3
    d.close()
    os.unlink(os.path.join(tmp_path, "log", "leader-epoch-checkpoint"))  # only quorum-state left
    with pytest.raises(CorruptSegmentError, match=r"entry 4 has term 3, above the term 2") as e:
        reopen(tmp_path)
    assert e.value.path == path and e.value.offset == 3


def test_a_term_that_decreases_along_the_raft_log_refuses_to_start(tmp_path) -> None:
    d = reopen(tmp_path)
    persist(d, ents(1, 3, 2), HardState(Term(2), NodeId(1), LogIndex(0)))
    persist(d, ents(4, 6, 3), HardState(Term(3), NodeId(1), LogIndex(3)))
    path = _flip_term(d, 4, 1)  # term 3 read as 1
    d.close()
    with pytest.raises(CorruptSegmentError) as e:
        reopen(tmp_path)
    assert e.value.path == path and e.value.offset == 3
