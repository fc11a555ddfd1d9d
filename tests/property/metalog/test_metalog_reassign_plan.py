"""Reassignment planners: valid replica lists, balance and rack coverage as ``place`` gives
them, fewer moves than a fresh placement, drains that move only what they must."""

from __future__ import annotations

import zlib
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from metalog.placement import PlacementBroker, place
from metalog.reassign_plan import (
    balanced_plan,
    drain_plan,
    replica_counts,
    replication_factor_plan,
)
from metalog.records import BrokerId


@st.composite
def clusters(
    draw: st.DrawFn,
) -> tuple[list[PlacementBroker], dict[tuple[str, int], tuple[BrokerId, ...]]]:
    n = draw(st.integers(2, 8))
    racks = draw(st.integers(0, 3))
    brokers = [
        PlacementBroker(BrokerId(i), f"r{i % racks}" if racks else None) for i in range(1, n + 1)
    ]
    assignment: dict[tuple[str, int], tuple[BrokerId, ...]] = {}
    for t in range(draw(st.integers(1, 3))):
        rf = draw(st.integers(1, n))
        for p in range(draw(st.integers(1, 12))):
            replicas = draw(st.permutations([b.broker_id for b in brokers]))[:rf]
            assignment[(f"t{t}", p)] = tuple(replicas)
    return brokers, assignment


def moves(
    before: dict[tuple[str, int], tuple[BrokerId, ...]],
    after: dict[tuple[str, int], tuple[BrokerId, ...]],
) -> int:
    return sum(len(set(after[k]) - set(before[k])) for k in after)


@settings(max_examples=200, deadline=None)
@given(clusters(), st.integers(0, 3))
def test_balanced_plan_is_placements_balance_with_no_more_moves(
    c: tuple[list[PlacementBroker], dict[tuple[str, int], tuple[BrokerId, ...]]], added: int
) -> None:
    brokers, assignment = c
    # Brokers added to the cluster: the plan spreads onto them.
    grown = brokers + [PlacementBroker(BrokerId(100 + i)) for i in range(added)]
    plan = balanced_plan(assignment, grown)
    assert set(plan) == set(assignment)
    ids = {b.broker_id for b in grown}
    for key, replicas in plan.items():
        assert len(replicas) == len(assignment[key])
        assert len(set(replicas)) == len(replicas) and set(replicas) <= ids
    for topic in {t for t, _ in assignment}:
        keys = sorted(k for k in assignment if k[0] == topic)
        by_rf: dict[int, list[tuple[str, int]]] = {}
        for k in keys:
            by_rf.setdefault(len(assignment[k]), []).append(k)
        for rf, ks in by_rf.items():
            h = zlib.crc32(topic.encode())
            fresh = place(grown, len(ks), rf, start_index=h, replica_shift=h >> 16)
            # The balance (replicas and leaders per broker) is exactly the placement's...
            assert Counter(plan[k][0] for k in ks) == Counter(r[0] for r in fresh)
            assert Counter(b for k in ks for b in plan[k]) == Counter(b for r in fresh for b in r)
            # ...and the matching never moves more than handing the sets out in order.
            in_order = sum(len(set(fresh[i]) - set(assignment[k])) for i, k in enumerate(ks))
            assert moves(assignment, {k: plan[k] for k in ks}) <= in_order
    # Re-planning a plan changes nothing: a balanced cluster is left alone.
    assert balanced_plan(plan, grown) == plan


@settings(max_examples=200, deadline=None)
@given(clusters(), st.data())
def test_drain_moves_only_the_drained_brokers_replicas(
    c: tuple[list[PlacementBroker], dict[tuple[str, int], tuple[BrokerId, ...]]],
    data: st.DataObject,
) -> None:
    brokers, assignment = c
    victim = data.draw(st.sampled_from([b.broker_id for b in brokers]))
    max_rf = max(len(r) for r in assignment.values())
    if max_rf > len(brokers) - 1:
        return  # nowhere to go: refused, covered below
    plan = drain_plan(assignment, victim, brokers)
    assert set(plan) == {k for k, r in assignment.items() if victim in r}
    for key, replicas in plan.items():
        before = assignment[key]
        assert victim not in replicas and len(set(replicas)) == len(replicas)
        # Position kept; only the drained replica changed.
        assert [a for a, b in zip(before, replicas, strict=True) if a != b] == [victim]
    after = {**assignment, **plan}
    counts = replica_counts(after, (b.broker_id for b in brokers if b.broker_id != victim))
    assert counts[victim] == 0


@settings(max_examples=200, deadline=None)
@given(clusters(), st.data())
def test_replication_factor_plan_keeps_the_preferred_leader(
    c: tuple[list[PlacementBroker], dict[tuple[str, int], tuple[BrokerId, ...]]],
    data: st.DataObject,
) -> None:
    brokers, assignment = c
    rf = data.draw(st.integers(1, len(brokers)))
    plan = replication_factor_plan(assignment, rf, brokers)
    for key, replicas in {**assignment, **plan}.items():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert replicas[0] == assignment[key][0]
        common = min(rf, len(assignment[key]))
        assert replicas[:common] == assignment[key][:common]


def test_a_broker_added_to_a_balanced_cluster_gets_its_share_with_few_moves() -> None:
    old = [PlacementBroker(BrokerId(i)) for i in (1, 2, 3)]
    keys = [("t", p) for p in range(6)]
    fresh = place(old, 6, 2, start_index=0)
    assignment = dict(zip(keys, fresh, strict=True))
    grown = [*old, PlacementBroker(BrokerId(4))]
    plan = balanced_plan(assignment, grown)
    counts = replica_counts(plan)
    assert counts[BrokerId(4)] >= 2  # 12 replicas over 4 brokers, as place() spreads them
    assert max(counts.values()) - min(counts.values()) <= 2
    moved = sum(len(set(plan[k]) - set(assignment[k])) for k in keys)
    assert moved == counts[BrokerId(4)]  # only what the new broker takes moves


def test_drain_keeps_replicas_in_distinct_racks() -> None:
    brokers = [
        PlacementBroker(BrokerId(1), "a"),
        PlacementBroker(BrokerId(2), "b"),
        PlacementBroker(BrokerId(3), "a"),
        PlacementBroker(BrokerId(4), "b"),
    ]
    plan = drain_plan({("t", 0): (BrokerId(1), BrokerId(2))}, BrokerId(1), brokers)
    assert plan == {("t", 0): (BrokerId(3), BrokerId(2))}
