"""Shared by the group consumer's tests (the fake-coordinator unit tests and the real-cluster
integration tests): a consumer polled in a background task with its callbacks, records and
their arrival times recorded, and a condition poller."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from api.client import AsyncGroupConsumer, ConsumerRecord, TopicPartition


async def until(cond: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Member:
    """An ``AsyncGroupConsumer`` polled in a background task. Every poll is checked to return
    only records of partitions assigned at that moment."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group: str,
        name: str,
        strategy: str = "range",
        *,
        topics: list[str] | None = None,
        pattern: str | None = None,
        with_lost: bool = False,
        **options: Any,
    ) -> None:
        self.name = name
        self.c = AsyncGroupConsumer(
            bootstrap,
            group_id=group,
            client_id=name,
            partition_assignment_strategy=strategy,
            **options,
        )
        self.records: list[ConsumerRecord] = []
        self.arrivals: list[tuple[float, ConsumerRecord]] = []
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []
        self.event_times: list[float] = []
        self.polling = True
        self._task: asyncio.Task[None] | None = None
        self._topics = topics
        self._pattern = pattern
        self._with_lost = with_lost

    def _event(self, kind: str, tps: set[TopicPartition]) -> None:
        self.events.append((kind, frozenset(tps)))
        self.event_times.append(time.monotonic())

    def revoked(self) -> set[TopicPartition]:
        return {tp for kind, tps in self.events if kind == "revoked" for tp in tps}

    async def start(self) -> Member:
        await self.c.start()
        lost = (lambda tps: self._event("lost", tps)) if self._with_lost else None
        self.c.subscribe(
            self._topics,
            pattern=self._pattern,
            on_revoked=lambda tps: self._event("revoked", tps),
            on_assigned=lambda tps: self._event("assigned", tps),
            on_lost=lost,
        )
        self._task = asyncio.get_running_loop().create_task(self._poll_loop())
        return self

    async def _poll_loop(self) -> None:
        while True:
            if not self.polling:
                await asyncio.sleep(0.01)
                continue
            got = await self.c.poll(50)
            held = self.c.assignment()
            assert all(TopicPartition(r.topic, r.partition) in held for r in got), (
                self.name,
                [(r.topic, r.partition) for r in got],
                held,
            )
            now = time.monotonic()
            self.records += got
            self.arrivals += [(now, r) for r in got]

    def seen(self) -> set[bytes]:
        return {r.value for r in self.records if r.value is not None}

    async def stop_polling(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def close(self) -> None:
        await self.stop_polling()
        await self.c.close()


def assigned_together(members: Sequence[Member], everything: set[TopicPartition]) -> bool:
    """Every member holds something, nobody holds a partition twice, all is held."""
    held = [m.c.assignment() for m in members]
    return (
        all(held)
        and sum(len(h) for h in held) == len(everything)
        and set().union(*held) == everything
    )
