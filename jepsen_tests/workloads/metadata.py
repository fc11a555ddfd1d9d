"""The metadata workload: topics created, deleted and described concurrently.

A few topic names, each a register (absent or a definition): workers pick a name and create
it (with a definition unique to this op, so a describe says which create won), delete it, or
describe it. The history is checked per topic for linearizability
(`jepsen_tests.checkers.linear.check_metadata`) and for two different definitions under one
topic id. After the faults heal, every topic is described once more.

As in the queue workload, a worker whose op ended in ``info`` returns as a new process id.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from jepsen_tests.cluster import DefiniteError, IndefiniteError, MetadataClient
from jepsen_tests.history import CREATE_TOPIC, DELETE_TOPIC, DESCRIBE_TOPIC, Recorder

_defs = itertools.count(1)


class MetadataWorker:
    def __init__(
        self,
        index: int,
        n_workers: int,
        client: MetadataClient,
        topics: Sequence[str],
        recorder: Recorder,
        rng: random.Random,
    ) -> None:
        self.process = index
        self.n_workers = n_workers
        self.client = client
        self.topics = list(topics)
        self.rec = recorder
        self.rng = rng

    async def _op(
        self, f: str, inv: dict[str, Any], call: Callable[[], Awaitable[dict[str, Any]]]
    ) -> None:
        p = self.process
        self.rec.invoke(p, f, inv)
        try:
            out = await call()
        except DefiniteError as e:
            self.rec.fail(p, f, inv, error=str(e))
        except IndefiniteError as e:
            self.rec.info(p, f, inv, error=str(e))
            self.process += self.n_workers
        else:
            # Which node answered, where the client knows (a stale read names its broker).
            node = getattr(self.client, "last_node", None)
            self.rec.ok(p, f, out, **({"node": node} if node else {}))

    async def step(self) -> None:
        t = self.rng.choice(self.topics)
        r = self.rng.random()
        if r < 0.3:
            d = {"partitions": self.rng.randint(1, 4), "create": next(_defs)}

            async def create() -> dict[str, Any]:
                return {"created": await self.client.create_topic(t, d)}

            await self._op(CREATE_TOPIC, {"topic": t, "definition": d}, create)
        elif r < 0.5:

            async def delete() -> dict[str, Any]:
                return {"deleted": await self.client.delete_topic(t)}

            await self._op(DELETE_TOPIC, {"topic": t}, delete)
        else:
            await self.describe(t)

    async def describe(self, t: str) -> None:
        async def describe() -> dict[str, Any]:
            return {"definition": await self.client.describe_topic(t)}

        await self._op(DESCRIBE_TOPIC, {"topic": t}, describe)

    async def run(self, deadline: float, pause_s: float = 0.01) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < deadline:
            await self.step()
            await asyncio.sleep(pause_s)


def topic_names(n: int = 4) -> list[str]:
    return [f"topic-{i}" for i in range(n)]
