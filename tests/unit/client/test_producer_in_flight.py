"""Several produce requests per partition in flight (``max_in_flight``), order kept.

The client's requests for one partition travel on several connections, so the leader may see
a batch before the one that precedes it. These tests stand a fake leader in for the
transport that checks sequences with the broker's own ``ProducerState`` (the same duplicate
and out-of-order answers a real leader gives) and holds every request until the test lets it
through, in whatever order the test picks: reversed, the middle one refused, an answer lost
after the append, no answer at all. Whatever happens, the log holds every acknowledged record
once, in send order, and the futures resolve in send order with the offsets the log gave.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Callable
from typing import Any

import pytest
from fake_metadata import OneTopicMetadata

from api.client import ClientError
from api.client.producer import RECORD_OVERHEAD, AsyncProducer
from broker.errors import BrokerError
from broker.producer_state import Duplicate, ProducerState
from storage.batch import decode_records, parse_header

VALUE_BYTES = 8


class HeldLeader:
    """The transport: each produce request waits in ``pending`` until ``let_through`` (the
    leader appends or refuses it, as a real one would) or ``refuse`` (an error, nothing
    appended)."""

    def __init__(self) -> None:
        self.state = ProducerState()
        self.log: list[bytes | None] = []
        self.pending: list[tuple[bytes, asyncio.Future[dict[str, Any]]]] = []
        self.arrived = asyncio.Event()
        self.most_pending = 0
        self.late_answers: list[tuple[asyncio.Future[dict[str, Any]], dict[str, Any]]] = []

    async def call(self, url: str, route: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        assert route == "produce"
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending.append((body["batch"], fut))
        self.most_pending = max(self.most_pending, len(self.pending))
        self.arrived.set()
        return await fut

    async def close(self) -> None:
        pass

    async def wait_pending(self, n: int = 1) -> None:
        async with asyncio.timeout(5):
            while len(self.pending) < n:
                self.arrived.clear()
                await self.arrived.wait()

    def append(self, batch: bytes) -> dict[str, Any]:
        header = parse_header(batch)
        try:
            plan = self.state.check_and_plan(header)
        except BrokerError as e:
            raise ClientError(e.code, str(e)) from None
        if isinstance(plan, Duplicate):
            return {"base_offset": plan.base_offset, "duplicate": True}
        base = len(self.log)
        self.log += [r.value for r in decode_records(batch)]
        self.state.on_append(header, base)
        return {"base_offset": base, "duplicate": False}

    def let_through(self, i: int, *, lose_answer: bool = False, answer_later: bool = False) -> None:
        batch, fut = self.pending.pop(i)
        try:
            answer = self.append(batch)
        except ClientError as e:
            fut.set_exception(e)
            return
        if lose_answer:  # appended, but the client never hears so
            fut.set_exception(ClientError("REQUEST_TIMED_OUT", "the answer was lost"))
        elif answer_later:  # appended; the answer is slow on its way back
            self.late_answers.append((fut, answer))
        else:
            fut.set_result(answer)

    def refuse(self, i: int, code: str = "NOT_LEADER_OR_FOLLOWER") -> None:
        _, fut = self.pending.pop(i)
        fut.set_exception(ClientError(code, "refused before the append"))


def _producer(**options: Any) -> tuple[AsyncProducer, HeldLeader, OneTopicMetadata]:
    options = {
        "linger_ms": 0,
        "retry_backoff_ms": 1,
        # One record per batch: every send is a request of its own.
        "batch_size": RECORD_OVERHEAD + VALUE_BYTES,
        **options,
    }
    p = AsyncProducer("http://127.0.0.1:1", **options)
    leader, md = HeldLeader(), OneTopicMetadata()
    p.transport = leader  # type: ignore[assignment]
    p.metadata = md
    p._loop = asyncio.get_running_loop()  # started: no cluster to ask

    async def init_producer_id() -> None:
        p.producer_id, p.producer_epoch = p.producer_id + 1, 0

    p._init_producer_id = init_producer_id  # type: ignore[method-assign]
    if p.idempotent:
        p.producer_id, p.producer_epoch = 1000, 0
    return p, leader, md


async def _until_done(
    futs: list[asyncio.Future[Any]], leader: HeldLeader, step: Callable[[], None]
) -> None:
    """``step`` whenever a request waits, until every future is done."""
    async with asyncio.timeout(10):
        while not all(f.done() for f in futs):
            if leader.pending:
                step()
            await asyncio.sleep(0.001)


def _value(i: int) -> bytes:
    return b"%08d" % i


async def _send(p: AsyncProducer, n: int, done: list[int]) -> list[asyncio.Future[Any]]:
    """Send records 0..n-1 to partition 0, each a batch of its own; ``done`` gets each
    record's number as its future completes."""
    futs: list[asyncio.Future[Any]] = []
    for i in range(n):
        f = await p.send("t", _value(i), partition=0)
        f.add_done_callback(functools.partial(lambda i, _: done.append(i), i))
        futs.append(f)
    return futs


