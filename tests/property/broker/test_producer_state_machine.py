"""ProducerState against a model: two idempotent producers retry their batches with random
duplicates and reorders, bump epochs, while the log is truncated (above the HW, or below it
after an "unclean election"), the HW moves, and the broker restarts from snapshots.

The model keeps only the log (which batches it holds, at which offsets) and derives the
expected answer to a batch from it. Properties:

* no batch is ever in the log twice;
* a duplicate is answered with the offsets the batch has in the log;
* every answer (append, duplicate, out of order, fenced epoch) is the one the log implies;
* the live state always equals the state rebuilt from the log's batch headers.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from replication_harness import header

from broker.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from broker.producer_state import (
    APPEND,
    INT32_MAX,
    Duplicate,
    ProducerState,
    in_sequence,
)

PIDS = (1, 2)
RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN, restated for the model


@dataclass(frozen=True)
class Batch:
    pid: int
    epoch: int
    first_seq: int
    count: int

    @property
    def last_seq(self) -> int:
        return (self.first_seq + self.count - 1) & INT32_MAX


@dataclass(frozen=True)
class Stored:
    batch: Batch
    base: int
    last: int


def expected(log: list[Stored], b: Batch):
    """The answer the log implies (Kafka's rules restated over the whole log)."""
    mine = [s for s in log if s.batch.pid == b.pid]
    if not mine:
        return "append"
    epoch = mine[-1].batch.epoch
    run = []
    for s in reversed(mine):
        if s.batch.epoch != epoch:
            break
        run.append(s)
    retained = list(reversed(run))[-RETAIN:]
    if b.epoch == epoch:
        for s in retained:
            if (s.batch.first_seq, s.batch.last_seq) == (b.first_seq, b.last_seq):
                return ("duplicate", s.base, s.last)
    if b.epoch < epoch:
        return "fenced"
    if b.epoch > epoch:
        return "append" if b.first_seq == 0 else "out_of_order"
    return "append" if in_sequence(mine[-1].batch.last_seq, b.first_seq) else "out_of_order"


class ProducerMachine(RuleBasedStateMachine):
    @initialize(start_seq=st.sampled_from([0, 0, INT32_MAX - 4]))
    def start(self, start_seq) -> None:
        self.state = ProducerState()
        self.log: list[Stored] = []
        self.sent: list[Batch] = []  # every batch ever made: retries pick from here
        self.epoch = dict.fromkeys(PIDS, 0)
        self.next_seq = dict.fromkeys(PIDS, start_seq)
        self.hw = 0
        self.clock = 0
        self.snapshot: tuple[bytes, int] | None = None

    @property
    def leo(self) -> int:
        return self.log[-1].last + 1 if self.log else 0

    def headers(self, upto: int | None = None):
        return [
            header(
                s.batch.pid,
                s.batch.epoch,
                s.batch.first_seq,
                s.batch.count,
                base_offset=s.base,
                timestamp_ms=s.base,
            )
            for s in self.log
            if upto is None or s.base < upto
        ]

    def _send(self, b: Batch) -> None:
        want = expected(self.log, b)
        h = header(b.pid, b.epoch, b.first_seq, b.count, timestamp_ms=self.leo)
        try:
            plan = self.state.check_and_plan(h)
        except OutOfOrderSequenceError:
            assert want == "out_of_order", want
            return
        except InvalidProducerEpochError:
            assert want == "fenced", want
            return
        if plan is APPEND:
            assert want == "append", want
            assert all(s.batch != b for s in self.log), "a batch appended twice"
            base = self.leo
            self.state.on_append(h, base)
            self.log.append(Stored(b, base, base + b.count - 1))
        else:
            assert isinstance(plan, Duplicate)
            assert want == ("duplicate", plan.base_offset, plan.last_offset), want
            [original] = [s for s in self.log if s.batch == b]
            assert (original.base, original.last) == (plan.base_offset, plan.last_offset)

    @rule(pid=st.sampled_from(PIDS), count=st.integers(1, 3))
    def send_new_batch(self, pid, count) -> None:
        b = Batch(pid, self.epoch[pid], self.next_seq[pid], count)
        self.next_seq[pid] = (self.next_seq[pid] + count) & INT32_MAX
        self.sent.append(b)
        self._send(b)

    @precondition(lambda self: bool(self.sent))
    @rule(data=st.data())
    def resend_an_old_batch(self, data) -> None:
        # A retry, or a batch that overtook another on the way (a reorder).
        recent = self.sent[-8:]
        self._send(data.draw(st.sampled_from(recent)))

    @rule(pid=st.sampled_from(PIDS))
    def bump_epoch(self, pid) -> None:
        self.epoch[pid] += 1
        self.next_seq[pid] = 0

    @precondition(lambda self: bool(self.log))
    @rule(data=st.data())
    def truncate(self, data) -> None:
        boundaries = [s.base for s in self.log] + [self.leo]
        t = data.draw(st.sampled_from(boundaries))
        self.log = [s for s in self.log if s.base < t]
        if self.snapshot is not None and self.snapshot[1] > t:
            self.snapshot = None  # the caller drops snapshots above a truncation point
        if self.state.can_truncate_to(t):
            self.state.truncate_to(t)
        else:  # below the HW: only an unclean election does this
            self.hw = min(self.hw, t)
            self.state = ProducerState.rebuild(self.headers(), high_watermark=self.hw)
        self.hw = min(self.hw, t)

    @rule(data=st.data())
    def high_watermark_advances(self, data) -> None:
        self.hw = data.draw(st.integers(self.hw, self.leo))
        self.state.on_high_watermark(self.hw)

    @rule()
    def take_snapshot(self) -> None:
        self.snapshot = (self.state.encode_snapshot(), self.state.end_offset)

    @precondition(lambda self: self.snapshot is not None)
    @rule()
    def restart_from_snapshot(self) -> None:
        assert self.snapshot is not None
        data, end = self.snapshot
        state = ProducerState.from_snapshot(data)
        assert state.end_offset == end
        state.replay(h for h in self.headers() if h.base_offset >= end)
        state.on_high_watermark(self.hw)
        self.state = state

    @invariant()
    def live_state_equals_the_state_rebuilt_from_the_log(self) -> None:
        rebuilt = ProducerState.rebuild(self.headers())
        assert self.state.producers == rebuilt.producers
        assert self.state.end_offset == self.leo

    @invariant()
    def no_batch_is_in_the_log_twice(self) -> None:
        assert len({s.batch for s in self.log}) == len(self.log)


ProducerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50)
test_producer_state_machine = ProducerMachine.TestCase
