"""The transactional workloads (Jepsen's Kafka test with transactions).

``txn``: each worker owns one transactional id and, until the deadline, randomly

* runs a transaction (``txn``) of 1-4 sends of fresh unique values to random keys (so over
  several partitions), aborting about one in six on purpose;
* polls every key at ``read_committed`` from its own positions (``poll``).

``txn-ctp`` (consume-transform-produce): even workers run the ``txn`` producers above; odd
workers are processors, members of one consumer group (`CTP_GROUP`, ``read_committed``) over
the input topic, each with its own transactional id: a step (``ctp``) polls, sends each record's
value to the same partition of the output topic (keys ``out/<key>``) and the next offsets to
read with `send_offsets_to_transaction`, and commits; about one step in eight is aborted on
purpose. After healing, the group's committed offsets are read (``committed``) and every key
of both topics is read to its end (``poll`` with ``final``).

Outcomes, as Jepsen's transactional client reports them (a history's ``fail`` means
"certainly not committed"):

* committed -> ``ok`` with every send's offset;
* aborted on purpose, or aborted after an abortable error (a send failed), or any failure
  before the commit was asked for -> ``fail``: only this producer's commit can commit its
  transaction, and a newer producer of the id aborts it;
* the commit raised (a timeout, a lost coordinator, fenced while committing) -> ``info``:
  the coordinator may have decided it. The worker then counts as crashed, as in Jepsen: a
  new process id and a new producer, whose ``init_transactions`` fences the old one.

Each op records ``commit_ns``, the history time at which the commit was asked for, so the
checker can tell a read of a transaction's records that came too early (G1b).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from jepsen_tests.checkers.txn import COMMITTED, CTP, TXN, output_key
from jepsen_tests.cluster import DefiniteError, IndefiniteError
from jepsen_tests.history import POLL, Recorder

CTP_GROUP = "jepsen-ctp"
POLL_MAX = 50
SENDS_MAX = 4
ABORT_P = 1 / 6
CTP_ABORT_P = 1 / 8


class TxnClient(Protocol):
    """A transactional producer and read_committed readers. Raise DefiniteError /
    IndefiniteError as the module docstring says."""

    async def transact(
        self, sends: list[tuple[str, int]], abort: bool, on_commit: Callable[[], None]
    ) -> list[int]:
        """Send ``(key, value)`` in one transaction, then commit (``on_commit`` just before
        asking) or, with ``abort``, abort and raise DefiniteError. The offsets, in order."""
        ...

    async def poll(
        self, key: str, offset: int, max_records: int
    ) -> tuple[list[tuple[int, Any]], int]:
        """Committed records of ``key`` from ``offset``: ([(offset, value), ...], the next
        position: past aborted records and markers too). ``([], offset)`` only at the last
        stable offset; DefiniteError if it failed or brought nothing."""
        ...

    async def crashed(self) -> None:
        """Drop the producer: the next transaction starts a new one (which fences it)."""
        ...

    async def close(self) -> None: ...


class CtpProcessor(Protocol):
    """A consume-transform-produce member of `CTP_GROUP` with its own transactional id."""

    async def step(
        self, max_records: int, abort: bool, on_commit: Callable[[], None], seen: dict[str, Any]
    ) -> bool:
        """Poll; if records came, send their outputs and the next offsets in a transaction
        and commit (or abort). Fills ``seen`` (``reads``, ``sends``, ``offsets``) as it goes,
        so a failed step still says what it consumed. False if nothing was polled."""
        ...

    async def committed(self) -> dict[str, int]:
        """The group's committed offsets (next to read) by input key."""
        ...

    async def close(self) -> None: ...


class TxnWorker:
    def __init__(
        self,
        index: int,
        n_workers: int,
        client: TxnClient,
        keys: Sequence[str],
        recorder: Recorder,
        values: Callable[[], int],
        rng: random.Random,
        *,
        txn_share: float = 0.6,
    ) -> None:
        self.index = index
        self.process = index
        self.n_workers = n_workers
        self.client = client
        self.keys = list(keys)
        self.rec = recorder
        self.values = values
        self.rng = rng
        self.txn_share = txn_share
        self.positions: dict[str, int] = dict.fromkeys(self.keys, 0)

    async def _crashed(self) -> None:
        self.process += self.n_workers
        self.positions = dict.fromkeys(self.keys, 0)
        await self.client.crashed()

    async def txn(self) -> None:
        n = self.rng.randint(1, SENDS_MAX)
        sends = [(self.rng.choice(self.keys), self.values()) for _ in range(n)]
        abort = self.rng.random() < ABORT_P
        p = self.process
        inv = {"sends": [[k, v] for k, v in sends], "abort": abort}
        self.rec.invoke(p, TXN, inv)
        commit: dict[str, int] = {}

        def on_commit() -> None:
            commit["commit_ns"] = self.rec.now_ns()

        try:
            offsets = await self.client.transact(sends, abort, on_commit)
        except DefiniteError as e:
            self.rec.fail(p, TXN, {**inv, **commit}, error=str(e))
            return
        except IndefiniteError as e:
            self.rec.info(p, TXN, {**inv, **commit}, error=str(e))
            await self._crashed()
            return
        done = [[k, v, o] for (k, v), o in zip(sends, offsets, strict=True)]
        self.rec.ok(p, TXN, {"sends": done, **commit})

    async def poll(self) -> None:
        p = self.process
        keys = sorted(self.rng.sample(self.keys, self.rng.randint(1, len(self.keys))))
        self.rec.invoke(p, POLL, {"keys": keys})
        reads: dict[str, list[list[Any]]] = {}
        moved: dict[str, int] = {}
        try:
            for k in keys:
                got, nxt = await self.client.poll(k, self.positions[k], POLL_MAX)
                reads[k] = [[o, v] for o, v in got]
                moved[k] = nxt
        except DefiniteError as e:
            self.rec.fail(p, POLL, {"keys": keys}, error=str(e))
            return
        self.positions.update(moved)
        self.rec.ok(p, POLL, {"reads": reads})

    async def run(self, deadline: float, pause_s: float = 0.005) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < deadline:
            if self.rng.random() < self.txn_share:
                await self.txn()
            else:
                await self.poll()
            await asyncio.sleep(pause_s)


