"""ProducerState: duplicates, out-of-order sequences, epoch bumps, sequence wrap, truncation,
expiration, snapshots and rebuild from headers (Kafka's ProducerStateManager, KIP-360)."""

from __future__ import annotations

import pytest
from replication_harness import header

from broker.errors import (
    CorruptProducerSnapshotError,
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
)
from broker.producer_state import (
    APPEND,
    INT32_MAX,
    Duplicate,
    ProducerState,
    ProducerStateConfig,
    in_sequence,
)
from common.invariant import InvariantError


class Leader:
    """A leader's append path over a ProducerState and a list standing in for the log."""

    def __init__(self, state: ProducerState | None = None) -> None:
        self.state = state or ProducerState()
        self.log: list = []  # headers as stored, with offsets

    @property
    def leo(self) -> int:
        return self.state.end_offset

    def send(self, h):
        plan = self.state.check_and_plan(h)
        if plan is APPEND:
            base = self.leo
            stored = h._replace(base_offset=base)
            self.log.append(stored)
            self.state.on_append(h, base)
            return (base, stored.last_offset)
        return plan


def test_unknown_producer_is_accepted_at_any_sequence() -> None:
    # KIP-360: its state may have expired or its records been deleted by retention.
    p = Leader()
    assert p.send(header(base_sequence=42, count=2)) == (0, 1)
    assert p.state.get(7).last_seq == 43


def test_in_sequence_batches_are_appended_and_out_of_order_ones_refused() -> None:
    p = Leader()
    p.send(header(base_sequence=0, count=3))
    p.send(header(base_sequence=3, count=1))
    for bad in (5, 2, 0x7FFF):
        with pytest.raises(OutOfOrderSequenceError):
            p.state.check_and_plan(header(base_sequence=bad))
    assert p.send(header(base_sequence=4)) == (4, 4)


def test_retries_of_the_last_five_batches_are_duplicates_with_the_original_offsets() -> None:
    p = Leader()
    offsets = [p.send(header(base_sequence=2 * i, count=2)) for i in range(7)]
    for i in range(2, 7):
        assert p.send(header(base_sequence=2 * i, count=2)) == Duplicate(*offsets[i])
    # Older than the window: not recognisable, so out of order (the producer learns its fate
    # from the first answer, as in Kafka).
    with pytest.raises(OutOfOrderSequenceError):
        p.send(header(base_sequence=2, count=2))
    assert len(p.log) == 7
    # Same first sequence, different range: not a duplicate.
    with pytest.raises(OutOfOrderSequenceError):
        p.send(header(base_sequence=12, count=1))


def test_older_epoch_is_fenced_even_for_a_retry() -> None:
    p = Leader()
    p.send(header(producer_epoch=3, base_sequence=0))
    with pytest.raises(InvalidProducerEpochError):
        p.send(header(producer_epoch=2, base_sequence=0))
    with pytest.raises(InvalidProducerEpochError):
        p.send(header(producer_epoch=2, base_sequence=1))


def test_newer_epoch_resets_sequences_and_must_start_at_zero() -> None:
    p = Leader()
    p.send(header(producer_epoch=0, base_sequence=0, count=5))
    with pytest.raises(OutOfOrderSequenceError):
        p.send(header(producer_epoch=1, base_sequence=5))
    assert p.send(header(producer_epoch=1, base_sequence=0)) == (5, 5)
    entry = p.state.get(7)
    assert entry.producer_epoch == 1 and len(entry.batches) == 1  # epoch 0's batches forgotten
    with pytest.raises(InvalidProducerEpochError):
        p.send(header(producer_epoch=0, base_sequence=0, count=5))  # old retry: fenced


@pytest.mark.parametrize(
    ("last", "nxt", "ok"),
    [
        (4, 5, True),
        (4, 6, False),
        (4, 4, False),
        (INT32_MAX, 0, True),
        (INT32_MAX - 1, 0, False),
        (-1, 0, True),
    ],
)
def test_in_sequence_wraps_at_int32_max(last, nxt, ok) -> None:
    assert in_sequence(last, nxt) == ok


def test_sequence_wraps_to_zero_after_int32_max() -> None:
    p = Leader()
    p.send(header(base_sequence=INT32_MAX - 1, count=3))  # INT32_MAX-1, INT32_MAX, 0
    assert p.state.get(7).last_seq == 0
    with pytest.raises(OutOfOrderSequenceError):
        p.send(header(base_sequence=0))
    assert p.send(header(base_sequence=1)) == (3, 3)
    assert p.send(header(base_sequence=INT32_MAX - 1, count=3)) == Duplicate(0, 2)


def test_non_idempotent_batches_are_always_appended() -> None:
    p = Leader()
    for _ in range(3):
        assert p.send(header(producer_id=-1, producer_epoch=-1, base_sequence=-1)) is not None
    assert len(p.state) == 0 and p.state.end_offset == 3


def test_idempotent_batch_without_a_sequence_is_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        ProducerState().check_and_plan(header(base_sequence=-1))


def test_check_and_plan_changes_nothing() -> None:
    s = ProducerState()
    s.check_and_plan(header())
    assert len(s) == 0 and s.end_offset == 0


def test_applying_a_batch_twice_is_a_bug() -> None:
    s = ProducerState()
    s.on_append(header(base_offset=0))
    with pytest.raises(InvariantError):
        s.on_append(header(base_sequence=1, base_offset=0))


# --------------------------------------------------------------------------- truncation