def test_five_requests_go_at_once_once_the_leader_knows_the_producer() -> None:
    async def go() -> None:
        p, leader, _ = _producer()
        futs = await _send(p, 8, [])
        await leader.wait_pending(1)
        await asyncio.sleep(0.02)
        assert len(leader.pending) == 1  # the id's first batch goes alone
        leader.let_through(0)
        await leader.wait_pending(5)
        await asyncio.sleep(0.02)
        assert len(leader.pending) == 5  # the window, no more
        await _until_done(futs, leader, lambda: leader.let_through(0))
        assert [(await f).offset for f in futs] == list(range(8))
        assert leader.most_pending == 5
        await p.close()

    asyncio.run(go())


def test_requests_reaching_the_leader_in_reverse_are_stored_in_send_order() -> None:
    async def go() -> None:
        p, leader, _ = _producer()
        done: list[int] = []
        futs = await _send(p, 30, done)
        # The newest first, each time the window has filled.
        await _until_done(futs, leader, lambda: leader.let_through(len(leader.pending) - 1))
        assert [(await f).offset for f in futs] == list(range(30))
        assert leader.log == [_value(i) for i in range(30)]
        assert done == list(range(30))
        assert p.out_of_order_resends > 0
        assert p._buffered == 0
        await p.close()

    asyncio.run(go())


def test_a_refused_middle_request_is_sent_again_before_its_successors() -> None:
    async def go() -> None:
        p, leader, md = _producer()
        done: list[int] = []
        futs = await _send(p, 4, done)
        await leader.wait_pending(1)
        leader.let_through(0)  # 0: the leader knows the producer now
        await leader.wait_pending(3)
        leader.let_through(0)  # 1
        leader.refuse(0)  # 2: not leader, nothing appended
        leader.let_through(0)  # 3: out of order (2 is missing)
        assert leader.log == [_value(0), _value(1)]

        def alone() -> None:
            assert len(leader.pending) == 1  # 2 alone, then 3 alone
            leader.let_through(0)

        await _until_done(futs, leader, alone)
        assert leader.log == [_value(i) for i in range(4)]
        assert [(await f).offset for f in futs] == list(range(4))
        assert done == list(range(4))
        assert md.refreshes == 1  # NOT_LEADER_OR_FOLLOWER refreshes before the retry
        await p.close()

    asyncio.run(go())


def test_a_lost_answer_is_answered_as_a_duplicate_with_the_original_offsets() -> None:
    async def go() -> None:
        p, leader, _ = _producer()
        futs = await _send(p, 4, [])
        await leader.wait_pending(1)
        leader.let_through(0)
        await leader.wait_pending(3)
        leader.let_through(0, lose_answer=True)  # 1 appended, the client hears a timeout
        leader.let_through(0)  # 2
        leader.let_through(0)  # 3
        await _until_done(futs, leader, lambda: leader.let_through(0))  # 1 again: a duplicate
        assert leader.log == [_value(i) for i in range(4)]
        assert [(await f).offset for f in futs] == list(range(4))
        await p.close()

    asyncio.run(go())


@pytest.mark.parametrize("seed", range(6))
def test_any_arrival_order_with_refusals_and_lost_answers_keeps_every_ack_once_in_order(
    seed: int,
) -> None:
    rng = random.Random(seed)

    async def go() -> None:
        p, leader, _ = _producer()
        done: list[int] = []
        n = 60
        futs = await _send(p, n, done)

        def step() -> None:
            i = rng.randrange(len(leader.pending))
            roll = rng.random()
            if roll < 0.1:
                leader.refuse(i, rng.choice(["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"]))
            else:
                leader.let_through(i, lose_answer=roll < 0.2)

        await _until_done(futs, leader, step)
        offsets = [(await f).offset for f in futs]
        assert offsets == list(range(n)), f"seed {seed}"
        assert leader.log == [_value(i) for i in range(n)], f"seed {seed}"
        assert done == list(range(n)), f"seed {seed}"
        assert p._buffered == 0
        await p.close()

    asyncio.run(go())


