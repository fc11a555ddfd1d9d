"""ACLs and SCRAM credentials through an in-process controller that snapshots every 20
records: a controller restarted on the same directory loads the snapshot and replays the
records after it to the same ACLs and credentials, and a broker's metadata follower that
starts after the snapshot gets them from it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from api.node.config import NodeConfig
from api.node.controller_app import build_controller
from api.node.localcluster import free_ports
from broker.metadata_follower import MetadataFollower, MetadataUpdate
from metalog.client import ControllerClient
from metalog.commands import AlterUserScramCredentials, CreateAcls, DeleteAcls, ScramUpsertion
from metalog.security import (
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    ScramCredential,
)
from metalog.service import ControllerService


async def _controller(cfg: NodeConfig) -> tuple[web.AppRunner, ControllerService]:
    app, svc = build_controller(cfg, snapshot_records=20)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, port = cfg.listen.split(":")
    await web.TCPSite(runner, host, int(port)).start()
    return runner, svc


def _acl(i: int) -> AclBinding:
    return AclBinding(
        f"User:u{i}",
        "*",
        ResourceType.TOPIC,
        f"t{i}-",
        PatternType.PREFIXED,
        Operation.WRITE,
        Permission.ALLOW,
    )


def _upsertion(user: str, password: str) -> ScramUpsertion:
    c = ScramCredential.derive("SCRAM-SHA-512", password, user.encode() * 4, 4096)
    return ScramUpsertion(user, c.mechanism, c.salt, c.iterations, c.stored_key, c.server_key)


def test_a_restarted_controller_and_a_late_follower_get_acls_and_users_from_the_snapshot(
    tmp_path: Path,
) -> None:
    port = free_ports(1)[0]
    cfg = NodeConfig(
        node_id=1,
        roles=("controller",),
        listen=f"127.0.0.1:{port}",
        controller_quorum=f"1@127.0.0.1:{port}",
        data_dir=tmp_path / "c1",
    )

    async def go() -> None:
        runner, svc = await _controller(cfg)
        try:
            async with ControllerClient([cfg.url], timeout_s=20) as c:
                await c.execute(AlterUserScramCredentials(upsertions=(_upsertion("ann", "pw-a"),)))
                for i in range(25):  # one record each: past the 20-record snapshot
                    await c.execute(CreateAcls(bindings=(_acl(i),)))
                for _ in range(200):
                    if svc._snapshot is not None:
                        break
                    await asyncio.sleep(0.05)
                assert svc._snapshot is not None
                # After the snapshot: records the restart must replay on top of it.
                await c.execute(DeleteAcls(filters=(AclBindingFilter(principal="User:u3"),)))
                await c.execute(AlterUserScramCredentials(upsertions=(_upsertion("ann", "pw-b"),)))
                target = svc.metadata_offset
                for _ in range(200):
                    if svc.controller.image.offset >= target:
                        break
                    await asyncio.sleep(0.05)
            before = svc.controller.image
            snap_offset = svc._snapshot[0]

            f = MetadataFollower([cfg.url], broker_id=9, max_wait_ms=200, retry_backoff_s=0.05)
            updates: list[MetadataUpdate] = []

            async def listen(u: MetadataUpdate) -> None:
                updates.append(u)

            f.subscribe(listen)
            await f.start()
            try:
                await f.wait_for_offset(target, timeout_s=10)
            finally:
                await f.stop()
            assert updates[0].is_snapshot  # it started from the snapshot, not from offset 0
            assert len(updates[0].image.acls) >= 15
            assert f.image.acls.by_id == before.acls.by_id
            assert f.image.scram.credentials == before.scram.credentials
        finally:
            await runner.cleanup()

        assert len(before.acls) == 24 and snap_offset < target
        runner, svc = await _controller(cfg)
        try:
            for _ in range(200):
                if svc.controller.image.offset >= target:
                    break
                await asyncio.sleep(0.05)
            image = svc.controller.image
            assert image.acls.by_id == before.acls.by_id
            assert image.acls.for_type(ResourceType.TOPIC) == before.acls.for_type(
                ResourceType.TOPIC
            )
            cred = image.scram.get("ann", "SCRAM-SHA-512")
            assert cred is not None and cred.verify("pw-b") and not cred.verify("pw-a")
        finally:
            await runner.cleanup()

    asyncio.run(go())
