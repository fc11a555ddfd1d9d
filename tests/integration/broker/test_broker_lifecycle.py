"""Three real controllers and three real brokers: registration, metadata following, fencing,
controller failover, controlled shutdown and restart (KIP-631 broker lifecycle).

One cluster for the module; the tests run in file order and each leaves every broker
running and ready. Default timeouts (heartbeat 2 s, session 9 s): the controller process
has no setting for shorter ones, so the pause and failover tests take ~10 s each.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.node.localcluster import Brokers, Quorum, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic, UnregisterBroker

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_S = 9.0


class Cluster:
    def __init__(self, quorum: Quorum, brokers: Brokers) -> None:
        self.quorum = quorum
        self.brokers = brokers

    def controller_metadata(self) -> dict[str, Any]:
        return self.quorum.metadata(self.quorum.wait_active_leader())

    def controller_brokers(self) -> dict[int, dict[str, Any]]:
        return {b["broker_id"]: b for b in self.controller_metadata()["brokers"]}

    def create_topic(self, name: str, partitions: int, rf: int) -> None:
        async def go() -> None:
            async with ControllerClient(self.quorum.urls, timeout_s=20) as c:
                await c.execute(
                    CreateTopic(name=name, num_partitions=partitions, replication_factor=rf)
                )

        asyncio.run(go())

    def wait_for(self, what: str, cond: Any, timeout_s: float) -> Any:
        return wait_for(what, cond, timeout_s)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("broker-cluster")
    q = Quorum(root, 3)
    brokers = Brokers(root, q, 3)
    q.start_all()
    brokers.start_all()
    try:
        yield Cluster(q, brokers)
    finally:
        brokers.stop_all()
        q.stop_all()


def test_brokers_register_with_distinct_epochs_and_become_ready(cluster: Cluster) -> None:
    b = cluster.brokers
    b.wait_ready(timeout_s=30)
    states = {i: b.ready(i)[1] for i in b.ids}
    assert {s["state"] for s in states.values()} == {"RUNNING"}
    epochs = {i: s["broker_epoch"] for i, s in states.items()}
    assert len(set(epochs.values())) == 3, epochs
    registered = cluster.controller_brokers()
    for i in b.ids:
        assert registered[i]["epoch"] == epochs[i]  # epoch = offset of its RegisterBrokerRecord
        assert registered[i]["fenced"] is False
        assert registered[i]["endpoints"] == [["http", "127.0.0.1", b.ports[i]]]


def _assignment(meta: dict[str, Any], topic: str) -> list[tuple[int, list[int]]] | None:
    for t in meta["topics"]:
        if t["name"] == topic:
            return [(p["partition"], p["replicas"]) for p in t["partitions"]]
    return None


def test_a_new_topic_reaches_every_broker_with_the_same_assignment(cluster: Cluster) -> None:
    cluster.create_topic("orders", 6, 3)
    expected = _assignment(cluster.controller_metadata(), "orders")
    assert expected is not None and len(expected) == 6
    for i in cluster.brokers.ids:
        got = cluster.wait_for(
            f"topic on broker {i}",
            lambda i=i: _assignment(cluster.brokers.metadata(i), "orders"),
            10,
        )
        assert got == expected


def _quorum_status(cluster: Cluster) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "api",
            "quorum",
            "status",
            "--json",
            "--bootstrap",
            ",".join(cluster.quorum.urls),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_quorum_status_lists_the_brokers_as_observers(cluster: Cluster) -> None:
    st = _quorum_status(cluster)
    observers = {o["broker_id"]: o for o in st["broker_observers"]}
    assert sorted(observers) == cluster.brokers.ids
    for o in observers.values():
        # Brokers long-poll and refetch at once: at most the last few records behind.
        assert o["lag"] <= 5, st
        assert o["last_contact_ms"] < 3_000, st
    assert st["voters"] == [1, 2, 3]  # brokers never join the Raft configuration


def test_a_paused_broker_is_fenced_and_unfenced_when_it_resumes(cluster: Cluster) -> None:
    b, paused = cluster.brokers, cluster.brokers.ids[2]
    b.send_signal(paused, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        cluster.wait_for(
            "fenced by the controller",
            lambda: cluster.controller_brokers()[paused]["fenced"],
            SESSION_TIMEOUT_S + 6,
        )
        fenced_after_s = time.monotonic() - t0
        # The session is 9 s from its last heartbeat, ~2 s (more on a loaded machine) before the stop.
        assert fenced_after_s > SESSION_TIMEOUT_S - 4, fenced_after_s
        # The other brokers see it fenced in their own images.
        other = b.ids[0]
        cluster.wait_for(
            "fence visible on another broker",
            lambda: {x["broker_id"]: x["fenced"] for x in b.metadata(other)["brokers"]}[paused],
            5,
        )
        for t in cluster.controller_metadata()["topics"]:
            for p in t["partitions"]:
                assert p["leader"] != paused, p
    finally:
        b.send_signal(paused, signal.SIGCONT)
    b.wait_ready([paused], timeout_s=10)
    assert cluster.controller_brokers()[paused]["fenced"] is False


def test_brokers_keep_following_and_stay_unfenced_when_the_active_controller_dies(
    cluster: Cluster,
) -> None:
    q, b = cluster.quorum, cluster.brokers
    old = q.wait_active_leader()
    epochs = {i: b.ready(i)[1]["broker_epoch"] for i in b.ids}
    q.kill(old)
    t0 = time.monotonic()
    new = q.wait_active_leader(exclude=old)
    cluster.create_topic("after-failover", 3, 3)
    for i in b.ids:
        cluster.wait_for(
            f"new topic on broker {i}", lambda i=i: _assignment(b.metadata(i), "after-failover"), 10
        )
    # Past a whole session timeout after the kill: heartbeats found the new controller.
    while time.monotonic() < t0 + SESSION_TIMEOUT_S + 2:
        regs = {x["broker_id"]: x for x in q.metadata(new)["brokers"]}
        assert not any(regs[i]["fenced"] for i in b.ids), regs
        time.sleep(0.5)
    for i in b.ids:
        code, state = b.ready(i)
        assert code == 200, state
        assert state["broker_epoch"] == epochs[i]  # no re-registration was needed
    q.start(old)


def test_sigterm_shuts_a_broker_down_in_a_controlled_way_and_a_restart_gets_a_new_epoch(
    cluster: Cluster,
) -> None:
    b = cluster.brokers
    meta = cluster.controller_metadata()
    leads = {
        i: sum(p["leader"] == i for t in meta["topics"] for p in t["partitions"]) for i in b.ids
    }
    victim = max(leads, key=lambda i: leads[i])
    assert leads[victim] > 0, leads
    old_state = b.ready(victim)[1]
    assert b.kill(victim, signal.SIGTERM) == 0, b.log_tail(victim)
    assert "controlled shutdown confirmed" in b.log_tail(victim, 10)
    # KIP-966: every log closed cleanly, so the next process may say so when it registers.
    assert (
        f"clean-shutdown marker written (broker epoch {old_state['broker_epoch']})"
        in b.log_tail(victim, 10)
    )
    meta = cluster.controller_metadata()
    for t in meta["topics"]:
        for p in t["partitions"]:
            assert p["leader"] != victim, p
            assert p["leader"] != -1, p  # leadership moved, nothing went offline
    reg = {x["broker_id"]: x for x in meta["brokers"]}[victim]
    assert reg["fenced"] is True
    assert reg["in_controlled_shutdown"] is True

    b.start(victim)
    b.wait_ready([victim], timeout_s=20)
    new_state = b.ready(victim)[1]
    assert new_state["broker_epoch"] > old_state["broker_epoch"]
    assert new_state["incarnation_id"] != old_state["incarnation_id"]
    assert cluster.controller_brokers()[victim]["fenced"] is False
    assert f"clean-shutdown marker of broker epoch {old_state['broker_epoch']}" in b.log_tail(
        victim, 200
    )


def test_a_broker_whose_registration_is_removed_registers_again(cluster: Cluster) -> None:
    b, victim = cluster.brokers, cluster.brokers.ids[1]
    before = b.ready(victim)[1]

    async def unregister() -> None:
        async with ControllerClient(cluster.quorum.urls, timeout_s=20) as c:
            await c.execute(UnregisterBroker(broker_id=victim))

    asyncio.run(unregister())
    # Its next heartbeat is refused (BROKER_ID_NOT_REGISTERED): same process, new epoch.
    after = cluster.wait_for(
        "re-registered",
        lambda: (s := b.ready(victim))[0] == 200 and s[1]["registrations"] == 2 and s[1],
        15,
    )
    assert after["incarnation_id"] == before["incarnation_id"]
    assert after["broker_epoch"] > before["broker_epoch"]
    assert cluster.controller_brokers()[victim]["epoch"] == after["broker_epoch"]


def test_a_killed_broker_restarted_at_once_registers_without_waiting_out_its_old_session(
    cluster: Cluster,
) -> None:
    b, victim = cluster.brokers, cluster.brokers.ids[0]
    before = b.ready(victim)[1]
    b.kill(victim, signal.SIGKILL)
    b.start(victim)
    # The old incarnation still holds a session, but the new process took the data
    # directory's lock and names it (previous_incarnation_id): the controller replaces it at
    # once instead of answering DUPLICATE_BROKER_REGISTRATION until the session expires.
    b.wait_ready([victim], timeout_s=SESSION_TIMEOUT_S + 10)
    after = b.ready(victim)[1]
    assert after["incarnation_id"] != before["incarnation_id"]
    assert after["broker_epoch"] > before["broker_epoch"]
    assert "another incarnation of broker" not in b.log_tail(victim, 200)
    assert "no clean-shutdown marker: the last stop was unclean" in b.log_tail(victim, 200)
