"""``longboat log dump|verify`` and ``longboat demo`` through click's test runner."""

from __future__ import annotations

import json

from click.testing import CliRunner

from api.cli.main import main
from storage.batch import encode_batch
from storage.config import LogConfig
from storage.log import PartitionLog


def _log(tmp_path) -> str:
    d = str(tmp_path / "t-0")
    log = PartitionLog.open(d, LogConfig(segment_bytes=400))
    for i in range(10):
        log.append(
            encode_batch([(b"k%d" % i, b"v%d" % i, 1000 + i, [("h", b"x")])]), leader_epoch=i // 5
        )
    log.close()
    return d


def test_verify_is_clean_and_dump_lists_batches_and_records(tmp_path) -> None:
    d = _log(tmp_path)
    r = CliRunner().invoke(main, ["log", "verify", d])
    assert r.exit_code == 0, r.output
    assert "ok: 10 batches" in r.output
    r = CliRunner().invoke(main, ["log", "dump", d, "--records"])
    assert r.exit_code == 0
    assert "baseOffset: 9 lastOffset: 9 count: 1" in r.output
    assert "partitionLeaderEpoch: 1" in r.output and "isvalid: true" in r.output
    assert "| offset: 3 CreateTime: 1003 keySize: 2 valueSize: 2 key: k3 payload: v3" in r.output
    r = CliRunner().invoke(main, ["log", "dump", d, "--json", "--records"])
    rows = [json.loads(line) for line in r.output.splitlines()]
    assert [row["base_offset"] for row in rows] == list(range(10))
    assert rows[0]["records"][0]["headers"] == [["h", "x"]]


def test_verify_fails_with_file_and_position_of_a_corrupt_batch(tmp_path) -> None:
    d = _log(tmp_path)
    seg = f"{d}/00000000000000000000.log"
    with open(seg, "r+b") as f:
        data = f.read()
        second = len(encode_batch([(b"k0", b"v0", 1000, [("h", b"x")])]))
        f.seek(second + 70)
        f.write(bytes([data[second + 70] ^ 1]))
    r = CliRunner().invoke(main, ["log", "verify", d])
    assert r.exit_code == 1
    assert f"{seg}: byte {second}: crc mismatch" in r.output
    r = CliRunner().invoke(main, ["log", "dump", d])
    assert "isvalid: false" in r.output


def test_demo_writes_a_log_that_verifies(tmp_path) -> None:
    r = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "longboat log verify" in r.output
    r = CliRunner().invoke(main, ["log", "verify", str(tmp_path / "orders-0")])
    assert r.exit_code == 0, r.output


def test_verify_and_dump_refuse_a_directory_without_segments(tmp_path) -> None:
    (tmp_path / "quorum-state").write_bytes(b"x")  # a node dir, not a log dir
    for cmd in (["log", "verify", str(tmp_path)], ["log", "dump", str(tmp_path)]):
        res = CliRunner().invoke(main, cmd)
        assert res.exit_code == 1, res.output
        assert "holds no segment files" in res.output