def _three_producers() -> Leader:
    p = Leader()
    p.send(header(producer_id=1, base_sequence=0, count=2))  # 0-1
    p.send(header(producer_id=2, base_sequence=0))  # 2
    p.send(header(producer_id=1, base_sequence=2))  # 3
    p.send(header(producer_id=1, producer_epoch=1, base_sequence=0))  # 4: epoch bump
    p.send(header(producer_id=3, base_sequence=9))  # 5
    return p


@pytest.mark.parametrize("offset", [6, 5, 4, 3, 2, 0])  # batch boundaries (0-1 is one batch)
def test_truncation_gives_the_state_rebuilt_from_the_remaining_log(offset) -> None:
    p = _three_producers()
    kept = [h for h in p.log if h.base_offset < offset]
    assert p.state.can_truncate_to(offset)
    p.state.truncate_to(offset)
    assert p.state.end_offset == min(offset, 6)
    assert p.state.producers == ProducerState.rebuild(kept).producers


def test_truncation_undoes_an_epoch_bump() -> None:
    p = _three_producers()
    p.state.truncate_to(4)
    entry = p.state.get(1)
    assert entry.producer_epoch == 0 and entry.last_seq == 2
    assert p.send(header(producer_id=1, base_sequence=2)) == Duplicate(3, 3)


def test_below_the_high_watermark_truncation_needs_a_rebuild() -> None:
    p = _three_producers()
    p.state.on_high_watermark(3)
    assert p.state.can_truncate_to(3) and not p.state.can_truncate_to(2)
    with pytest.raises(InvariantError):
        p.state.truncate_to(2)
    rebuilt = ProducerState.rebuild([h for h in p.log if h.base_offset < 2])
    assert rebuilt.get(1).last_offset == 1 and rebuilt.get(2) is None
    p.state.truncate_to(3)
    assert p.state.producers == ProducerState.rebuild(p.log[:2]).producers


def test_rebuild_with_a_high_watermark_keeps_the_tail_undoable() -> None:
    p = _three_producers()
    s = ProducerState.rebuild(p.log, high_watermark=3)
    assert s.producers == p.state.producers
    assert s.can_truncate_to(3) and not s.can_truncate_to(2)
    s.truncate_to(3)
    assert s.producers == ProducerState.rebuild(p.log[:2]).producers
    full = ProducerState.rebuild(p.log)
    assert not full.can_truncate_to(5) and full.can_truncate_to(6)


# --------------------------------------------------------------------------- expiration


def test_producers_idle_past_the_expiration_are_forgotten_and_stay_forgotten() -> None:
    s = ProducerState(ProducerStateConfig(producer_id_expiration_ms=1000))
    s.on_append(header(producer_id=1, timestamp_ms=0, base_offset=0))
    s.on_append(header(producer_id=2, timestamp_ms=500, base_offset=1))
    s.on_append(header(producer_id=1, base_sequence=1, timestamp_ms=100, base_offset=2))
    assert not s.maybe_expire_producers(now_ms=1099)
    assert s.maybe_expire_producers(now_ms=1100)  # >= expiration: Kafka's rule
    assert set(s.producers) == {2}
    s.truncate_to(2)  # the batch of 1 at offset 2 goes; 1 does not come back
    assert set(s.producers) == {2}
    # An expired producer is unknown: it may continue at any sequence (KIP-360).
    assert s.check_and_plan(header(producer_id=1, base_sequence=77)) is APPEND


def test_expiration_config_from_kafka_names() -> None:
    assert (
        ProducerStateConfig.from_kafka({"producer.id.expiration.ms": "5"}).producer_id_expiration_ms
        == 5
    )
    assert ProducerStateConfig.from_kafka({}).producer_id_expiration_ms == 86_400_000


# --------------------------------------------------------------------------- snapshots


def test_snapshot_plus_replay_equals_the_live_state() -> None:
    p = _three_producers()
    snap = p.state.encode_snapshot()
    before = list(p.log)
    p.send(header(producer_id=2, base_sequence=1, count=3))
    p.send(header(producer_id=4, base_sequence=0))
    restored = ProducerState.from_snapshot(snap)
    assert restored.end_offset == 6
    restored.replay(h for h in p.log if h.base_offset >= restored.end_offset)
    assert restored.producers == p.state.producers
    assert restored.end_offset == p.state.end_offset
    # All five batches survive a restart, so duplicates are still recognised.
    assert ProducerState.from_snapshot(snap).producers == ProducerState.rebuild(before).producers


def test_snapshot_is_compact() -> None:
    s = ProducerState()
    for pid in range(100):
        s.on_append(header(producer_id=pid, base_offset=pid, timestamp_ms=1_700_000_000_000))
    assert len(s.encode_snapshot()) < 100 * 30


@pytest.mark.parametrize("damage", ["short", "magic", "flip", "garbage", "shape"])
def test_corrupt_snapshots_are_refused(damage) -> None:
    import struct

    import crc32c
    import msgpack

    good = _three_producers().state.encode_snapshot()
    if damage == "short":
        data = good[:5]
    elif damage == "magic":
        data = b"XXXX" + good[4:]
    elif damage == "flip":
        data = good[:-1] + bytes([good[-1] ^ 1])
    else:
        payload = b"\xc1" if damage == "garbage" else msgpack.packb([1, [[1, 0, []]]])
        data = struct.pack(">4sBI", b"LBPS", 1, crc32c.crc32c(payload)) + payload
    with pytest.raises(CorruptProducerSnapshotError):
        ProducerState.from_snapshot(data)
