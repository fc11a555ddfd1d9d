"""``GET /v3/quorum/metadata`` walks the image in a worker thread and answers polls of the same
image with the same bytes: at 10,000 partitions the summary and its JSON took ~0.8 s, and on the
controller's event loop that held the Raft node's heartbeats as long (issue 17's load)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import orjson

from api.node import controller_app
from api.node.controller_app import SERVICE_KEY, SUMMARY_KEY, handle_metadata
from metalog.delta import MetadataDelta
from metalog.image import MetadataImage
from metalog.records import BrokerId, PartitionRecord, TopicId, TopicRecord

PARTITIONS = 10_000


def image(partitions: int, leader: int = 1) -> MetadataImage:
    d = MetadataDelta(MetadataImage.EMPTY)
    d.replay(TopicRecord(name="t", topic_id=TopicId("AAAAAAAAAAAAAAAAAAAAAA")), 0)
    for p in range(partitions):
        rs = (BrokerId(1), BrokerId(2), BrokerId(3))
        d.replay(
            PartitionRecord(
                topic_id=TopicId("AAAAAAAAAAAAAAAAAAAAAA"),
                partition=p,
                replicas=rs,
                isr=rs,
                leader=BrokerId(leader),
            ),
            p + 1,
        )
    return d.apply()


def request(img: MetadataImage, cache: list[Any]) -> Any:
    svc = SimpleNamespace(controller=SimpleNamespace(image=img))
    return SimpleNamespace(app={SERVICE_KEY: svc, SUMMARY_KEY: cache})


def test_a_big_image_is_summarized_off_the_event_loop(monkeypatch: Any) -> None:
    big = image(PARTITIONS)
    threads: list[int] = []
    real = controller_app.image_summary

    def recording(img: MetadataImage) -> dict[str, Any]:
        threads.append(threading.get_ident())
        return real(img)

    monkeypatch.setattr(controller_app, "image_summary", recording)

    async def run() -> tuple[Any, int]:
        return await handle_metadata(request(big, [])), threading.get_ident()

    resp, loop_thread = asyncio.run(run())
    assert threads and loop_thread not in threads
    body = orjson.loads(resp.body)
    assert len(body["topics"][0]["partitions"]) == PARTITIONS


def test_the_same_image_is_answered_from_the_cache_and_a_new_one_is_not() -> None:
    cache: list[Any] = []
    first = image(3)
    a = asyncio.run(handle_metadata(request(first, cache)))
    b = asyncio.run(handle_metadata(request(first, cache)))
    assert a.body is b.body  # the cached bytes, not a second walk
    changed = image(3, leader=2)
    c: Any = asyncio.run(handle_metadata(request(changed, cache)))
    assert {p["leader"] for p in orjson.loads(c.body)["topics"][0]["partitions"]} == {2}