def test_dump_index_files_checks_entries_against_the_log(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = PartitionLog.open(d, LogConfig(segment_bytes=400, index_interval_bytes=1))
    for i in range(10):
        log.append(encode_batch([(b"k%d" % i, b"v%d" % i, 1000 + i, [])]), leader_epoch=0)
    log.close()
    idx = f"{d}/00000000000000000000.index"
    r = CliRunner().invoke(main, ["log", "dump", idx])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == f"Dumping {idx}" and lines[1].startswith("offset: ")
    r = CliRunner().invoke(main, ["log", "dump", d, "--indexes", "--json"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.output.splitlines()]
    times = [x for x in rows if "timestamp" in x]
    offsets = [x for x in rows if "position" in x]
    assert times and offsets and all("problem" not in x for x in rows)
    assert sorted(x["timestamp"] for x in times) == [x["timestamp"] for x in times]
    # A damaged entry is named with its byte position, and the exit status says so.
    with open(idx, "r+b") as f:
        f.seek(8 + 4)
        f.write((3).to_bytes(4, "big"))  # entry 1 now points 3 bytes into the log
    r = CliRunner().invoke(main, ["log", "dump", idx])
    assert r.exit_code == 1 and "problem at byte 8: entry 1" in r.output, r.output


def test_dump_decodes_metadata_and_consumer_offsets_records(tmp_path) -> None:
    import uuid

    from broker.groups.records import OffsetCommitRecord, OffsetTombstoneRecord
    from broker.groups.records import encode_record as encode_group_record
    from metalog.records import TopicId, TopicRecord, encode_records
    from raft.types import ConfState, NodeId

    meta = str(tmp_path / "meta")
    log = PartitionLog.open(meta, LogConfig())
    conf = ConfState(frozenset({NodeId(1), NodeId(2)}), frozenset({NodeId(3)})).to_bytes()
    topic = TopicRecord(name="orders", topic_id=TopicId(str(uuid.UUID(int=7))))
    log.append(
        encode_batch(
            [
                (b"\x01", conf, 1, []),
                (b"\x00", b"", 2, []),
                (b"\x00", encode_records([topic]), 3, []),
                (b"\x00", b"\xc1junk", 4, []),
            ]
        ),
        leader_epoch=1,
    )
    log.close()
    r = CliRunner().invoke(main, ["log", "dump", meta, "--cluster-metadata-decoder", "--json"])
    assert r.exit_code == 0, r.output
    decoded = [rec["decoded"] for rec in json.loads(r.output)["records"]]
    assert decoded[0] == {"conf_change": {"voters": [1, 2], "observers": [3]}}
    assert "no_op" in decoded[1]
    assert decoded[2] == [
        {
            "type": "TopicRecord",
            "version": 0,
            "data": {"name": "orders", "topic_id": str(uuid.UUID(int=7)), "version": 0},
        }
    ]
    assert "undecodable" in decoded[3]
    r = CliRunner().invoke(main, ["log", "dump", meta, "--cluster-metadata-decoder"])
    assert '| offset: 2 CreateTime: 3 payload: [{"data": {"name": "orders"' in r.output

    offsets = str(tmp_path / "__consumer_offsets-0")
    log = PartitionLog.open(offsets, LogConfig())
    commit = encode_group_record(OffsetCommitRecord("g", "orders", 0, 42, "", 99))
    tomb = encode_group_record(OffsetTombstoneRecord("g", "orders", 1))
    log.append(encode_batch([(*commit, 5, []), (*tomb, 6, [])]), leader_epoch=0)
    log.close()
    r = CliRunner().invoke(main, ["log", "dump", offsets, "--offsets-decoder", "--json"])
    assert r.exit_code == 0, r.output
    assert [rec["decoded"] for rec in json.loads(r.output)["records"]] == [
        {
            "type": "OffsetCommitRecord",
            "data": {
                "group": "g",
                "topic": "orders",
                "partition": 0,
                "offset": 42,
                "metadata": "",
                "commit_ts_ms": 99,
            },
        },
        {
            "type": "OffsetTombstoneRecord",
            "data": {"group": "g", "topic": "orders", "partition": 1},
        },
    ]
    r = CliRunner().invoke(
        main, ["log", "dump", offsets, "--offsets-decoder", "--cluster-metadata-decoder"]
    )
    assert r.exit_code == 2 and "exclude each other" in r.output


def test_dump_prints_the_aborted_transactions_as_kafka_dump_log_does(tmp_path) -> None:
    from storage.txn import AbortedTxn, ControlMarker, encode_marker_batch

    d = str(tmp_path / "t-0")
    log = PartitionLog.open(d, LogConfig())
    txn = encode_batch(
        [(b"k", b"v", 1000, [])],
        producer_id=100,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    log.append(txn, leader_epoch=0)  # 0
    marker = encode_marker_batch(100, 0, ControlMarker(False, 0), timestamp_ms=1000)
    log.append(marker, leader_epoch=0)  # 1
    log.append_aborted_txn(AbortedTxn(100, 0, 1, 2))
    log.close()
    path = f"{d}/00000000000000000000.txnindex"
    r = CliRunner().invoke(main, ["log", "dump", path])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[1:] == [
        "version: 0 producerId: 100 firstOffset: 0 lastOffset: 1 lastStableOffset: 2"
    ]
    with open(path, "ab") as f:
        f.write(b"\x00")  # not a whole entry
    r = CliRunner().invoke(main, ["log", "dump", d, "--indexes"])
    assert r.exit_code == 1 and "not a whole number" in r.output, r.output
