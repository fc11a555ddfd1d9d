"""The ``longboat`` PySpark data source: batch and streaming reads and writes of topics.

Spark's Kafka source, ported to Python's Data Source API (PySpark >= 4.2): the same options
(``spark.options``), the same rows (``spark.schema``), end-exclusive offsets per partition as
the streaming checkpoint (``{"topic": {"0": 42}}``), and the same rules where Kafka has them
(Spark's ``KafkaSourceProvider``). Where each piece runs (``pyspark.sql.datasource``'s
contract) decides its shape:

* ``LongboatDataSource.schema/reader/streamReader/writer`` run in short-lived planner
  processes; options are parsed there, so a bad option fails ``load()``/``save()`` at once.
* ``LongboatBatchReader.partitions`` and the stream reader's offset methods run in the driver's
  Python process: they ask the cluster through ``spark.cluster.ClusterView`` (the Python
  client) and return pickled ``LongboatInputPartition`` objects holding everything ``read()``
  needs (``spark.fetch.RangeTask``).
* ``read`` runs in executor workers on a separately unpickled reader: it opens its own HTTP
  connections and yields Arrow record batches (``spark.fetch``).
* Writers run in executor workers with one idempotent producer per task; a record that fails
  fails the task, and so the write.

Registration: ``spark.register(spark_session)`` (``spark/__init__.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from api.client import ClientError, ClientSecurity
from spark import avro, exactly_once
from spark.cluster import ClusterView
from spark.fetch import RangeTask, read_range
from spark.options import (
    LongboatOptionError,
    Offsets,
    SinkOptions,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from spark.planning import (
    OffsetRange,
    TopicPartitions,
    batch_ranges,
    cap,
    check_start,
    rate_limit,
    resolve,
    split_ranges,
    timestamps_needed,
)
from spark.produce import produce
from spark.schema import kafka_struct
from spark.security import reraise_auth

log = logging.getLogger("spark.longboat")

FORMAT = "longboat"


class LongboatDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("longboat")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        # Reads only: a write takes the DataFrame's schema. includeHeaders adds the column.
        raw = {k.lower(): v for k, v in self.options.items()}
        include = str(raw.get("includeheaders", "false")).strip().lower() == "true"
        # valueFormat/keyFormat avro|jsonschema: the columns typed by the registry's reader
        # schemas, which ride in the columns' metadata to reader() (spark/avro.py).
        formats = avro.parse_formats(self.options, sink=False)
        if not formats.any:
            return kafka_struct(include)
        o = parse_source_options(self.options, streaming=False)
        topic = avro.single_topic(o.subscribe, o.assign)
        return avro.with_columns(kafka_struct(include), formats, topic)

    def reader(self, schema: StructType) -> LongboatBatchReader:
        return LongboatBatchReader(
            parse_source_options(self.options, streaming=False), _decoders(self.options, schema)
        )

    def streamReader(self, schema: StructType) -> LongboatStreamReader:
        return LongboatStreamReader(
            parse_source_options(self.options, streaming=True), _decoders(self.options, schema)
        )

    def writer(self, schema: StructType, overwrite: bool) -> LongboatWriter:
        sink = _sink(self.options, schema, overwrite)
        if sink.exactly_once:
            raise LongboatOptionError(
                "option 'exactlyOnce' is for writeStream (it deduplicates micro-batches by "
                "their batch id); a batch write has none"
            )
        return LongboatWriter(sink, _encoders(self.options, schema, sink))

    def streamWriter(self, schema: StructType, overwrite: bool) -> LongboatStreamWriter:
        # overwrite is output mode "complete": as Kafka's sink, every micro-batch appends the
        # whole result again (a topic cannot be truncated; readers keep the last per key).
        sink = _sink(self.options, schema, overwrite=False)
        return LongboatStreamWriter(sink, _encoders(self.options, schema, sink))


def _decoders(options: Any, schema: StructType) -> tuple[avro.ColumnDecoder, ...]:
    return avro.decoders(schema, avro.parse_formats(options, sink=False))


def _encoders(options: Any, schema: StructType, sink: SinkOptions) -> _Encoders:
    formats = avro.parse_formats(options, sink=True)
    dtypes = {f.name.lower(): f.dataType for f in schema.fields}
    return _Encoders(formats.registry, avro.encoders(formats, dtypes, sink.topic), formats.security)


@dataclass(frozen=True)
class _Encoders:
    registry: tuple[str, ...] = ()
    columns: tuple[avro.ColumnEncoder, ...] = ()
    security: ClientSecurity | None = None


class LongboatInputPartition(InputPartition):
    def __init__(self, task: RangeTask) -> None:
        super().__init__(task)
        self.task = task


def _tasks(
    opts: SourceOptions, cv: ClusterView, ranges: list[OffsetRange]
) -> list[LongboatInputPartition]:
    ranges = split_ranges(
        ranges,
        min_partitions=opts.min_partitions,
        max_records_per_partition=opts.max_records_per_partition,
    )
    if not ranges:
        return []
    cid = cv.cluster_id() if opts.fetch_format == "arrow" else None
    return [
        LongboatInputPartition(
            RangeTask(
                topic=r.topic,
                partition=r.partition,
                start=r.start,
                end=r.end,
                urls=cv.urls_for(r.topic, r.partition),
                cluster_id=cid,
                include_headers=opts.include_headers,
                fetch_max_bytes=opts.fetch_max_bytes,
                fail_on_data_loss=opts.fail_on_data_loss,
                poll_timeout_ms=opts.poll_timeout_ms,
                isolation_level=opts.isolation_level,
                security=opts.security,
            )
        )
        for r in ranges
    ]


def _starting_offsets(
    o: SourceOptions, cv: ClusterView, tps: TopicPartitions, earliest: Offsets, latest: Offsets
) -> Offsets:
    """Where reading starts in each partition of ``tps`` (``startingOffsets`` or a starting
    timestamp); a timestamp with no record at or after it is an error unless
    ``startingOffsetsByTimestampStrategy=latest``."""
    return resolve(
        o.starting,
        tps,
        earliest,
        latest,
        cv.offsets_for_times(timestamps_needed(o.starting, tps)),
        which="starting",
        no_match_is_error=o.starting_by_timestamp_strategy == "error",
    )


def _read(
    partition: InputPartition | None, decoders: tuple[avro.ColumnDecoder, ...] = ()
) -> Iterator[pa.RecordBatch]:
    task = (
        partition.task
        if isinstance(partition, LongboatInputPartition)
        else (None if partition is None else partition.value)
    )
    if task is None:
        # Nothing to read: when partitions() returns [], Spark 4.3 plans one
        # InputPartition(None) all the same (plan_data_source_read.py).
        return iter(())
    if decoders:
        return avro.decode_batches(decoders, read_range(task))
    return read_range(task)


class LongboatBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, decoders: tuple[avro.ColumnDecoder, ...] = ()) -> None:
        self.opts = opts
        self.decoders = decoders

    def partitions(self) -> list[LongboatInputPartition]:
        o = self.opts
        with ClusterView(o.bootstrap, isolation_level=o.isolation_level, security=o.security) as cv:
            tps = cv.topic_partitions(o, missing_ok=False)
            if not tps:
                return []
            earliest = cv.earliest(tps)
            latest = cv.latest(tps)
            start = _starting_offsets(o, cv, tps, earliest, latest)
            end = resolve(
                o.ending,
                tps,
                earliest,
                latest,
                cv.offsets_for_times(timestamps_needed(o.ending, tps)),
                which="ending",
                no_match_is_error=False,
            )
            ranges = batch_ranges(
                start,
                end,
                earliest,
                latest,
                fail_on_data_loss=o.fail_on_data_loss,
                warn=log.warning,
            )
            return _tasks(o, cv, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.decoders)


class LongboatStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over end-exclusive offsets per partition.

    Partitions created after the query started are read from their earliest offset (Kafka's
    rule). ``maxOffsetsPerTrigger`` is the default read limit; Spark passes
    ``ReadAllAvailable`` instead where a trigger demands it. With ``availableNow`` the latest
    offsets are fixed when the query starts and never passed.
    """

    def __init__(self, opts: SourceOptions, decoders: tuple[avro.ColumnDecoder, ...] = ()) -> None:
        self.opts = opts
        self.decoders = decoders
        self._target: Offsets | None = None
        self._latest: Offsets | None = None

    def initialOffset(self) -> dict[str, Any]:
        o = self.opts
        with ClusterView(o.bootstrap, isolation_level=o.isolation_level, security=o.security) as cv:
            tps = cv.topic_partitions(o, missing_ok=True)
            if not tps:
                return {}
            earliest = cv.earliest(tps)
            latest = cv.latest(tps)
            start = _starting_offsets(o, cv, tps, earliest, latest)
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with ClusterView(
            self.opts.bootstrap,
            isolation_level=self.opts.isolation_level,
            security=self.opts.security,
        ) as cv:
            tps = cv.topic_partitions(self.opts, missing_ok=True)
            self._target = cv.latest(tps) if tps else {}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_json(start)
        with ClusterView(
            self.opts.bootstrap,
            isolation_level=self.opts.isolation_level,
            security=self.opts.security,
        ) as cv:
            tps = cv.topic_partitions(self.opts, missing_ok=True)
            latest = cv.latest(tps) if tps else {}
            new = {t: [p for p in ps if p not in begin.get(t, {})] for t, ps in tps.items()}
            new = {t: ps for t, ps in new.items() if ps}
            first = cv.earliest(new) if new else {}
        self._latest = latest
        if self._target is not None:
            latest = cap(latest, self._target)
        # Where each partition of this batch starts: its last end, or its log start if new.
        begin_all: Offsets = {t: dict(ps) for t, ps in begin.items()}
        for t, ps in first.items():
            for p, off in ps.items():
                if p in latest.get(t, {}):
                    begin_all.setdefault(t, {})[p] = off
        latest = {
            t: {p: max(o, begin_all.get(t, {}).get(p, o)) for p, o in ps.items()}
            for t, ps in latest.items()
        }
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(
                {t: {p: begin_all[t][p] for p in ps} for t, ps in latest.items()},
                latest,
                limit.max_rows,
            )
        else:
            end = latest
        # A partition that is gone (topic deleted) keeps its offset rather than vanish from
        # the checkpoint.
        for t, ps in begin.items():
            for p, off in ps.items():
                end.setdefault(t, {}).setdefault(p, off)
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> list[LongboatInputPartition]:
        o = self.opts
        begin, stop = offsets_from_json(start), offsets_from_json(end)
        todo = {
            t: sorted(p for p, e in ps.items() if e > begin.get(t, {}).get(p, -1))
            for t, ps in stop.items()
        }
        todo = {t: ps for t, ps in todo.items() if ps}
        if not todo:
            return []
        with ClusterView(o.bootstrap, isolation_level=o.isolation_level, security=o.security) as cv:
            earliest = cv.earliest(todo)
            ranges = []
            for t, ps in todo.items():
                for p in ps:
                    s = begin.get(t, {}).get(p, earliest[t][p])
                    s = check_start(
                        t,
                        p,
                        s,
                        earliest[t][p],
                        fail_on_data_loss=o.fail_on_data_loss,
                        warn=log.warning,
                    )
                    if s < stop[t][p]:
                        ranges.append(OffsetRange(t, p, s, stop[t][p]))
            return _tasks(o, cv, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.decoders)

    def commit(self, end: dict[str, Any]) -> None:
        # As Kafka's source: offsets live in Spark's checkpoint, nothing is committed to the
        # cluster (so consumer-group lag tools do not see the query).
        pass