class CtpWorker:
    """A processor: ``ctp`` steps until the deadline. After an ``info`` it crashes: a new
    process id and a new processor (a new member and a new producer of the same id)."""

    def __init__(
        self,
        index: int,
        n_workers: int,
        new_processor: Callable[[], CtpProcessor],
        recorder: Recorder,
        rng: random.Random,
    ) -> None:
        self.index = index
        self.process = index
        self.n_workers = n_workers
        self.new_processor = new_processor
        self.processor: CtpProcessor | None = None
        self.rec = recorder
        self.rng = rng

    async def step(self) -> None:
        if self.processor is None:
            self.processor = self.new_processor()
        p = self.process
        abort = self.rng.random() < CTP_ABORT_P
        seen: dict[str, Any] = {}

        def on_commit() -> None:
            seen["commit_ns"] = self.rec.now_ns()

        inv = {"group": CTP_GROUP, "abort": abort}
        # Invoked before the poll: what it consumes is part of the step.
        self.rec.invoke(p, CTP, inv)
        try:
            polled = await self.processor.step(POLL_MAX, abort, on_commit, seen)
        except DefiniteError as e:
            self.rec.fail(p, CTP, {**inv, **seen}, error=str(e))
            return
        except IndefiniteError as e:
            self.rec.info(p, CTP, {**inv, **seen}, error=str(e))
            self.process += self.n_workers
            proc, self.processor = self.processor, None
            await proc.close()
            return
        if not polled:
            self.rec.fail(p, CTP, inv, error="nothing to consume")
            await asyncio.sleep(0.05)
            return
        self.rec.ok(p, CTP, {**inv, **seen})

    async def run(self, deadline: float, pause_s: float = 0.005) -> None:
        loop = asyncio.get_running_loop()
        try:
            while loop.time() < deadline:
                await self.step()
                await asyncio.sleep(pause_s)
        finally:
            if self.processor is not None:
                await self.processor.close()


async def final_reads(
    client: TxnClient,
    keys: Sequence[str],
    recorder: Recorder,
    process: int,
    timeout_s: float = 15.0,
) -> dict[str, bool]:
    """Read every key from 0 to its last stable offset; returns which keys were read
    completely (a complete key's last final poll is empty)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    complete: dict[str, bool] = {}
    for k in keys:
        pos = 0
        complete[k] = False
        while loop.time() < deadline:
            inv = {"keys": [k], "final": True}
            recorder.invoke(process, POLL, inv)
            try:
                recs, nxt = await client.poll(k, pos, 500)
            except (DefiniteError, IndefiniteError) as e:
                recorder.fail(process, POLL, inv, error=str(e))
                await asyncio.sleep(0.2)
                continue
            if not recs and nxt <= pos:
                # At the end: say so, the checker holds complete keys to the strict rule.
                recorder.ok(process, POLL, {"reads": {k: []}, "complete": True})
                complete[k] = True
                break
            recorder.ok(process, POLL, {"reads": {k: [[o, v] for o, v in recs]}})
            pos = nxt
    return complete


async def final_committed(
    processor: CtpProcessor, recorder: Recorder, process: int, timeout_s: float = 15.0
) -> bool:
    """The group's committed offsets, once (retried until ``timeout_s``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        inv = {"group": CTP_GROUP}
        recorder.invoke(process, COMMITTED, inv)
        try:
            offsets = await processor.committed()
        except (DefiniteError, IndefiniteError) as e:
            recorder.fail(process, COMMITTED, inv, error=str(e))
            await asyncio.sleep(0.5)
            continue
        recorder.ok(process, COMMITTED, {"group": CTP_GROUP, "offsets": offsets})
        return True
    return False


def all_keys(keys: Sequence[str], ctp: bool) -> list[str]:
    """The keys the final reads cover: the input's, and with ctp the output's."""
    return [*keys, *(output_key(k) for k in keys)] if ctp else list(keys)
