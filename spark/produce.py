"""Rows to records: what a writer task sends, through the Python client's producer.

The Arrow batches Spark hands a writer task carry ``value`` (and maybe ``key``, ``topic``,
``partition``, ``headers``); ``send_rows`` turns them into sends on a producer it is given,
in order, so the at-least-once writer (one idempotent producer per task, ``produce``) and
the exactly-once one (a transactional producer per task, ``spark.exactly_once``) share it.
A record that fails raises, and so fails the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from api.client import AsyncProducer
from spark.options import LongboatOptionError, SinkOptions
from spark.security import client_security

PENDING_MAX = 10_000
"""Delivery futures held before waiting for them (bounds memory, surfaces failures early)."""


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    idx = {n.lower(): i for i, n in enumerate(batch.schema.names)}.get(name)
    if idx is None:
        return None
    col = batch.column(idx)
    if name in ("key", "value") and (
        pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
    ):
        col = col.cast(pa.binary())
    return list(col.to_pylist())


def _utf8(v: str | bytes | None) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def new_producer(sink: SinkOptions, **more: Any) -> AsyncProducer:
    return AsyncProducer(
        list(sink.bootstrap),
        acks=sink.acks,
        linger_ms=sink.linger_ms,
        compression=sink.compression,
        enable_idempotence=sink.acks == -1,
        request_timeout_ms=sink.request_timeout_ms,
        delivery_timeout_ms=max(4 * sink.request_timeout_ms, 120_000),
        security=client_security(sink.security),
        **more,
    )


async def send_rows(p: AsyncProducer, sink: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row of ``batches``; the number sent. Waits for the deliveries."""
    n = 0
    pending: list[asyncio.Future[Any]] = []
    for batch in batches:
        rows = batch.num_rows
        if not rows:
            continue
        values = _column(batch, "value") or [None] * rows
        keys = _column(batch, "key")
        topics = None if sink.topic else _column(batch, "topic")
        parts = _column(batch, "partition")
        headers = _column(batch, "headers") if sink.include_headers else None
        if topics is None and parts is None and not (headers and any(headers)):
            # The bulk path: one future per stored batch, not per record.
            pending.append(await p.send_batch(str(sink.topic), values, keys=keys))
        else:
            for i in range(rows):
                topic = sink.topic or (topics[i] if topics else None)
                if topic is None:
                    raise LongboatOptionError(
                        f"row {n + i} has a null topic and no 'topic' option is set"
                    )
                hs = (
                    [(h["key"], _utf8(h["value"])) for h in headers[i]]
                    if headers and headers[i]
                    else None
                )
                pending.append(
                    await p.send(
                        topic,
                        values[i],
                        key=keys[i] if keys else None,
                        headers=hs,
                        partition=parts[i] if parts and parts[i] is not None else None,
                    )
                )
        n += rows
        if len(pending) >= PENDING_MAX:
            await asyncio.gather(*pending)  # raises the first failure: the task fails
            pending.clear()
    await p.flush()
    await asyncio.gather(*pending)
    return n


async def produce(sink: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """At least once: one idempotent producer (``acks=all``) for the task's rows."""
    async with new_producer(sink) as p:
        return await send_rows(p, sink, batches)