# ---------------------------------------------------------------- writing

_BYTES_TYPES = (BinaryType, StringType)
_INT_TYPES = (IntegerType, LongType, ShortType)


def _sink(options: Any, schema: StructType, overwrite: bool) -> SinkOptions:
    if overwrite:
        raise LongboatOptionError(
            "a topic is append-only: use mode('append') (overwrite would mean deleting records)"
        )
    sink = parse_sink_options(options)
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise LongboatOptionError(
            f"a longboat write needs a 'value' column (binary or string); the DataFrame has "
            f"{schema.simpleString()}"
        )
    encoded = {c.column for c in avro.parse_formats(options, sink=True).columns()}
    for name in ("key", "value"):
        if name in encoded:
            continue  # encoded as Avro (spark/avro.py checks the struct against its schema)
        if name in fields and not isinstance(fields[name], _BYTES_TYPES):
            raise LongboatOptionError(
                f"column '{name}' must be binary or string, not {fields[name].simpleString()}; "
                f"cast it, e.g. col('{name}').cast('string')"
            )
    if sink.topic is None:
        if "topic" not in fields:
            raise LongboatOptionError("say where to write: option 'topic', or a 'topic' column")
        if not isinstance(fields["topic"], StringType):
            raise LongboatOptionError("column 'topic' must be a string")
    if "partition" in fields and not isinstance(fields["partition"], _INT_TYPES):
        raise LongboatOptionError("column 'partition' must be an integer")
    if "headers" in fields and sink.include_headers:
        ht = fields["headers"]
        ok = (
            isinstance(ht, ArrayType)
            and isinstance(ht.elementType, StructType)
            and [f.name for f in ht.elementType.fields] == ["key", "value"]
            and isinstance(ht.elementType.fields[0].dataType, StringType)
            and isinstance(ht.elementType.fields[1].dataType, _BYTES_TYPES)
        )
        if not ok:
            raise LongboatOptionError(
                "column 'headers' must be array<struct<key:string,value:binary>>, not "
                f"{ht.simpleString()}"
            )
    return sink


