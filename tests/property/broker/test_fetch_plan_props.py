"""Properties of the follower fetcher's pure core (``broker.fetch_plan``): a round asks for
exactly the partitions that may be fetched, each once, in a rotation of their order, and never
waits past the moment a left-out partition may be asked again; any answer entry, however
malformed, is one outcome and never an exception."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from broker.fetch_plan import Append, Retry, Slot, entry_outcome, plan_fetch

slots_st = st.lists(
    st.builds(
        Slot,
        key=st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 50)),
        busy=st.booleans(),
        ready_at_s=st.floats(0, 20, allow_nan=False),
        throttled=st.booleans(),
    ),
    max_size=30,
    unique_by=lambda s: s.key,
)


@given(
    slots_st,
    st.floats(0, 20, allow_nan=False),
    st.integers(0, 10**6),
    st.sampled_from([0.0, 0.001, 0.3, 5.0]),
    st.integers(0, 1000),
)
def test_a_round_asks_exactly_the_fetchable_partitions(
    slots: list[Slot], now_s: float, rotation: int, delay_s: float, max_wait_ms: int
) -> None:
    p = plan_fetch(
        slots, now_s=now_s, rotation=rotation, throttle_delay_s=delay_s, max_wait_ms=max_wait_ms
    )
    fetchable = [
        s.key
        for s in slots
        if not s.busy and s.ready_at_s <= now_s and not (s.throttled and delay_s > 0)
    ]
    assert sorted(p.keys) == sorted(fetchable) and len(set(p.keys)) == len(p.keys)
    if fetchable:
        k = fetchable.index(p.keys[0])
        assert list(p.keys) == fetchable[k:] + fetchable[:k]
    waits = [
        w
        for s in slots
        if not s.busy and (w := max(s.ready_at_s - now_s, delay_s if s.throttled else 0.0)) > 0
    ]
    if p.keys:
        assert 0 <= p.max_wait_ms <= max_wait_ms and p.sleep_s is None
        if waits:
            assert p.max_wait_ms <= math.ceil(min(waits) * 1000)
    elif waits:
        assert p.sleep_s is not None and p.sleep_s == min(waits)
    else:
        assert p.sleep_s is None


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
entry_keys = st.sampled_from(
    ["records", "high_watermark", "log_start_offset", "diverging_epoch", "error", "message"]
)


@given(st.dictionaries(entry_keys, values) | values)
def test_any_entry_is_one_outcome(e: Any) -> None:
    out = entry_outcome(e)
    if isinstance(out, Append):
        assert type(e) is dict and isinstance(e["records"], bytes) and out.high_watermark >= -1


@given(st.binary(max_size=50), st.integers(-1, 2**40), st.integers(0, 2**40) | st.none())
def test_a_well_formed_answer_is_appended_as_sent(records: bytes, hw: int, start: Any) -> None:
    e = {"records": records, "high_watermark": hw, "diverging_epoch": None}
    if start is not None:
        e["log_start_offset"] = start
    assert entry_outcome(e) == Append(records, hw, start)
    assert isinstance(entry_outcome({**e, "error": "X"}), Retry)
