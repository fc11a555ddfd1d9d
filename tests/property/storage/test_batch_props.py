"""Property tests of the batch codec: round trips, and every flipped byte is caught.

Decision pinned here: ``base_offset`` (bytes 0-7) and ``leader_epoch`` (bytes 12-15) are
outside the CRC, as in Kafka, because the leader stamps them in place; a flip there gives a
batch whose CRC still verifies, with the changed field (or, for the sign bit of the base
offset, an impossible header). The log catches a changed base
offset structurally (offsets must increase; a follower refuses a batch that goes back) and
nothing catches a changed epoch, exactly as in Kafka. Every other byte is covered:
``batch_length`` by the length check, ``magic`` by the magic check, the rest by the CRC.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.batch import (
    HEADER_SIZE,
    LEADER_EPOCH_OFFSET,
    decode_records,
    encode_batch,
    iter_batches,
    parse_header,
    verify_batch,
)
from storage.compression import Compression
from storage.errors import CorruptRecordError

keys = st.one_of(st.none(), st.binary(max_size=20))
values = st.one_of(st.none(), st.binary(max_size=200))
headers = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
)
records = st.lists(st.tuples(keys, values, st.integers(0, 2**40), headers), min_size=1, max_size=20)
codecs = st.sampled_from(list(Compression))


@settings(max_examples=100)
@given(
    records,
    codecs,
    st.integers(0, 2**62),
    st.integers(-1, 2**31 - 1),
    st.integers(-1, 2**62),
    st.integers(-1, 2**15 - 1),
    st.integers(-1, 2**31 - 1),
)
def test_encode_decode_round_trip(recs, codec, base, epoch, pid, pepoch, seq) -> None:
    b = encode_batch(
        recs,
        base_offset=base,
        leader_epoch=epoch,
        compression=codec,
        producer_id=pid,
        producer_epoch=pepoch,
        base_sequence=seq,
    )
    h = verify_batch(b)
    assert (h.base_offset, h.leader_epoch, h.compression) == (base, epoch, codec)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (pid, pepoch, seq)
    assert h.record_count == len(recs) and h.last_offset == base + len(recs) - 1
    assert h.max_timestamp == max(r[2] for r in recs)
    out = decode_records(b)
    assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in out] == [
        (k, v, ts, [tuple(x) for x in hs]) for k, v, ts, hs in recs
    ]
    assert [r.offset for r in out] == list(range(base, base + len(recs)))


@settings(max_examples=200)
@given(records, codecs, st.data())
def test_a_flipped_byte_is_corruption_unless_in_base_offset_or_leader_epoch(
    recs, codec, data
) -> None:
    b = bytearray(encode_batch(recs, compression=codec, base_offset=5, leader_epoch=2))
    i = data.draw(st.integers(0, len(b) - 1), label="position")
    bit = data.draw(st.integers(0, 7), label="bit")
    b[i] ^= 1 << bit
    if i < 8 or LEADER_EPOCH_OFFSET <= i < LEADER_EPOCH_OFFSET + 4:
        # Outside the CRC: accepted with the changed field, unless the base offset went
        # negative (an impossible header).
        try:
            h = verify_batch(b)
        except CorruptRecordError as e:
            assert i == 0 and bit == 7 and "negative base_offset" in e.reason
            return
        assert (h.base_offset, h.leader_epoch) != (5, 2)
        return
    try:
        verify_batch(b)
    except CorruptRecordError:
        pass
    else:
        raise AssertionError(f"flip at byte {i} bit {bit} went unnoticed")
    # In a stream of batches the corruption is located at the batch's position.
    good = encode_batch(recs, compression=codec)
    try:
        list(iter_batches(good + bytes(b) + good))
    except CorruptRecordError as e:
        assert e.position == len(good)
    else:
        # Only possible when the flip grew batch_length past the buffer: a torn tail.
        assert 8 <= i < 12 and parse_header(b).size > len(b)


@settings(max_examples=50)
@given(st.binary(min_size=HEADER_SIZE, max_size=300))
def test_random_bytes_never_pass_as_a_batch_silently(junk) -> None:
    try:
        h = verify_batch(junk)
    except CorruptRecordError:
        return
    # Astronomically unlikely: a valid CRC over random bytes.
    assert h.size == len(junk)
