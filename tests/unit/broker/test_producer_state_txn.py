"""ProducerState, the transaction side (KIP-98, KIP-890 part 1): open transactions, the first
unstable offset and LSO, markers (commit, abort, fencing by producer and coordinator epoch),
the aborted transactions abort markers make (the log indexes them: storage.txn_index),
truncation, snapshots and rebuild with markers."""

from __future__ import annotations

import crc32c
import msgpack
import pytest
from replication_harness import header

from broker.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from broker.producer_state import ProducerState
from storage.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader
from storage.txn import AbortedTxn, ControlMarker


def txn(pid: int, epoch: int = 0, seq: int = 0, count: int = 1) -> BatchHeader:
    return header(pid, epoch, seq, count)._replace(attributes=ATTR_TRANSACTIONAL)


def marker_header(pid: int, epoch: int = 0) -> BatchHeader:
    return header(pid, epoch, -1, 1)._replace(
        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL, base_sequence=-1
    )


class Log:
    """A leader's append path: check, append at the log end, apply."""

    def __init__(self) -> None:
        self.state = ProducerState()
        self.headers: list[BatchHeader] = []
        self.markers: dict[int, ControlMarker] = {}
        self.aborted: list[AbortedTxn] = []
        """What ``on_append`` handed over, as the log's index would get it."""

    def append(self, h: BatchHeader) -> int:
        self.state.check_and_plan(h)
        base = self.state.end_offset
        self.headers.append(h._replace(base_offset=base))
        self.state.on_append(h, base)
        return base

    def plain(self, count: int = 1) -> int:
        return self.append(header(-1, -1, -1, count))

    def end(self, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
        self.state.check_marker(pid, epoch, coordinator_epoch)
        base = self.state.end_offset
        h = marker_header(pid, epoch)._replace(base_offset=base)
        m = ControlMarker(commit, coordinator_epoch)
        self.headers.append(h)
        self.markers[base] = m
        aborted = self.state.on_append(h, base, m)
        if aborted is not None:
            self.aborted.append(aborted)
        return base


def test_lso_is_the_first_offset_of_the_oldest_open_transaction() -> None:
    log = Log()
    log.plain(2)  # 0-1
    assert log.state.first_unstable_offset is None
    assert log.state.last_stable_offset(2) == 2
    assert log.append(txn(10, count=3)) == 2  # 2-4
    log.plain()  # 5
    assert log.append(txn(11)) == 6
    log.append(txn(10, seq=3))  # 7: same transaction, first offset stays 2
    assert log.state.first_unstable_offset == 2
    assert log.state.last_stable_offset(8) == 2
    assert log.state.last_stable_offset(1) == 1  # never past the HW
    log.end(10, commit=True)  # 8
    assert log.state.first_unstable_offset == 6
    log.end(11, commit=False)  # 9
    assert log.state.first_unstable_offset is None
    assert log.aborted == [AbortedTxn(11, 6, 9, 10)]


def test_abort_records_the_lso_after_the_marker() -> None:
    log = Log()
    log.append(txn(1))  # 0
    log.append(txn(2))  # 1
    log.end(2, commit=False)  # 2: producer 1 still open at 0
    assert log.aborted == [AbortedTxn(2, 1, 2, 0)]


def test_marker_from_an_older_producer_epoch_is_refused() -> None:
    log = Log()
    log.append(txn(5, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        log.end(5, commit=True, epoch=2)
    assert log.state.first_unstable_offset == 0  # nothing changed


def test_marker_from_an_older_coordinator_epoch_is_refused() -> None:
    log = Log()
    log.append(txn(5))
    log.end(5, commit=True, coordinator_epoch=4)
    log.append(txn(5, seq=1))
    with pytest.raises(TransactionCoordinatorFencedError):
        log.end(5, commit=False, coordinator_epoch=3)
    log.end(5, commit=False, coordinator_epoch=4)
    assert log.state.first_unstable_offset is None


def test_abort_with_a_bumped_epoch_fences_the_old_epoch() -> None:
    # InitProducerId bumps the epoch and the coordinator aborts with the new one.
    log = Log()
    log.append(txn(5, epoch=1))
    log.end(5, commit=False, epoch=2)
    entry = log.state.get(5)
    assert entry is not None and entry.producer_epoch == 2 and entry.batches == ()
    with pytest.raises(InvalidProducerEpochError):
        log.state.check_and_plan(txn(5, epoch=1, seq=1))
    log.append(txn(5, epoch=2, seq=0))  # the new epoch writes on


def test_clients_cannot_write_control_batches() -> None:
    with pytest.raises(InvalidRecordError):
        ProducerState().check_and_plan(marker_header(5))
    with pytest.raises(InvalidRecordError):
        ProducerState().check_and_plan(txn(-1)._replace(producer_epoch=-1, base_sequence=-1))


def test_non_transactional_batch_during_a_transaction_is_invalid_txn_state() -> None:
    log = Log()
    log.append(txn(5))
    with pytest.raises(InvalidTxnStateError):
        log.state.check_and_plan(header(5, 0, 1))
    log.end(5, commit=True)
    log.append(header(5, 0, 1))


def test_only_the_batch_that_opens_a_transaction_needs_verification() -> None:
    log = Log()
    assert log.state.needs_txn_verification(txn(5))
    assert not log.state.needs_txn_verification(header(5))
    log.append(txn(5))
    assert not log.state.needs_txn_verification(txn(5, seq=1))
    assert log.state.needs_txn_verification(txn(5, epoch=1))  # a new epoch: a new transaction
    log.end(5, commit=True)
    assert log.state.needs_txn_verification(txn(5, seq=1))


def test_truncation_undoes_markers_and_transactions() -> None:
    log = Log()
    log.state.on_high_watermark(0)
    log.append(txn(1))  # 0
    log.end(1, commit=False)  # 1
    log.append(txn(2))  # 2
    log.end(2, commit=False)  # 3
    log.state.truncate_to(3)
    assert log.state.first_unstable_offset == 2
    log.state.truncate_to(1)
    assert log.state.first_unstable_offset == 0
    # The abort marker cut, a new one aborts the same transaction the same way.
    assert log.end(1, commit=False) == 1
    assert log.aborted[-1] == AbortedTxn(1, 0, 1, 2)
    log.state.truncate_to(0)
    assert log.state.first_unstable_offset is None and len(log.state) == 0


def test_snapshot_and_rebuild_keep_transactions() -> None:
    log = Log()
    log.append(txn(1))
    log.plain()
    log.end(1, commit=False, coordinator_epoch=7)
    log.append(txn(2, count=2))
    log.append(txn(1, seq=1))
    loaded = ProducerState.from_snapshot(log.state.encode_snapshot())
    rebuilt = ProducerState.rebuild(log.headers, markers=log.markers)
    assert log.aborted == [AbortedTxn(1, 0, 2, 3)]
    for s in (loaded, rebuilt):
        assert s.producers == log.state.producers
        assert s.first_unstable_offset == 3
        entry = s.get(1)
        assert entry is not None and entry.coordinator_epoch == 7


def test_a_version_2_snapshot_with_aborted_transactions_is_still_read() -> None:
    log = Log()
    log.append(txn(1))
    log.end(1, commit=False)
    log.append(txn(2))
    raw = log.state.encode_snapshot()
    header, payload = raw[:9], msgpack.unpackb(raw[9:])
    payload.append([[1, 0, 1, 2]])
    body = msgpack.packb(payload)
    v2 = header[:4] + bytes([2]) + crc32c.crc32c(body).to_bytes(4, "big") + body
    loaded = ProducerState.from_snapshot(v2)
    assert loaded.producers == log.state.producers
    assert loaded.first_unstable_offset == 2


def test_a_producer_with_an_open_transaction_does_not_expire() -> None:
    log = Log()
    log.append(txn(1))
    log.append(header(2, 0, 0))
    assert log.state.maybe_expire_producers(10**12)
    assert log.state.get(1) is not None and log.state.get(2) is None
