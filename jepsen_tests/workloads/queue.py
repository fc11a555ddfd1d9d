"""The queue workload (Jepsen's Kafka queue test, without transactions).

Each worker is a client process that, until the deadline, randomly

* sends a fresh unique value to a random key (``send``),
* polls its assigned keys from its own positions (``poll``), advancing them,
* now and then re-assigns itself a random subset of keys, from offset 0 (``assign``).

After an ``info`` (unknown) outcome the worker counts as crashed, as in Jepsen: it comes back
as a new process id (old id + number of workers) with fresh positions. After the faults heal,
`final_reads` reads every key from offset 0 to its end, as ``poll`` ops marked ``final``, so the
checker can tell lost writes from slow readers.

A `GroupQueueWorker` (``run --consumers group|mixed``) sends the same way but consumes as a
member of the run's consumer group (`GROUP`): it subscribes to every key (``subscribe``),
polls what the group assigned it (``poll``) and then commits, per key, the offset after the
last record that poll returned (``commit``). Its member's assignment changes are recorded as
``rebalance`` ops of a process named after the member (``m<worker>.<incarnation>``), at the
moment they happen, so the checker knows which polls fall within one ownership of a key.
Every 8-20 s (drawn from the worker's seed) the worker closes its member and starts a new
one, which makes the group rebalance and the others resume from its commits. After a crash
(an ``info``) the member carries on under the new process id, which subscribes again in the
history; the checker's per-ownership checks follow the member, not the process.

Values are ints, unique in the run; a shared counter hands them out.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from jepsen_tests.cluster import (
    DefiniteError,
    GroupMember,
    IndefiniteError,
    OnRebalance,
    QueueClient,
)
from jepsen_tests.history import ASSIGN, COMMIT, POLL, REBALANCE, SEND, SUBSCRIBE, Recorder

T = TypeVar("T")

POLL_MAX = 50
GROUP = "jepsen-consumers"
GROUP_ASSIGNORS = ("range", "cooperative-sticky")
"""Eager and cooperative. One per run: the coordinator refuses a member whose assignor is
not the group's (INCONSISTENT_GROUP_PROTOCOL), so a group cannot mix them."""
MEMBER_RESTART_S = (8.0, 20.0)


class QueueWorker:
    def __init__(
        self,
        index: int,
        n_workers: int,
        client: QueueClient,
        keys: Sequence[str],
        recorder: Recorder,
        values: Callable[[], int],
        rng: random.Random,
    ) -> None:
        self.index = index
        self.process = index
        self.n_workers = n_workers
        self.client = client
        self.keys = list(keys)
        self.rec = recorder
        self.values = values
        self.rng = rng
        self.positions: dict[str, int] = {}

    def _crashed(self) -> None:
        self.process += self.n_workers
        self.positions = {}

    async def assign(self) -> None:
        k = self.rng.randint(1, len(self.keys))
        keys = sorted(self.rng.sample(self.keys, k))
        self.rec.invoke(self.process, ASSIGN, {"keys": keys})
        self.positions = dict.fromkeys(keys, 0)
        self.rec.ok(self.process, ASSIGN, {"keys": keys})

    async def _attempt(
        self, f: str, inv: dict[str, Any], call: Awaitable[T]
    ) -> tuple[int, T | None]:
        """Record ``f`` invoked and await ``call``: a definite error is recorded as ``fail``,
        an indefinite one as ``info`` (and this process has crashed); then None. Otherwise
        its result, for the caller to record ``ok`` under the process it returns."""
        p = self.process
        self.rec.invoke(p, f, inv)
        try:
            return p, await call
        except DefiniteError as e:
            self.rec.fail(p, f, inv, error=str(e))
        except IndefiniteError as e:
            self.rec.info(p, f, inv, error=str(e))
            self._crashed()
        return p, None

    async def send(self) -> None:
        key = self.rng.choice(self.keys)
        v = self.values()
        inv = {"key": key, "value": v}
        p, got = await self._attempt(SEND, inv, self.client.send(key, v))
        if got is not None:
            off, node = got
            self.rec.ok(p, SEND, {**inv, "offset": off}, node=node)

    async def poll(self) -> None:
        if not self.positions:
            await self.assign()
        p = self.process
        keys = sorted(self.positions)
        self.rec.invoke(p, POLL, {"keys": keys})
        reads: dict[str, list[list[Any]]] = {}
        try:
            for k in keys:
                got = await self.client.poll(k, self.positions[k], POLL_MAX)
                reads[k] = [[o, v] for o, v in got]
        except (DefiniteError, IndefiniteError) as e:
            # A failed poll returned nothing and moved no position: it had no effect.
            self.rec.fail(p, POLL, {"keys": keys}, error=str(e))
            return
        for k, recs in reads.items():
            if recs:
                self.positions[k] = recs[-1][0] + 1
        self.rec.ok(p, POLL, {"reads": reads})

    async def run(self, deadline: float, pause_s: float = 0.005) -> None:
        loop = asyncio.get_running_loop()
        await self.assign()
        while loop.time() < deadline:
            r = self.rng.random()
            if r < 0.5:
                await self.send()
            elif r < 0.95:
                await self.poll()
            else:
                await self.assign()
            await asyncio.sleep(pause_s)


