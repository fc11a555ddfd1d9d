"""Partition reassignment under load: move the workload topic's replicas while clients work.

Fault kind ``reassign``: `start` moves every partition of the workload's topic to a new
replica set drawn from the fault's seed (any brokers, a new order so preferred leaders move
too; with no spare broker, one replica fewer, and the next move back to full strength, so a
replica always has to catch up from nothing somewhere), throttled or not (``params.throttle``, bytes/s); `stop` cancels
the moves still running if ``params.cancel``, else lets them finish. Both go through the
operator's command line, ``longboat partitions reassign --execute|--cancel`` with a
kafka-reassign-partitions JSON file in the run directory, run inside the run's namespace
(``wrap``); the harness imports no server code. Combined with ``kill``, a broker dies
mid-move, which is what KIP-455's rule (remove old replicas only once every target is in the
ISR) must survive without losing an acknowledged record: the queue checker decides.

A command the cluster refuses (no controller, a broker gone) is recorded as a nemesis
``error`` op with its output; the window stays recorded.
"""

from __future__ import annotations

import json
import os
import random
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jepsen_tests.history import NEMESIS, Recorder
from jepsen_tests.nemesis import Fault, Nemesis

Wrap = Callable[[list[str]], list[str]]
PartitionTable = Callable[[], dict[int, dict[str, Any]]]


class ReassignNemesis(Nemesis):
    kinds = ("reassign",)

    def __init__(
        self,
        topic: str,
        broker_ids: list[int],
        broker_urls: list[str],
        partition_table: PartitionTable,
        wrap: Wrap,
        run_dir: Path,
        recorder: Recorder | None = None,
        timeout_s: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`env`: added to the commands' environment, and the TLS files its
        ``LONGBOAT_SSL_*`` name used for the nemesis's own requests (a secure cluster)."""
        super().__init__(recorder)
        self.env = {**os.environ, **(env or {})}
        self.ssl: ssl.SSLContext | None = None
        if env and env.get("LONGBOAT_SSL_CAFILE"):
            self.ssl = ssl.create_default_context(cafile=env["LONGBOAT_SSL_CAFILE"])
            if env.get("LONGBOAT_SSL_CERTFILE"):
                self.ssl.load_cert_chain(env["LONGBOAT_SSL_CERTFILE"], env["LONGBOAT_SSL_KEYFILE"])
        self.topic = topic
        self.broker_ids = sorted(broker_ids)
        self.bootstrap = ",".join(broker_urls)
        self.partition_table = partition_table
        self.wrap = wrap
        self.dir = run_dir / "reassign"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self.plans: dict[str, Path] = {}
        self.full_rf: dict[int, int] = {}
        """Each partition's replication factor when first seen: a plan may go one below it
        (with as many brokers as replicas, the only way to make a replica catch up from
        nothing) and the next one back."""

    def _cli(self, fault: Fault, *args: str) -> bool:
        argv = self.wrap(
            [
                sys.executable,
                "-m",
                "api",
                "partitions",
                "reassign",
                *args,
                "--bootstrap",
                self.bootstrap,
            ]
        )
        try:
            r = subprocess.run(
                argv, capture_output=True, text=True, timeout=self.timeout_s, env=self.env
            )
            ok, out = r.returncode == 0, (r.stdout + r.stderr).strip()
        except subprocess.TimeoutExpired:
            ok, out = False, f"timed out after {self.timeout_s} s"
        if not ok:
            print(f"reassign {args[0]}: {out}", file=sys.stderr)
            if self.recorder is not None:
                self.recorder.info(
                    NEMESIS, "error", {**fault.describe(), "op": args[0], "output": out[-500:]}
                )
        return ok

    def plan(self, fault: Fault) -> dict[str, Any] | None:
        """The moves of ``fault``: each partition to a random replica set of its size."""
        try:
            table = self.partition_table()
        except OSError:
            table = {}
        if not table:
            return None
        rng = random.Random(f"reassign/{fault.params.get('seed', fault.id)}")
        parts = []
        for p, info in sorted(table.items()):
            now = len(info["replicas"])
            full = self.full_rf.setdefault(p, now)
            if now < full:
                rf = full  # back to full strength: a replica is added and must catch up
            elif len(self.broker_ids) == full and full > 1 and rng.random() < 0.5:
                # Every broker holds a replica already: to move any data, drop one now
                # (the next move adds one back, from scratch).
                rf = full - 1
            else:
                rf = full
            parts.append(
                {"topic": self.topic, "partition": p, "replicas": rng.sample(self.broker_ids, rf)}
            )
        return {"version": 1, "partitions": parts}

    def _start(self, fault: Fault) -> None:
        plan = self.plan(fault)
        if plan is None:
            if self.recorder is not None:
                self.recorder.info(
                    NEMESIS, "error", {**fault.describe(), "op": "plan", "output": "no metadata"}
                )
            return
        path = self.dir / f"plan-{fault.id}.json"
        path.write_text(json.dumps(plan))
        self.plans[fault.id] = path
        args = ["--execute", "--reassignment-json-file", str(path)]
        throttle = fault.params.get("throttle")
        if throttle:
            args += ["--throttle", str(int(throttle))]
        self._cli(fault, *args)

    def _stop(self, fault: Fault) -> None:
        path = self.plans.pop(fault.id, None)
        if path is not None and fault.params.get("cancel"):
            self._cli(fault, "--cancel", "--reassignment-json-file", str(path))

    def _heal(self) -> None:
        """No throttle left, and every partition back to its full replication factor (a
        move that the run's recovery phase lets finish; the final reads need no more)."""
        self._remove_throttle()
        plan = self.plan(Fault("reassign", (), {"seed": "heal"}))
        if plan is None:
            return
        rng = random.Random("reassign/heal")
        for e in plan["partitions"]:
            full = self.full_rf.get(e["partition"], len(e["replicas"]))
            e["replicas"] = rng.sample(self.broker_ids, min(full, len(self.broker_ids)))
        path = self.dir / "heal.json"
        path.write_text(json.dumps(plan))
        self._cli(
            Fault("reassign", (), {"heal": True}),
            "--execute",
            "--reassignment-json-file",
            str(path),
        )

    def _remove_throttle(self) -> None:
        for url in self.bootstrap.split(","):
            try:
                with urllib.request.urlopen(f"{url}/v3/clusters", timeout=5, context=self.ssl) as r:
                    cid = json.loads(r.read())["data"][0]["cluster_id"]
                req = urllib.request.Request(
                    f"{url}/v3/clusters/{cid}/reassignment-throttle", method="DELETE"
                )
                with urllib.request.urlopen(req, timeout=20, context=self.ssl):
                    return
            except (OSError, ValueError, KeyError, IndexError):
                continue
