"""What the txn workload's workers record for each outcome of a transaction or a ctp step."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from jepsen_tests.checkers.txn import check
from jepsen_tests.cluster import DefiniteError, IndefiniteError
from jepsen_tests.history import Recorder
from jepsen_tests.workloads.txn import CtpWorker, TxnWorker, final_reads


class FakeTxnClient:
    """A log per key; `outcomes` scripts each transaction: ok, fail (refused before the
    commit), info-applied or info-lost (the commit's answer lost, applied or not)."""

    def __init__(self, outcomes: list[str]) -> None:
        self.outcomes = outcomes
        self.logs: dict[str, list[tuple[int, Any]]] = {}
        self.crashes = 0

    async def transact(
        self, sends: list[tuple[str, int]], abort: bool, on_commit: Callable[[], None]
    ) -> list[int]:
        if abort:
            raise DefiniteError("aborted on purpose")
        outcome = self.outcomes.pop(0)
        if outcome == "fail":
            raise DefiniteError("send failed")
        on_commit()
        if outcome == "info-lost":
            raise IndefiniteError("commit timed out")
        offsets = []
        for k, v in sends:
            log = self.logs.setdefault(k, [])
            offsets.append(2 * len(log))  # markers take the odd offsets
            log.append((offsets[-1], v))
        if outcome == "info-applied":
            raise IndefiniteError("commit timed out")
        return offsets

    async def poll(self, key: str, offset: int, max_records: int) -> tuple[list[Any], int]:
        recs = [r for r in self.logs.get(key, []) if r[0] >= offset][:max_records]
        return recs, (recs[-1][0] + 2 if recs else offset)

    async def crashed(self) -> None:
        self.crashes += 1

    async def close(self) -> None:
        pass


class NoAbortRng(random.Random):
    """Never below the abort probability: every transaction tries to commit."""

    def random(self) -> float:
        return 0.99


def _run_txns(
    outcomes: list[str], lose: str | None = None
) -> tuple[Recorder, FakeTxnClient, TxnWorker]:
    rec = Recorder()
    client = FakeTxnClient(list(outcomes))
    counter = iter(range(1, 1000))
    w = TxnWorker(0, 3, client, ["k0", "k1"], rec, lambda: next(counter), NoAbortRng(5))

    async def go() -> None:
        for _ in outcomes:
            await w.txn()
        if lose is not None:
            client.logs[lose] = []
        await final_reads(client, ["k0", "k1"], rec, process=10_000, timeout_s=5)

    asyncio.run(go())
    return rec, client, w


def test_outcomes_are_recorded_as_jepsen_does_and_the_history_checks_valid() -> None:
    rec, client, w = _run_txns(["ok", "fail", "info-applied", "info-lost", "ok"])
    h = rec.history()
    done = [o for o in h if o.f == "txn" and o.type != "invoke"]
    assert [o.type for o in done] == ["ok", "fail", "info", "info", "ok"]
    # Every info is a crash: a new process id each time, the producer dropped.
    assert [o.process for o in done] == [0, 0, 0, 3, 6]
    assert w.process == 6 and client.crashes == 2
    assert "commit_ns" in done[0].value and "commit_ns" not in done[1].value
    assert all(len(s) == 3 for s in done[0].value["sends"])  # with offsets
    r = check(h)
    assert r["valid"], r
    assert r["stats"]["committed"] == 3  # two ok, and the info whose records were read
    assert r["counts"] == {"unread-info": 1}


def test_a_lost_commit_is_found_by_the_checker() -> None:
    rec, _, _ = _run_txns(["ok", "ok", "ok"], lose="k0")
    r = check(rec.history())
    assert not r["valid"], r
    assert "lost-write" in r["anomaly_types"], r


class FakeProcessor:
    def __init__(self, script: list[str]) -> None:
        self.script = script
        self.closed = False

    async def step(
        self, max_records: int, abort: bool, on_commit: Callable[[], None], seen: dict[str, Any]
    ) -> bool:
        what = self.script.pop(0)
        if what == "empty":
            return False
        seen["reads"] = {"k0": [[0, 1]]}
        seen["sends"] = [["out/k0", 1]]
        seen["offsets"] = {"k0": 1}
        if what == "fail":
            raise DefiniteError("send_offsets refused")
        on_commit()
        if what == "info":
            raise IndefiniteError("commit timed out")
        seen["sends"] = [["out/k0", 1, 0]]
        return True

    async def committed(self) -> dict[str, int]:
        return {"k0": 1}

    async def close(self) -> None:
        self.closed = True


def test_ctp_worker_records_reads_of_failed_steps_and_replaces_a_crashed_processor() -> None:
    rec = Recorder()
    made: list[FakeProcessor] = []
    scripts = [["empty", "fail", "info"], ["ok"]]

    def new() -> FakeProcessor:
        made.append(FakeProcessor(scripts[len(made)]))
        return made[-1]

    w = CtpWorker(1, 2, new, rec, NoAbortRng(1))

    async def go() -> None:
        for _ in range(4):
            await w.step()

    asyncio.run(go())
    done = [o for o in rec.history() if o.f == "ctp" and o.type != "invoke"]
    assert [o.type for o in done] == ["fail", "fail", "info", "ok"]
    assert done[0].error == "nothing to consume"
    assert done[1].value["reads"] == {"k0": [[0, 1]]}  # a failed step's reads are kept
    assert "commit_ns" in done[2].value
    assert [o.process for o in done] == [1, 1, 1, 3]
    assert len(made) == 2 and made[0].closed
