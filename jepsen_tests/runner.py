"""One run: cluster up, clients and nemeses for the time limit, heal, final reads, check, report.

The run lives in its own network namespace when the machine allows (root, ``ip``, ``nft``):
the harness's main thread enters it (setns on that thread only) before the client event loop
starts, and every node process is started through ``ip netns exec``. Partitions need it; with
``--netns off`` or without root, partitions fall back to blackholed proxy links (said loudly).

Everything started is undone in ``finally`` (and by `jepsen_tests.cleanup` on signals and at
exit): faults healed, processes killed, proxies closed, the namespace deleted.

Layout of a run directory::

    history.jsonl   every op, streamed as recorded
    schedule.json   the faults drawn from the seed
    logs/<node>.log node stdout/stderr across restarts
    logs/clients.log the client library's log (retries, group rejoins, coordinator moves)
    data/<node>/    node data directories (with a disk nemesis: each a mounted filesystem
                    whose image is disks/<node>.img)
    resources.jsonl node processes' memory, open files and CPU (soak)
    results.json    config, checker result, warnings, nodes not running at the end
    report.html     plots and anomaly tables
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jepsen_tests import cleanup, report
from jepsen_tests.checkers import linear, queue, txn
from jepsen_tests.checkers import schemas as schemas_checker
from jepsen_tests.cluster import Cluster, GroupMember, OnRebalance
from jepsen_tests.history import History, Recorder
from jepsen_tests.nemesis import (
    GROUPS,
    KINDS,
    Composite,
    Fault,
    FaultInjectionUnavailable,
    Nemesis,
)
from jepsen_tests.nemesis.clock import ClockNemesis, WallClockNemesis
from jepsen_tests.nemesis.disk import DiskNemesis, NodeDisk, destroy_disks, make_disks
from jepsen_tests.nemesis.lazydisk import LazyDiskNemesis
from jepsen_tests.nemesis.membership import MembershipNemesis
from jepsen_tests.nemesis.net import (
    NetNamespace,
    NetNemesis,
    client_address,
    netns_unavailable_reason,
)
from jepsen_tests.nemesis.process import LAZYFS_ENV, ProcessNemesis
from jepsen_tests.nemesis.proxy import InterceptNet, ProxyNemesis, ProxyNet, proxy_mesh
from jepsen_tests.nemesis.reassign import ReassignNemesis
from jepsen_tests.nemesis.schedule import DISK_SPECS, PROCESS_SPECS, Step, generate
from jepsen_tests.resources import ResourceBound, ResourceMonitor, check_growth
from jepsen_tests.workloads import schemas as schemas_workload
from jepsen_tests.workloads import txn as txn_workload
from jepsen_tests.workloads.metadata import MetadataWorker, topic_names
from jepsen_tests.workloads.queue import (
    GROUP,
    GROUP_ASSIGNORS,
    GroupQueueWorker,
    QueueWorker,
    final_reads,
    value_counter,
)

WORKLOADS = ("queue", "metadata", "txn", "txn-ctp", "schemas")
TXN_WORKLOADS = ("txn", "txn-ctp")
SCHEMAS_PROCESS_SPECS = ("one", "minority", "schemas-leader", "schemas-leader", "controller")
"""The schemas workload's kills and pauses aim mostly at the broker leading ``_schemas``: the
one every registration is written through."""
CONSUMERS = ("assign", "group", "mixed")
"""How the queue workload's workers consume: all by assignment, all as members of one
consumer group, or alternately (odd-numbered workers in the group)."""


@dataclass
class RunConfig:
    out_dir: Path
    workload: str = "queue"
    nemeses: list[str] = field(default_factory=list)
    time_limit_s: float = 10.0
    seed: int = 0
    concurrency: int = 4
    netns: str = "auto"  # auto | on | off
    recovery_s: float = 2.0
    recovery_timeout_s: float = 30.0
    final_read_timeout_s: float = 15.0
    tracks: int = 1
    fault_duration_s: tuple[float, float] = (1.0, 3.0)
    fault_gap_s: tuple[float, float] = (0.5, 1.5)
    process_specs: list[str] = field(default_factory=list)  # empty: PROCESS_SPECS, DISK_SPECS
    consumers: str = "assign"  # one of CONSUMERS
    resources: ResourceBound | None = None
    """Soak: sample the nodes' memory and open files, fail the run on growth past this."""
    resource_interval_s: float = 30.0
    resource_warmup_s: float = 60.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["out_dir"] = str(self.out_dir)
        return d


