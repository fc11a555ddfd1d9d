"""The replication throttle's token bucket: a sustained rate, bursts of one second's worth."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.throttle import TokenBucket


def test_a_full_bucket_lets_one_seconds_worth_through_at_once() -> None:
    b = TokenBucket(1000, now_s=0.0)
    assert b.take(1000, 0.0) == 0.0
    assert b.take(500, 0.0) == 0.5


def test_the_balance_refills_at_the_rate_and_no_further_than_the_burst() -> None:
    b = TokenBucket(1000, now_s=0.0)
    b.take(1500, 0.0)
    assert b.delay_s(0.25) == 0.25
    assert b.delay_s(0.5) == 0.0
    assert b.delay_s(100.0) == 0.0
    assert b.tokens == 1000


def test_a_new_rate_applies_from_now() -> None:
    b = TokenBucket(1000, now_s=0.0)
    b.take(2000, 0.0)
    b.set_rate(4000, 0.0)
    assert b.delay_s(0.0) == 0.25


@given(st.lists(st.tuples(st.integers(0, 5000), st.floats(0, 2)), min_size=1, max_size=50))
def test_a_sender_that_waits_as_told_never_exceeds_rate_times_time_plus_burst(
    steps: list[tuple[int, float]],
) -> None:
    rate = 1000
    b = TokenBucket(rate, now_s=0.0)
    now, sent = 0.0, 0
    for n, pause in steps:
        now += b.delay_s(now) + pause
        sent += n
        b.take(n, now)
        # Everything sent before the last request was paid for: what a request may overdraw
        # is its own size.
        assert sent - n <= rate * now + rate + 1e-6
