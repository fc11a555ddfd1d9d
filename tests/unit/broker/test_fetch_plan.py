"""The follower fetcher's pure core (``broker.fetch_plan``): which partitions a round asks
for, and what each answer entry means."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from broker.fetch_plan import (
    Append,
    Diverge,
    MalformedAnswerError,
    OutOfRange,
    Retry,
    Slot,
    answer_outcomes,
    decode_records_apart,
    encode_records_apart,
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


# ---------------------------------------------------------------------- records apart


def _answer() -> dict[str, Any]:
    return {
        "session_id": 7,
        "partitions": [
            {"topic": "t", "partition": 0, "records": b"abc", "high_watermark": 3},
            {"topic": "t", "partition": 1, "error": "NOT_LEADER_OR_FOLLOWER", "leader_id": 2},
            {"topic": "u", "partition": 0, "records": b"", "high_watermark": 9},
            {"topic": "u", "partition": 1, "records": b"defgh", "high_watermark": 5},
        ],
    }


def test_records_apart_round_trips_with_the_records_as_views_into_the_body() -> None:
    answer = _answer()
    parts = encode_records_apart(answer)
    assert answer == _answer()  # the caller's map is left as it was
    # The records themselves are parts of their own (written uncopied), the empty one left out.
    assert parts[2:] == [b"abc", b"defgh"]
    body = b"".join(parts)
    out = decode_records_apart(body)
    assert isinstance(out["partitions"][0]["records"], memoryview)
    plain = {
        **out,
        "partitions": [
            {k: bytes(v) if k == "records" else v for k, v in e.items()} for e in out["partitions"]
        ],
    }
    assert plain == answer
    outcomes = answer_outcomes(out)
    assert outcomes[("t", 0)] == Append(memoryview(b"abc"), 3, None)
    assert bytes(outcomes[("u", 1)].records) == b"defgh"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("mangle", "why"),
    [
        (lambda b: b[:3], "a records-apart body of 3 bytes"),
        (lambda b: b"\x7f\xff\xff\xff" + b[4:], "a map of"),
        (lambda b: b[:-1], "records of 5 bytes"),
        (lambda b: b + b"x", "1 bytes after the last entry's records"),
        (lambda b: b"\0\0\0\1\xc1", "does not unpack"),
        (lambda b: b"\0\0\0\1\x01", "the map is a int"),
    ],
)
def test_a_records_apart_body_whose_sizes_do_not_add_up_is_refused(
    mangle: Callable[[bytes], bytes], why: str
) -> None:
    body = mangle(b"".join(encode_records_apart(_answer())))
    with pytest.raises(MalformedAnswerError, match=why):
        decode_records_apart(body)


def test_records_apart_refuses_a_records_field_that_is_not_a_size() -> None:
    head = msgpack.packb({"partitions": [{"topic": "t", "partition": 0, "records": b"x"}]})
    with pytest.raises(MalformedAnswerError, match="records of b'x'"):
        decode_records_apart(len(head).to_bytes(4, "big") + head)
