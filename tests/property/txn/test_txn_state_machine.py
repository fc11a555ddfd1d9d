"""The transaction core under random request sequences from several producers sharing one
transactional id (zombies included), with writes that sometimes fail:

* every committed transition is legal (``VALID_PREVIOUS``);
* the (producer id, epoch) pair never goes back, and the markers of an ended transaction
  carry an epoch above every batch of it (KIP-890 part 2);
* only the newest pair handed out is ever accepted: an older one is fenced, for good;
* replaying the records written rebuilds the same state (what a new coordinator loads);
* the codec round-trips every record written, and garbage decodes to CorruptRecordError only.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.groups.types import TopicPartition
from broker.txn.records import (
    EPOCH_MAX,
    PREPARED,
    TxnMetadata,
    TxnState,
    decode_txn,
    encode_txn,
)
from broker.txn.state import (
    NONE,
    PRODUCER_FENCED,
    VALID_PREVIOUS,
    Step,
    TxnCoordinatorState,
)
from storage.errors import CorruptRecordError

T = "tx"
TPS = [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)]

ops = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "init",
                "add",
                "commit",
                "abort",
                "commit-v1",
                "abort-v1",
                "markers",
                "markers+add",
                "timeout",
                "verify",
            ]
        ),
        st.integers(0, 2),  # which producer (client) acts
        st.sets(st.sampled_from(TPS), min_size=1, max_size=3),
        st.booleans(),  # does the write succeed
        st.integers(0, 50_000),  # time passing
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(EPOCH_MAX - 6, EPOCH_MAX - 1) | st.just(0))
def test_random_requests_keep_the_rules(script: list, start_epoch: int) -> None:
    st_ = TxnCoordinatorState()
    if start_epoch:
        st_.replay(TxnMetadata(T, 1, start_epoch, 10_000, TxnState.EMPTY))
    next_pid = iter(range(100, 10_000))
    clients: list[tuple[int, int] | None] = [None, None, None]
    newest: tuple[int, int] | None = (1, start_epoch) if start_epoch else None
    handed: list[tuple[int, int]] = [] if newest is None else [newest]
    log: list[tuple[bytes, bytes | None]] = []
    now = 0
    for op, who, tps, ok, dt in script:
        now += dt
        pair = clients[who]

        def call(step_fn: object) -> Step:
            step: Step = step_fn(None)  # type: ignore[operator]
            if step.need_producer_id:
                step = step_fn(next(next_pid))  # type: ignore[operator]
            assert not step.need_producer_id
            return step

        if op == "init":
            step = call(lambda pid, now=now: st_.handle_init_producer_id(T, 10_000, now, pid))
        elif op == "add" and pair is not None:
            step = st_.handle_add_partitions(T, *pair, tps, now)
        elif op.startswith(("commit", "abort")) and pair is not None:
            # "-v1": Kafka's first protocol, which keeps the epoch at the end.
            step = call(
                lambda pid, p=pair, c=op.startswith("commit"), b=not op.endswith("v1"), now=now: (
                    st_.handle_end_txn(T, *p, c, now, pid, b)
                )
            )
        elif op == "markers" and T in st_.txns and st_.txns[T].state in PREPARED:
            step = st_.on_markers_written(T, st_.txns[T], now)
        elif op == "markers+add" and T in st_.txns and st_.txns[T].state in PREPARED:
            # The next transaction's first add, decided while the completion is written
            # and chained behind it: both records, in that order, or neither.
            done = st_.on_markers_written(T, st_.txns[T], now)
            assert done.target is not None
            nxt = st_.handle_add_partitions(T, *pair, tps, now) if pair is not None else Step()
            if nxt.target is not None:
                assert pair == newest and st_.chained[T] is nxt.target
            if not ok:
                st_.on_write_failed(T)
                assert T not in st_.pending and T not in st_.chained
                continue
            for target in (done.target, nxt.target):
                if target is not None:
                    prev = st_.txns.get(T)
                    assert prev is not None and prev.state in VALID_PREVIOUS[target.state]
                    st_.on_written(target)
                    log.append(encode_txn(target))
            assert not st_.pending and not st_.chained
            continue
        elif op == "timeout" and T in st_.timed_out(now):
            step = call(lambda pid, now=now: st_.abort_timed_out(T, now, pid))
        elif op == "verify" and pair is not None:
            for tp in tps:
                code = st_.verify_partition(T, *pair, tp)
                if code == NONE:
                    assert pair == newest and tp in st_.txns[T].partitions
            continue
        else:
            continue
        if pair is not None and pair != newest and op in ("add", "commit"):
            # A fenced pair is refused, whatever it asks (an end retried with the pair just
            # before a bump is the one exception, and only for the outcome it asked for).
            assert step.error != NONE or step.target is None
        if step.target is None:
            if step.error == NONE and step.result is not None and op != "add":
                clients[who] = (step.result.producer_id, step.result.producer_epoch)
            continue
        prev = st_.txns.get(T)
        if not ok:
            st_.on_write_failed(T)
            continue
        target = step.target
        if prev is not None:
            assert prev.state in VALID_PREVIOUS[target.state]
            assert (target.producer_id, target.producer_epoch) != (
                prev.producer_id,
                prev.producer_epoch - 1,
            )
            if target.state in PREPARED:
                mp, me = target.marker_pair()
                assert mp == prev.producer_id
                if op.endswith("v1"):
                    assert me == prev.producer_epoch  # the transaction's own epoch
                else:
                    # The markers' epoch is above every batch of the ended transaction.
                    assert me == prev.producer_epoch + 1
        st_.on_written(target)
        log.append(encode_txn(target))
        assert decode_txn(*log[-1]) == target
        cur = (target.producer_id, target.producer_epoch)
        if newest is None or cur != newest:
            assert cur not in handed, "a pair was handed out twice"
            handed.append(cur)
            newest = cur
        if step.error == NONE and op != "add" and op != "markers" and op != "timeout":
            clients[who] = cur
    # Only the newest pair is accepted; every other one ever handed out is fenced.
    for pair in handed[:-1]:
        code = st_.handle_add_partitions(T, *pair, [TPS[0]], now).error
        assert code in (PRODUCER_FENCED, "CONCURRENT_TRANSACTIONS"), (pair, code)
    # What a new coordinator loads is what this one had.
    replayed = TxnCoordinatorState()
    if start_epoch:
        replayed.replay(TxnMetadata(T, 1, start_epoch, 10_000, TxnState.EMPTY))
    for k, v in log:
        replayed.replay(decode_txn(k, v))
    assert replayed.txns == st_.txns


@settings(max_examples=500)
@given(st.binary(max_size=40), st.none() | st.binary(max_size=80))
def test_garbage_is_corrupt_record_error_only(key: bytes, value: bytes | None) -> None:
    try:
        decode_txn(key, value)
    except CorruptRecordError:
        pass
