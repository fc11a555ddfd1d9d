"""Replica placement: leaders and replicas spread evenly, replicas cover racks."""

from __future__ import annotations

from collections import Counter

import pytest

from metalog.placement import PlacementBroker, PlacementError, place, rack_alternated
from metalog.records import BrokerId


def brokers(n: int, racks: int = 0) -> list[PlacementBroker]:
    return [PlacementBroker(BrokerId(i), f"r{i % racks}" if racks else None) for i in range(n)]


def test_rack_alternated_list_takes_one_broker_per_rack_in_turn() -> None:
    bs = [
        PlacementBroker(BrokerId(i), r)
        for i, r in [(0, "a"), (1, "a"), (2, "b"), (3, "c"), (4, "c"), (5, "a")]
    ]
    assert rack_alternated(bs) == [0, 2, 3, 1, 4, 5]


@pytest.mark.parametrize(
    ("n", "racks", "partitions", "rf"),
    [
        (3, 0, 30, 3),
        (5, 0, 100, 2),
        (6, 3, 60, 3),
        (9, 3, 90, 2),
        (4, 2, 7, 3),
        (1, 0, 10, 1),
    ],
)
def test_leaders_and_replicas_are_spread_evenly(
    n: int, racks: int, partitions: int, rf: int
) -> None:
    out = place(brokers(n, racks), partitions, rf, start_index=7, replica_shift=3)
    assert len(out) == partitions
    for replicas in out:
        assert len(replicas) == rf == len(set(replicas))
    leaders = Counter(r[0] for r in out)
    assert max(leaders.values()) - min(leaders.values(), default=0) <= 1
    assert len(leaders) == min(n, partitions)
    load = Counter(b for r in out for b in r)
    assert max(load.values()) - min(load.values()) <= max(1, partitions * rf // n // 5)


@pytest.mark.parametrize(("n", "racks", "rf"), [(6, 3, 3), (6, 3, 2), (8, 2, 3), (9, 3, 3)])
def test_replicas_cover_min_of_rf_and_racks(n: int, racks: int, rf: int) -> None:
    bs = brokers(n, racks)
    rack = {b.broker_id: b.rack for b in bs}
    for start in range(n):
        for replicas in place(bs, 24, rf, start_index=start):
            assert len({rack[b] for b in replicas}) == min(rf, racks)


def test_uneven_racks_still_cover_every_rack() -> None:
    bs = [PlacementBroker(BrokerId(i), r) for i, r in enumerate(["a", "a", "a", "a", "b", "c"])]
    rack = {b.broker_id: b.rack for b in bs}
    for replicas in place(bs, 30, 3):
        assert {rack[b] for b in replicas} == {"a", "b", "c"}


def test_placement_is_deterministic_given_its_draws() -> None:
    assert place(brokers(5), 10, 3, start_index=2) == place(brokers(5), 10, 3, start_index=2)
    assert place(brokers(5), 10, 3, start_index=2) != place(brokers(5), 10, 3, start_index=3)


def test_added_partitions_continue_the_pattern() -> None:
    whole = place(brokers(4), 12, 2, start_index=1, replica_shift=0)
    head = place(brokers(4), 5, 2, start_index=1, replica_shift=0)
    tail = place(brokers(4), 7, 2, start_partition=5, start_index=1, replica_shift=0)
    assert head + tail == whole


@pytest.mark.parametrize(("n", "p", "rf"), [(2, 1, 3), (0, 1, 1), (3, 0, 1), (3, 1, 0)])
def test_impossible_requests_are_refused(n: int, p: int, rf: int) -> None:
    with pytest.raises(PlacementError):
        place(brokers(n), p, rf)
