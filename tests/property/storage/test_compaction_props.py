"""Compaction keeps exactly the latest record of each key, and every keyless record."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.batch import decode_records, encode_batch, iter_batches
from storage.config import LogConfig
from storage.fileio import LazyFileLayer
from storage.log import PartitionLog

CONFIG = LogConfig.from_kafka(
    {"cleanup.policy": "compact", "segment.bytes": "500", "delete.retention.ms": "0"}
)

batches = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from([b"a", b"b", b"c", b"d", None]),
            st.one_of(st.none(), st.binary(max_size=30)),
        ),
        min_size=1,
        max_size=5,
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60)
@given(batches)
def test_compaction_keeps_exactly_the_latest_record_per_key(items) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = PartitionLog.open(d, CONFIG, LazyFileLayer())
        model = []
        for recs in items:
            base, _ = log.append(encode_batch([(k, v, 0, []) for k, v in recs]), leader_epoch=0)
            model += [(base + i, k, v) for i, (k, v) in enumerate(recs)]
        log.roll()  # everything into closed segments
        log.maybe_compact(now_ms=10)
        got = []
        offset = 0
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20).data
            if not data:
                break
            for pos, h in iter_batches(data):
                got += [
                    (r.offset, r.key, r.value) for r in decode_records(data[pos : pos + h.size])
                ]
                offset = h.next_offset
        latest = {k: (o, k, v) for o, k, v in model if k is not None}
        # Tombstones older than delete.retention.ms (0 here) go too.
        expect = sorted(
            [r for r in latest.values() if r[2] is not None] + [r for r in model if r[1] is None]
        )
        assert got == expect
        assert log.log_end_offset == len(model)
        log.abandon()