@dataclass
class LongboatCommitMessage(WriterCommitMessage):
    records: int
    skipped: bool = False
    """exactlyOnce: the task's part of the batch was already committed; nothing written."""


def _write(
    sink: SinkOptions, iterator: Iterator[pa.RecordBatch], enc: _Encoders | None = None
) -> LongboatCommitMessage:
    if enc is not None and enc.columns:
        iterator = avro.encode_batches(enc.columns, enc.registry, iterator, enc.security)
    try:
        return LongboatCommitMessage(asyncio.run(produce(sink, iterator)))
    except ClientError as e:
        reraise_auth(e)
        raise


class LongboatWriter(DataSourceArrowWriter):
    """``df.write.format("longboat")``: rows with value (key, topic, partition, headers)."""

    def __init__(self, sink: SinkOptions, encoders: _Encoders | None = None) -> None:
        self.sink = sink
        self.encoders = encoders

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LongboatCommitMessage:
        return _write(self.sink, iterator, self.encoders)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, LongboatCommitMessage))
        log.info("longboat write committed: %d records", total)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        # Records already acknowledged stay in the topic (no transactions), as with Kafka's
        # sink: a failed write is at-least-once when retried.
        log.warning("longboat write aborted; records already produced remain in the topic")


class LongboatStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("longboat")``: at-least-once per micro-batch, as Kafka's sink, or
    exactly once with ``exactlyOnce=true`` (``spark.exactly_once``)."""

    def __init__(self, sink: SinkOptions, encoders: _Encoders | None = None) -> None:
        self.sink = sink
        self.encoders = encoders

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LongboatCommitMessage:
        if not self.sink.exactly_once:
            return _write(self.sink, iterator, self.encoders)
        enc = self.encoders
        if enc is not None and enc.columns:
            iterator = avro.encode_batches(enc.columns, enc.registry, iterator, enc.security)
        try:
            w = exactly_once.write(self.sink, iterator, exactly_once.batch_task_of_spark())
        except ClientError as e:
            reraise_auth(e)
            raise
        return LongboatCommitMessage(w.records, w.skipped)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, LongboatCommitMessage)]
        if self.sink.exactly_once and any(m.skipped for m in done):
            log.info(
                "longboat batch %d: %d of %d tasks found the batch already committed and "
                "wrote nothing",
                batchId,
                sum(m.skipped for m in done),
                len(done),
            )

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if self.sink.exactly_once:
            # Each task aborted its own transaction (or the next attempt's init does).
            log.warning("longboat stream batch %d aborted; its transactions were aborted", batchId)
        else:
            log.warning(
                "longboat stream batch %d aborted; records already produced remain", batchId
            )
