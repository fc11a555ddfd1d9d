"""``longboat produce`` and ``longboat consume``: the console producer and consumer.

As Kafka's ``kafka-console-producer`` / ``kafka-console-consumer``: lines of standard input
become records (``--key-separator`` splits a key off each line; ``--parse-headers`` and ``-H``
add headers; ``--jsonl`` reads key, value, headers, timestamp and partition per line), and
records are printed one per line (kcat's ``-f`` format, JSON, or the console consumer's line
with timestamp and headers; the words are ``api.cli.console_format``). ``consume`` starts at
``--offset earliest|latest|-N|N`` or ``--from-time``, and ``--exit`` stops at the ends the
partitions had at the start (kcat's ``-e``). ``--value-format avro|jsonschema`` writes each
line's JSON value in the schema registry's wire format (``--value-schema FILE`` registered
under ``TOPIC-value``, or ``--value-schema-id``) and prints such values back as JSON. ``consume --group G`` reads as a member of
consumer group G (its share of the partitions, resuming from the group's commits,
auto-committing what it printed). Both go through the Python client (``api.client``),
straight to partition leaders.
``--bootstrap`` defaults to ``$LONGBOAT_BOOTSTRAP`` or the brokers of the local cluster file
(``longboat dev up`` writes it).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import click
import orjson

from api.cli.common import bootstrap_option, client_security, main, resolve_bootstrap, run_loop
from api.cli.console_format import (
    FormatError,
    Header,
    LineRecord,
    compile_format,
    default_line,
    json_field,
    parse_header,
    parse_jsonl,
    parse_offset,
    split_headers,
    start_offset,
)


def _run(coro: Any) -> Any:
    return run_loop(coro)


def _fail(e: BaseException) -> click.ClickException:
    return click.ClickException(str(e))


@main.command("produce")
@click.argument("topic")
@bootstrap_option
@click.option(
    "--key-separator",
    metavar="SEP",
    help="Split each line at the first SEP into key and value (a line without SEP is refused).",
)
@click.option("--partition", "-p", type=int, help="Send every record to this partition.")
@click.option("--acks", type=click.Choice(["all", "1", "0"]), default="all", show_default=True)
@click.option(
    "--compression",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
)
@click.option("--linger-ms", type=float, default=5, show_default=True)
@click.option(
    "--no-idempotence",
    is_flag=True,
    help="Turn the idempotent producer off (required for --acks 1 or 0).",
)
@click.option(
    "--header",
    "-H",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    help="A header for every record (repeatable).",
)
@click.option(
    "--parse-headers",
    is_flag=True,
    help="Each line starts with its own headers, h1:v1,h2:v2 then a TAB "
    "(kafka-console-producer's parse.headers=true); the rest is [key SEP] value.",
)
@click.option(
    "--jsonl",
    is_flag=True,
    help='Each line is a JSON object: {"key", "value", "headers", "timestamp", "partition"} '
    '(all optional; {"base64": ...} for bytes; consume --json prints this form).',
)
@click.option(
    "--value-format",
    type=click.Choice(["bytes", "avro", "jsonschema"]),
    default="bytes",
    show_default=True,
    help="avro/jsonschema: each value is JSON (Avro's JSON encoding for avro: unions as "
    '{"type": value}), checked and written in the schema registry\'s wire format.',
)
@click.option(
    "--value-schema",
    type=click.Path(exists=True, dir_okay=False),
    help="The value schema's file, registered under TOPIC-value (with --value-format).",
)
@click.option(
    "--value-schema-id", type=int, help="Use this registered schema instead of --value-schema."
)
@click.option(
    "--schema-registry",
    metavar="URL",
    help="The schema registry (default: the brokers, which serve one).",
)
def produce_cmd(
    topic: str,
    bootstrap: str | None,
    key_separator: str | None,
    partition: int | None,
    acks: str,
    compression: str,
    linger_ms: float,
    no_idempotence: bool,
    headers: tuple[str, ...],
    parse_headers: bool,
    jsonl: bool,
    value_format: str,
    value_schema: str | None,
    value_schema_id: int | None,
    schema_registry: str | None,
) -> None:
    """Send each line of standard input as one record of TOPIC."""
    try:
        hdrs = [parse_header(h) for h in headers]
    except FormatError as e:
        raise click.UsageError(f"--header: {e}") from None
    if value_format == "bytes" and (value_schema or value_schema_id is not None):
        raise click.UsageError("--value-schema/--value-schema-id need --value-format")
    if value_format != "bytes" and (value_schema is None) == (value_schema_id is None):
        raise click.UsageError(
            f"--value-format {value_format} needs --value-schema or --value-schema-id"
        )
    if jsonl and (key_separator or parse_headers):
        raise click.UsageError(
            "--jsonl lines carry key and headers: no --key-separator/--parse-headers"
        )
    line_parser = _line_parser(
        key_separator.encode() if key_separator else None, parse_headers, jsonl
    )
    idempotent = not no_idempotence and acks == "all"
    if not no_idempotence and acks != "all":
        click.echo("note: --acks 1/0 turns idempotence off", err=True)
    boot = resolve_bootstrap(bootstrap)
    try:
        encode = (
            None
            if value_format == "bytes"
            else _value_encoder(
                topic,
                value_format,
                schema_registry or boot,
                value_schema,
                value_schema_id,
            )
        )
        n, failed = _run(
            _produce(
                topic,
                boot,
                line_parser,
                partition,
                acks,
                compression,
                linger_ms,
                idempotent,
                hdrs,
                encode,
            )
        )
    except click.ClickException:
        raise
    except Exception as e:
        raise _fail(e) from None
    click.echo(
        f"produced {n} record(s) to {topic}" + (f", {failed} failed" if failed else ""), err=True
    )
    if failed:
        sys.exit(1)


def _registry(urls: str) -> Any:
    from api.client.schemas import SchemaRegistryClient

    return SchemaRegistryClient([u.strip() for u in urls.split(",") if u.strip()])


def _value_encoder(
    topic: str, fmt: str, registry_urls: str, schema_file: str | None, schema_id: int | None
) -> Callable[[bytes, int], bytes]:
    """Line value (JSON text) -> the registry's wire format. The schema is registered (or
    fetched by id) here, before any record is sent: a bad schema changes nothing."""
    from api.client.schemas import (
        AVRO,
        AvroSerializer,
        JSONSerializer,
        SchemaRegistryError,
        SerializationError,
    )

    registry = _registry(registry_urls)
    kind = AVRO if fmt == "avro" else "JSON"
    try:
        if schema_id is not None:
            got = registry.get_schema(schema_id)
            if got.schema_type != kind:
                raise click.ClickException(f"schema {schema_id} is {got.schema_type}, not {kind}")
            text, refs = got.schema, got.references
        else:
            assert schema_file is not None
            with open(schema_file, encoding="utf-8") as f:
                text, refs = f.read(), ()
        ser: Any = (AvroSerializer if kind == AVRO else JSONSerializer)(
            registry, text, references=refs, schema_id=schema_id
        )
        sid = ser.schema_id(topic)
    except (SchemaRegistryError, SerializationError, OSError) as e:
        raise click.ClickException(f"value schema: {e}") from None
    click.echo(f"value schema id {sid}", err=True)

    def encode(line: bytes, n: int) -> bytes:
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise FormatError(f"line {n}: the value is not JSON: {e}") from None
        try:
            out: bytes = ser.from_json(value, topic) if kind == AVRO else ser(value, topic)
        except SerializationError as e:
            raise FormatError(f"line {n}: {e}") from None
        return out

    return encode


def _line_parser(
    sep: bytes | None, parse_headers: bool, jsonl: bool
) -> Callable[[bytes, int], LineRecord | None]:
    """A line (and its number) as a record; None for a line to skip (a blank JSON line)."""

    def parse(line: bytes, n: int) -> LineRecord | None:
        if jsonl:
            return parse_jsonl(line, n) if line.strip() else None
        hdrs: list[Header] = []
        if parse_headers:
            hdrs, line = split_headers(line, n)
        key: bytes | None = None
        if sep is not None:
            k, s, v = line.partition(sep)
            if not s:
                raise FormatError(f"line {n} has no key separator {sep!r}")
            key, line = k, v
        return LineRecord(line, key, tuple(hdrs))

    return parse


async def _produce(
    topic: str,
    bootstrap: str,
    parse: Callable[[bytes, int], LineRecord | None],
    partition: int | None,
    acks: str,
    compression: str,
    linger_ms: float,
    idempotent: bool,
    headers: list[Header],
    encode: Callable[[bytes, int], bytes] | None = None,
) -> tuple[int, int]:
    from api.client import AsyncProducer, ClientError

    loop = asyncio.get_running_loop()
    stdin = sys.stdin.buffer
    read: Callable[[], bytes] = (
        (lambda: stdin.read1(1 << 16)) if hasattr(stdin, "read1") else stdin.readline
    )
    futures: list[asyncio.Future[Any]] = []
    failed = 0
    n = lineno = 0
    async with AsyncProducer(
        bootstrap,
        acks=acks,
        compression=compression,
        linger_ms=linger_ms,
        enable_idempotence=idempotent,
        security=client_security(),
    ) as p:
        tail = b""
        while True:
            chunk = await loop.run_in_executor(None, read)
            if chunk:
                lines = (tail + chunk).split(b"\n")
                tail = lines.pop()  # an unfinished line waits for its end
            else:
                lines, tail = ([tail] if tail else []), b""
            for line in lines:
                lineno += 1
                rec = parse(line.rstrip(b"\r"), lineno)
                if rec is None:
                    continue
                value = rec.value
                if encode is not None and value is not None:
                    try:
                        value = encode(value, lineno)
                    except FormatError as e:
                        # One bad line fails alone, as a refused send does.
                        failed += 1
                        click.echo(f"error: {e}", err=True)
                        continue
                hdrs = headers + list(rec.headers)
                futures.append(
                    await p.send(
                        topic,
                        value,
                        key=rec.key,
                        partition=rec.partition if rec.partition is not None else partition,
                        headers=hdrs or None,
                        timestamp_ms=rec.timestamp_ms,
                    )
                )
                n += 1
            if len(futures) >= 10_000 or not chunk:
                for f in futures:
                    try:
                        await f
                    except ClientError as e:
                        failed += 1
                        click.echo(f"error: {e}", err=True)
                futures.clear()
            if not chunk:
                break
    return n, failed


@main.command("consume")
@click.argument("topic")
@bootstrap_option
@click.option(
    "--group",
    "-g",
    metavar="GROUP",
    help="Consume as a member of this consumer group: its share of the "
    "partitions, from the group's committed offsets, committing as it goes.",
)
@click.option(
    "--from-beginning",
    is_flag=True,
    help="Start at the earliest offset (default: only new records). With --group: "
    "where the group has no committed offset.",
)
@click.option(
    "--partition",
    "-p",
    type=int,
    multiple=True,
    help="Read only this partition (repeatable). Default: all.",
)
@click.option(
    "--offset",
    "-o",
    metavar="earliest|latest|-N|N",
    help="Where each partition starts: earliest, latest, -N (N records before the end, "
    "kcat's -o -N) or the offset N (clamped to the log).",
)
@click.option(
    "--from-time",
    metavar="ISO-8601|MS",
    help="Start each partition at its first record at or after this time "
    "(ISO-8601, zone-less = local, or epoch ms).",
)
@click.option(
    "--exit",
    "-e",
    "exit_at_end",
    is_flag=True,
    help="Exit once every partition is read to the end it had at the start (kcat -e).",
)
@click.option("--max-messages", type=int, help="Exit after this many records.")
@click.option(
    "--timeout-ms",
    type=int,
    help="Exit when no record arrived for this long (default: wait forever).",
)
@click.option("--print-key", is_flag=True, help="Print KEY<TAB>VALUE.")
@click.option("--print-timestamp", is_flag=True, help="Prefix CreateTime:MS<TAB>.")
@click.option(
    "--print-headers", is_flag=True, help="Prefix h1:v1,h2:v2<TAB> (NO_HEADERS when none)."
)
@click.option(
    "--format",
    "-f",
    "fmt",
    metavar="FMT",
    help="kcat's -f: %t topic, %p partition, %o offset, %k key, %s value, %K/%S their "
    "lengths, %T timestamp (ms), %h headers, %%; \\n \\t escapes; no newline added.",
)
@click.option("--print-offset", is_flag=True, help="Prefix PARTITION:OFFSET<TAB>.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='One JSON object per record (non-UTF-8 bytes as {"base64": ...}).',
)
@click.option(
    "--value-format",
    type=click.Choice(["bytes", "avro", "jsonschema"]),
    default="bytes",
    show_default=True,
    help="avro/jsonschema: print each value as JSON, decoded by the schema id it carries "
    "(Avro's JSON encoding for avro).",
)
@click.option(
    "--schema-registry",
    metavar="URL",
    help="The schema registry (default: the brokers, which serve one).",
)
def consume_cmd(
    topic: str,
    bootstrap: str | None,
    group: str | None,
    from_beginning: bool,
    partition: tuple[int, ...],
    offset: str | None,
    from_time: str | None,
    exit_at_end: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    print_timestamp: bool,
    print_headers: bool,
    fmt: str | None,
    print_offset: bool,
    as_json: bool,
    value_format: str,
    schema_registry: str | None,
) -> None:
    """Print the records of TOPIC, one per line."""
    if group is not None and (partition or offset or from_time or exit_at_end):
        raise click.UsageError(
            "--group shares the partitions out itself and starts at its commits: "
            "no --partition, --offset, --from-time or --exit with it"
        )
    starts = [o for o in (offset, from_time) if o is not None]
    if len(starts) + from_beginning > 1:
        raise click.UsageError("give one of --from-beginning, --offset, --from-time")
    if fmt is not None and as_json:
        raise click.UsageError("--format and --json exclude each other")
    try:
        start = (
            ("time", _parse_time(from_time))
            if from_time is not None
            else parse_offset(offset)
            if offset is not None
            else ("earliest", 0)
            if from_beginning
            else ("latest", 0)
        )
        render = compile_format(fmt) if fmt is not None else None
    except FormatError as e:
        raise click.UsageError(str(e)) from None
    boot = resolve_bootstrap(bootstrap)
    printer = _Printer(
        render,
        as_json,
        {
            "print_key": print_key,
            "print_offset": print_offset,
            "print_timestamp": print_timestamp,
            "print_headers": print_headers,
        },
        None if value_format == "bytes" else _value_decoder(value_format, schema_registry or boot),
    )
    try:
        if group is not None:
            n = _run(
                _consume_group(
                    topic, boot, group, from_beginning, max_messages, timeout_ms, printer
                )
            )
        else:
            n = _run(
                _consume(
                    topic,
                    boot,
                    start,
                    list(partition),
                    exit_at_end,
                    max_messages,
                    timeout_ms,
                    printer,
                )
            )
    except KeyboardInterrupt:
        return
    except Exception as e:
        raise _fail(e) from None
    click.echo(f"Processed a total of {n} messages", err=True)


def _parse_time(text: str) -> int:
    from api.client.offset_reset import ResetError, parse_time_ms

    try:
        return parse_time_ms(text)
    except ResetError as e:
        raise FormatError(f"--from-time: {e}") from None


def _value_decoder(fmt: str, registry_urls: str) -> Callable[[bytes], bytes]:
    """A value in the registry's wire format -> its JSON text (blocking on a schema id not
    seen before: called off the event loop)."""
    from api.client.schemas import AvroDeserializer, JSONDeserializer, SerializationError

    registry = _registry(registry_urls)
    de: Any = AvroDeserializer(registry) if fmt == "avro" else JSONDeserializer(registry)
    to_json = de.to_json if fmt == "avro" else de

    def decode(v: bytes) -> bytes:
        try:
            return orjson.dumps(to_json(v))
        except SerializationError as e:
            raise click.ClickException(f"a value does not decode as {fmt}: {e}") from None

    return decode


class _Printer:
    """Records to standard output: a kcat format, JSON lines, or the console consumer's
    default line; values decoded by ``decode`` first when given (``--value-format``)."""

    def __init__(
        self,
        render: Callable[[Any], bytes] | None,
        as_json: bool,
        flags: dict[str, bool],
        decode: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self.render = render
        self.as_json = as_json
        self.flags = flags
        self.decode = decode
        self.out = sys.stdout.buffer

    async def prepare(self, records: list[Any]) -> list[Any]:
        """The records with their values decoded (in a thread: a new schema id is fetched
        from the registry)."""
        decode = self.decode
        if decode is None:
            return records
        return await asyncio.get_running_loop().run_in_executor(
            None,
            lambda: [r if r.value is None else r._replace(value=decode(r.value)) for r in records],
        )

    def line(self, r: Any) -> bytes:
        if self.render is not None:
            return self.render(r)
        if self.as_json:
            return (
                orjson.dumps(
                    {
                        "topic": r.topic,
                        "partition": r.partition,
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "key": json_field(r.key),
                        "value": json_field(r.value),
                        "headers": [[h, json_field(v)] for h, v in r.headers],
                    }
                )
                + b"\n"
            )
        return default_line(r, **self.flags)

    def write(self, records: list[Any]) -> None:
        self.out.write(b"".join(self.line(r) for r in records))
        self.out.flush()


class _UntilEnd:
    """``--exit``: each partition is read up to the end it had at the start (later records
    are left out, the partition paused), and the read is over when all are there."""

    def __init__(self, consumer: Any, end: dict[Any, int]) -> None:
        self.consumer = consumer
        self.end = end

    def keep(self, records: list[Any]) -> list[Any]:
        from api.client import TopicPartition

        return [r for r in records if r.offset < self.end[TopicPartition(r.topic, r.partition)]]

    def done(self) -> bool:
        pos = self.consumer.positions()
        reached = [tp for tp, e in self.end.items() if pos.get(tp, -1) >= e]
        for tp in reached:
            if tp not in self.consumer.paused():
                self.consumer.pause(tp)
        return len(reached) == len(self.end)


JOIN_TIMEOUT_S = 60.0
"""How long ``consume --group --timeout-ms`` waits for its first join before giving up."""


async def _print_polls(
    poll: Callable[[int, int | None], Any],
    max_messages: int | None,
    timeout_ms: int | None,
    printer: _Printer,
    ready: Callable[[], bool] | None = None,
    until: _UntilEnd | None = None,
) -> int:
    """Poll and print until ``max_messages`` or ``timeout_ms`` without a record. Until
    ``ready()`` (a group member's first join) the idle clock does not run, since a group's
    first rebalance (3 s of initial delay by default) is not idleness; with ``timeout_ms``
    the wait for it is bounded by ``JOIN_TIMEOUT_S``."""
    loop = asyncio.get_running_loop()
    n = 0
    idle_deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
    join_deadline = loop.time() + JOIN_TIMEOUT_S
    try:
        while max_messages is None or n < max_messages:
            if until is not None and until.done():
                break
            if ready is not None and ready():
                ready = None
                if timeout_ms is not None:
                    idle_deadline = loop.time() + timeout_ms / 1000
            joining = ready is not None
            if joining and timeout_ms is not None and loop.time() >= join_deadline:
                raise click.ClickException(f"did not join the group within {JOIN_TIMEOUT_S:g} s")
            wait = (
                1000 if idle_deadline is None else max(0, int((idle_deadline - loop.time()) * 1000))
            )
            if joining:
                wait = 200
            left = None if max_messages is None else max_messages - n
            records = await poll(wait, left)
            if until is not None:
                records = until.keep(records)
            if not records:
                if not joining and idle_deadline is not None and loop.time() >= idle_deadline:
                    break
                continue
            if timeout_ms is not None:
                idle_deadline = loop.time() + timeout_ms / 1000
            printer.write(await printer.prepare(records))
            n += len(records)
    except (BrokenPipeError, asyncio.CancelledError):
        pass
    return n


async def _consume(
    topic: str,
    bootstrap: str,
    start: tuple[str, int],
    partitions: list[int],
    exit_at_end: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    printer: _Printer,
) -> int:
    from api.client import AsyncConsumer, TopicPartition

    how, arg = start
    async with AsyncConsumer(
        bootstrap,
        auto_offset_reset="earliest" if how != "latest" else "latest",
        max_wait_ms=500,
        security=client_security(),
    ) as c:
        have = await c.partitions_for(topic)
        missing = sorted(set(partitions) - set(have))
        if missing:
            raise FormatError(f"topic {topic!r} has no partition(s) {missing} (it has {len(have)})")
        tps = [TopicPartition(topic, p) for p in (partitions or have)]
        c.assign(tps)
        first = await c.beginning_offsets(tps)
        end = await c.end_offsets(tps)
        if how == "time":
            found = await c.offsets_for_times({tp: arg for tp in tps})
            # No record at or after the time: the end (as kcat and Kafka's tools).
            begin = {tp: e if (o := found[tp]) is None else o for tp, e in end.items()}
        else:
            begin = {tp: start_offset(how, arg, first[tp], end[tp]) for tp in tps}
        for tp in tps:
            c.seek(tp, begin[tp])
        until = _UntilEnd(c, end) if exit_at_end else None
        return await _print_polls(c.poll, max_messages, timeout_ms, printer, until=until)


async def _consume_group(
    topic: str,
    bootstrap: str,
    group: str,
    from_beginning: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    printer: _Printer,
) -> int:
    from api.client import AsyncGroupConsumer

    # Auto-commit, and the commit on close covers everything printed: poll never returns
    # more than --max-messages, so the group resumes right after the last printed record.
    async with AsyncGroupConsumer(
        bootstrap,
        group_id=group,
        client_id="longboat-consume",
        auto_offset_reset="earliest" if from_beginning else "latest",
        enable_auto_commit=True,
        max_wait_ms=500,
        security=client_security(),
    ) as c:
        c.subscribe([topic])
        return await _print_polls(
            c.poll, max_messages, timeout_ms, printer, ready=lambda: c.generation >= 0
        )
