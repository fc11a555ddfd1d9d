"""``longboat topics describe`` of every topic and its kafka-topics filters, against real
processes: a broker is SIGKILLed, and each filter shows the partitions that fits it."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from api.cli.main import main
from api.node.localcluster import running_cluster, wait_for

pytestmark = pytest.mark.slow


def test_describe_all_topics_and_the_under_replicated_min_isr_unavailable_filters(
    tmp_path: Path,
) -> None:
    with running_cluster(
        tmp_path,
        controllers=1,
        brokers=3,
        controller_args=["--override", "broker_session_timeout_ms=2000"],
        broker_args=["--override", "replica_lag_time_max_ms=2000"],
    ) as (_q, bs):
        boot = ",".join(bs.url(b) for b in bs.ids)

        def cli(*args: str) -> Any:
            r = CliRunner().invoke(main, ["topics", *args, "-b", boot])
            assert r.exit_code == 0, (args, r.output)
            return r.output

        def described(*flags: str) -> dict[str, list[int]]:
            out = json.loads(cli("describe", *flags, "--json"))
            return {
                d["topic"]["topic_name"]: [p["partition_id"] for p in d["partitions"]] for d in out
            }

        cli("create", "wide", "-p", "2", "-r", "3")
        cli("create", "strict", "-p", "1", "-r", "3", "-c", "min.insync.replicas=3")
        cli("create", "single", "-p", "3", "-r", "1")
        assert described() == {"wide": [0, 1], "strict": [0], "single": [0, 1, 2]}
        assert described("--under-replicated-partitions") == {}
        out = cli("describe")  # every topic, one block each
        assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("Topic:")] == [
            "single",
            "strict",
            "wide",
        ]

        single = json.loads(cli("describe", "single", "--json"))
        victim = single["partitions"][0]["leader_id"]
        on_victim = [p["partition_id"] for p in single["partitions"] if p["leader_id"] == victim]
        bs.kill(victim, signal.SIGKILL)

        # The dead broker's single-replica partitions count too: the controller empties their
        # ISR when it fences the broker (KIP-966 keeps it as an eligible leader replica). The
        # fence (session timeout) and the followers' ISR shrink (replica lag) come in either
        # order: wait for both.
        lost = {"single": on_victim}

        def shrunk() -> dict[str, list[int]]:
            got = described("--under-replicated-partitions")
            return got if {"wide", "strict", "single"} <= set(got) else {}

        got = wait_for("the ISRs shrink", shrunk, 60)
        assert got == {"wide": [0, 1], "strict": [0], **lost}
        assert described("--under-min-isr-partitions") == {"strict": [0], **lost}
        assert wait_for(
            "the dead broker's partitions unavailable",
            lambda: described("--unavailable-partitions") == {"single": on_victim},
            60,
        )
        # Filters combine (every one must match); a named topic with none matching is null.
        assert described("--under-min-isr-partitions", "--unavailable-partitions") == lost
        assert json.loads(cli("describe", "wide", "--unavailable-partitions", "--json")) is None
        text = cli("describe", "--under-min-isr-partitions")
        assert "Topic: strict" in text and "Topic: wide" not in text and "yes" in text
