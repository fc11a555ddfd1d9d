"""Properties of the partition assignors (broker/groups/assignors.py)."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.groups.assignors import (
    ASSIGNORS,
    Assignment,
    MemberSubscription,
    cooperative_sticky_assign,
    range_assign,
    resolve_owners,
    round_robin_assign,
    sticky_assign,
    subscribed_partitions,
)
from broker.groups.types import TopicPartition

TOPICS = ["a", "b", "c"]
FAST = settings(max_examples=150)


@st.composite
def topic_counts(draw: st.DrawFn) -> dict[str, int]:
    return {t: draw(st.integers(0, 9)) for t in TOPICS if draw(st.booleans()) or t == "a"}


@st.composite
def groups(
    draw: st.DrawFn, *, homogeneous: bool = False, disjoint: bool = True
) -> tuple[list[MemberSubscription], dict[str, int]]:
    """Members with subscriptions and (by default disjoint) current ownership."""
    counts = draw(topic_counts())
    n = draw(st.integers(0, 6))
    ids = [f"m{i}" for i in range(n)]
    topic_sets = st.frozensets(st.sampled_from(TOPICS), min_size=1)
    shared = draw(topic_sets)
    subs = {mid: shared if homogeneous else draw(topic_sets) for mid in ids}
    every = [TopicPartition(t, p) for t in TOPICS for p in range(counts.get(t, 0) + 1)]
    owned: dict[str, set[TopicPartition]] = {mid: set() for mid in ids}
    for tp in every:
        if not ids:
            break
        claimants = draw(st.lists(st.sampled_from(ids), max_size=1 if disjoint else 2))
        for mid in claimants:
            owned[mid].add(tp)
    members = [
        MemberSubscription(
            mid,
            subs[mid],
            frozenset(owned[mid]),
            generation=1 if disjoint else draw(st.integers(0, 2)),
        )
        for mid in ids
    ]
    return members, counts


def counts_of(a: Assignment) -> dict[str, int]:
    return {mid: len(tps) for mid, tps in a.items()}


def assert_each_partition_once(
    members: list[MemberSubscription], counts: Mapping[str, int], a: Assignment
) -> None:
    assert set(a) == {m.member_id for m in members}
    subs = {m.member_id: m.topics for m in members}
    flat = [tp for tps in a.values() for tp in tps]
    assert len(flat) == len(set(flat)), "a partition assigned twice"
    assert sorted(flat) == subscribed_partitions(members, counts)
    for mid, tps in a.items():
        assert all(tp.topic in subs[mid] for tp in tps), "assigned to a non-subscriber"


def assert_balanced(members: list[MemberSubscription], a: Assignment) -> None:
    """No partition can move to a subscriber with at least two fewer partitions."""
    subs = {m.member_id: m.topics for m in members}
    n = counts_of(a)
    for src, tps in a.items():
        for tp in tps:
            for dst in subs:
                if tp.topic in subs[dst]:
                    assert n[dst] >= n[src] - 1, (tp, src, dst, n)
    by_subscription: dict[frozenset[str], list[int]] = {}
    for mid, topics in subs.items():
        by_subscription.setdefault(topics, []).append(n[mid])
    for cs in by_subscription.values():
        assert max(cs) - min(cs) <= 1, by_subscription


@FAST
@given(groups(disjoint=False))
def test_every_subscribed_partition_is_assigned_exactly_once(g: tuple) -> None:
    members, counts = g
    for name in ("range", "roundrobin", "sticky"):
        assert_each_partition_once(members, counts, ASSIGNORS[name](members, counts))


@FAST
@given(groups(disjoint=False), st.randoms(use_true_random=False))
def test_assignors_are_deterministic_whatever_the_member_order(g: tuple, rnd) -> None:
    members, counts = g
    shuffled = list(members)
    rnd.shuffle(shuffled)
    for assign in ASSIGNORS.values():
        assert assign(members, counts) == assign(shuffled, counts)


@FAST
@given(groups())
def test_range_is_balanced_per_topic(g: tuple) -> None:
    members, counts = g
    a = range_assign(members, counts)
    for topic in counts:
        per = [
            sum(1 for tp in a[m.member_id] if tp.topic == topic)
            for m in members
            if topic in m.topics
        ]
        if per:
            assert max(per) - min(per) <= 1


@FAST
@given(groups(homogeneous=True))
def test_round_robin_is_balanced_when_subscriptions_match(g: tuple) -> None:
    members, counts = g
    a = round_robin_assign(members, counts)
    assert_each_partition_once(members, counts, a)
    if members:
        assert max(counts_of(a).values()) - min(counts_of(a).values()) <= 1


@FAST
@given(groups(disjoint=False))
def test_sticky_is_balanced(g: tuple) -> None:
    members, counts = g
    a = sticky_assign(members, counts)
    assert_each_partition_once(members, counts, a)
    assert_balanced(members, a)


@FAST
@given(groups(disjoint=False))
def test_sticky_keeps_everything_when_membership_is_unchanged(g: tuple) -> None:
    members, counts = g
    first = sticky_assign(members, counts)
    again = [MemberSubscription(m.member_id, m.topics, first[m.member_id], 5) for m in members]
    assert sticky_assign(again, counts) == first


def moved(members: list[MemberSubscription], counts: Mapping[str, int], a: Assignment) -> int:
    owners = resolve_owners(members, counts)
    return sum(1 for tp, mid in owners.items() if tp not in a[mid])


@FAST
@given(groups(homogeneous=True))
def test_sticky_moves_the_fewest_partitions_balance_allows(g: tuple) -> None:
    members, counts = g
    if not members:
        return
    a = sticky_assign(members, counts)
    # Lower bound: the r members that end with one extra should be those that own most.
    total = len(subscribed_partitions(members, counts))
    quota, extra = divmod(total, len(members))
    owners = resolve_owners(members, counts)
    owned = sorted(
        (sum(1 for o in owners.values() if o == m.member_id) for m in members), reverse=True
    )
    bound = sum(max(0, c - (quota + (1 if i < extra else 0))) for i, c in enumerate(owned))
    assert moved(members, counts, a) == bound


@FAST
@given(groups(), st.sets(st.sampled_from([f"m{i}" for i in range(8)]), max_size=3))
def test_sticky_after_a_membership_change_keeps_what_balance_allows(
    g: tuple, joiners: set[str]
) -> None:
    """Members come and go: every survivor keeps its partitions up to the new quota."""
    members, counts = g
    shared = frozenset(TOPICS)
    members = [MemberSubscription(m.member_id, shared) for m in members]
    before = sticky_assign(members, counts)
    survivors = [
        MemberSubscription(m.member_id, shared, before[m.member_id], 1)
        for m in members
        if m.member_id not in joiners
    ]
    after_members = survivors + [
        MemberSubscription(j, shared) for j in sorted(joiners) if j not in before
    ]
    if not after_members:
        return
    after = sticky_assign(after_members, counts)
    quota_max = -(-len(subscribed_partitions(after_members, counts)) // len(after_members))
    for m in survivors:
        kept = len(m.owned & after[m.member_id])
        assert kept >= min(len(m.owned), quota_max - 1), (m.member_id, kept)


def assert_no_double_owner(holding: Mapping[str, frozenset[TopicPartition]]) -> None:
    flat = [tp for tps in holding.values() for tp in tps]
    assert len(flat) == len(set(flat)), holding


@FAST
@given(groups(), st.sets(st.sampled_from([f"m{i}" for i in range(8)]), max_size=3))
def test_cooperative_never_has_two_owners_across_the_rounds(g: tuple, churn: set[str]) -> None:
    """Members join and leave; rounds repeat until nothing is withheld any more."""
    members, counts = g
    # Membership change: the churned members that exist leave, the others join.
    present = {m.member_id for m in members}
    members = [m for m in members if m.member_id not in churn] + [
        MemberSubscription(mid, frozenset(TOPICS)) for mid in sorted(churn - present)
    ]
    holding = {m.member_id: m.owned for m in members}
    assert_no_double_owner(holding)
    for _round in range(6):
        subs = [MemberSubscription(m.member_id, m.topics, holding[m.member_id], 1) for m in members]
        plan = cooperative_sticky_assign(subs, counts)
        # While the plan is handed out, a member holds its old partitions and its new ones.
        assert_no_double_owner({mid: holding[mid] | plan[mid] for mid in plan})
        # Then each revokes what its plan lacks, and the next round starts from there.
        if plan == holding:
            break
        holding = dict(plan)
    else:
        raise AssertionError("cooperative rebalancing did not converge in 6 rounds")
    assert_each_partition_once(members, counts, holding)
    assert_balanced(members, holding)


@FAST
@given(groups(homogeneous=True))
def test_cooperative_hands_everything_over_in_the_second_round(g: tuple) -> None:
    members, counts = g
    first = cooperative_sticky_assign(members, counts)
    target = sticky_assign(members, counts)
    assert all(first[mid] <= target[mid] for mid in target)
    second_input = [
        MemberSubscription(m.member_id, m.topics, first[m.member_id], 2) for m in members
    ]
    second = cooperative_sticky_assign(second_input, counts)
    assert all(first[mid] <= second[mid] for mid in second), "second round revoked something"
    assert_each_partition_once(members, counts, second)
    assert_balanced(members, second)