def expand_kinds(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        if n not in GROUPS:
            raise ValueError(f"unknown nemesis {n!r}; known: {', '.join(sorted(GROUPS))}")
        out.extend(k for k in GROUPS[n] if k not in out)
    return out


def check_consumers(cluster: Cluster, cfg: RunConfig) -> None:
    if cfg.consumers not in CONSUMERS:
        raise ValueError(f"unknown consumers {cfg.consumers!r}; known: {', '.join(CONSUMERS)}")
    if cfg.consumers == "assign":
        return
    if cfg.workload != "queue":
        raise ValueError(f"--consumers {cfg.consumers} is for the queue workload")
    if not cluster.supports_groups:
        raise ValueError(
            f"--consumers {cfg.consumers}: {type(cluster).__name__} has no consumer groups"
        )
    if cfg.consumers == "mixed" and cfg.concurrency < 2:
        raise ValueError("--consumers mixed needs --concurrency 2 or more")


def group_assignor(seed: int) -> str:
    """The run's group assignor, drawn from the seed (one per run, see GROUP_ASSIGNORS)."""
    return random.Random(f"{seed}/group").choice(GROUP_ASSIGNORS)


def consumes_by_group(consumers: str, worker: int) -> bool:
    return consumers == "group" or (consumers == "mixed" and worker % 2 == 1)


CLIENT_LOGGER = "api.client"


def _log_clients_to(path: Path) -> Callable[[], None]:
    """The client library's log (a group member's rejoins, retries, lost coordinators) goes
    to the run directory: on the console it would bury the run's own output. Returns the
    undo."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger(CLIENT_LOGGER)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False

    def undo() -> None:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        handler.close()

    return undo


def warn(msg: str, warnings: list[str]) -> None:
    warnings.append(msg)
    print(f"\n!!! {msg} !!!\n", file=sys.stderr)


def run(cluster: Cluster, cfg: RunConfig) -> dict[str, Any]:
    out = cfg.out_dir
    if out.is_dir() and any(out.iterdir()):
        # Its nodes would start over the earlier run's data directories and metadata logs,
        # and the checker would read that run's records as this one's (a sweep resumed over
        # an interrupted run once reported 457 "duplicates" that way).
        raise ValueError(
            f"run directory {out} is not empty (an earlier run's files); "
            "give another --out or remove it"
        )
    if cfg.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {cfg.workload!r}; known: {', '.join(WORKLOADS)}")
    if cfg.workload in TXN_WORKLOADS and not hasattr(cluster, "txn_client"):
        raise ValueError(f"--workload {cfg.workload}: {type(cluster).__name__} has no transactions")
    if cfg.workload == "txn-ctp" and cfg.concurrency < 2:
        raise ValueError("--workload txn-ctp needs --concurrency 2 or more")
    if cfg.workload == "schemas" and not hasattr(cluster, "schema_client"):
        raise ValueError(f"--workload schemas: {type(cluster).__name__} has no schema registry")
    check_consumers(cluster, cfg)
    kinds = expand_kinds(cfg.nemeses)
    cluster.configure_for(kinds)
    cluster.preflight()
    cats = {KINDS[k] for k in kinds}
    out.mkdir(parents=True, exist_ok=True)
    warnings: list[str] = []
    rec = Recorder(stream_to=out / "history.jsonl")
    undo_client_log = _log_clients_to(out / "logs" / "clients.log")
    ns: NetNamespace | None = None
    proxies: ProxyNet | None = None
    intercept: InterceptNet | None = None
    wallclock: WallClockNemesis | None = None
    disks: dict[str, NodeDisk] = {}
    monitor: ResourceMonitor | None = None
    nemesis: Nemesis | None = None
    dead: dict[str, dict[str, Any]] = {}
    entered = False
    started = time.time()
    try:
        # ---- namespace
        reason = netns_unavailable_reason()
        if cfg.netns == "on" or (cfg.netns == "auto" and reason is None):
            ns = NetNamespace.create()  # raises FaultInjectionUnavailable with the reason
        elif "net" in cats:
            warn(
                f"no network namespace ({reason or 'netns off'}): partitions fall back to "
                "blackholed TCP proxy links between clients and nodes only",
                warnings,
            )
        if ns is None and "partition-oneway" in kinds:
            raise FaultInjectionUnavailable(
                "partition-oneway needs nftables in a network namespace (root): a proxy link "
                "carries both directions of its connections"
            )
        if not cluster.dials_through_proxies and ns is None and ("proxy" in cats or "net" in cats):
            raise FaultInjectionUnavailable(
                f"{type(cluster).__name__}'s clients dial the addresses the nodes advertise, "
                "not the harness's TCP proxies: without a network namespace (where the "
                "harness intercepts every connection) delay/reorder/blackhole and partitions "
                "cannot reach them"
            )
        wrap = ns.wrap if ns is not None else (lambda argv: list(argv))
        if ns is not None:
            ns.enter()
            entered = True

        # ---- cluster processes with the environment the nemeses need
        names = cluster.node_names()
        clients = [f"c{i}" for i in range(cfg.concurrency)]
        clash = set(clients) & set(names)
        if clash:  # a partition naming one would cut the other's address
            raise ValueError(f"node names {sorted(clash)} clash with client names")
        client_hosts = {c: client_address(i) for i, c in enumerate(clients)}
        clock = ClockNemesis(names, out / "clock", rec) if "clock" in cats else None
        if clock is not None and clock.unavailable:
            warn(f"clock nemesis unavailable: {clock.unavailable}", warnings)
        if "wallclock" in cats:
            wallclock = WallClockNemesis(names, out / "clock", rec)
            if wallclock.unavailable:
                warn(f"wall-clock nemesis unavailable: {wallclock.unavailable}", warnings)

        lazydisk = (
            LazyDiskNemesis(cluster.processes, out / "lazyfs", rec) if "lazydisk" in cats else None
        )

        def env_for(node: str) -> dict[str, str]:
            return node_env(node, kinds, [wallclock, clock, lazydisk])

        cluster.setup(out, env_for, wrap)
        if "disk" in cats:
            disks = make_disks({n.name: n.data_dir for n in cluster.nodes}, out / "disks")
        node_addr = {n.name: (n.host, n.port) for n in cluster.nodes}
        if "proxy" in cats and ns is not None:
            # Before any node starts: connections opened earlier would bypass it.
            intercept = InterceptNet(
                ns,
                node_addr,
                {**{n.name: n.host for n in cluster.nodes}, **client_hosts},
                {n.name: n.extra.get("more_ports", ()) for n in cluster.nodes},
            )
            intercept.start()
        cluster.start()
        if cfg.resources is not None:
            monitor = ResourceMonitor(
                cluster.processes, out / "resources.jsonl", cfg.resource_interval_s
            )
            monitor.start()

        # ---- clients and their routes (through proxies where a nemesis needs them)
        use_proxy_partitions = "net" in cats and ns is None
        routes: dict[tuple[str, str], tuple[str, int]] = {}
        if ("proxy" in cats and ns is None) or use_proxy_partitions:
            proxies = ProxyNet()
            routes = proxy_mesh(proxies, clients, node_addr, client_hosts)

        def dial(client: str, node: str) -> tuple[str, int]:
            return routes.get((client, node), node_addr[node])

        parts: list[Nemesis] = [ProcessNemesis(cluster.processes, rec)]
        if "net" in cats and ns is not None:
            parts.append(
                NetNemesis(
                    ns, {**{n.name: n.host for n in cluster.nodes}, **client_hosts}, names, rec
                )
            )
        if proxies is not None:
            parts.append(
                ProxyNemesis(
                    proxies, names + clients, rec, partitions=use_proxy_partitions, nodes=names
                )
            )
        if intercept is not None:
            parts.append(ProxyNemesis(intercept, names + clients, rec, nodes=names))
        if clock is not None:
            parts.append(clock)
        if wallclock is not None:
            parts.append(wallclock)
        if disks:
            parts.append(DiskNemesis(cluster.processes, disks, rec, seed=cfg.seed))
        if lazydisk is not None:
            parts.append(lazydisk)
        if "membership" in cats:
            if not cluster.voters():
                raise FaultInjectionUnavailable(
                    f"membership: {type(cluster).__name__} has no Raft voters to change"
                )
            parts.append(MembershipNemesis(cluster.voters(), wrap, rec, env=cluster.cli_env()))
        if "reassign" in cats:
            reassignable = cluster.reassignable()
            if reassignable is None:
                raise FaultInjectionUnavailable(
                    f"reassign: {type(cluster).__name__} has no partitions to move"
                )
            parts.append(ReassignNemesis(*reassignable, wrap, out, rec, env=cluster.cli_env()))
        nemesis = Composite(parts)

        steps = generate(
            cfg.seed,
            kinds,
            names,
            cfg.time_limit_s,
            duration_s=cfg.fault_duration_s,
            gap_s=cfg.fault_gap_s,
            tracks=cfg.tracks,
            process_specs=cfg.process_specs
            or (SCHEMAS_PROCESS_SPECS if cfg.workload == "schemas" else PROCESS_SPECS),
            disk_specs=cfg.process_specs or DISK_SPECS,
        )
        steps = [_with_clients(s, clients) for s in steps]
        (out / "schedule.json").write_text(json.dumps([s.describe() for s in steps], indent=1))

        final = cleanup.run_async(
            _drive(cluster, cfg, rec, nemesis, steps, clients, client_hosts, dial)
        )
        dead = dead_nodes(cluster)
        for node, d in dead.items():
            warn(
                f"{node} was not running at the end (exit status {d['returncode']}): "
                f"{d['last_log_line']}",
                warnings,
            )
        if monitor is not None:
            monitor.sample()  # the end: after the final reads
            monitor.stop()
    finally:
        if monitor is not None:
            monitor.stop()
        if nemesis is not None:
            try:
                nemesis.heal_all()
            except Exception as e:
                print(f"heal failed: {e!r}", file=sys.stderr)
        cluster.stop()
        destroy_disks(disks)
        if wallclock is not None:
            wallclock.close()
        if intercept is not None:
            intercept.close()
        if proxies is not None:
            proxies.close()
        if entered and ns is not None:
            ns.leave()
        if ns is not None:
            ns.destroy()
        rec.close()
        undo_client_log()

    history = rec.history()
    idempotent = bool(getattr(cluster, "idempotence", True))
    result = check_history(history, cfg.workload, idempotent=idempotent)
    results: dict[str, Any] = {
        "config": cfg.to_json(),
        "idempotent_producers": idempotent,
        "kinds": kinds,
        "group_assignor": group_assignor(cfg.seed) if cfg.consumers != "assign" else None,
        "cluster": type(cluster).__name__,
        "netns": ns.name if ns is not None else None,
        "warnings": warnings,
        "final_reads_complete": final,
        "dead_nodes": dead,
        "wall_time_s": round(time.time() - started, 3),
        "ops": len(history),
        "result": result,
    }
    if monitor is not None and cfg.resources is not None:
        growth = check_growth(monitor.samples, cfg.resources, cfg.resource_warmup_s)
        results["resources"] = growth
        apply_resource_verdict(result, growth)
    write_results(out, results, history)
    return results


def node_env(node: str, kinds: list[str], preloads: list[Any]) -> dict[str, str]:
    """A node's extra environment for the run's nemeses. Preloaded libraries chain: the
    wall-clock shim first, so its offset adds to whatever libfaketime reports below it."""
    env: dict[str, str] = {}
    if "lose-unsynced" in kinds:
        env.update(LAZYFS_ENV)
    libs: list[str] = []
    for p in preloads:
        if p is None:
            continue
        e = dict(p.env_for(node))
        if "LD_PRELOAD" in e:
            libs.append(e.pop("LD_PRELOAD"))
        env.update(e)
    if libs:
        env["LD_PRELOAD"] = " ".join(libs)
    return env


def dead_nodes(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Nodes whose process had exited when the run ended (a fail-stop, a refusal to start
    on a corrupt file), with the exit status and the last line of the node's log."""
    out: dict[str, dict[str, Any]] = {}
    for name, p in cluster.processes.items():
        if p.proc is None or p.alive():
            continue
        tail = [ln for ln in p.log_tail(4000).splitlines() if ln.strip()]
        out[name] = {
            "returncode": p.proc.returncode,
            "last_log_line": tail[-1][-300:] if tail else "",
        }
    return out


def apply_resource_verdict(result: dict[str, Any], growth: dict[str, Any]) -> None:
    """A soak whose nodes grew past the bound (or that could check none) is invalid."""
    if growth.get("ok"):
        return
    entries = [{"node": n, "violation": v} for n, v in growth.get("violations", {}).items()]
    if not entries:
        entries = [{"violation": "no node ran as one process from the baseline to the end"}]
    result["valid"] = False
    result.setdefault("counts", {})["resource-growth"] = len(entries)
    types = result.setdefault("anomaly_types", [])
    if "resource-growth" not in types:
        types.append("resource-growth")
    result.setdefault("anomalies", {})["resource-growth"] = entries


def _with_clients(step: Step, clients: list[str]) -> Step:
    """Partitions also cut clients: they go with the majority, and an isolated node loses
    them too, so the effect is visible even to a cluster whose nodes never talk."""
    f = step.fault
    params = dict(f.params)
    if f.kind == "partition-majority":
        params["majority"] = [*params["majority"], *clients]
    elif f.kind == "partition-isolate" or (
        f.kind == "partition-oneway" and params.get("shape") in ("deaf", "mute")
    ):
        params["among"] = None  # filled with nodes + clients when the target is known
        params["clients"] = clients
    else:
        return step
    return Step(
        step.at_s, step.duration_s, Fault(f.kind, f.targets, params, f.id), step.target_spec
    )


async def _drive(
    cluster: Cluster,
    cfg: RunConfig,
    rec: Recorder,
    nemesis: Nemesis,
    steps: list[Step],
    clients: list[str],
    client_hosts: dict[str, str],
    dial: Any,
) -> dict[str, bool]:
    loop = asyncio.get_running_loop()
    if cfg.workload == "queue" and cfg.consumers != "assign":
        await cluster.prepare_group(GROUP, client_address(150))
    if cfg.workload == "txn-ctp":
        await cluster.prepare_group(txn_workload.CTP_GROUP, client_address(150))
    if cfg.workload in TXN_WORKLOADS:
        return await _drive_txn(cluster, cfg, rec, nemesis, steps, clients, client_hosts)
    if cfg.workload == "schemas":
        return await _drive_schemas(cluster, cfg, rec, nemesis, steps, clients, client_hosts)
    t0 = loop.time()
    deadline = t0 + cfg.time_limit_s
    values = value_counter()
    topics = topic_names()
    assignor = group_assignor(cfg.seed)
    conns: list[Any] = []
    workers: list[Any] = []
    for i, c in enumerate(clients):
        rng = random.Random(f"{cfg.seed}/client/{i}")
        if cfg.workload == "queue":
            qc = cluster.client(c, client_hosts[c], dial)
            conns.append(qc)
            if consumes_by_group(cfg.consumers, i):
                workers.append(
                    GroupQueueWorker(
                        i,
                        len(clients),
                        qc,
                        _member_factory(cluster, c, client_hosts[c], assignor),
                        cluster.keys,
                        rec,
                        values,
                        rng,
                        group=GROUP,
                        assignor=assignor,
                    )
                )
            else:
                workers.append(QueueWorker(i, len(clients), qc, cluster.keys, rec, values, rng))
        else:
            mc = cluster.metadata_client(c, client_hosts[c], dial)
            conns.append(mc)
            workers.append(MetadataWorker(i, len(clients), mc, topics, rec, rng))
    await _under_faults(cluster, cfg, nemesis, steps, t0, deadline, workers, conns)
    if cfg.workload == "metadata":
        mreader = cluster.metadata_client("final", client_address(150), lambda c, n: dial("", n))
        final = MetadataWorker(10_000, 1, mreader, topics, rec, random.Random(0))
        try:
            for topic in topics:
                await final.describe(topic)
        finally:
            await mreader.close()
        return {}
    reader = cluster.client("final", client_address(150), lambda c, n: dial("", n))
    try:
        return await final_reads(
            reader, cluster.keys, rec, process=10_000, timeout_s=cfg.final_read_timeout_s
        )
    finally:
        await reader.close()


async def _drive_txn(
    cluster: Any,
    cfg: RunConfig,
    rec: Recorder,
    nemesis: Nemesis,
    steps: list[Step],
    clients: list[str],
    client_hosts: dict[str, str],
) -> dict[str, bool]:
    """The txn workloads: producers (and, for txn-ctp, processors on odd workers) under the
    schedule, then the group's committed offsets and final reads of every key."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    deadline = t0 + cfg.time_limit_s
    values = value_counter()
    ctp = cfg.workload == "txn-ctp"
    ids = [
        f"jepsen-ctp-{i}" if ctp and i % 2 == 1 else f"jepsen-txn-{i}" for i in range(len(clients))
    ]
    cluster.transactional_ids = ids  # what --target-specs txn-coordinator aims at
    conns: list[Any] = []
    workers: list[Any] = []
    for i, c in enumerate(clients):
        rng = random.Random(f"{cfg.seed}/client/{i}")
        host = client_hosts[c]
        if ctp and i % 2 == 1:

            def new_processor(c: str = c, host: str = host, i: int = i) -> Any:
                return cluster.ctp_processor(c, host, ids[i])

            workers.append(txn_workload.CtpWorker(i, len(clients), new_processor, rec, rng))
        else:
            tc = cluster.txn_client(c, host, ids[i])
            conns.append(tc)
            workers.append(
                txn_workload.TxnWorker(i, len(clients), tc, cluster.keys, rec, values, rng)
            )
    await _under_faults(cluster, cfg, nemesis, steps, t0, deadline, workers, conns)
    host = client_address(150)
    if ctp:
        # Before the final reads: what the group committed, then everything it may cover.
        proc = cluster.ctp_processor("final", host, "jepsen-ctp-final")
        try:
            await txn_workload.final_committed(proc, rec, process=10_001)
        finally:
            await proc.close()
    reader = cluster.txn_client("final", host, "jepsen-txn-final")
    try:
        return await txn_workload.final_reads(
            reader,
            txn_workload.all_keys(cluster.keys, ctp),
            rec,
            process=10_000,
            timeout_s=cfg.final_read_timeout_s,
        )
    finally:
        await reader.close()


async def _drive_schemas(
    cluster: Any,
    cfg: RunConfig,
    rec: Recorder,
    nemesis: Nemesis,
    steps: list[Step],
    clients: list[str],
    client_hosts: dict[str, str],
) -> dict[str, bool]:
    """The schemas workload: registrations and reads under the schedule, then every
    subject's versions read once the cluster has healed."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    deadline = t0 + cfg.time_limit_s
    subjects = schemas_workload.Subjects()
    known_ids: list[int] = []
    conns: list[Any] = []
    workers: list[Any] = []
    for i, c in enumerate(clients):
        sc = cluster.schema_client(c, client_hosts[c])
        conns.append(sc)
        rng = random.Random(f"{cfg.seed}/client/{i}")
        workers.append(
            schemas_workload.SchemaWorker(i, len(clients), sc, subjects, rec, rng, known_ids)
        )
    await _under_faults(cluster, cfg, nemesis, steps, t0, deadline, workers, conns)
    reader = cluster.schema_client("final", client_address(150))
    try:
        return await schemas_workload.final_reads(
            reader, subjects.names, rec, process=10_000, timeout_s=cfg.final_read_timeout_s
        )
    finally:
        await reader.close()


async def _under_faults(
    cluster: Any,
    cfg: RunConfig,
    nemesis: Nemesis,
    steps: list[Step],
    t0: float,
    deadline: float,
    workers: list[Any],
    conns: list[Any],
) -> None:
    """Every workload's middle: the workers run until ``deadline`` while the nemesis starts and
    stops each scheduled fault; then the connections close, every fault is healed, and the
    cluster gets ``recovery_timeout_s`` to elect and refill its ISRs before the final reads (on
    this thread: its probes must run inside the namespace)."""
    loop = asyncio.get_running_loop()
    stops: list[asyncio.Task[None]] = []

    async def stop_later(f: Fault, at: float) -> None:
        await asyncio.sleep(max(0.0, at - loop.time()))
        await asyncio.to_thread(nemesis.stop, f)

    async def schedule() -> None:
        for s in steps:
            await asyncio.sleep(max(0.0, t0 + s.at_s - loop.time()))
            f = _resolve(s, cluster)
            await asyncio.to_thread(nemesis.start, f)
            stops.append(asyncio.ensure_future(stop_later(f, t0 + s.at_s + s.duration_s)))

    sched = asyncio.ensure_future(schedule())
    try:
        await asyncio.gather(*(w.run(deadline) for w in workers))
        await sched
        await asyncio.gather(*stops)
    finally:
        for t in [sched, *stops]:
            t.cancel()
        for conn in conns:
            await conn.close()
    await asyncio.to_thread(nemesis.heal_all)
    await asyncio.sleep(cfg.recovery_s)
    healed_at = loop.time()
    while not cluster.healthy() and loop.time() - healed_at < cfg.recovery_timeout_s:
        await asyncio.sleep(0.5)
    if loop.time() - healed_at >= cfg.recovery_timeout_s:
        print(
            f"cluster not healthy {cfg.recovery_timeout_s}s after healing; reading anyway",
            file=sys.stderr,
        )


def _member_factory(
    cluster: Cluster, client: str, host: str, assignor: str
) -> Callable[[str, OnRebalance], GroupMember]:
    def new_member(name: str, on_rebalance: OnRebalance) -> GroupMember:
        return cluster.group_member(
            f"{client}-{name}", host, group=GROUP, assignor=assignor, on_rebalance=on_rebalance
        )

    return new_member


def _resolve(step: Step, cluster: Cluster) -> Fault:
    f = step.fault
    targets = f.targets
    params = dict(f.params)
    pick = zlib.crc32(f.id.encode())  # which leader: fixed by the schedule, not by timing
    if step.target_spec == "leader":
        leader = cluster.leader_of_something(pick)
        targets = (leader,) if leader is not None else ()
    elif step.target_spec == "controller":
        ctl = cluster.active_controller()
        if ctl is None and f.kind != "membership":
            ctl = cluster.leader_of_something(pick)
        targets = (ctl,) if ctl is not None else ()
    elif step.target_spec == "txn-coordinator":
        coord = getattr(cluster, "txn_coordinator", lambda _pick: None)(pick)
        targets = (coord,) if coord is not None else ()
    elif step.target_spec == "schemas-leader":
        sl = getattr(cluster, "schemas_leader", lambda: None)()
        targets = (sl,) if sl is not None else ()
    elif step.target_spec == "voter":
        voters = sorted(cluster.voters())
        targets = (voters[pick % len(voters)],) if voters else ()
    elif step.target_spec == "leader-followers":
        lf = cluster.leader_and_followers(pick)
        if lf is not None and lf[1]:  # else keep the random cut drawn with the schedule
            targets = (lf[0],)
            params.update(node=lf[0], cut_from=lf[1], shape="leader-followers")
    if f.kind in ("partition-isolate", "partition-oneway") and "clients" in params:
        params["among"] = [*cluster.node_names(), *params.pop("clients")]
    return Fault(f.kind, targets, params, f.id)


def check_history(history: History, workload: str, *, idempotent: bool = True) -> dict[str, Any]:
    if workload == "queue":
        return queue.check(history, idempotent=idempotent)
    if workload == "metadata":
        return linear.check_metadata(history)
    if workload in TXN_WORKLOADS:
        return txn.check(history)
    if workload == "schemas":
        return schemas_checker.check(history)
    raise ValueError(f"no checker for workload {workload!r}")


def write_results(out: Path, results: dict[str, Any], history: History) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    history.save(out / "history.jsonl")
    (out / "report.html").write_text(report.render(results, history))


def recheck(run_dir: Path) -> dict[str, Any]:
    """Check a saved run again (after a checker change, or a history from elsewhere)."""
    history = History.load(run_dir / "history.jsonl")
    try:
        results = json.loads((run_dir / "results.json").read_text())
    except FileNotFoundError:
        results = {"config": {"workload": "queue"}}
    results["result"] = check_history(
        history,
        results["config"].get("workload", "queue"),
        idempotent=results.get("idempotent_producers", True),
    )
    if results.get("resources"):
        apply_resource_verdict(results["result"], results["resources"])
    results["ops"] = len(history)
    write_results(run_dir, results, history)
    return results
