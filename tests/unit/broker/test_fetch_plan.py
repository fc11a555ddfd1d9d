"""The follower fetcher's pure core (``broker.fetch_plan``): which partitions a round asks
for, and what each answer entry means."""

from __future__ import annotations

from broker.fetch_plan import (
    Append,
    Diverge,
    OutOfRange,
    Retry,
    Slot,
    answer_outcomes,
    entry_outcome,
    plan_fetch,
)

A, B, C, D = ("t", 0), ("t", 1), ("u", 0), ("u", 1)


def test_a_round_asks_for_every_ready_partition_and_rotates_the_order() -> None:
    slots = [Slot(A), Slot(B), Slot(C)]
    p0 = plan_fetch(slots, now_s=10, rotation=0, throttle_delay_s=0, max_wait_ms=500)
    p1 = plan_fetch(slots, now_s=10, rotation=1, throttle_delay_s=0, max_wait_ms=500)
    assert p0.keys == (A, B, C) and p0.max_wait_ms == 500 and p0.sleep_s is None
    assert p1.keys == (B, C, A)


def test_a_truncating_or_backing_off_partition_is_left_out_and_the_others_go_on() -> None:
    slots = [Slot(A, busy=True), Slot(B, ready_at_s=10.1), Slot(C)]
    p = plan_fetch(slots, now_s=10, rotation=0, throttle_delay_s=0, max_wait_ms=500)
    assert p.keys == (C,)
    # The long poll ends when B may be asked again.
    assert p.max_wait_ms == 100


def test_throttled_partitions_wait_for_the_bucket_unthrottled_ones_do_not() -> None:
    slots = [Slot(A, throttled=True), Slot(B)]
    p = plan_fetch(slots, now_s=0, rotation=0, throttle_delay_s=0.25, max_wait_ms=500)
    assert p.keys == (B,) and p.max_wait_ms == 250
    p = plan_fetch(slots, now_s=0, rotation=0, throttle_delay_s=0, max_wait_ms=500)
    assert p.keys == (A, B)


def test_nothing_to_ask_sleeps_until_the_first_partition_may_be_asked() -> None:
    p = plan_fetch(
        [Slot(A, ready_at_s=5.5), Slot(B, throttled=True)],
        now_s=5,
        rotation=0,
        throttle_delay_s=2,
        max_wait_ms=500,
    )
    assert p.keys == () and p.sleep_s == 0.5
    # Only truncating partitions: nothing until one of them is done (the shell is woken).
    p = plan_fetch([Slot(A, busy=True)], now_s=5, rotation=0, throttle_delay_s=0, max_wait_ms=9)
    assert p.keys == () and p.sleep_s is None
    assert plan_fetch([], now_s=0, rotation=3, throttle_delay_s=0, max_wait_ms=1).sleep_s is None


def test_answer_entries_become_outcomes() -> None:
    assert entry_outcome(
        {"records": b"xy", "high_watermark": 7, "log_start_offset": 2, "diverging_epoch": None}
    ) == Append(b"xy", 7, 2)
    assert entry_outcome({"records": b"", "high_watermark": 7}) == Append(b"", 7, None)
    assert entry_outcome({"records": b"", "high_watermark": 0, "diverging_epoch": [3, 40]}) == (
        Diverge(3, 40)
    )
    assert entry_outcome({"error": "OFFSET_OUT_OF_RANGE", "message": "m"}) == OutOfRange("m")
    assert entry_outcome({"error": "FENCED_LEADER_EPOCH", "message": "old"}) == Retry(
        "FENCED_LEADER_EPOCH", "old"
    )


def test_a_malformed_entry_is_a_retry_never_an_exception() -> None:
    bad: object
    for bad in (
        None,
        [],
        {"records": "text", "high_watermark": 1},
        {"records": b"", "high_watermark": True},
        {"records": b"", "high_watermark": -5},
        {"records": b""},
        {"records": b"", "high_watermark": 1, "diverging_epoch": [1]},
        {"records": b"", "high_watermark": 1, "diverging_epoch": ["a", 2]},
    ):
        out = entry_outcome(bad)
        assert isinstance(out, Retry) and out.code == "UNKNOWN_SERVER_ERROR", bad


def test_an_answer_is_read_by_partition_and_unattributable_entries_are_dropped() -> None:
    ans = {
        "partitions": [
            {"topic": "t", "partition": 0, "records": b"a", "high_watermark": 1},
            {"topic": "t", "partition": 1, "error": "NOT_LEADER_OR_FOLLOWER", "message": ""},
            {"topic": 3, "partition": 0, "records": b"", "high_watermark": 1},
            "junk",
        ]
    }
    out = answer_outcomes(ans)
    assert out == {A: Append(b"a", 1, None), B: Retry("NOT_LEADER_OR_FOLLOWER", "")}
    assert answer_outcomes({"partitions": "no"}) == {} == answer_outcomes([1, 2])
    assert D not in out
