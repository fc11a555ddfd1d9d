"""The exactly-once stream writer (issue 19): each task of a micro-batch writes its rows in
one transaction and commits, in the same transaction, the batch id it wrote.

Spark's own Kafka sink is at least once: a micro-batch Spark runs again after a failure
(the query restarted from its checkpoint, which had not yet recorded the batch as
committed) is written again. Here, with ``exactlyOnce=true``:

* A task's transactional id is ``<transactionalIdPrefix><query id>-<partition id>``. The
  query id is the one Spark keeps in the checkpoint (``sql.streaming.queryId``), so a
  restarted query uses the same ids; the partition id is the task's partition of the batch.
* ``init_transactions`` takes the id: any older attempt of the same partition (a zombie
  task, a speculative copy, the run before a crash) is fenced, and its open transaction
  aborted, before this one writes.
* The id's bookkeeping consumer group (the same name) holds the last batch id committed
  by that partition, as the offset of partition 0 of the output topic, committed with the
  rows (``send_offsets_to_transaction``, KIP-447). It is read with ``require_stable`` after
  ``init_transactions``, so what it says is final: a batch id at or below it was written
  and committed, and the task writes nothing.
* Otherwise the task begins a transaction, sends every row, sends the batch id, and
  commits; any failure aborts, and a task that dies leaves its transaction to be aborted
  by the next attempt's ``init_transactions`` or the coordinator's timeout. Either way a
  ``read_committed`` reader sees all of a task's rows of a batch once, or none.

What this needs from the query (Spark's rule for exactly-once sinks): a batch run again
reads the same offsets (Spark's checkpoint guarantees it for replayable sources) and splits
its rows into the same partitions with the same rows (a deterministic plan). A partition
with no rows writes nothing and records nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from api.client import AsyncProducer, ClientError, ProducerFencedError
from api.client.coordinator import CoordinatorClient
from spark.options import LongboatOptionError, SinkOptions
from spark.produce import new_producer, send_rows

QUERY_ID_KEY = "sql.streaming.queryId"
"""Spark's local property of a streaming query's jobs (``StreamExecution.QUERY_ID_KEY``)."""
BATCH_ID_KEY = "streaming.sql.batchId"
"""Spark's local property of a micro-batch's jobs (``MicroBatchExecution.BATCH_ID_KEY``)."""


@dataclass(frozen=True)
class BatchTask:
    """Which part of which micro-batch of which query a task writes."""

    query_id: str
    batch_id: int
    partition_id: int

    def transactional_id(self, sink: SinkOptions) -> str:
        return f"{sink.transactional_id_prefix}{self.query_id}-{self.partition_id}"


@dataclass(frozen=True)
class Written:
    records: int
    skipped: bool
    """The batch id was already committed by this partition: nothing was written."""


def batch_task_of_spark(batch_id: int | None = None) -> BatchTask:
    """The running Spark task's query, batch and partition (in an executor's worker)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise LongboatOptionError("option 'exactlyOnce' needs a Spark task (writeStream)")
    query_id = ctx.getLocalProperty(QUERY_ID_KEY)
    raw_batch = ctx.getLocalProperty(BATCH_ID_KEY) if batch_id is None else str(batch_id)
    if not query_id or raw_batch is None:
        raise LongboatOptionError(
            "option 'exactlyOnce' is for writeStream: this task is not part of a "
            "micro-batch of a streaming query (no query or batch id)"
        )
    return BatchTask(query_id, int(raw_batch), ctx.partitionId())


async def last_committed_batch(p: AsyncProducer, group: str) -> int | None:
    """The bookkeeping group's batch id, once no transaction holds its offsets (KIP-447
    ``require_stable``: an older attempt's commit that is still writing markers is waited
    for, not missed)."""
    cc = CoordinatorClient(p.transport, p.metadata, group)
    delay_s = 0.01
    loop = asyncio.get_running_loop()
    deadline = loop.time() + p.request_timeout_s
    while True:
        try:
            ans = await cc.call("fetch_offsets", {"require_stable": True})
            err = str(ans.get("error") or "NONE")
        except ClientError as e:
            err, ans = e.code, {"message": e.message}
        if err == "NONE":
            break
        if err != "UNSTABLE_OFFSET_COMMIT" or loop.time() > deadline:
            raise ClientError(err, f"reading the last batch of {group!r}: {ans.get('message')}")
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 0.2)
    batches = [int(o) for _t, _p, o, *_ in ans.get("offsets") or [] if int(o) >= 0]
    return max(batches) if batches else None


def _first_topic(sink: SinkOptions, first: pa.RecordBatch) -> str:
    if sink.topic:
        return sink.topic
    idx = {n.lower(): i for i, n in enumerate(first.schema.names)}["topic"]
    topic = first.column(idx)[0].as_py()
    if not topic:
        raise LongboatOptionError("row 0 has a null topic and no 'topic' option is set")
    return str(topic)


async def write_batch(
    sink: SinkOptions, batches: Iterator[pa.RecordBatch], task: BatchTask
) -> Written:
    """Write one task's rows of a micro-batch exactly once (see the module doc)."""
    rows = (b for b in batches if b.num_rows)
    first = next(rows, None)
    if first is None:
        return Written(0, skipped=False)
    tid = task.transactional_id(sink)
    async with new_producer(
        sink, transactional_id=tid, transaction_timeout_ms=sink.transaction_timeout_ms
    ) as p:
        await p.init_transactions()
        last = await last_committed_batch(p, tid)
        if last is not None and last >= task.batch_id:
            return Written(0, skipped=True)
        p.begin_transaction()
        try:
            n = await send_rows(p, sink, _chain(first, rows))
            # The batch id rides as an offset of the output topic's partition 0 (any
            # partition that exists will do; the group is ours alone).
            tp = (_first_topic(sink, first), 0)
            meta = json.dumps({"query": task.query_id, "batch": task.batch_id, "records": n})
            await p.send_offsets_to_transaction({tp: task.batch_id}, tid, metadata={tp: meta})
            await p.commit_transaction()
        except ProducerFencedError:
            raise  # a newer attempt owns the id: it decides; nothing to abort from here
        except BaseException:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await p.abort_transaction()
            raise
        return Written(n, skipped=False)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def write(sink: SinkOptions, batches: Iterator[pa.RecordBatch], task: BatchTask) -> Written:
    return asyncio.run(write_batch(sink, batches, task))
