"""The node-to-node transport and the quorum-state file, on real sockets and real files."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from api.node.localcluster import free_ports
from raft.aio.quorum_state import (
    CorruptQuorumStateError,
    HardState,
    QuorumStateFile,
)
from raft.aio.transport import RaftTransport


def free_port() -> int:
    return free_ports(1)[0]


async def start_app(app: web.Application, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def test_messages_arrive_in_order_batched_into_few_posts() -> None:
    async def main() -> None:
        pa, pb = free_port(), free_port()
        got: list[tuple[int, dict]] = []
        posts = 0

        def on_b(sender: int, msgs: list[dict]) -> None:
            nonlocal posts
            posts += 1
            got.extend((sender, m) for m in msgs)

        a = RaftTransport(1, {2: f"http://127.0.0.1:{pb}"}, lambda s, m: None)
        b = RaftTransport(2, {1: f"http://127.0.0.1:{pa}"}, on_b)
        app_a, app_b = web.Application(), web.Application()
        a.add_routes(app_a)
        b.add_routes(app_b)
        ra, rb = await start_app(app_a, pa), await start_app(app_b, pb)
        try:
            for i in range(2000):
                a.send(2, {"type": "app", "i": i, "data": b"x" * 10})
            for _ in range(200):
                if len(got) == 2000:
                    break
                await asyncio.sleep(0.01)
            assert [m["i"] for _, m in got] == list(range(2000))
            assert {s for s, _ in got} == {1}
            assert got[0][1]["data"] == b"x" * 10
            assert posts < 100, posts
        finally:
            await a.close()
            await b.close()
            await ra.cleanup()
            await rb.cleanup()

    asyncio.run(main())


def test_send_to_a_dead_peer_drops_and_recovers_when_it_comes_up() -> None:
    async def main() -> None:
        pb = free_port()
        got: list[dict] = []
        a = RaftTransport(
            1,
            {2: f"http://127.0.0.1:{pb}"},
            lambda s, m: None,
            queue_messages_max=8,
            backoff_ms_max=100,
        )
        for i in range(100):
            a.send(2, {"i": i})  # nobody listens: must not block or raise
        await asyncio.sleep(0.2)
        assert a.stats()[2]["dropped"] >= 92
        b = RaftTransport(2, {}, lambda s, m: got.extend(m))
        app_b = web.Application()
        b.add_routes(app_b)
        rb = await start_app(app_b, pb)
        try:
            for _ in range(100):
                a.send(2, {"i": "late"})
                if got:
                    break
                await asyncio.sleep(0.05)
            assert got and got[-1] == {"i": "late"}
        finally:
            await a.close()
            await b.close()
            await rb.cleanup()

    asyncio.run(main())


def test_quorum_state_round_trips_and_rejects_corruption(tmp_path) -> None:
    qs = QuorumStateFile(tmp_path)
    assert qs.load() == HardState(0, 0, 0)
    qs.save(HardState(term=7, vote=3, commit=42))
    assert QuorumStateFile(tmp_path).load() == HardState(7, 3, 42)
    assert not (tmp_path / "quorum-state.tmp").exists()
    raw = bytearray((tmp_path / "quorum-state").read_bytes())
    raw[-1] ^= 0xFF
    (tmp_path / "quorum-state").write_bytes(bytes(raw))
    with pytest.raises(CorruptQuorumStateError):
        QuorumStateFile(tmp_path).load()
    (tmp_path / "quorum-state").write_bytes(b"LB")
    with pytest.raises(CorruptQuorumStateError):
        QuorumStateFile(tmp_path).load()


def test_bodies_over_the_apps_client_max_size_still_arrive() -> None:
    """A follower catching up gets MiBs of entries; the app's 1 MiB default must not stop it."""

    async def main() -> None:
        pb = free_port()
        got: list[dict] = []
        a = RaftTransport(1, {2: f"http://127.0.0.1:{pb}"}, lambda s, m: None)
        b = RaftTransport(2, {}, lambda s, m: got.extend(m))
        app_b = web.Application()  # client_max_size stays at aiohttp's 1 MiB
        b.add_routes(app_b)
        rb = await start_app(app_b, pb)
        try:
            big = b"y" * (3 << 20)
            a.send(2, {"type": "AppendEntries", "data": big})
            for _ in range(200):
                if got:
                    break
                await asyncio.sleep(0.01)
            assert got and got[0]["data"] == big
        finally:
            await a.close()
            await b.close()
            await rb.cleanup()

    asyncio.run(main())
