"""Pure parts of the hardening nemeses: one-way grudges, intercept rules, link delays, the
schedules of the new kinds, file corruption plans, and the soak's growth bound."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jepsen_tests.nemesis import GROUPS, KINDS, Fault
from jepsen_tests.nemesis.disk import (
    Corruption,
    apply_corruption,
    classify,
    file_sizes,
    plan_corruption,
)
from jepsen_tests.nemesis.net import grudge_for, nft_script, node_address, one_way_shape
from jepsen_tests.nemesis.proxy import MARK, LinkState, chunk_due, nat_script
from jepsen_tests.nemesis.schedule import CLOCK_SPECS, DISK_SPECS, generate
from jepsen_tests.resources import MB, ResourceBound, Sample, check_growth
from jepsen_tests.runner import apply_resource_verdict, node_env

NODES = ["q1", "q2", "q3", "b1", "b2", "b3"]


# ---- one-way partitions


def test_deaf_node_hears_nobody_and_everybody_hears_it() -> None:
    g = one_way_shape("deaf", "q1", NODES)
    assert g == {"q1": set(NODES) - {"q1"}}


def test_mute_node_is_heard_by_nobody_and_hears_everybody() -> None:
    g = one_way_shape("mute", "b2", NODES)
    assert "b2" not in g
    assert all(g[n] == {"b2"} for n in NODES if n != "b2")


def test_one_way_split_drops_only_one_direction() -> None:
    g = one_way_shape("split", "", NODES, half=["q1", "b1", "b2"])
    assert g == {n: {"q2", "q3", "b3"} for n in ("q1", "b1", "b2")}
    addrs = {n: node_address(i + 1) for i, n in enumerate(NODES)}
    script = nft_script(g, addrs)
    # b3 -> b1 dropped at b1; b1 -> b3 passes (no rule with b3 as the destination)
    assert f"ip saddr {addrs['b3']} ip daddr {addrs['b1']} drop" in script
    assert f"ip daddr {addrs['b3']} drop" not in script
    assert script.count("drop") == 9


def test_grudge_for_a_oneway_fault_uses_the_resolved_target_and_clients() -> None:
    f = Fault("partition-oneway", ("q2",), {"shape": "deaf", "among": [*NODES, "c0"]})
    assert grudge_for(f, NODES) == {"q2": {"q1", "q3", "b1", "b2", "b3", "c0"}}
    with pytest.raises(ValueError, match="unknown one-way shape"):
        one_way_shape("sideways", "q1", NODES)


# ---- intercepting proxies


def test_nat_script_redirects_each_node_except_the_marked_onward_connections() -> None:
    s = nat_script({("127.0.0.2", 9000): 41000, ("127.0.0.3", 9001): 41001})
    assert s.startswith("table ip longboat_jepsen_nat\ndelete table ip longboat_jepsen_nat\n")
    assert "type nat hook output priority -100" in s
    assert (
        f"meta mark != {MARK:#x} ip daddr 127.0.0.2 tcp dport 9000 dnat to 127.0.0.2:41000"
    ) in s
    assert s.count("dnat to") == 2


def test_a_delayed_chunk_waits_its_delay_and_never_overtakes_the_one_before() -> None:
    rng = random.Random(1)
    st = LinkState("delay", delay_ms=100, jitter_ms=0)
    assert chunk_due(10.0, 0.0, st, rng) == pytest.approx(10.1)
    jittery = LinkState("delay", delay_ms=0, jitter_ms=500)
    last = 0.0
    dues = []
    for i in range(200):
        last = chunk_due(10.0 + i * 0.001, last, jittery, rng)
        dues.append(last)
    assert dues == sorted(dues)  # order inside a connection is kept
    assert max(dues) - 10.0 <= 0.7
    # two connections drawing their own jitter do overtake each other
    a = [chunk_due(10.0, 0.0, jittery, random.Random(s)) for s in range(20)]
    assert len({round(x, 3) for x in a}) > 10


def test_pass_and_blackhole_add_no_delay() -> None:
    rng = random.Random(0)
    assert chunk_due(5.0, 0.0, LinkState("pass"), rng) == 5.0
    assert chunk_due(5.0, 6.0, LinkState("pass"), rng) == 6.0


# ---- schedules of the new kinds


def test_new_kinds_are_known_and_grouped() -> None:
    for k in (
        "partition-oneway",
        "reorder",
        "clock-skew",
        "clock-strobe",
        "disk-full",
        "disk-eio",
        "disk-corrupt",
    ):
        assert k in KINDS and GROUPS[k] == (k,)
    assert GROUPS["disk"] == ("disk-full", "disk-eio", "disk-corrupt")
    # the existing rows of the sweep keep their meaning
    assert GROUPS["clock"] == ("clock-bump",)
    assert "partition-oneway" not in GROUPS["partition"]


def test_disk_faults_hit_one_node_or_a_minority_and_name_a_file_class() -> None:
    steps = generate(
        5, ["disk-full", "disk-eio", "disk-corrupt"], NODES, 600, duration_s=(3, 6), gap_s=(1, 2)
    )
    assert {s.target_spec for s in steps} <= set(DISK_SPECS)
    for s in steps:
        assert len(s.fault.targets) <= (len(NODES) - 1) // 2
        if s.fault.kind == "disk-corrupt":
            assert s.fault.params["file"] in ("segment", "index", "checkpoint", "snapshot")
            assert s.fault.params["how"] in ("flip", "truncate")
    assert {s.fault.params["file"] for s in steps if s.fault.kind == "disk-corrupt"} == {
        "segment",
        "index",
        "checkpoint",
        "snapshot",
    }


def test_target_specs_also_steer_disk_faults() -> None:
    steps = generate(
        5,
        ["disk-eio"],
        NODES,
        300,
        duration_s=(3, 6),
        gap_s=(1, 2),
        process_specs=["controller"],
        disk_specs=["controller"],
    )
    assert steps and all(s.target_spec == "controller" and not s.fault.targets for s in steps)


def test_clock_skew_and_strobe_go_mostly_to_the_active_controller() -> None:
    steps = generate(
        11, ["clock-skew", "clock-strobe"], NODES, 900, duration_s=(3, 6), gap_s=(1, 2)
    )
    specs = [s.target_spec for s in steps]
    assert set(specs) <= set(CLOCK_SPECS)
    assert specs.count("controller") > len(specs) / 2
    for s in steps:
        assert s.fault.params["delta_s"] != 0
        if s.fault.kind == "clock-strobe":
            assert s.fault.params["period_ms"] in (10, 50, 200)


def test_reorder_jitter_dwarfs_its_delay() -> None:
    steps = generate(3, ["reorder", "delay"], NODES, 600, duration_s=(3, 6), gap_s=(1, 2))
    for s in steps:
        p = s.fault.params
        if s.fault.kind == "reorder":
            assert p["jitter_ms"] >= 2 * max(p["delay_ms"], 25)
        assert isinstance(p["nodes_only"], bool)


# ---- corruption


def _files(tmp: Path) -> dict[str, int]:
    layout = {
        "jepsen-0/00000000000000000000.log": 500,
        "jepsen-0/00000000000000000000.index": 16,
        "jepsen-0/00000000000000000000.timeindex": 24,
        "jepsen-0/high-watermark-checkpoint": 4,
        "jepsen-0/leader-epoch-checkpoint": 8,
        "__cluster_metadata-0/quorum-state": 30,
        "__cluster_metadata-0/snapshots/00000000000000000005-0000000001.checkpoint": 40,
        "__cluster_metadata-0/snapshots/00000000000000000120-0000000003.checkpoint": 40,
        "__cluster_metadata-0/snapshots/00000000000000000099-0000000004.checkpoint": 40,
        "peers": 10,
        ".jepsen-ballast": 100,
    }
    for rel, size in layout.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes(range(256)) * (size // 256) + bytes(range(size % 256)))
    return file_sizes(tmp)


def test_classify_by_name() -> None:
    assert classify("d/jepsen-0/00000000000000000042.log") == "segment"
    assert classify("d/x/00000000000000000042.index") == "index"
    assert classify("d/x/00000000000000000042.timeindex") == "index"
    assert classify("d/x/recovery-point-offset-checkpoint") == "checkpoint"
    assert classify("d/__cluster_metadata-0/quorum-state") == "checkpoint"
    assert classify("d/m/snapshots/00000000000000000010-0000000002.checkpoint") == "snapshot"
    assert classify("d/broker.log") is None
    assert classify("d/peers") is None


def test_file_sizes_skips_the_ballast(tmp_path: Path) -> None:
    files = _files(tmp_path)
    assert not any(p.endswith(".jepsen-ballast") for p in files)


def test_corruption_plan_picks_the_class_asked_for_and_the_newest_snapshot(tmp_path: Path) -> None:
    files = _files(tmp_path)
    for cls in ("segment", "index", "checkpoint"):
        plan = plan_corruption(files, cls, "flip", random.Random(1))
        assert plan is not None and plan.file_class == cls
        assert 0 <= plan.position < files[plan.path] and 0 <= plan.bit < 8
    snap = plan_corruption(files, "snapshot", "truncate", random.Random(1))
    assert snap is not None
    assert snap.path.endswith("00000000000000000120-0000000003.checkpoint")
    assert snap.position < snap.size_before


def test_corruption_plan_falls_back_to_a_class_the_node_has(tmp_path: Path) -> None:
    files = {p: s for p, s in _files(tmp_path).items() if classify(p) == "segment"}
    plan = plan_corruption(files, "snapshot", "flip", random.Random(2))
    assert plan is not None and plan.file_class == "segment"
    assert plan_corruption({}, "segment", "flip", random.Random(2)) is None
    empty = {str(tmp_path / "00000000000000000000.log"): 0}
    assert plan_corruption(empty, "segment", "flip", random.Random(2)) is None


def test_corruption_plans_are_reproducible(tmp_path: Path) -> None:
    files = _files(tmp_path)
    a = plan_corruption(files, "segment", "flip", random.Random("7/0.1/b2"))
    b = plan_corruption(files, "segment", "flip", random.Random("7/0.1/b2"))
    assert a == b


def test_apply_corruption_flips_exactly_one_bit_or_truncates(tmp_path: Path) -> None:
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(bytes(100))
    apply_corruption(Corruption(str(p), "segment", "flip", 37, 5, 100))
    data = p.read_bytes()
    assert len(data) == 100 and data[37] == 1 << 5
    assert sum(1 for b in data if b) == 1
    apply_corruption(Corruption(str(p), "segment", "truncate", 12, 0, 100))
    assert p.stat().st_size == 12
    with pytest.raises(ValueError):
        apply_corruption(Corruption(str(p), "segment", "flip", 50, 0, 100))


# ---- the soak's bound


def _s(node: str, pid: int, t: float, rss_mb: float, fds: int) -> Sample:
    return Sample(node, pid, t, int(rss_mb * MB), fds, 0)


def test_growth_within_the_bound_passes() -> None:
    samples = [_s("b1", 10, 0, 80, 40), _s("b1", 10, 70, 100, 60), _s("b1", 10, 7000, 209, 160)]
    r = check_growth(samples, ResourceBound(), warmup_s=60)
    assert r["ok"] and r["checked"] == 1
    assert r["nodes"]["b1"]["baseline"]["t_s"] == 70  # the first sample after the warm-up


def test_rss_past_twice_plus_50_mb_fails() -> None:
    samples = [_s("b1", 10, 0, 100, 40), _s("b1", 10, 7000, 251, 40)]
    r = check_growth(samples, ResourceBound(), warmup_s=0)
    assert not r["ok"]
    assert "RSS 251.0 MB > 2 x 100.0 MB + 50 MB" in r["violations"]["b1"]


def test_open_files_past_the_slack_fail() -> None:
    samples = [_s("q1", 5, 0, 50, 30), _s("q1", 5, 100, 50, 131)]
    r = check_growth(samples, ResourceBound(fds_slack=100), warmup_s=0)
    assert r["violations"] == {"q1": "open files 131 > 30 + 100"}


def test_a_restarted_node_is_not_checked_and_a_soak_that_checked_nothing_fails() -> None:
    samples = [_s("b1", 10, 0, 50, 30), _s("b1", 11, 100, 500, 900)]
    r = check_growth(samples, ResourceBound(), warmup_s=0)
    assert r["nodes"]["b1"]["checked"] is False
    assert "restarted" in r["nodes"]["b1"]["why_not_checked"]
    assert r["checked"] == 0 and not r["ok"]


def test_the_resource_verdict_invalidates_a_valid_history() -> None:
    result = {"valid": True, "counts": {}, "anomaly_types": [], "anomalies": {}}
    growth = check_growth([_s("b1", 1, 0, 10, 10), _s("b1", 1, 5, 10, 500)], ResourceBound())
    apply_resource_verdict(result, growth)
    assert result["valid"] is False
    assert result["anomaly_types"] == ["resource-growth"]
    assert result["anomalies"]["resource-growth"][0]["node"] == "b1"
    ok = {"valid": True}
    apply_resource_verdict(
        ok, check_growth([_s("b1", 1, 0, 10, 10), _s("b1", 1, 5, 11, 11)], ResourceBound())
    )
    assert ok == {"valid": True}


# ---- node environments


class _Preload:
    def __init__(self, lib: str, var: str) -> None:
        self.lib, self.var = lib, var

    def env_for(self, node: str) -> dict[str, str]:
        return {"LD_PRELOAD": self.lib, self.var: f"/state/{node}"}


def test_preloads_chain_with_the_wall_clock_shim_first() -> None:
    env = node_env(
        "q1",
        ["clock-skew", "clock-bump", "lose-unsynced"],
        [
            _Preload("shim.so", "LBJT_WALLCLOCK_FILE"),
            None,
            _Preload("faketime.so", "FAKETIME_TIMESTAMP_FILE"),
        ],
    )
    assert env["LD_PRELOAD"] == "shim.so faketime.so"
    assert env["LBJT_WALLCLOCK_FILE"] == "/state/q1"
    assert env["LONGBOAT_LAZYFS"] == "1"
    assert node_env("q1", ["kill"], [None]) == {}


# ---- the lazy layer's control commands


def test_lazy_layer_commands_are_the_lines_storage_takes() -> None:
    from jepsen_tests.nemesis.lazydisk import fail_fsync_command, free_bytes_command

    assert fail_fsync_command(1) == "fail-fsync 1 EIO"
    assert fail_fsync_command(3, ".log") == "fail-fsync 3 EIO .log"
    assert free_bytes_command(0) == "free-bytes 0"
    assert free_bytes_command(None) == "free-bytes none"
    with pytest.raises(ValueError):
        fail_fsync_command(0)
    with pytest.raises(ValueError):
        fail_fsync_command(1, "a b")
    with pytest.raises(ValueError):
        free_bytes_command(-1)


def test_lazy_disk_faults_draw_their_parameters() -> None:
    steps = generate(
        9, ["lazy-fsync-eio", "lazy-disk-full"], NODES, 600, duration_s=(3, 6), gap_s=(1, 2)
    )
    assert {s.fault.kind for s in steps} == {"lazy-fsync-eio", "lazy-disk-full"}
    for s in steps:
        assert s.target_spec in DISK_SPECS
        if s.fault.kind == "lazy-fsync-eio":
            assert s.fault.params["nth"] in (1, 2, 3)
            assert s.fault.params["match"] in ("", ".log", "checkpoint")
        else:
            assert s.fault.params["free_bytes"] in (0, 4096, 65536)
    assert GROUPS["lazy-disk"] == ("lazy-fsync-eio", "lazy-disk-full")


# ---- the load's measure of a leadership move


def test_leadership_has_moved_only_when_every_partition_has_another_leader() -> None:
    from jepsen_tests.load import move_progress

    def table(*leaders: int) -> dict[int, dict[str, int]]:
        return {p: {"leader": lead} for p, lead in enumerate(leaders)}

    led = [0, 1, 2]
    assert move_progress(table(101, 101, 101, 102), 101, led) == (3, 0)
    assert move_progress(table(102, 101, 103, 102), 101, led) == (1, 0)
    # gone from the killed broker, but one partition has no leader at all: not moved
    assert move_progress(table(102, -1, 103, 102), 101, led) == (0, 1)
    assert move_progress(table(102, 103, 103, 101), 101, led) == (0, 0)
    assert move_progress({}, 101, led) == (0, 3)


def test_the_load_kills_only_once_every_broker_holds_the_replicas_the_metadata_gives_it() -> None:
    from jepsen_tests.load import replicas_missing

    table = {
        0: {"leader": 101, "replicas": [101, 102, 103]},
        1: {"leader": 102, "replicas": [102, 103, 101]},
        2: {"leader": 103, "replicas": [103, 101, 102]},
    }
    everything = {101: {0, 1, 2}, 102: {0, 1, 2}, 103: {0, 1, 2}}
    assert replicas_missing(table, everything) == {}
    # the metadata says led with a full ISR; broker 102 has created one log of three
    assert replicas_missing(table, {**everything, 102: {1}}) == {102: 2}
    # a broker that did not answer holds nothing as far as the load knows
    assert replicas_missing(table, {101: {0, 1, 2}}) == {102: 3, 103: 3}
