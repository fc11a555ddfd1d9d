"""Pure parts of the nemeses: grudges, nft scripts, target selection, seeded schedules."""

from __future__ import annotations

import itertools
import random

import pytest

from jepsen_tests.nemesis import Fault, select_targets
from jepsen_tests.nemesis.net import (
    cut,
    grudge_for,
    isolate,
    majority_minority,
    merge,
    nft_script,
    node_address,
    ring,
    split,
)
from jepsen_tests.nemesis.schedule import generate

NODES = ["n1", "n2", "n3", "n4", "n5"]


def test_split_is_complete_between_parts_and_empty_within() -> None:
    g = split([{"n1", "n2"}, {"n3"}])
    assert g == {"n1": {"n3"}, "n2": {"n3"}, "n3": {"n1", "n2"}}


def test_isolate_cuts_one_node_both_ways() -> None:
    g = isolate("n2", NODES)
    assert g["n2"] == {"n1", "n3", "n4", "n5"}
    assert all(g[n] == {"n2"} for n in NODES if n != "n2")


def test_ring_keeps_only_neighbours() -> None:
    g = ring(NODES)
    assert g["n1"] == {"n3", "n4"}  # hears n5 and n2
    assert g["n3"] == {"n1", "n5"}


def test_cut_leaves_other_links_alone() -> None:
    # a partition leader cut from its followers while it still reaches the controllers
    g = cut("n1", ["n2", "n3"])
    assert g == {"n1": {"n2", "n3"}, "n2": {"n1"}, "n3": {"n1"}}
    assert "n4" not in g


def test_majority_minority_sizes() -> None:
    maj, mino = majority_minority(NODES, random.Random(1))
    assert len(maj) == 3 and len(mino) == 2 and set(maj) | set(mino) == set(NODES)


def test_nft_script_drops_each_grudged_pair_once() -> None:
    addrs = {n: node_address(i + 1) for i, n in enumerate(NODES)}
    s = nft_script(merge([isolate("n1", NODES), isolate("n1", NODES)]), addrs)
    assert s.count("drop") == 8
    assert "ip saddr 127.0.0.3 ip daddr 127.0.0.2 drop" in s  # n2 -> n1
    assert s.startswith("table inet longboat_jepsen\ndelete table inet longboat_jepsen\n")


def test_grudge_for_partition_faults() -> None:
    f = Fault(
        "partition-majority",
        ("n4", "n5"),
        {"majority": ["n1", "n2", "n3"], "minority": ["n4", "n5"]},
    )
    assert grudge_for(f, NODES)["n4"] == {"n1", "n2", "n3"}
    f2 = Fault("partition-cut", ("n1",), {"node": "n1", "cut_from": ["n2"]})
    assert grudge_for(f2, NODES) == {"n1": {"n2"}, "n2": {"n1"}}


def test_select_targets() -> None:
    rng = random.Random(0)
    assert len(select_targets("minority", NODES, rng)) == 2
    assert len(select_targets("majority", NODES, rng)) == 3
    assert select_targets("n3", NODES, rng) == ("n3",)
    assert select_targets("leader", NODES, rng, leader="n2") == ("n2",)
    with pytest.raises(ValueError):
        select_targets("leader", NODES, rng)


def test_schedule_is_reproducible_from_the_seed() -> None:
    kinds = ["kill", "pause", "partition-majority", "partition-ring", "delay", "clock-bump"]
    a = [s.describe() for s in generate(42, kinds, NODES, 60, tracks=2)]
    b = [s.describe() for s in generate(42, kinds, NODES, 60, tracks=2)]
    c = [s.describe() for s in generate(43, kinds, NODES, 60, tracks=2)]
    strip = [{k: v for k, v in d.items() if k != "id"} for d in a]
    assert a == b
    assert strip != [{k: v for k, v in d.items() if k != "id"} for d in c]
    assert len({d["kind"] for d in a}) >= 4


def test_schedule_stays_inside_the_time_limit_and_tracks_do_not_self_overlap() -> None:
    steps = generate(7, ["kill"], NODES, 30, warmup_s=2, tracks=1)
    assert steps and steps[0].at_s >= 2
    for s, t in itertools.pairwise(steps):
        assert s.at_s + s.duration_s <= t.at_s
    assert all(s.at_s + s.duration_s <= 30 for s in steps)