def test_a_batch_that_fails_for_good_lets_its_successors_through_under_a_new_id() -> None:
    async def go() -> None:
        p, leader, _ = _producer()
        done: list[int] = []
        futs = await _send(p, 3, done)
        await leader.wait_pending(1)
        leader.let_through(0)  # 0
        await leader.wait_pending(2)
        leader.let_through(1)  # 2 before 1: out of order
        # 1 is refused for good: its sequence is burnt, and 2 cannot follow it under the
        # old id.
        leader.refuse(0, "INVALID_RECORD")
        await _until_done(futs[2:], leader, lambda: leader.let_through(0))
        assert (await futs[0]).offset == 0
        with pytest.raises(ClientError) as e:
            await futs[1]
        assert e.value.code == "INVALID_RECORD"
        assert (await futs[2]).offset == 1
        assert leader.log == [_value(0), _value(2)]
        assert done == [0, 1, 2]
        assert p.producer_id == 1001  # a new id after the give-up
        assert p._buffered == 0
        await p.close()

    asyncio.run(go())


def test_the_delivery_timeout_fails_every_unanswered_batch_in_order() -> None:
    async def go() -> None:
        p, leader, _ = _producer(delivery_timeout_ms=300, request_timeout_ms=100)
        done: list[int] = []
        futs = await _send(p, 3, done)
        await leader.wait_pending(1)
        leader.let_through(0)
        await leader.wait_pending(2)
        # Nobody answers 1 and 2 (a paused leader) until their time is up.
        await asyncio.sleep(0.4)
        leader.refuse(1, "REQUEST_TIMED_OUT")
        leader.refuse(0, "REQUEST_TIMED_OUT")
        for f in futs[1:]:
            with pytest.raises(ClientError) as e:
                await f
            assert e.value.code == "REQUEST_TIMED_OUT"
        await asyncio.sleep(0)  # the futures' callbacks
        assert done == [0, 1, 2]
        assert p._buffered == 0
        await p.close()

    asyncio.run(go())


def test_an_out_of_order_answer_to_a_batch_sent_alone_is_fatal() -> None:
    async def go() -> None:
        p, leader, _ = _producer()
        fut = await p.send("t", _value(0), partition=0)
        await leader.wait_pending(1)
        leader.refuse(0, "OUT_OF_ORDER_SEQUENCE_NUMBER")
        with pytest.raises(ClientError) as e:
            await fut
        assert e.value.code == "OUT_OF_ORDER_SEQUENCE_NUMBER"
        assert p.producer_id == 1001
        await p.close()

    asyncio.run(go())


def test_without_idempotence_the_window_opens_at_once() -> None:
    async def go() -> None:
        p, leader, _ = _producer(enable_idempotence=False, acks=1)
        futs = await _send(p, 5, [])
        await leader.wait_pending(5)
        for _ in range(5):
            leader.let_through(0)
        assert [(await f).offset for f in futs] == list(range(5))
        await p.close()

    asyncio.run(go())


def test_max_in_flight_1_sends_one_request_at_a_time() -> None:
    async def go() -> None:
        p, leader, _ = _producer(max_in_flight=1)
        futs = await _send(p, 4, [])

        def alone() -> None:
            assert len(leader.pending) == 1
            leader.let_through(0)

        await _until_done(futs, leader, alone)
        assert leader.most_pending == 1
        await p.close()

    asyncio.run(go())


def test_max_in_flight_above_five_is_refused_with_idempotence() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        AsyncProducer("http://127.0.0.1:1", max_in_flight=6)
    with pytest.raises(ValueError, match="max_in_flight"):
        AsyncProducer("http://127.0.0.1:1", max_in_flight=0)
    AsyncProducer("http://127.0.0.1:1", max_in_flight=8, enable_idempotence=False, acks=1)


