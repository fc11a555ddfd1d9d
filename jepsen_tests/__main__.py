"""Command line: run a test against a cluster, or re-check a saved run.

    python -m jepsen_tests run --workload queue --nemesis kill,partition --time-limit 30 \\
        --seed 7 [--cluster toy|longboat] [--nodes 3] [--consumers assign|group|mixed] \\
        [--secure] [--out DIR (default var/jepsen/...)]
    python -m jepsen_tests check DIR
    python -m jepsen_tests sweep [--nemesis kill,pause,...] [--minutes 30] [--time-limit 60]
    python -m jepsen_tests summary SWEEP_DIR [SWEEP_DIR...]
    python -m jepsen_tests soak [--minutes 120] [--nemesis MIX] [run options]
    python -m jepsen_tests load [--partitions 10000] [--kill auto|bN] [--out DIR]

Exit status: 0 valid, 1 anomalies found (or the checker gave up: unknown), 2 could not run
(fault injection unavailable, bad arguments). ``kill -USR1`` a run that seems stuck: it prints
every thread's stack to stderr and goes on.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
import time
from pathlib import Path
from typing import Any

from jepsen_tests.cluster import Cluster
from jepsen_tests.nemesis import GROUPS, FaultInjectionUnavailable
from jepsen_tests.resources import MB, ResourceBound
from jepsen_tests.runner import CONSUMERS, WORKLOADS, RunConfig, recheck, run

SOAK_NEMESES = (
    "pause,partition,partition-oneway,delay,reorder,clock-skew,clock-strobe,disk-full,membership"
)
"""The soak's default mix: faults that leave node processes running, so that each node's
memory and open files at the end can be compared with its own at the start (a restarted
node is a new process). Kill-like faults can be added with --nemesis; the nodes they hit are
then reported as not checked."""


def _summary(results: dict[str, Any], out: Path) -> int:
    r = results["result"]
    print(f"valid: {r['valid']}")
    st = r.get("stats") or {}
    if "sends" in st:
        print(
            f"  sends {st['sends']}, polls {st['polls']}; committed {st['committed']}, "
            f"read {st['values_read']}; final reads complete: "
            f"{all((results.get('final_reads_complete') or {'': False}).values())}"
        )
    if "txns" in st:
        print(
            f"  txns {st['txns']}, ctp steps {st['ctp']}; aborted on purpose "
            f"{st['aborted_on_purpose']}, committed {st['committed']}; polls {st['polls']}, "
            f"records read {st['records_read']}; final reads complete: "
            f"{all((results.get('final_reads_complete') or {'': False}).values())}"
        )
    if st.get("group"):
        g = st["group"]
        print(
            f"  group ({results.get('group_assignor') or '?'}): polls {g['polls']} "
            f"({g['records']} records), commits {g['commits']}, rebalance events "
            f"{g['rebalances']}, ownerships {g['ownerships']}"
        )
    for k, n in sorted(r.get("counts", {}).items()):
        flag = " (invalidates)" if k in r.get("anomaly_types", []) else ""
        print(f"  {k}: {n}{flag}")
    if r.get("lost_by_fault"):
        print(f"  lost by fault window: {r['lost_by_fault']}")
    if r.get("lost_by_node"):
        print(f"  lost by node: {r['lost_by_node']}")
    res = results.get("resources")
    if res:
        print(
            f"  resources ({res['bound_text']}): {res['checked']} nodes checked, "
            f"{'ok' if res['ok'] else 'FAILED'}"
        )
        for node, e in res["nodes"].items():
            b, end = e["baseline"], e["end"]
            note = e.get("violation") or e.get("why_not_checked") or "ok"
            print(
                f"    {node}: RSS {b['rss_bytes'] / MB:.1f} -> {end['rss_bytes'] / MB:.1f} MB, "
                f"open files {b['fds']} -> {end['fds']}: {note}"
            )
    for node, d in (results.get("dead_nodes") or {}).items():
        print(f"  {node} not running at the end (exit {d['returncode']}): {d['last_log_line']}")
    print(f"report: {out / 'report.html'}")
    return 0 if r["valid"] is True else 1


def make_cluster(args: argparse.Namespace) -> Cluster:
    if args.cluster == "toy":
        if args.secure:
            raise ValueError("--secure needs --cluster longboat (the toy has no TLS)")
        from jepsen_tests.toy.cluster import ToyCluster

        return ToyCluster(
            n_nodes=args.nodes,
            n_keys=args.keys,
            mode=args.toy_mode,
            sync_interval_ms=args.toy_sync_interval_ms,
        )
    if args.secure and args.client == "kafka":
        # The harness's clients would need the Kafka listener's SASL_SSL settings, which
        # `--secure` does not set up yet: say so rather than run plaintext Kafka clients.
        raise ValueError("--secure with --client kafka is not supported yet")
    from jepsen_tests.longboat import LongboatCluster
    from jepsen_tests.longboat_txn import OUTPUT_TOPIC

    return LongboatCluster(
        n=args.nodes,
        partitions=args.keys,
        idempotence=args.idempotence == "on",
        acks_require_fsync=args.acks_require_fsync,
        extra_topics=(OUTPUT_TOPIC,) if args.workload == "txn-ctp" else (),
        kafka_clients=args.client == "kafka",
        secure=args.secure,
    )


def _span(text: str | None, default: tuple[float, float]) -> tuple[float, float]:
    """ "MIN,MAX" seconds."""
    if not text:
        return default
    lo, _, hi = text.partition(",")
    a, b = float(lo), float(hi or lo)
    if not 0 <= a <= b:
        raise ValueError(f"expected MIN,MAX seconds with 0 <= MIN <= MAX, got {text!r}")
    return a, b


def _sweep(args: argparse.Namespace) -> int:
    from jepsen_tests import sweep

    if args.cmd == "sweep":
        root = args.out or Path("var") / "jepsen" / time.strftime("sweep-%Y%m%dT%H%M%S")
        print(f"sweep directory {root}", file=sys.stderr)
        extra = [a for a in args.run_args if a != "--"]
        nemeses = [n.replace("+", ",") for n in args.nemesis.split(",") if n]
        rows = sweep.sweep(
            root, nemeses, args.minutes, args.time_limit, args.seed, args.budget_minutes, extra
        )
    else:
        root = args.dir[0]
        rows = [row for d in args.dir for row in sweep.load_rows(d)]
    table = sweep.summarize(rows)
    text = sweep.format_table(table)
    if args.cmd == "sweep" or len(args.dir) == 1:
        (root / "summary.md").write_text(text + "\n")
    print(text)
    return 0 if table and all(t["invalid"] == 0 for t in table) else 1


def _run_options(r: argparse.ArgumentParser, soak: bool = False) -> None:
    """The options of a run (and of a soak, which is a run with other defaults)."""
    r.add_argument("--workload", default="queue", choices=list(WORKLOADS))
    r.add_argument(
        "--nemesis",
        default=SOAK_NEMESES if soak else "",
        help=f"comma-separated: {', '.join(sorted(GROUPS))}",
    )
    r.add_argument("--time-limit", type=float, default=30.0, help="seconds of faults+load")
    r.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    r.add_argument("--cluster", default="longboat", choices=["longboat", "toy"])
    r.add_argument("--nodes", type=int, default=3)
    r.add_argument("--keys", type=int, default=6, help="partitions the workload uses")
    r.add_argument("--concurrency", type=int, default=4, help="client processes")
    r.add_argument("--tracks", type=int, default=2 if soak else 1, help="overlapping fault tracks")
    r.add_argument("--netns", default="auto", choices=["auto", "on", "off"])
    r.add_argument(
        "--consumers",
        default="assign",
        choices=list(CONSUMERS),
        help="queue workload: workers consume by assignment, as members of one "
        "consumer group (subscribe, commit after each poll), or mixed (odd "
        "workers in the group); group modes need --cluster longboat",
    )
    r.add_argument(
        "--idempotence",
        default="on",
        choices=["on", "off"],
        help="the Longboat producers' enable_idempotence",
    )
    r.add_argument(
        "--client",
        default="longboat",
        choices=["longboat", "kafka"],
        help="queue workload (consumers assign): Longboat's Python client over HTTP, or "
        "confluent-kafka (librdkafka) over the brokers' Kafka listeners",
    )
    r.add_argument(
        "--acks-require-fsync",
        action="store_true",
        help="brokers acknowledge a write only once every in-sync replica has "
        "fsynced it (acks_require_fsync): lose-unsynced on several brokers "
        "at once must then lose nothing",
    )
    r.add_argument(
        "--fault-duration",
        default=None,
        metavar="MIN,MAX",
        help="seconds each fault lasts (default 1,3 on the toy; 3,15 on Longboat, "
        "whose broker session timeout is 9 s)",
    )
    r.add_argument(
        "--fault-gap",
        default=None,
        metavar="MIN,MAX",
        help="seconds between faults (default 0.5,1.5 on the toy; 2,6 on Longboat)",
    )
    r.add_argument(
        "--target-specs",
        default="",
        metavar="SPEC,...",
        help="what kill/pause/freeze/lose-unsynced choose among: one, minority, "
        "majority, leader, controller, txn-coordinator, schemas-leader (default: all, one "
        "twice as likely; the schemas workload: mostly schemas-leader)",
    )
    r.add_argument(
        "--recovery-timeout",
        type=float,
        default=30.0,
        help="seconds to wait for a healthy cluster after healing",
    )
    r.add_argument(
        "--secure",
        action="store_true",
        help="Longboat with TLS on every listener, SCRAM users and ACLs (as `longboat dev up "
        "--secure`): the clients are a SCRAM user holding only the ACLs the workload needs",
    )
    r.add_argument("--toy-mode", default="correct", choices=["correct", "ack-before-sync"])
    r.add_argument("--toy-sync-interval-ms", type=float, default=1000)
    r.add_argument("--out", type=Path, default=None, help="run directory (default: runs/<ts>)")
    r.add_argument(
        "--resources",
        action="store_true",
        default=soak,
        help="sample the node processes' memory and open files and fail the run "
        "if they grow past the bound (on for soak)",
    )
    r.add_argument(
        "--rss-factor",
        type=float,
        default=2.0,
        help="resource bound: RSS at the end <= this x the baseline + slack",
    )
    r.add_argument("--rss-slack-mb", type=float, default=50.0)
    r.add_argument(
        "--fds-slack",
        type=int,
        default=100,
        help="resource bound: open files at the end <= baseline + this",
    )
    r.add_argument(
        "--resource-interval", type=float, default=30.0, help="seconds between resource samples"
    )
    r.add_argument(
        "--resource-warmup",
        type=float,
        default=None,
        help="seconds after the start of the load at which the baseline is taken "
        "(default: 60, or a quarter of a shorter time limit)",
    )


def _bound(args: argparse.Namespace) -> ResourceBound | None:
    if not args.resources:
        return None
    return ResourceBound(
        rss_factor=args.rss_factor,
        rss_slack_bytes=int(args.rss_slack_mb * MB),
        fds_slack=args.fds_slack,
    )


def _load(args: argparse.Namespace) -> int:
    from jepsen_tests.load import LoadConfig, format_summary, run_load

    out = args.out or Path("var") / "jepsen" / time.strftime("load-%Y%m%dT%H%M%S")
    print(f"load: run directory {out}", file=sys.stderr)
    r = run_load(
        LoadConfig(
            out_dir=out,
            partitions=args.partitions,
            nodes=args.nodes,
            producers=args.producers,
            warmup_s=args.warmup,
            observe_s=args.observe,
            kill=args.kill,
            start_timeout_s=args.start_timeout,
            isr_timeout_s=args.isr_timeout,
            rejoin_timeout_s=args.rejoin_timeout,
            seed=args.seed,
        )
    )
    print(format_summary(r))
    print(f"figures: {out / 'load.json'}")
    return 0 if r["leadership_moved_s"] is not None else 1


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    p = argparse.ArgumentParser(prog="python -m jepsen_tests", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a workload under faults, then check and report")
    _run_options(r)
    k = sub.add_parser(
        "soak",
        help="a long run of a mixed schedule that also fails on "
        "memory or open-file growth of the node processes",
    )
    _run_options(k, soak=True)
    k.add_argument(
        "--minutes",
        type=float,
        default=120.0,
        help="minutes of load and faults (sets --time-limit)",
    )
    ld = sub.add_parser(
        "load",
        help="many partitions under produce, one broker killed: "
        "time for leadership to move, controller CPU",
    )
    ld.add_argument("--partitions", type=int, default=10_000)
    ld.add_argument("--nodes", type=int, default=3)
    ld.add_argument("--producers", type=int, default=4)
    ld.add_argument("--warmup", type=float, default=20.0, help="seconds of baseline")
    ld.add_argument(
        "--observe",
        type=float,
        default=30.0,
        help="seconds of produce after leadership moved, before the restart",
    )
    ld.add_argument(
        "--kill",
        default="auto",
        help="the broker to kill (auto: the one leading the most partitions)",
    )
    ld.add_argument(
        "--start-timeout",
        type=float,
        default=900.0,
        help="seconds for the cluster to come up with every partition led",
    )
    ld.add_argument(
        "--isr-timeout",
        type=float,
        default=300.0,
        help="seconds to wait, once every partition is led, for full ISRs",
    )
    ld.add_argument(
        "--rejoin-timeout",
        type=float,
        default=300.0,
        help="seconds to wait, after restarting the broker, for full ISRs",
    )
    ld.add_argument("--seed", type=int, default=0)
    ld.add_argument("--out", type=Path, default=None)
    c = sub.add_parser("check", help="re-check a saved run directory")
    c.add_argument("dir", type=Path)
    w = sub.add_parser("sweep", help="many seeds of each nemesis in turn, then the table")
    w.add_argument(
        "--nemesis",
        default="kill,pause,partition,lose-unsynced,clock,membership,kill+partition",
        help="comma-separated; each one is swept separately (use + to combine "
        "several in one run: kill+partition)",
    )
    w.add_argument(
        "--minutes", type=float, default=30.0, help="minutes of load and faults per nemesis"
    )
    w.add_argument("--time-limit", type=float, default=120.0, help="seconds per run")
    w.add_argument("--seed", type=int, default=1, help="first seed")
    w.add_argument(
        "--budget-minutes",
        type=float,
        default=None,
        help="stop starting runs after this much wall-clock time",
    )
    w.add_argument(
        "--out",
        type=Path,
        default=None,
        help="sweep directory (default var/jepsen/sweep-<ts>; reusing one resumes)",
    )
    w.add_argument(
        "run_args",
        nargs=argparse.REMAINDER,
        help="after --: more arguments for every run (--idempotence off, ...)",
    )
    m = sub.add_parser("summary", help="the table of one or more sweep directories")
    m.add_argument("dir", type=Path, nargs="+")
    args = p.parse_args(argv)

    try:
        if args.cmd == "check":
            return _summary(recheck(args.dir), args.dir)
        if args.cmd in ("sweep", "summary"):
            return _sweep(args)
        if args.cmd == "load":
            return _load(args)
        if args.cmd == "soak":
            args.time_limit = args.minutes * 60
        seed = args.seed if args.seed is not None else int(time.time()) % 100_000
        out = args.out or Path("var") / "jepsen" / time.strftime(f"%Y%m%dT%H%M%S-seed{seed}")
        print(f"seed {seed}; run directory {out}", file=sys.stderr)
        toy = args.cluster == "toy"
        cfg = RunConfig(
            out_dir=out,
            workload=args.workload,
            nemeses=[n for n in args.nemesis.split(",") if n],
            time_limit_s=args.time_limit,
            seed=seed,
            concurrency=args.concurrency,
            netns=args.netns,
            tracks=args.tracks,
            recovery_timeout_s=args.recovery_timeout,
            process_specs=[t for t in args.target_specs.split(",") if t],
            consumers=args.consumers,
            fault_duration_s=_span(args.fault_duration, (1.0, 3.0) if toy else (3.0, 15.0)),
            fault_gap_s=_span(args.fault_gap, (0.5, 1.5) if toy else (2.0, 6.0)),
            resources=_bound(args),
            resource_interval_s=args.resource_interval,
            resource_warmup_s=(
                args.resource_warmup
                if args.resource_warmup is not None
                else min(60.0, args.time_limit / 4)
            ),
        )
        return _summary(run(make_cluster(args), cfg), out)
    except (FaultInjectionUnavailable, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: faults healed, processes and namespace removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
