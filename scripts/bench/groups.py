#!/usr/bin/env python3
"""Consumer-group rebalances: how long a group of 10 member processes takes to become stable
after a member joins and after one is killed, eager against cooperative, and how long members
that keep their partitions are kept from them.

A real cluster (3 controllers, 3 brokers, started and stopped here) holds a topic of 20
partitions. For each protocol (``sticky``: eager; ``cooperative-sticky``: cooperative, both
with the sticky assignor so the plans are alike) 10 member processes subscribe; once stable:

1. an 11th member joins: ``join`` = from its subscribe to the moment the 11 members' owned
   partitions are disjoint, cover the topic and every member holds some;
2. a member is SIGKILLed: ``kill`` = from the kill to the moment the 10 left cover the topic.

``pause``: for every member that owns a partition before and after a rebalance, the time it
did not own it (revoked until assigned again; 0 when never revoked), the maximum over those
partitions and members: how long consumption of partitions that did not move stops.

Figures (JSON lines on stdout, progress on stderr):

* ``groups.pause_join.cooperative_vs_eager`` / ``groups.pause_kill...``: pause, ms (lower is
  better); the ratio is eager / cooperative (inf-safe: reported without ratio when 0).
* ``groups.stable_after_join.cooperative_vs_eager`` and ``...after_kill...``: ms.
* ``groups.stable_after_kill.vs_session_timeout``: time to stable after a kill against the
  session timeout plus one second (the goal: at most that).

Goal (issue 5): cooperative pause for unaffected members 0; time to stable after a kill at
most the session timeout plus one second. Full: 3 runs of each scenario (about 6 minutes);
``--quick``: one; ``--smoke``: one with 3 members, 6 partitions and a 1.5 s session timeout;
``--runs N`` sets the runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _report import add_size_flags, figure, progress, size

from api.node.localcluster import running_cluster, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Shape:
    """The group measured: its size, its timeouts, and the pause between steps."""

    members: int
    partitions: int
    session_ms: int
    heartbeat_ms: int
    settle_s: float


SHAPES = {
    "full": Shape(members=10, partitions=20, session_ms=6000, heartbeat_ms=500, settle_s=2.0),
    "quick": Shape(members=10, partitions=20, session_ms=6000, heartbeat_ms=500, settle_s=2.0),
    "smoke": Shape(members=3, partitions=6, session_ms=1500, heartbeat_ms=300, settle_s=0.5),
}


class Member:
    def __init__(
        self,
        root: Path,
        bootstrap: str,
        group: str,
        topic: str,
        strategy: str,
        name: str,
        shape: Shape,
    ) -> None:
        self.out = root / f"{group}-{name}.events"
        self.out.touch()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "_group_member.py"),
                bootstrap,
                group,
                topic,
                strategy,
                str(self.out),
                str(shape.session_ms),
                str(shape.heartbeat_ms),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(f"{self.out}.stderr", "wb"),  # noqa: SIM115
        )

    def events(self) -> list[tuple[str, int, set[int]]]:
        evs = []
        for line in self.out.read_text().splitlines():
            kind, ts, *rest = line.split(" ")
            parts = {int(p) for p in rest[0].split(",") if p} if rest else set()
            evs.append((kind, int(ts), parts))
        return evs

    def owned(self, until_ns: int | None = None) -> set[int]:
        own: set[int] = set()
        for kind, ts, parts in self.events():
            if until_ns is not None and ts > until_ns:
                break
            if kind == "A":
                own |= parts
            elif kind == "V":
                own -= parts
        return own

    def joined_ns(self) -> int | None:
        return next((ts for k, ts, _ in self.events() if k == "J"), None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def stable(members: list[Member], partitions: int) -> bool:
    owned = [m.owned() for m in members]
    return (
        set().union(*owned) == set(range(partitions))
        and sum(map(len, owned)) == partitions
        and all(owned)
    )


def wait_stable(members: list[Member], partitions: int, timeout_s: float = 120) -> int:
    """When the group became stable: the latest assignment event once it is (the events'
    own clock, not when this loop noticed)."""
    wait_for("a stable group", lambda: stable(members, partitions), timeout_s, interval_s=0.05)
    return max(ts for m in members for k, ts, _ in m.events() if k in "AV")


def pause_ms(members: list[Member], since_ns: int) -> float:
    """The longest time a member was without a partition it owned before ``since_ns`` and
    owns now (0 if such partitions were never revoked)."""
    worst = 0
    for m in members:
        before, after = m.owned(since_ns), m.owned()
        for p in before & after:
            gone_at: int | None = None
            for kind, ts, parts in m.events():
                if ts <= since_ns or p not in parts:
                    continue
                if kind == "V" and gone_at is None:
                    gone_at = ts
                elif kind == "A" and gone_at is not None:
                    worst = max(worst, ts - gone_at)
                    gone_at = None
    return worst / 1e6


def scenario(
    root: Path, bootstrap: str, quorum_urls: list[str], strategy: str, run: int, shape: Shape
) -> dict[str, float]:
    import asyncio

    topic = f"bench-groups-{strategy}-{run}"

    async def create() -> None:
        async with ControllerClient(quorum_urls, timeout_s=20) as cc:
            await cc.execute(
                CreateTopic(name=topic, num_partitions=shape.partitions, replication_factor=1)
            )

    asyncio.run(create())
    group = f"g-{strategy}-{run}"
    members = [
        Member(root, bootstrap, group, topic, strategy, f"m{i}", shape)
        for i in range(shape.members)
    ]
    try:
        wait_stable(members, shape.partitions)
        time.sleep(shape.settle_s)
        progress(f"  {strategy} run {run}: {shape.members} members stable; one joins")
        newcomer = Member(root, bootstrap, group, topic, strategy, "new", shape)
        members.append(newcomer)
        wait_for("the newcomer to subscribe", lambda: newcomer.joined_ns() is not None, 60)
        t_join = newcomer.joined_ns()
        assert t_join is not None
        t_stable = wait_stable(members, shape.partitions)
        join_ms = (t_stable - t_join) / 1e6
        join_pause = pause_ms(members, t_join)
        time.sleep(shape.settle_s)
        progress(
            f"  {strategy} run {run}: join stable in {join_ms:.0f} ms, "
            f"pause {join_pause:.0f} ms; killing one"
        )
        victim = members.pop(0)
        t_kill = time.monotonic_ns()
        victim.proc.kill()
        victim.proc.wait()
        t_stable = wait_stable(members, shape.partitions)
        kill_ms = (t_stable - t_kill) / 1e6
        kill_pause = pause_ms(members, t_kill)
        progress(
            f"  {strategy} run {run}: kill stable in {kill_ms:.0f} ms, pause {kill_pause:.0f} ms"
        )
        return {
            "join_ms": join_ms,
            "join_pause_ms": join_pause,
            "kill_ms": kill_ms,
            "kill_pause_ms": kill_pause,
        }
    finally:
        for m in members:
            m.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_flags(ap)
    ap.add_argument("--runs", type=int, default=None, help="runs of each scenario")
    ap.add_argument("--keep", help="a directory to keep the members' event files and logs in")
    args = ap.parse_args()
    shape = SHAPES[size(args)]
    runs = args.runs or (3 if size(args) == "full" else 1)
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        with running_cluster(
            root,
            broker_args=[
                "--override",
                "group_initial_rebalance_delay_ms=0",
                "--override",
                "group_min_session_timeout_ms=1000",
            ],
        ) as (q, b):
            bootstrap = ",".join(b.url(i) for i in b.ids)
            res: dict[str, list[dict[str, float]]] = {"sticky": [], "cooperative-sticky": []}
            for run in range(runs):
                for strategy in res:
                    res[strategy].append(scenario(root, bootstrap, q.urls, strategy, run, shape))
    eager, coop = res["sticky"], res["cooperative-sticky"]
    params = {
        "members": shape.members,
        "partitions": shape.partitions,
        "session_timeout_ms": shape.session_ms,
        "heartbeat_interval_ms": shape.heartbeat_ms,
        "cpus": os.cpu_count(),
    }
    for what in ("join", "kill"):
        figure(
            f"groups.pause_{what}.cooperative_vs_eager",
            "ms",
            [r[f"{what}_pause_ms"] for r in coop],
            baseline="eager (sticky)",
            baseline_values=[r[f"{what}_pause_ms"] for r in eager],
            higher_is_better=False,
            params=params,
        )
        figure(
            f"groups.stable_after_{what}.cooperative_vs_eager",
            "ms",
            [r[f"{what}_ms"] for r in coop],
            baseline="eager (sticky)",
            baseline_values=[r[f"{what}_ms"] for r in eager],
            higher_is_better=False,
            params=params,
        )
    for name, rows in (("cooperative", coop), ("eager", eager)):
        figure(
            f"groups.stable_after_kill.{name}.vs_session_timeout",
            "ms",
            [r["kill_ms"] for r in rows],
            baseline="session timeout + 1 s",
            baseline_values=[shape.session_ms + 1000.0] * len(rows),
            higher_is_better=False,
            params=params,
        )


if __name__ == "__main__":
    main()
