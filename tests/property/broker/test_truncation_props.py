"""Follower truncation (KIP-101, KIP-279) against random leadership histories.

A history: rounds of "some replica becomes leader of a new epoch, appends some records, some
replicas copy a prefix of its log" (a replica's log is always a prefix of some leader's log at
some time, which is all pull replication can produce; elections here may be unclean, since
truncation must keep logs consistent even then). Then one replica becomes follower of another
and runs the OffsetsForLeaderEpoch rounds. Properties (KIP-101, logs match):

* afterwards the follower's log is a prefix of the leader's, offset by offset;
* it kept exactly the longest common prefix: nothing both logs agree on is cut.

Each offset is identified by the epoch that wrote it: one leader per epoch, so two logs with
the same epoch at an offset hold the same record there.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from replication_harness import EpochHistory, run_truncation

from storage.epoch_cache import LeaderEpochCache

rounds = st.lists(
    st.tuples(
        st.integers(0, 2),  # who leads the new epoch
        st.integers(0, 4),  # records it appends
        st.lists(st.tuples(st.integers(0, 2), st.floats(0, 1)), max_size=3),  # who copies how much
    ),
    min_size=1,
    max_size=8,
)


def build(history) -> list[EpochHistory]:
    logs = [EpochHistory() for _ in range(3)]
    for epoch, (leader, count, copies) in enumerate(history):
        lead = logs[leader]
        lead.assign(epoch, lead.log_end_offset)
        for _ in range(count):
            lead.append(epoch)
        for r, fraction in copies:
            if r != leader:
                m = round(fraction * lead.log_end_offset)
                logs[r] = lead.copy()
                logs[r].truncate_to(m)
    return logs


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@settings(max_examples=400)
@given(rounds, st.integers(0, 2), st.integers(0, 2))
def test_follower_keeps_exactly_the_prefix_it_shares_with_the_leader(history, f, ldr) -> None:
    logs = build(history)
    if f == ldr:
        return
    follower, leader = logs[f], logs[ldr]
    # The new leader records its epoch at its LEO on election (KIP-101), even with no record.
    leader.assign(len(history), leader.log_end_offset)
    before = follower.epochs()
    expected = common_prefix(before, leader.epochs())
    run_truncation(follower, leader)
    assert follower.log_end_offset == expected, (history, before, leader)
    assert follower.epochs() == leader.epochs()[:expected]


entries = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=6).map(
    lambda deltas: _monotonic(deltas)
)


def _monotonic(deltas: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, e, o = [], -1, -1
    for de, do in deltas:
        e, o = e + 1 + de, o + 1 + do
        out.append((e, o))
    return out


@settings(max_examples=300)
@given(entries, st.integers(0, 40), st.integers(-1, 40))
def test_model_epoch_history_answers_as_the_storage_epoch_cache(es, extra, epoch) -> None:
    leo = (es[-1][1] if es else 0) + extra
    cache = LeaderEpochCache("unused", None, es)  # type: ignore[arg-type]  # queries only
    assert EpochHistory(es, leo).end_offset_for_epoch(epoch) == cache.end_offset_for_epoch(
        epoch, leo
    )
