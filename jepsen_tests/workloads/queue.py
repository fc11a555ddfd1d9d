"""The queue workload (Jepsen's Kafka queue test, without transactions).

Each worker is a client process that, until the deadline, randomly

* sends a fresh unique value to a random key (``send``),
* polls its assigned keys from its own positions (``poll``), advancing them,
* now and then re-assigns itself a random subset of keys, from offset 0 (``assign``).

After an ``info`` (unknown) outcome the worker counts as crashed, as in Jepsen: it comes back
as a new process id (old id + number of workers) with fresh positions. After the faults heal,
`final_reads` reads every key from offset 0 to its end, as ``poll`` ops marked ``final``, so the
checker can tell lost writes from slow readers.

Values are ints, unique in the run; a shared counter hands them out.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Sequence
from typing import Any

from jepsen_tests.cluster import DefiniteError, IndefiniteError, QueueClient
from jepsen_tests.history import ASSIGN, POLL, SEND, Recorder

POLL_MAX = 50


class QueueWorker:
    def __init__(self, index: int, n_workers: int, client: QueueClient, keys: Sequence[str],
                 recorder: Recorder, values: Callable[[], int], rng: random.Random) -> None:
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

    async def send(self) -> None:
        key = self.rng.choice(self.keys)
        v = self.values()
        inv = {"key": key, "value": v}
        p = self.process
        self.rec.invoke(p, SEND, inv)
        try:
            off, node = await self.client.send(key, v)
        except DefiniteError as e:
            self.rec.fail(p, SEND, inv, error=str(e))
        except IndefiniteError as e:
            self.rec.info(p, SEND, inv, error=str(e))
            self._crashed()
        else:
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


async def final_reads(client: QueueClient, keys: Sequence[str], recorder: Recorder,
                      process: int, timeout_s: float = 15.0) -> dict[str, bool]:
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
