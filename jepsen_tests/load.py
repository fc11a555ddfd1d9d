"""Load: many partitions under produce, one broker killed; how long leadership takes to move.

    python -m jepsen_tests load --partitions 10000 [--nodes 3] [--producers 4] \\
        [--warmup 20] [--observe 30] [--kill auto|bN] [--out DIR]

A measurement, not a safety check (the queue workload does those): it prints figures and
writes them to ``<out>/load.json``. Steps, in the run's own network namespace when the
machine allows (as `run`):

1. start N controllers and N brokers (`LongboatCluster`), create the topic with
   ``--partitions`` partitions (replication factor 3, ``min.insync.replicas`` 2), wait
   until every partition is led (``--start-timeout``), then up to ``--isr-timeout`` for every
   ISR to fill (reported: the time, or the ISR sizes when it gave up);
2. produce: ``--producers`` clients (acks=all, idempotent, the queue workload's client) send
   to random partitions as fast as they are acknowledged, until the end;
3. ``--warmup`` seconds: the baseline (produce rate, CPU of the active controller and of
   every broker, from ``/proc/<pid>/stat``);
4. SIGKILL one broker (``--kill``; ``auto``: the one leading the most partitions), then poll
   the partition table every 0.2 s on the surviving brokers until every partition it led has
   another leader: *leadership moved* is the time from the kill to that poll. Partitions whose
   ISR held only the killed broker get no leader (no unclean election): once none is left on
   it, the load waits `OFFLINE_GRACE_S` more and reports how many stayed leaderless. The controller
   only learns of the death when the broker's session expires (``broker_session_timeout_ms``,
   9 s by default), so that is the floor; the rest is the controller's and the brokers' work.
   The active controller's CPU is sampled every poll;
5. ``--observe`` seconds more of produce, restart the broker, wait up to ``--rejoin-timeout``
   until every partition has a full ISR again (*ISR restored*; else the ISR sizes at the
   end), stop.

Check the controller's partition bounds first (``max_partitions``, 200,000, and
``max_partitions_per_topic``, 100,000, in ``api/node/config.py``): a topic over them is refused.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jepsen_tests import cleanup
from jepsen_tests.longboat import LongboatCluster, http_json
from jepsen_tests.nemesis.net import NetNamespace, client_address, netns_unavailable_reason
from jepsen_tests.resources import CLOCK_TICKS_PER_S, read_group_usage


@dataclass
class LoadConfig:
    out_dir: Path
    partitions: int = 10_000
    nodes: int = 3
    producers: int = 4
    warmup_s: float = 20.0
    observe_s: float = 30.0
    kill: str = "auto"
    poll_interval_s: float = 0.2
    start_timeout_s: float = 900.0
    isr_timeout_s: float = 300.0
    move_timeout_s: float = 600.0
    rejoin_timeout_s: float = 300.0
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["out_dir"] = str(self.out_dir)
        return d


@dataclass
class CpuMeter:
    """CPU use of one process group between samples, as a percentage of one core."""

    pid: int
    last_ticks: int = 0
    last_t: float = 0.0
    percents: list[float] = field(default_factory=list)

    def sample(self) -> float | None:
        u = read_group_usage(self.pid)
        now = time.monotonic()
        if u is None:
            return None
        pct = None
        if self.last_t and now > self.last_t:
            pct = 100.0 * (u.cpu_ticks - self.last_ticks) / CLOCK_TICKS_PER_S / (now - self.last_t)
            self.percents.append(pct)
        self.last_ticks, self.last_t = u.cpu_ticks, now
        return pct

    def summary(self) -> dict[str, float | None]:
        if not self.percents:
            return {"mean_percent": None, "max_percent": None}
        return {
            "mean_percent": round(statistics.fmean(self.percents), 1),
            "max_percent": round(max(self.percents), 1),
        }


def isr_sizes(cluster: LongboatCluster) -> dict[int, int]:
    """How many partitions have an ISR of each size."""
    return dict(sorted(Counter(len(p["isr"]) for p in cluster.partition_table().values()).items()))


def wait_full_isr(cluster: LongboatCluster, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cluster.healthy():
            return True
        time.sleep(1.0)
    return bool(cluster.healthy())


def replicas_missing(table: dict[int, dict[str, Any]], held: dict[int, set[int]]) -> dict[int, int]:
    """By broker id: how many of the partitions the metadata puts on it (``table``, a
    partition's ``replicas``) its replica manager does not hold yet (``held``: the partitions
    each broker's ``/internal/broker/v1/replicas`` lists). A broker's metadata image moves
    before its replica manager has created what the update added (10 ms or so a new log), so
    a partition the metadata calls led with a full ISR may have no log on its brokers yet."""
    want: dict[int, set[int]] = {}
    for p, info in table.items():
        for b in info.get("replicas", []):
            want.setdefault(int(b), set()).add(p)
    return {b: n for b, ps in want.items() if (n := len(ps - held.get(b, set())))}


def wait_replicas(cluster: LongboatCluster, timeout_s: float) -> dict[int, int]:
    """Wait until every broker holds every replica the metadata gives it; what is still
    missing at ``timeout_s`` (empty: nothing)."""
    deadline = time.monotonic() + timeout_s
    missing: dict[int, int] = {-1: -1}  # broker -1: no broker answered its metadata
    while time.monotonic() < deadline:
        table = cluster.partition_table()
        held: dict[int, set[int]] = {}
        for b in cluster.brokers:
            try:
                reps = http_json(
                    cluster.url(b) + "/internal/broker/v1/replicas",
                    cluster.metadata_timeout_s,
                    cluster.admin_ssl,
                )
            except (OSError, ValueError):
                continue
            held[cluster.node_ids[b]] = {
                int(r["partition"]) for r in reps if r.get("topic") == cluster.topic
            }
        missing = replicas_missing(table, held) if table else {-1: -1}
        if not missing:
            return {}
        time.sleep(1.0)
    return missing


OFFLINE_GRACE_S = 15.0
"""How long after the last partition left the killed broker the load waits for the ones
left without a leader (their ISR held only that broker) before it gives up on them."""


def move_progress(
    table: dict[int, dict[str, Any]], victim_id: int, victim_led: list[int]
) -> tuple[int, int]:
    """Of the partitions the killed broker led: how many it still leads (as the metadata says),
    and how many have no leader at all. Leadership has moved when both are 0."""
    still = offline = 0
    for p in victim_led:
        leader = int(table[p]["leader"]) if p in table else -1
        still += leader == victim_id
        offline += leader < 0
    return still, offline


def leaders_by_broker(table: dict[int, dict[str, Any]]) -> Counter[int]:
    return Counter(int(p["leader"]) for p in table.values())


def led_by(table: dict[int, dict[str, Any]], broker_id: int) -> list[int]:
    return sorted(p for p, info in table.items() if int(info["leader"]) == broker_id)


class Producers:
    """`n` clients sending to random partitions until stopped; counts outcomes by phase."""

    def __init__(self, cluster: LongboatCluster, n: int, seed: int) -> None:
        self.cluster = cluster
        self.n = n
        self.rng = random.Random(seed)
        self.phase = "start"
        self.counts: dict[str, Counter[str]] = {}
        self.phase_started: dict[str, float] = {}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.phase_started[phase] = time.monotonic()

    async def _worker(self, i: int) -> None:
        from jepsen_tests.cluster import DefiniteError, IndefiniteError
        from jepsen_tests.longboat_client import LongboatQueueClient

        c = LongboatQueueClient(self.cluster, f"load{i}", client_address(i))
        value = i
        try:
            while not self._stop.is_set():
                key = f"k{self.rng.randrange(self.cluster.partitions)}"
                try:
                    await c.send(key, value)
                    outcome = "ok"
                except DefiniteError:
                    outcome = "fail"
                except IndefiniteError:
                    outcome = "info"
                self.counts.setdefault(self.phase, Counter())[outcome] += 1
                value += self.n
        finally:
            await c.close()

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._worker(i)) for i in range(self.n)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def rates(self, ends: dict[str, float]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for phase, c in self.counts.items():
            t0 = self.phase_started.get(phase)
            t1 = ends.get(phase)
            span = (t1 - t0) if t0 is not None and t1 is not None else None
            out[phase] = {
                **dict(c),
                "seconds": round(span, 1) if span else None,
                "ok_per_s": round(c["ok"] / span, 1) if span else None,
            }
        return out


def run_load(cfg: LoadConfig) -> dict[str, Any]:
    out = cfg.out_dir
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(f"run directory {out} is not empty; give another --out")
    out.mkdir(parents=True, exist_ok=True)
    ns: NetNamespace | None = None
    cluster = LongboatCluster(n=cfg.nodes, partitions=cfg.partitions)
    cluster.start_timeout_s = cfg.start_timeout_s
    try:
        if netns_unavailable_reason() is None:
            ns = NetNamespace.create()
            ns.enter()
        wrap = ns.wrap if ns is not None else (lambda argv: list(argv))
        cluster.setup(out, lambda node: {}, wrap)
        t = time.monotonic()
        print(
            f"load: starting {cfg.nodes} controllers and {cfg.nodes} brokers, topic of "
            f"{cfg.partitions} partitions",
            file=sys.stderr,
            flush=True,
        )
        cluster.start(full_isr=False)
        started_s = time.monotonic() - t
        print(f"load: every partition led after {started_s:.1f} s", file=sys.stderr, flush=True)
        full = wait_full_isr(cluster, cfg.isr_timeout_s)
        isr_s = round(time.monotonic() - t, 1) if full else None
        print(
            f"load: every ISR full after {isr_s} s"
            if full
            else f"load: ISRs not full {cfg.isr_timeout_s} s later (partitions by ISR "
            f"size: {isr_sizes(cluster)}); measuring anyway",
            file=sys.stderr,
            flush=True,
        )
        # Before the kill, the brokers' own replicas: the metadata above says a partition is
        # led with a full ISR before its brokers have created its log.
        missing = wait_replicas(cluster, cfg.isr_timeout_s)
        replicas_s = None if missing else round(time.monotonic() - t, 1)
        print(
            f"load: every broker holds its replicas after {replicas_s} s"
            if not missing
            else f"load: replicas still missing {cfg.isr_timeout_s} s later (by broker: "
            f"{missing}); measuring anyway",
            file=sys.stderr,
            flush=True,
        )
        result = cleanup.run_async(_measure(cluster, cfg))
        result["cluster_start_s"] = round(started_s, 1)
        result["isr_full_after_create_s"] = isr_s
        result["replicas_created_s"] = replicas_s
    finally:
        cluster.stop()
        if ns is not None:
            ns.leave()
            ns.destroy()
    result = {"config": cfg.to_json(), **result}
    (out / "load.json").write_text(json.dumps(result, indent=1))
    return result


async def _measure(cluster: LongboatCluster, cfg: LoadConfig) -> dict[str, Any]:
    ctl = await asyncio.to_thread(cluster.active_controller)
    if ctl is None:
        raise RuntimeError("load: no active controller")
    ctl_pid = cluster.processes[ctl].pid
    assert ctl_pid is not None
    meters = {n: CpuMeter(p.pid) for n, p in cluster.processes.items() if p.pid is not None}
    prod = Producers(cluster, cfg.producers, cfg.seed)
    ends: dict[str, float] = {}
    prod.enter("warmup")
    prod.start()
    try:
        for m in meters.values():
            m.sample()
        await asyncio.sleep(cfg.warmup_s)
        baseline = {n: m.sample() for n, m in meters.items()}
        ends["warmup"] = time.monotonic()

        table = await asyncio.to_thread(cluster.partition_table)
        if not table:
            raise RuntimeError(
                "load: no broker answered its metadata within "
                f"{cluster.metadata_timeout_s} s: nothing to measure"
            )
        isr_before = dict(sorted(Counter(len(p["isr"]) for p in table.values()).items()))
        counts = leaders_by_broker(table)
        if cfg.kill == "auto":
            victim_id = max((b for b in counts if b in cluster.by_id), key=lambda b: counts[b])
            victim = cluster.by_id[victim_id]
        else:
            victim = cfg.kill
            victim_id = cluster.node_ids[victim]
        victim_led = led_by(table, victim_id)
        ctl_meter = CpuMeter(ctl_pid)
        ctl_meter.sample()
        print(
            f"load: killing {victim}, leader of {len(victim_led)} partitions; active "
            f"controller {ctl}",
            file=sys.stderr,
            flush=True,
        )
        prod.enter("move")
        t_kill = time.monotonic()
        cluster.processes[victim].kill()
        first_moved: float | None = None
        left: float | None = None
        moved: float | None = None
        offline = 0
        timeline: list[tuple[float, int, int]] = []
        while time.monotonic() - t_kill < cfg.move_timeout_s:
            await asyncio.sleep(cfg.poll_interval_s)
            table = await asyncio.to_thread(cluster.partition_table)
            ctl_meter.sample()
            if not table:
                continue
            still, offline = move_progress(table, victim_id, victim_led)
            now = time.monotonic() - t_kill
            timeline.append((round(now, 2), still, offline))
            if first_moved is None and still + offline < len(victim_led):
                first_moved = now
            if still == 0 and left is None:
                left = now
            if still == 0 and offline == 0:
                moved = now
                break
            if left is not None and now - left > OFFLINE_GRACE_S:
                break  # leaderless partitions wait for the killed broker (no unclean election)
        ends["move"] = time.monotonic()
        led_after = leaders_by_broker(table) if table else Counter()
        print(
            f"load: leadership moved in {None if moved is None else round(moved, 2)} s"
            + (f"; {offline} partitions left without a leader" if offline else ""),
            file=sys.stderr,
            flush=True,
        )

        prod.enter("after")
        await asyncio.sleep(cfg.observe_s)
        ends["after"] = time.monotonic()
        prod.enter("rejoin")
        t_restart = time.monotonic()
        cluster.processes[victim].start()
        restored: float | None = None
        while time.monotonic() - t_restart < cfg.rejoin_timeout_s:
            await asyncio.sleep(1.0)
            if await asyncio.to_thread(cluster.healthy):
                restored = time.monotonic() - t_restart
                break
        ends["rejoin"] = time.monotonic()
        isr_end = await asyncio.to_thread(isr_sizes, cluster)
    finally:
        await prod.stop()
    return {
        "active_controller": ctl,
        "victim": victim,
        "victim_led_partitions": len(victim_led),
        "leaders_before_kill": {cluster.by_id.get(b, str(b)): n for b, n in counts.items()},
        "isr_sizes_before_kill": isr_before,
        "leadership_moved_s": None if moved is None else round(moved, 2),
        "left_killed_broker_s": None if left is None else round(left, 2),
        "partitions_without_leader": offline,
        "first_partition_moved_s": None if first_moved is None else round(first_moved, 2),
        "move_timeline": timeline,
        "leaders_after_move": {cluster.by_id.get(b, str(b)): n for b, n in led_after.items()},
        "isr_restored_after_restart_s": None if restored is None else round(restored, 1),
        "isr_sizes_at_end": isr_end,
        "controller_cpu_during_move": ctl_meter.summary(),
        "cpu_percent_baseline": {
            n: None if v is None else round(v, 1) for n, v in baseline.items()
        },
        "produce": prod.rates(ends),
    }


def format_summary(r: dict[str, Any]) -> str:
    cpu = r["controller_cpu_during_move"]
    lines = [
        f"partitions {r['config']['partitions']}: every one led {r.get('cluster_start_s')} s "
        f"after the start, every ISR full after {r.get('isr_full_after_create_s')} s, "
        f"every broker holding its replicas after {r.get('replicas_created_s')} s; "
        f"ISR sizes before the kill {r.get('isr_sizes_before_kill')}, leaders "
        f"{r.get('leaders_before_kill')}",
        f"killed {r['victim']} (leader of {r['victim_led_partitions']} partitions): "
        f"leadership moved in {r['leadership_moved_s']} s (first partition at "
        f"{r['first_partition_moved_s']} s, none left on it at {r['left_killed_broker_s']} s, "
        f"{r['partitions_without_leader']} without a leader); leaders after: "
        f"{r['leaders_after_move']}",
        f"active controller {r['active_controller']} CPU during the move: mean "
        f"{cpu['mean_percent']}%, max {cpu['max_percent']}% of a core; baseline "
        f"{r['cpu_percent_baseline'].get(r['active_controller'])}%",
        f"restarted {r['victim']}: every ISR full again after "
        f"{r['isr_restored_after_restart_s']} s (partitions by ISR size at the end: "
        f"{r.get('isr_sizes_at_end')})",
    ]
    for phase, p in r["produce"].items():
        lines.append(f"  produce {phase}: {p}")
    return "\n".join(lines)
