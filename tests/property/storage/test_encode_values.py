"""``encode_values`` (the producer's bulk encoder) builds exactly the bytes ``encode_batch``
builds for the same records: the format has one writer semantics, two speeds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.batch import decode_records, encode_batch, encode_values
from storage.compression import Compression

# Lengths around msgpack's size classes (fixarray/array16/array32, bin8/bin16/bin32) matter.
values = st.one_of(
    st.binary(max_size=300), st.sampled_from([b"v" * 255, b"v" * 256, b"v" * 65535, b"v" * 65536])
)


@settings(max_examples=150)
@given(
    vals=st.lists(values, min_size=1, max_size=40),
    keyed=st.booleans(),
    data=st.data(),
    ts=st.integers(min_value=0, max_value=2**62),
    codec=st.sampled_from(list(Compression)),
    seq=st.integers(min_value=-1, max_value=2**31 - 1),
    txn=st.booleans(),
)
def test_encode_values_equals_encode_batch(
    vals: list[bytes],
    keyed: bool,
    data: st.DataObject,
    ts: int,
    codec: Compression,
    seq: int,
    txn: bool,
) -> None:
    keys = (
        data.draw(
            st.lists(
                st.one_of(st.none(), st.binary(max_size=300)),
                min_size=len(vals),
                max_size=len(vals),
            )
        )
        if keyed
        else None
    )
    pid = -1 if seq < 0 else 42
    fast = encode_values(
        vals,
        timestamp=ts,
        keys=keys,
        compression=codec,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        transactional=txn and pid >= 0,
    )
    slow = encode_batch(
        [(None if keys is None else keys[i], v, ts, ()) for i, v in enumerate(vals)],
        compression=codec,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        transactional=txn and pid >= 0,
    )
    assert fast == slow
    assert [r.value for r in decode_records(fast)] == vals


def test_many_records_cross_the_array16_and_array32_headers() -> None:
    for n in (15, 16, 65535, 65536, 70_000):
        vals = [b"%d" % i for i in range(n)]
        assert encode_values(vals, timestamp=7) == encode_batch([(None, v, 7, ()) for v in vals])
