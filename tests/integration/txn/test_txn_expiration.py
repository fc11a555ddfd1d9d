"""Transactional id expiration with real processes (1 controller, 1 broker, Kafka's
``transactional.id.expiration.ms`` shortened to 1 s): an idle id is removed and its
tombstone survives a restart; an id with an open transaction is kept however long it idles;
a removed id starts afresh with a new producer id."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from api.client import AsyncProducer
from api.node.localcluster import Brokers, running_cluster, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic

pytestmark = pytest.mark.slow

EXPIRATION_MS = 1_000
B = 101


def txn(brokers: Brokers, op: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{brokers.url(B)}/internal/broker/v1/txn/{op}", data=msgpack.packb(body), method="POST"
    )
    with urllib.request.urlopen(req, timeout=15) as r:
        out: dict[str, Any] = msgpack.unpackb(r.read())
        return out


def state_of(brokers: Brokers, tid: str) -> str | None:
    """The id's state on its coordinator (the only broker), once it answers."""
    out: list[str | None] = []

    def ask() -> bool:
        try:
            ans = txn(brokers, "describe", {"transactional_id": tid})
        except OSError:
            return False
        if ans["error"] != "NONE":
            return False
        out.append(ans["state"])
        return True

    wait_for(f"{tid} described", ask, 30)
    return out[-1]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    with running_cluster(
        tmp_path_factory.mktemp("txn-expire"),
        controllers=1,
        brokers=1,
        broker_args=[
            "--override",
            "transaction_state_log_num_partitions=2",
            "--override",
            f"transactional_id_expiration_ms={EXPIRATION_MS}",
            "--override",
            "transaction_remove_expired_transaction_cleanup_interval_ms=100",
        ],
    ) as (_, b):
        yield b


def test_an_idle_id_is_removed_an_open_one_kept_and_the_removal_survives_a_restart(
    brokers: Brokers,
) -> None:
    boot = brokers.url(B)

    async def setup() -> tuple[int, AsyncProducer]:
        async with AsyncProducer(boot, transactional_id="idle") as p:
            await p.init_transactions()
            async with p.transaction():
                await p.send("exp-t", b"committed")
            pid = p.producer_id
        busy = AsyncProducer(boot, transactional_id="busy", transaction_timeout_ms=120_000)
        await busy.init_transactions()
        busy.begin_transaction()
        await busy.send("exp-t", b"open")
        await busy.flush()
        return pid, busy

    async def create() -> None:
        async with ControllerClient(brokers.quorum.urls, timeout_s=20) as cc:
            await cc.execute(CreateTopic(name="exp-t", num_partitions=1, replication_factor=1))
        async with AsyncProducer(boot) as p:
            await p.send_and_wait("exp-t", b"plain")

    asyncio.run(create())
    loop = asyncio.new_event_loop()
    try:
        before = time.monotonic()  # the id's last transition is later than this
        idle_pid, busy = loop.run_until_complete(setup())
        assert state_of(brokers, "idle") in ("PrepareCommit", "CompleteCommit")
        wait_for("the idle id removed", lambda: state_of(brokers, "idle") is None, 30)
        assert time.monotonic() - before >= EXPIRATION_MS / 1000  # not before it expired
        # Several expirations later the id with an open transaction is still there, and
        # its transaction commits.
        time.sleep(2 * EXPIRATION_MS / 1000)
        assert state_of(brokers, "busy") == "Ongoing"
        loop.run_until_complete(busy.commit_transaction())
        loop.run_until_complete(busy.close())
    finally:
        loop.close()

    # The tombstone is in __transaction_state: a coordinator that reloads it (the broker
    # restarted) does not bring the id back. (The busy id, committed just now, may expire
    # meanwhile, so it is not asserted on.)
    brokers.restart(B)
    brokers.wait_ready(timeout_s=60)
    assert state_of(brokers, "idle") is None

    async def again() -> int:
        async with AsyncProducer(boot, transactional_id="idle") as p:
            await p.init_transactions()
            assert p.producer_epoch == 0
            return p.producer_id

    assert asyncio.run(again()) != idle_pid