class GroupQueueWorker(QueueWorker):
    """Sends as `QueueWorker` does; consumes as a member of consumer group `group`."""

    def __init__(
        self,
        index: int,
        n_workers: int,
        client: QueueClient,
        new_member: Callable[[str, OnRebalance], GroupMember],
        keys: Sequence[str],
        recorder: Recorder,
        values: Callable[[], int],
        rng: random.Random,
        *,
        group: str = GROUP,
        assignor: str = GROUP_ASSIGNORS[0],
    ) -> None:
        super().__init__(index, n_workers, client, keys, recorder, values, rng)
        self.new_member = new_member
        self.group = group
        self.assignor = assignor
        self.member: GroupMember | None = None
        self.member_name = ""
        self.incarnation = 0

    def _subscription(self) -> dict[str, Any]:
        return {
            "keys": self.keys,
            "group": self.group,
            "member": self.member_name,
            "assignor": self.assignor,
        }

    def _crashed(self) -> None:
        self.process += self.n_workers
        if self.member is not None:
            # The new process consumes through the same member: it starts subscribed.
            v = self._subscription()
            self.rec.invoke(self.process, SUBSCRIBE, v)
            self.rec.ok(self.process, SUBSCRIBE, v)

    def _rebalance_recorder(self, member: str) -> OnRebalance:
        def on_rebalance(event: str, keys: list[str]) -> None:
            v = {"group": self.group, "member": member, "event": event, "keys": keys}
            self.rec.invoke(member, REBALANCE, v)
            self.rec.ok(member, REBALANCE, v)

        return on_rebalance

    async def join(self) -> None:
        self.incarnation += 1
        self.member_name = name = f"m{self.index}.{self.incarnation}"
        member = self.new_member(name, self._rebalance_recorder(name))
        p = self.process
        inv = self._subscription()
        self.rec.invoke(p, SUBSCRIBE, inv)
        try:
            await member.start()
        except DefiniteError as e:
            self.rec.fail(p, SUBSCRIBE, inv, error=str(e))
            await member.close()
            return
        self.member = member
        self.rec.ok(p, SUBSCRIBE, inv)

    async def leave(self) -> None:
        member, self.member = self.member, None
        if member is not None:
            await member.close()

    async def poll(self) -> None:
        member = self.member
        if member is None:
            await self.join()
            return
        p = self.process
        inv = {"group": self.group, "member": self.member_name}
        self.rec.invoke(p, POLL, inv)
        try:
            got = await member.poll(POLL_MAX)
        except DefiniteError as e:
            self.rec.fail(p, POLL, inv, error=str(e))
            return
        self.rec.ok(
            p,
            POLL,
            {**inv, "reads": {k: [[o, v] for o, v in recs] for k, recs in sorted(got.items())}},
        )
        # Recorded is processed: commit it. Nothing awaits between the poll's return and the
        # commit's first attempt, so the member still owns these keys in the generation the
        # commit is sent under (the coordinator fences a later generation's commits).
        offsets = {k: recs[-1][0] + 1 for k, recs in sorted(got.items()) if recs}
        if offsets:
            await self.commit(member, offsets)

    async def commit(self, member: GroupMember, offsets: dict[str, int]) -> None:
        v = {"group": self.group, "member": self.member_name, "offsets": offsets}
        p, done = await self._attempt(COMMIT, v, self._committed(member, offsets))
        if done:
            self.rec.ok(p, COMMIT, v)

    @staticmethod
    async def _committed(member: GroupMember, offsets: dict[str, int]) -> bool:
        await member.commit(offsets)
        return True

    async def run(self, deadline: float, pause_s: float = 0.005) -> None:
        loop = asyncio.get_running_loop()
        restart_at = loop.time() + self.rng.uniform(*MEMBER_RESTART_S)
        try:
            await self.join()
            while loop.time() < deadline:
                if self.member is not None and loop.time() >= restart_at:
                    await self.leave()
                    await self.join()
                    restart_at = loop.time() + self.rng.uniform(*MEMBER_RESTART_S)
                elif self.rng.random() < 0.5:
                    await self.send()
                else:
                    await self.poll()
                await asyncio.sleep(pause_s)
        finally:
            await self.leave()


async def final_reads(
    client: QueueClient,
    keys: Sequence[str],
    recorder: Recorder,
    process: int,
    timeout_s: float = 15.0,
) -> dict[str, bool]:
    """Read every key from 0 to its end; returns which keys were read completely."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    complete: dict[str, bool] = {}
    for k in keys:
        pos = 0
        complete[k] = False
        while loop.time() < deadline:
            recorder.invoke(process, POLL, {"keys": [k], "final": True})
            try:
                recs = await client.poll(k, pos, 500)
            except (DefiniteError, IndefiniteError) as e:
                recorder.fail(process, POLL, {"keys": [k], "final": True}, error=str(e))
                await asyncio.sleep(0.2)
                continue
            recorder.ok(process, POLL, {"reads": {k: [[o, v] for o, v in recs]}})
            if not recs:
                complete[k] = True
                break
            pos = recs[-1][0] + 1
    return complete


def value_counter() -> Callable[[], int]:
    c = itertools.count(1)
    return lambda: next(c)
