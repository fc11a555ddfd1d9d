"""A request that timed out, or a leader's offline log directory, refreshes the metadata
before the retry.

A paused or partitioned leader answers nothing: the client's request times out
(``REQUEST_TIMED_OUT``) while the controller moves leadership elsewhere. Retrying against the
cached leader until some other error happened to refresh the cache kept producers on the
dead leader for as long as the pause lasted. Kafka's client asks for new metadata when a
request times out (it drops the connection) and on ``KAFKA_STORAGE_ERROR`` (an
``InvalidMetadataException``: the replica's log directory went offline, and leadership is
moving); ours now does the same.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_metadata import OneTopicMetadata

from api.client import ClientError
from api.client.producer import AsyncProducer


class MovingLeader(OneTopicMetadata):
    """The metadata: the leader is ``old`` until a refresh, ``new`` after it."""

    async def leader_url(self, topic: str, partition: int, *, timeout_s: float = 10.0) -> str:
        return "http://new" if self.refreshes else "http://old"


class Transport:
    """``old`` fails every request with ``code``; ``new`` stores the batch."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.calls: list[str] = []

    async def call(self, url: str, route: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.calls.append(url)
        if url == "http://old":
            raise ClientError(self.code, "no answer from the old leader")
        return {"base_offset": 0}

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("code", ["REQUEST_TIMED_OUT", "KAFKA_STORAGE_ERROR"])
def test_the_retry_goes_to_the_leader_the_refreshed_metadata_names(code: str) -> None:
    async def go() -> None:
        p = AsyncProducer(
            "http://127.0.0.1:1",
            enable_idempotence=False,
            acks=1,
            linger_ms=0,
            retry_backoff_ms=1,
            delivery_timeout_ms=5_000,
        )
        md, transport = MovingLeader(), Transport(code)
        p.metadata = md
        p.transport = transport  # type: ignore[assignment]
        p._loop = asyncio.get_running_loop()  # started: no cluster to ask for a producer id
        async with asyncio.timeout(5):
            md_offset = await (await p.send("t", b"v", partition=0))
        await p.close()
        assert md_offset.offset == 0
        assert transport.calls == ["http://old", "http://new"]
        assert md.refreshes == 1

    asyncio.run(go())
