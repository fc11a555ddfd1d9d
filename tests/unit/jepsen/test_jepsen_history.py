"""History recording, pairing, fault windows and the JSON-lines round trip."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from jepsen_tests.history import History, HistoryError, Op, Recorder


def test_recorder_round_trips_through_jsonl(tmp_path: Path) -> None:
    rec = Recorder(stream_to=tmp_path / "stream.jsonl")
    rec.invoke(0, "send", {"key": "k", "value": 1})
    rec.ok(0, "send", {"key": "k", "value": 1, "offset": 0}, node="n1")
    rec.invoke(1, "poll", {})
    rec.info(1, "poll", None, error="timeout")
    rec.close()
    h = rec.history()
    h.save(tmp_path / "h.jsonl")
    loaded = History.load(tmp_path / "h.jsonl")
    assert [o.to_json() for o in loaded] == [o.to_json() for o in h]
    assert [o.to_json() for o in History.load(tmp_path / "stream.jsonl")] == [
        o.to_json() for o in h
    ]
    assert loaded.ops[1].node == "n1" and loaded.ops[3].error == "timeout"
    times = [o.time_ns for o in loaded]
    assert times == sorted(times)


def test_pairs_match_invocations_and_open_ops_count_as_info() -> None:
    rec = Recorder()
    rec.invoke(0, "send", {"value": 1})
    rec.invoke(1, "send", {"value": 2})
    rec.ok(0, "send", {"value": 1, "offset": 0})
    pairs = rec.history().pairs()
    assert [p.type for p in pairs] == ["ok", "info"]
    assert pairs[0].latency_ns is not None and pairs[1].complete is None


def test_pairs_reject_double_invoke_and_orphan_completion() -> None:
    with pytest.raises(HistoryError):
        History([Op(0, 0, "invoke", "send"), Op(1, 0, "invoke", "send")]).pairs()
    with pytest.raises(HistoryError):
        History([Op(0, 0, "ok", "send")]).pairs()
    with pytest.raises(HistoryError):
        History([Op(0, 0, "invoke", "send"), Op(1, 0, "ok", "poll")]).pairs()


def test_fault_windows_from_nemesis_ops() -> None:
    rec = Recorder()
    rec.info("nemesis", "start", {"id": "1", "kind": "kill", "targets": ["n1"]})
    rec.info("nemesis", "start", {"id": "2", "kind": "partition", "targets": []})
    rec.info("nemesis", "stop", {"id": "1", "kind": "kill", "targets": ["n1"]})
    rec.invoke(0, "poll", {})
    ws = rec.history().fault_windows()
    assert [(w.id, w.label) for w in ws] == [("1", "kill(n1)"), ("2", "partition")]
    assert ws[1].end_ns == rec.history().ops[-1].time_ns  # never stopped: runs to the end


def test_recorder_is_safe_from_threads_and_tasks() -> None:
    rec = Recorder()

    def worker(p: int) -> None:
        for i in range(500):
            rec.invoke(p, "send", i)
            rec.ok(p, "send", i)

    async def task(p: int) -> None:
        for i in range(500):
            rec.invoke(p, "poll", i)
            await asyncio.sleep(0)
            rec.ok(p, "poll", i)

    async def main() -> None:
        await asyncio.gather(*(task(100 + p) for p in range(4)))

    threads = [threading.Thread(target=worker, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    asyncio.run(main())
    for t in threads:
        t.join()
    h = rec.history()
    assert [o.index for o in h] == list(range(8000))
    assert len(h.pairs()) == 4000
