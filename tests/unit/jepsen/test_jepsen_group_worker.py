"""`GroupQueueWorker` records what the checker expects: a subscribe per process, rebalance
events under the member's name, polls with the member, a commit of each poll's end offsets,
and honest outcomes (a crash after an unknown commit)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from jepsen_tests.checkers.queue import check
from jepsen_tests.cluster import DefiniteError, IndefiniteError, OnRebalance
from jepsen_tests.history import Recorder
from jepsen_tests.workloads.queue import GroupQueueWorker


class _Producer:
    async def send(self, key: str, value: int) -> tuple[int, str | None]:
        raise AssertionError("not used")

    async def poll(self, key: str, offset: int, max_records: int) -> list[tuple[int, Any]]:
        raise AssertionError("not used")

    async def close(self) -> None:
        pass


class _Member:
    """Assigned k0 and k1 once started; polls and commits answer from scripts."""

    def __init__(self, name: str, on_rebalance: OnRebalance) -> None:
        self.name = name
        self.on_rebalance = on_rebalance
        self.owns = {"k0", "k1"}
        self.polls: list[Any] = []
        self.commits: list[Any] = []
        self.committed: list[dict[str, int]] = []
        self.closed = False

    async def start(self) -> None:
        self.on_rebalance("assigned", sorted(self.owns))

    async def poll(self, max_records: int) -> dict[str, list[tuple[int, Any]]]:
        got = self.polls.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    async def commit(self, offsets: dict[str, int]) -> None:
        self.committed.append(offsets)
        outcome = self.commits.pop(0)
        if isinstance(outcome, Exception):
            raise outcome

    async def close(self) -> None:
        self.closed = True


def test_group_worker_records_polls_commits_and_crashes() -> None:
    rec = Recorder()
    members: list[_Member] = []

    def new_member(name: str, on_rebalance: OnRebalance) -> _Member:
        members.append(_Member(name, on_rebalance))
        return members[-1]

    w = GroupQueueWorker(
        1,
        4,
        _Producer(),
        new_member,
        ["k0", "k1"],
        rec,
        lambda: 0,
        random.Random(0),
        group="g",
        assignor="range",
    )

    async def go() -> None:
        await w.join()
        m = members[0]
        m.polls = [
            {"k0": [(3, 30), (4, 40)], "k1": [(0, 7)]},
            DefiniteError("leader moved"),
            {"k0": [(5, 50)]},
            {"k1": [(1, 8)]},
            {},
        ]
        m.commits = [None, DefiniteError("not in a generation"), IndefiniteError("timeout")]
        await w.poll()  # ok, commit ok
        await w.poll()  # failed poll: no commit
        await w.poll()  # commit refused before sending
        await w.poll()  # unknown commit: crash
        await w.poll()  # empty: nothing to commit
        await w.leave()

    asyncio.run(go())
    m = members[0]
    assert m.committed == [{"k0": 5, "k1": 1}, {"k0": 6}, {"k1": 2}]
    assert m.closed
    ops = [(o.process, o.type, o.f) for o in rec.history().ops]
    assert ops == [
        (1, "invoke", "subscribe"),
        ("m1.1", "invoke", "rebalance"),
        ("m1.1", "ok", "rebalance"),
        (1, "ok", "subscribe"),
        (1, "invoke", "poll"),
        (1, "ok", "poll"),
        (1, "invoke", "commit"),
        (1, "ok", "commit"),
        (1, "invoke", "poll"),
        (1, "fail", "poll"),
        (1, "invoke", "poll"),
        (1, "ok", "poll"),
        (1, "invoke", "commit"),
        (1, "fail", "commit"),
        (1, "invoke", "poll"),
        (1, "ok", "poll"),
        (1, "invoke", "commit"),
        (1, "info", "commit"),
        (5, "invoke", "subscribe"),
        (5, "ok", "subscribe"),  # the member carries on as p5
        (5, "invoke", "poll"),
        (5, "ok", "poll"),
    ]
    h = rec.history()
    first_poll = next(o for o in h.ops if o.f == "poll" and o.type == "ok")
    assert first_poll.value == {
        "group": "g",
        "member": "m1.1",
        "reads": {"k0": [[3, 30], [4, 40]], "k1": [[0, 7]]},
    }
    assert h.ops[1].value == {
        "group": "g",
        "member": "m1.1",
        "event": "assigned",
        "keys": ["k0", "k1"],
    }
    r = check(h)
    assert r["stats"]["group"]["commits"] == {"ok": 1, "fail": 1, "info": 1}
    assert r["stats"]["group"]["polls"] == 4
