"""FlushPolicy: pure decisions from unflushed bytes, messages and time."""

from __future__ import annotations

from storage.flush_policy import CLEAN, FlushPolicy


def test_nothing_unflushed_never_flushes() -> None:
    assert not FlushPolicy.every_append().should_flush(CLEAN, 10**9)
    assert FlushPolicy(interval_ms=5).deadline_ms(CLEAN) is None


def test_each_bound_triggers_a_flush() -> None:
    s = CLEAN.after_append(100, 1, now_ms=1000).after_append(50, 2, now_ms=1010)
    assert (s.bytes_, s.messages, s.since_ms) == (150, 3, 1000)
    assert FlushPolicy.every_append().should_flush(s, 1010)
    assert FlushPolicy(bytes_max=150).should_flush(s, 1010)
    assert not FlushPolicy(bytes_max=151).should_flush(s, 1010)
    assert not FlushPolicy(messages_max=4).should_flush(s, 1010)
    p = FlushPolicy(interval_ms=20)
    assert not p.should_flush(s, 1019) and p.should_flush(s, 1020)
    assert p.deadline_ms(s) == 1020
    assert not FlushPolicy.on_demand().should_flush(s, 10**9)
