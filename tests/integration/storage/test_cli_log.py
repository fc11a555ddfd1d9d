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
