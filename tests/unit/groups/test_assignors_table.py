"""Assignors on small, hand-checked inputs (Kafka's own javadoc examples where there is one)."""

from __future__ import annotations

import pytest
from groups_harness import tps

from broker.groups.assignors import (
    ASSIGNORS,
    MemberSubscription,
    cooperative_sticky_assign,
    resolve_owners,
    sticky_assign,
)
from broker.groups.types import TopicPartition


def m(mid: str, topics: str, owned: frozenset[TopicPartition] = frozenset(), gen: int = 1):
    return MemberSubscription(mid, frozenset(topics.split(",")), owned, gen)


TWO_TOPICS = {"t0": 3, "t1": 3}

CASES = [
    # RangeAssignor javadoc: C0 gets t0p0, t0p1, t1p0, t1p1; C1 gets t0p2, t1p2.
    ("range", [m("C0", "t0,t1"), m("C1", "t0,t1")], TWO_TOPICS,
     {"C0": tps("t0-0", "t0-1", "t1-0", "t1-1"), "C1": tps("t0-2", "t1-2")}),
    # RoundRobinAssignor javadoc: C0 gets t0p0, t0p2, t1p1; C1 gets t0p1, t1p0, t1p2.
    ("roundrobin", [m("C0", "t0,t1"), m("C1", "t0,t1")], TWO_TOPICS,
     {"C0": tps("t0-0", "t0-2", "t1-1"), "C1": tps("t0-1", "t1-0", "t1-2")}),
    # Round robin skips members not subscribed to a topic.
    ("roundrobin", [m("C0", "t0"), m("C1", "t0,t1"), m("C2", "t0,t1")], {"t0": 1, "t1": 2},
     {"C0": tps("t0-0"), "C1": tps("t1-0"), "C2": tps("t1-1")}),
    # A topic nobody subscribes to, or that does not exist yet, is not assigned.
    ("range", [m("C0", "t0,nope")], {"t0": 1, "t1": 5}, {"C0": tps("t0-0")}),
    # StickyAssignor javadoc: C1 leaves; sticky keeps C0's and C2's partitions.
    ("sticky",
     [m("C0", "t0,t1", tps("t0-0", "t1-1")), m("C2", "t0,t1", tps("t0-2", "t1-0"))],
     TWO_TOPICS,
     {"C0": tps("t0-0", "t1-1", "t0-1"), "C2": tps("t0-2", "t1-0", "t1-2")}),
    # No members, no assignment.
    ("sticky", [], TWO_TOPICS, {}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "members", "counts", "expected"), CASES)
def test_assignor_example(name: str, members, counts, expected) -> None:
    assert ASSIGNORS[name](members, counts) == expected


def test_the_newest_generation_wins_a_contested_claim() -> None:
    members = [m("a", "t", tps("t-0"), gen=3), m("b", "t", tps("t-0"), gen=2)]
    assert resolve_owners(members, {"t": 1}) == {TopicPartition("t", 0): "a"}


def test_a_claim_contested_within_one_generation_is_nobodys() -> None:
    members = [m("a", "t", tps("t-0"), gen=3), m("b", "t", tps("t-0"), gen=3)]
    assert resolve_owners(members, {"t": 1}) == {}


def test_claims_on_unsubscribed_or_missing_partitions_do_not_count() -> None:
    members = [m("a", "t", tps("u-0", "t-7"))]
    assert resolve_owners(members, {"t": 2, "u": 1}) == {}


def test_cooperative_sticky_withholds_what_moves_and_keeps_the_rest() -> None:
    members = [m("a", "t", tps("t-0", "t-1", "t-2", "t-3")), m("b", "t")]
    target = sticky_assign(members, {"t": 4})
    plan = cooperative_sticky_assign(members, {"t": 4})
    assert len(target["b"]) == 2
    assert plan == {"a": target["a"], "b": frozenset()}
