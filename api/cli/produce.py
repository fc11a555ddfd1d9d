"""``longboat produce`` and ``longboat consume``: the console producer and consumer.

As Kafka's ``kafka-console-producer`` / ``kafka-console-consumer``: lines of standard input
become records (``--key-separator`` splits a key off each line), and records are printed one
per line. ``consume --group G`` reads as a member of consumer group G (its share of the
partitions, resuming from the group's commits, auto-committing what it printed). Both go through the Python client (``api.client``), straight to partition leaders.
``--bootstrap`` defaults to ``$LONGBOAT_BOOTSTRAP`` or the brokers of the local cluster file
(``longboat dev up`` writes it).
"""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import Callable
from typing import Any

import click
import orjson

from api.cli.common import bootstrap_option, main, resolve_bootstrap, run_loop


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
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    help="A header for every record (repeatable).",
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
) -> None:
    """Send each line of standard input as one record of TOPIC."""
    hdrs: list[tuple[str, bytes | None]] = []
    for h in headers:
        name, sep, value = h.partition("=")
        if not sep or not name:
            raise click.UsageError(f"--header {h!r}: expected NAME=VALUE")
        hdrs.append((name, value.encode()))
    idempotent = not no_idempotence and acks == "all"
    if not no_idempotence and acks != "all":
        click.echo("note: --acks 1/0 turns idempotence off", err=True)
    boot = resolve_bootstrap(bootstrap)
    sep_bytes = key_separator.encode() if key_separator else None
    try:
        n, failed = _run(
            _produce(
                topic, boot, sep_bytes, partition, acks, compression, linger_ms, idempotent, hdrs
            )
        )
    except Exception as e:
        raise _fail(e) from None
    click.echo(
        f"produced {n} record(s) to {topic}" + (f", {failed} failed" if failed else ""), err=True
    )
    if failed:
        sys.exit(1)


async def _produce(
    topic: str,
    bootstrap: str,
    sep: bytes | None,
    partition: int | None,
    acks: str,
    compression: str,
    linger_ms: float,
    idempotent: bool,
    headers: list[tuple[str, bytes | None]],
) -> tuple[int, int]:
    from api.client import AsyncProducer, ClientError

    loop = asyncio.get_running_loop()
    stdin = sys.stdin.buffer
    read: Callable[[], bytes] = (
        (lambda: stdin.read1(1 << 16)) if hasattr(stdin, "read1") else stdin.readline
    )
    futures: list[asyncio.Future[Any]] = []
    failed = 0
    n = 0
    async with AsyncProducer(
        bootstrap,
        acks=acks,
        compression=compression,
        linger_ms=linger_ms,
        enable_idempotence=idempotent,
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
                line = line.rstrip(b"\r")
                key: bytes | None = None
                if sep is not None:
                    k, s, v = line.partition(sep)
                    if not s:
                        raise ClientError(
                            "INVALID_RECORD", f"line {n + 1} has no key separator {sep!r}"
                        )
                    key, line = k, v
                futures.append(
                    await p.send(topic, line, key=key, partition=partition, headers=headers or None)
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


def _text(b: bytes | None) -> str:
    if b is None:
        return "null"
    return b.decode("utf-8", errors="backslashreplace")


def _json_field(b: bytes | None) -> Any:
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode()}


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
@click.option("--offset", type=int, help="Start at this offset (with one --partition).")
@click.option("--max-messages", type=int, help="Exit after this many records.")
@click.option(
    "--timeout-ms",
    type=int,
    help="Exit when no record arrived for this long (default: wait forever).",
)
@click.option("--print-key", is_flag=True, help="Print KEY<TAB>VALUE.")
@click.option("--print-offset", is_flag=True, help="Prefix PARTITION:OFFSET<TAB>.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='One JSON object per record (non-UTF-8 bytes as {"base64": ...}).',
)
def consume_cmd(
    topic: str,
    bootstrap: str | None,
    group: str | None,
    from_beginning: bool,
    partition: tuple[int, ...],
    offset: int | None,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    print_offset: bool,
    as_json: bool,
) -> None:
    """Print the records of TOPIC, one per line."""
    if group is not None and (partition or offset is not None):
        raise click.UsageError(
            "--group shares the partitions out itself: no --partition or --offset with it"
        )
    if offset is not None and len(partition) != 1:
        raise click.UsageError("--offset needs exactly one --partition")
    boot = resolve_bootstrap(bootstrap)
    printer = _Printer(print_key, print_offset, as_json)
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
                    from_beginning,
                    list(partition),
                    offset,
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


class _Printer:
    def __init__(self, print_key: bool, print_offset: bool, as_json: bool) -> None:
        self.print_key = print_key
        self.print_offset = print_offset
        self.as_json = as_json
        self.out = sys.stdout.buffer

    def write(self, records: list[Any]) -> None:
        lines = []
        for r in records:
            if self.as_json:
                lines.append(
                    orjson.dumps(
                        {
                            "topic": r.topic,
                            "partition": r.partition,
                            "offset": r.offset,
                            "timestamp": r.timestamp,
                            "key": _json_field(r.key),
                            "value": _json_field(r.value),
                            "headers": [[h, _json_field(v)] for h, v in r.headers],
                        }
                    )
                )
                continue
            s = _text(r.value)
            if self.print_key:
                s = f"{_text(r.key)}\t{s}"
            if self.print_offset:
                s = f"{r.partition}:{r.offset}\t{s}"
            lines.append(s.encode())
        self.out.write(b"\n".join(lines) + b"\n")
        self.out.flush()


JOIN_TIMEOUT_S = 60.0
"""How long ``consume --group --timeout-ms`` waits for its first join before giving up."""


async def _print_polls(
    poll: Callable[[int, int | None], Any],
    max_messages: int | None,
    timeout_ms: int | None,
    printer: _Printer,
    ready: Callable[[], bool] | None = None,
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
            if not records:
                if not joining and idle_deadline is not None and loop.time() >= idle_deadline:
                    break
                continue
            if timeout_ms is not None:
                idle_deadline = loop.time() + timeout_ms / 1000
            printer.write(records)
            n += len(records)
    except (BrokenPipeError, asyncio.CancelledError):
        pass
    return n


async def _consume(
    topic: str,
    bootstrap: str,
    from_beginning: bool,
    partitions: list[int],
    offset: int | None,
    max_messages: int | None,
    timeout_ms: int | None,
    printer: _Printer,
) -> int:
    from api.client import AsyncConsumer, TopicPartition

    async with AsyncConsumer(
        bootstrap, auto_offset_reset="earliest" if from_beginning else "latest", max_wait_ms=500
    ) as c:
        parts = partitions or await c.partitions_for(topic)
        tps = [TopicPartition(topic, p) for p in parts]
        c.assign(tps)
        if offset is not None:
            c.seek(tps[0], offset)
        elif from_beginning:
            await c.seek_to_beginning(*tps)
        else:
            await c.seek_to_end(*tps)
        return await _print_polls(c.poll, max_messages, timeout_ms, printer)


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
    ) as c:
        c.subscribe([topic])
        return await _print_polls(
            c.poll, max_messages, timeout_ms, printer, ready=lambda: c.generation >= 0
        )