def test_an_answer_ahead_of_the_oldest_request_does_not_close_the_window() -> None:
    async def go() -> None:
        p, leader, _ = _producer()
        done: list[int] = []
        futs = await _send(p, 4, done)
        await leader.wait_pending(1)
        leader.let_through(0)  # 0
        await leader.wait_pending(3)
        leader.let_through(0, answer_later=True)  # 1: appended, its answer on its way
        leader.let_through(0)  # 2: appended and answered; 3 is still out
        await asyncio.sleep(0.01)
        futs.append(await p.send("t", _value(4), partition=0))
        await leader.wait_pending(2)  # 4 goes at once: 4 of 5 places are taken
        fut, answer = leader.late_answers.pop()
        fut.set_result(answer)
        await _until_done(futs, leader, lambda: leader.let_through(0))
        assert [(await f).offset for f in futs] == list(range(5))
        assert done == list(range(4))
        await p.close()

    asyncio.run(go())


def test_batches_refused_together_wait_one_back_off_not_one_each() -> None:
    async def go() -> None:
        p, leader, _ = _producer(retry_backoff_ms=500)
        futs = await _send(p, 5, [])
        await leader.wait_pending(1)
        leader.let_through(0)
        await leader.wait_pending(4)
        t0 = time.monotonic()
        for _ in range(4):  # a leader change refuses all four at once
            leader.refuse(0)
        await _until_done(futs, leader, lambda: leader.let_through(0))
        # One back-off (0.5 s) for the head; its successors' have run meanwhile. One
        # each would be 2 s.
        assert time.monotonic() - t0 < 1.5
        assert [(await f).offset for f in futs] == list(range(5))
        assert leader.log == [_value(i) for i in range(5)]
        await p.close()

    asyncio.run(go())


@pytest.mark.parametrize("seed", range(4))
def test_with_batches_failing_for_good_the_log_keeps_send_order_and_every_ack(
    seed: int,
) -> None:
    rng = random.Random(seed)

    async def go() -> None:
        p, leader, _ = _producer()
        n = 60
        futs = await _send(p, n, [])

        def step() -> None:
            i = rng.randrange(len(leader.pending))
            roll = rng.random()
            if roll < 0.05:
                leader.refuse(i, "INVALID_RECORD")  # not appended; the batch is given up
            elif roll < 0.15:
                leader.refuse(i, "NOT_LEADER_OR_FOLLOWER")
            else:
                leader.let_through(i, lose_answer=roll < 0.25)

        await _until_done(futs, leader, step)
        acked = [i for i, f in enumerate(futs) if f.exception() is None]
        stored = [int(v or b"") for v in leader.log]
        # In send order, none twice; a failed batch may be there (an earlier attempt was
        # appended, its answer lost), an acknowledged one is, at the offset it was given.
        assert stored == sorted(set(stored)), f"seed {seed}: {stored}"
        assert [futs[i].result().offset for i in acked] == [stored.index(i) for i in acked]
        assert len(acked) < n, "nothing failed: the test tested nothing"
        assert p._buffered == 0
        await p.close()

    asyncio.run(go())


def test_a_batch_joining_the_transaction_is_waited_for_by_a_flush() -> None:
    """A batch taken from the queue waits for ``add_partition`` before its first send; a
    commit's flush must wait for it too. Passed by, the commit ended the transaction
    without it, and its send was then fenced (Jepsen txn-ctp: offsets without outputs)."""

    class SlowJoin:
        def __init__(self) -> None:
            self.joining = asyncio.Event()
            self.joined = asyncio.Event()

        async def add_partition(self, tp: Any) -> None:
            self.joining.set()
            await self.joined.wait()

        transactional_id = "tx"

        def check_can_send(self) -> None:
            pass

        def on_send_failed(self, err: Any) -> None:
            pass

    async def go() -> None:
        p, leader, _ = _producer()
        txn = SlowJoin()
        p._txn = txn  # type: ignore[assignment]
        (fut,) = await _send(p, 1, [])
        async with asyncio.timeout(5):
            await txn.joining.wait()
        flushed = asyncio.ensure_future(p.flush())
        await asyncio.sleep(0.05)
        assert not flushed.done()  # the joining batch holds the flush back
        txn.joined.set()
        await leader.wait_pending(1)
        leader.let_through(0)
        async with asyncio.timeout(5):
            await flushed
        assert fut.done() and (await fut).offset == 0
        p._txn = None
        await p.close()

    asyncio.run(go())
