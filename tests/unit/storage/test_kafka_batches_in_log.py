"""A partition log holding Kafka clients' batches (magic 2) beside Longboat's own.

The batches are built by kafka-python's producer code, so the log is checked against bytes a
real client writes: stored verbatim (offsets and epoch stamped in place, CRC untouched),
recovered after a reopen, found by time, dumped by ``longboat log dump``, and compacted
into batches that stay magic 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_harness import open_log, read_all

from storage.batch import MAGIC_KAFKA, MAGIC_MSGPACK, encode_batch, iter_batches, verify_batch
from storage.dump import format_record, segment_files, walk_segment

kafka_record = pytest.importorskip("kafka.record.default_records")


def kafka_batch(records: list[tuple[bytes | None, bytes | None, int]], codec: int = 0) -> bytes:
    b = kafka_record.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, (k, v, ts) in enumerate(records):
        b.append(i, timestamp=ts, key=k, value=v, headers=[("h", b"1")])
    return bytes(b.build())


def test_kafka_batches_are_stored_verbatim_beside_msgpack_ones(tmp_path: Path) -> None:
    log = open_log(str(tmp_path))
    kb = kafka_batch([(b"a", b"1", 10), (b"b", b"2", 11)], codec=4)  # zstd, as librdkafka
    assert log.append(kb, leader_epoch=3) == (0, 1)
    assert log.append(encode_batch([(b"c", b"3", 12, [])]), leader_epoch=3) == (2, 2)
    assert log.append(kafka_batch([(None, b"4", 13)]), leader_epoch=4) == (3, 3)
    data = log.read(0, 1 << 20).data
    spans = list(iter_batches(data))
    assert [h.magic for _, h in spans] == [MAGIC_KAFKA, MAGIC_MSGPACK, MAGIC_KAFKA]
    first = data[: spans[0][1].size]
    assert first[16:] == kb[16:]  # everything after base offset, length and epoch, as sent
    assert verify_batch(first).leader_epoch == 3
    log.flush()
    log.close()
    log = open_log(str(tmp_path))  # recovery walks both encodings
    assert [(r.offset, r.key, r.value) for r in read_all(log)] == [
        (0, b"a", b"1"),
        (1, b"b", b"2"),
        (2, b"c", b"3"),
        (3, None, b"4"),
    ]
    assert log.offset_for_timestamp(11) == 1
    assert log.offset_for_timestamp(13) == 3
    log.close()
    infos = [i for f in segment_files(str(tmp_path)) for i in walk_segment(f, records=True)]
    lines = [format_record(r) for i in infos for r in getattr(i, "records", None) or []]
    assert lines[0].startswith("| offset: 0 CreateTime: 10 keySize: 1 valueSize: 1 key: a")
    assert all(getattr(i, "crc_valid", False) for i in infos)


def test_compaction_keeps_kafka_batches_magic_2(tmp_path: Path) -> None:
    log = open_log(str(tmp_path), **{"cleanup.policy": "compact", "segment.bytes": "400"})
    for i in range(40):
        log.append(kafka_batch([(b"k%d" % (i % 3), b"v%d" % i, 100 + i)]), leader_epoch=0)
    log.flush()
    assert log.maybe_compact(now_ms=10**6)
    recs = read_all(log)
    latest = {r.key: r.value for r in recs}
    assert latest == {b"k0": b"v39", b"k1": b"v37", b"k2": b"v38"}
    assert len(recs) < 40
    assert all(r.value == b"v%d" % r.offset for r in recs)  # offsets kept
    data = log.read(log.log_start_offset, 1 << 20).data
    assert {h.magic for _, h in iter_batches(data)} == {MAGIC_KAFKA}
    log.close()
