"""Produce over HTTP: the order of one request's produce, from its body to its reports.

Who owns what, one way down (nothing below calls back up):

* ``api.http.v3`` and ``api.http.v2``, the routes: HTTP only (path and query parameters,
  media types, the body's framing: whole, a chunked stream, msgpack; the status and the shape
  of the answer). A produce route checks the request and calls one function here.
* this module: the orchestration. It checks the topic, takes the request's timestamp, has the
  body parsed (``api.http.records``) or planned (``api.http.fast_produce``), picks each
  record's partition, cuts the batches, builds each batch on an idempotent lane and sends it
  to its partition's leader through ``ctx.router``, counts the metrics and collects one
  outcome or report line per record.
* ``api.http.records`` and ``api.http.fast_produce``, pure: records parsed and reports
  rendered (the general path), and the msgspec planner and renderer of plain bodies (the
  fast path). Neither knows the ``HttpContext``.
* ``api.http.context.HttpContext``: the broker's collaborators (its metadata image, the
  ``PartitionRouter``, the ``ProduceLanes``, the metrics) and small lookups (a topic or 404,
  the next sticky partition). It is read and used here; it calls nothing here.

The general path runs in three steps, so that a bad record fails alone:

1. parse each record into a ``ParsedRecord`` or an ``HttpError`` (bad type, bad base64);
2. give each good record its partition (as given, else by key as Kafka's default partitioner
   does, ``api.client.partitioner``; keyless records of one request share one partition,
   rotating between requests) or its error (unknown partition, larger than the topic's
   ``max.message.bytes``); group them by partition, in request order, cut into batches that
   fit ``max.message.bytes``, and produce the batches of different partitions concurrently
   (the batches of one partition in order, one after the other);
3. answer one outcome per record, in request order: its partition and offset, or its error
   (a refused batch fails each of its records with the batch's error).

A whole JSON body of plain records takes the fast path instead (``fast_produce``: its
docstring says which bodies); it does the same three steps per column and per batch rather
than per record, and stores and answers exactly what the general path would.

With acks=all every batch built here carries a producer id and sequence of a lane of its own
(``produce_built``, ``broker.produce_lanes``), so the router's retries cannot append it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from api.client.partitioner import partition_for_key
from api.http import fast_produce
from api.http.context import HttpContext
from api.http.errors import HttpError, kafka_error, partition_not_found
from api.http.records import (
    BATCH_OVERHEAD_BYTES,
    Delivered,
    Outcome,
    ParsedRecord,
    RecordParser,
    parse_all,
    parse_v3_record,
    report_lines,
    report_prefix,
    split_body,
)
from broker.group_coordinator import OFFSETS_TOPIC
from broker.replica_manager import ReplicaError
from broker.replica_state import ACKS_ALL
from metalog.image import TopicImage
from storage.batch import encode_batch

PRODUCE_TIMEOUT_MS_DEFAULT = 30_000
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
"""Written only by the brokers themselves (the group coordinators)."""


def now_ms() -> int:
    """The timestamp of a request's records that carry none."""
    return int(time.time() * 1000)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Parsing a request allocates a few objects per record and no cycles; the collector's
    passes over them (and over the broker's long-lived image) cost more than the parsing
    (py-spy on the benchmark), so it waits until the synchronous section is done. Never
    held across an ``await``."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def writable_topic_or_404(ctx: HttpContext, topic: str) -> TopicImage:
    """The topic's image, refusing client appends to an internal topic as Kafka's
    ReplicaManager does (a record there would be replayed by a group coordinator as group
    state or offsets)."""
    t = ctx.topic_or_404(topic)
    if topic in INTERNAL_TOPICS:
        raise kafka_error(
            "INVALID_TOPIC_EXCEPTION",
            f"INVALID_TOPIC_EXCEPTION: Cannot append to internal topic {topic}.",
        )
    return t


def max_message_bytes(ctx: HttpContext, topic: str) -> int:
    v = ctx.image.configs.topic_config(topic, "max.message.bytes")
    try:
        return int(v) if v is not None else 1048588
    except ValueError:
        return 1048588


@dataclass(slots=True)
class Reports:
    """A whole JSON body's answer."""

    lines: bytes
    """One NDJSON report line per record, in request order."""
    count: int
    error: HttpError | None
    """A one-record body's error (answered as the request's status instead of a line)."""


# --------------------------------------------------------------------------- JSON bodies


async def produce_json(
    ctx: HttpContext, topic: str, raw: bytes, *, acks: int, timeout_ms: int, fast: bool = True
) -> Reports:
    """A whole (non-streamed) JSON body: one object, an array or concatenated values. A body
    of plain records takes the fast path, which stores and answers exactly what the general
    path would; ``fast=False`` (tests) skips it."""
    ts = now_ms()
    if fast:
        with gc_paused():
            plan = _plan(ctx, topic, raw, ts)
        if plan is not None:
            return await _produce_plan(ctx, topic, plan, acks=acks, timeout_ms=timeout_ms)
    objs = await _with_schemas(ctx, topic, split_body(raw))
    with gc_paused():
        parsed = parse_all(objs, ts)
    outcomes = await produce_records(ctx, topic, parsed, acks=acks, timeout_ms=timeout_ms)
    with gc_paused():
        lines = report_lines(ctx.cluster_id, topic, parsed, outcomes)
    only = outcomes[0] if len(outcomes) == 1 else None
    return Reports(lines, len(parsed), only if isinstance(only, HttpError) else None)


async def produce_stream_chunk(
    ctx: HttpContext, topic: str, objs: list[Any], *, acks: int, timeout_ms: int
) -> bytes:
    """The values of one chunk of a produce stream (``records.JsonStream``), produced as one
    group: their report lines. The status has been sent, so a refusal of the whole request
    (the topic deleted mid-stream) is each record's error."""
    objs = await _with_schemas(ctx, topic, objs)
    with gc_paused():
        parsed = parse_all(objs, now_ms())
    try:
        outcomes = await produce_records(ctx, topic, parsed, acks=acks, timeout_ms=timeout_ms)
    except HttpError as e:
        outcomes = [e] * len(parsed)
    return report_lines(ctx.cluster_id, topic, parsed, outcomes)


async def produce_values(
    ctx: HttpContext,
    topic: str,
    objs: Sequence[Any],
    *,
    acks: int,
    timeout_ms: int,
    parse: RecordParser = parse_v3_record,
) -> tuple[list[ParsedRecord | HttpError], list[Outcome]]:
    """Records given as values (the entries of ``records:batch``, a v2 body's or a msgpack
    body's ``records``), each parsed by ``parse``: the records and their outcomes."""
    if parse is parse_v3_record:
        objs = await _with_schemas(ctx, topic, list(objs))
    with gc_paused():
        parsed = parse_all(objs, now_ms(), parse)
    return parsed, await produce_records(ctx, topic, parsed, acks=acks, timeout_ms=timeout_ms)


async def _with_schemas(ctx: HttpContext, topic: str, objs: list[Any]) -> list[Any]:
    """v3 records with their schema-typed keys and values encoded (``api.http.embedded``)."""
    if ctx.embedded is None:
        return objs
    return await ctx.embedded.prepare_v3(topic, objs)


# --------------------------------------------------------------------------- general path


async def produce_records(
    ctx: HttpContext,
    topic: str,
    parsed: Sequence[ParsedRecord | HttpError],
    *,
    acks: int,
    timeout_ms: int,
) -> list[Outcome]:
    """Produce every good record; one outcome per input, in input order (module docstring)."""
    t = writable_topic_or_404(ctx, topic)
    count = len(t.partitions)
    limit = max_message_bytes(ctx, topic)
    out: list[Outcome | None] = [None] * len(parsed)
    by_partition: dict[int, list[int]] = {}
    sticky: int | None = None
    for i, r in enumerate(parsed):
        if isinstance(r, HttpError):
            out[i] = r
            continue
        p = r.partition
        if p is None:
            if r.key is not None:
                p = partition_for_key(r.key, count)
            else:
                if sticky is None:
                    sticky = ctx.next_sticky_partition(topic, count)
                p = sticky
        elif p >= count:
            out[i] = partition_not_found(topic, p)
            continue
        if r.size + BATCH_OVERHEAD_BYTES > limit:
            out[i] = HttpError(
                413,
                f"MESSAGE_TOO_LARGE: the record is {r.size} bytes, more "
                f"than the topic's max.message.bytes ({limit}).",
                413,
            )
            continue
        r.partition = p
        by_partition.setdefault(p, []).append(i)

    async def one_partition(p: int, idxs: list[int]) -> None:
        start = 0
        while start < len(idxs):
            end, size = start, BATCH_OVERHEAD_BYTES
            while end < len(idxs):
                rec = parsed[idxs[end]]
                assert isinstance(rec, ParsedRecord)
                if end > start and size + rec.size > limit:
                    break
                size += rec.size
                end += 1
            chunk = idxs[start:end]
            await _produce_batch(ctx, topic, p, parsed, chunk, out, acks, timeout_ms)
            start = end

    if by_partition:
        await asyncio.gather(*(one_partition(p, idxs) for p, idxs in by_partition.items()))
    result: list[Outcome] = []
    for o in out:
        assert o is not None
        result.append(o)
    return result


async def _produce_batch(
    ctx: HttpContext,
    topic: str,
    p: int,
    parsed: Sequence[ParsedRecord | HttpError],
    chunk: list[int],
    out: list[Outcome | None],
    acks: int,
    timeout_ms: int,
) -> None:
    recs = [
        (r.key, r.value, r.timestamp_ms, r.headers)  # type: ignore[union-attr]
        for r in (parsed[i] for i in chunk)
    ]

    def build(producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        return encode_batch(
            recs,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )

    sent = await _send(ctx, topic, p, len(recs), build, acks, timeout_ms)
    if isinstance(sent, HttpError):
        for i in chunk:
            out[i] = sent
        return
    base, append_time = sent
    with gc_paused():  # no cycles, one object per record
        for n, i in enumerate(chunk):
            r = parsed[i]
            out[i] = Delivered(
                p,
                base + n if base >= 0 else -1,
                append_time if append_time >= 0 else r.timestamp_ms,  # type: ignore[union-attr]
            )


# --------------------------------------------------------------------------- fast path


def _plan(ctx: HttpContext, topic: str, raw: bytes, timestamp_ms: int) -> fast_produce.Plan | None:
    count = len(writable_topic_or_404(ctx, topic).partitions)
    return fast_produce.plan(
        raw,
        partitions=count,
        limit=max_message_bytes(ctx, topic),
        timestamp_ms=timestamp_ms,
        next_sticky=lambda: ctx.next_sticky_partition(topic, count),
    )


async def _produce_plan(
    ctx: HttpContext, topic: str, p: fast_produce.Plan, *, acks: int, timeout_ms: int
) -> Reports:
    """Produce a plan's batches (each partition's in order, partitions concurrently, as
    ``produce_records``): the report lines in request order, byte for byte
    ``records.report_lines``."""
    prefix = report_prefix(ctx.cluster_id, topic)
    errors: list[HttpError] = []

    async def one_partition(batches: list[tuple[int, Sequence[int]]], joined: bool) -> list[bytes]:
        lines: list[bytes] = []
        for part, idxs in batches:
            sent = await _send(
                ctx, topic, part, len(idxs), partial(p.encode, idxs), acks, timeout_ms
            )
            if isinstance(sent, HttpError):
                errors.append(sent)
                lines += fast_produce.failed_lines(sent, len(idxs))
            else:
                lines += fast_produce.batch_lines(p, idxs, prefix, part, *sent, joined=joined)
        return lines

    if len(p.batches) == 1:
        # One partition: its batches' lines are the request's order, so each batch may
        # hand back its lines already joined.
        body = b"".join(await one_partition(p.batches[0], True))
    else:
        per_partition = await asyncio.gather(*(one_partition(b, False) for b in p.batches))
        body = fast_produce.in_request_order(p, per_partition)
    return Reports(body, p.count, errors[0] if errors and p.count == 1 else None)


# --------------------------------------------------------------------------- batches


async def _send(
    ctx: HttpContext,
    topic: str,
    partition: int,
    records: int,
    build: Callable[[int, int, int], bytes],
    acks: int,
    timeout_ms: int,
) -> tuple[int, int] | HttpError:
    """Build one batch of ``records`` records (``produce_built``), send it to its leader and
    count it. Returns its base offset (-1: not known; acks=0 learns none, and Kafka's
    producer reports -1) and its log append time (-1: the records keep their timestamps),
    or the error that refused it, which each of its records fails with."""
    try:
        ans, batch = await produce_built(ctx, topic, partition, acks, timeout_ms, records, build)
    except ReplicaError as e:
        ctx.metrics.produce_record_errors.inc(records)
        return kafka_error(e.error_code, str(e))
    ctx.metrics.bytes_in.inc(len(batch))
    ctx.metrics.produce_records.inc(records)
    base = int(ans.get("base_offset", -1))
    return (base if acks != 0 else -1), int(ans.get("log_append_time", -1))


async def produce_built(
    ctx: HttpContext,
    topic: str,
    partition: int,
    acks: int,
    timeout_ms: int,
    records: int,
    build: Callable[[int, int, int], bytes],
) -> tuple[dict[str, Any], bytes]:
    """Build one batch of ``records`` records with ``build(producer_id, producer_epoch,
    base_sequence)`` and produce it through the router: with acks=all on a lane of its
    own (``broker.produce_lanes``), so the router's retries cannot append it twice.
    Returns the leader's answer and the batch; raises ``ReplicaError``."""
    lanes = ctx.lanes if acks == ACKS_ALL else None
    lane = None if lanes is None else await lanes.acquire(topic, partition)
    if lanes is None or lane is None:
        batch = build(-1, -1, -1)
        return await ctx.router.produce(topic, partition, acks, timeout_ms, batch), batch
    batch = build(lane.producer_id, lane.producer_epoch, lane.next_sequence)
    try:
        ans = await ctx.router.produce(topic, partition, acks, timeout_ms, batch)
    except BaseException:  # cancellation too: the batch may have reached the leader
        lanes.drop(lane)
        raise
    lanes.release(topic, partition, lane, records)
    return ans, batch


async def produce_batch_bytes(
    ctx: HttpContext, topic: str, partition: int | None, batch: bytes, *, acks: int, timeout_ms: int
) -> dict[str, Any]:
    """The binary form: one ready batch, handed on as it is (with the client's own producer
    id, if any: no lane)."""
    t = writable_topic_or_404(ctx, topic)
    if partition is None:
        partition = ctx.next_sticky_partition(topic, len(t.partitions))
    elif partition not in t.partitions:
        raise partition_not_found(topic, partition)
    try:
        ans = await ctx.router.produce(topic, partition, acks, timeout_ms, batch)
    except ReplicaError as e:
        raise kafka_error(e.error_code, str(e)) from None
    ctx.metrics.bytes_in.inc(len(batch))
    return {
        "partition_id": partition,
        "base_offset": int(ans["base_offset"]),
        "last_offset": int(ans["last_offset"]),
        "log_append_time": int(ans.get("log_append_time", -1)),
        "duplicate": bool(ans.get("duplicate", False)),
    }
