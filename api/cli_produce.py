"""``longboat produce`` and ``longboat consume``: the console producer and consumer.

As Kafka's ``kafka-console-producer`` / ``kafka-console-consumer``: lines of standard input
become records (``--key-separator`` splits a key off each line), and records are printed one
per line. Both go through the Python client (``api.client``), straight to partition leaders.
``--bootstrap`` defaults to ``$LONGBOAT_BOOTSTRAP`` or the brokers of the local cluster file
(``longboat dev up`` writes it).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from collections.abc import Callable
from typing import Any

import click
import orjson

from api.cli import main
from api.cli_dev import cluster_file, load_cluster


def default_bootstrap() -> str | None:
    env = os.environ.get("LONGBOAT_BOOTSTRAP")
    if env:
        return env
    cluster = load_cluster()
    if cluster and cluster.get("brokers"):
        return ",".join(b["url"] for b in cluster["brokers"])
    return None


def resolve_bootstrap(bootstrap: str | None) -> str:
    b = bootstrap or default_bootstrap()
    if not b:
        raise click.UsageError(
            f"no --bootstrap given, $LONGBOAT_BOOTSTRAP unset and no local cluster file at "
            f"{cluster_file()} (start one with `longboat dev up` or pass --bootstrap URL)")
    return b


bootstrap_option = click.option(
    "--bootstrap", "-b", metavar="URL[,URL...]",
    help="Broker URL(s). Default: $LONGBOAT_BOOTSTRAP, else the local cluster file.")


def _run(coro: Any) -> Any:
    from api.cli_quorum import run_loop
    return run_loop(coro)


def _fail(e: BaseException) -> click.ClickException:
    return click.ClickException(str(e))


@main.command("produce")
@click.argument("topic")
@bootstrap_option
@click.option("--key-separator", metavar="SEP",
              help="Split each line at the first SEP into key and value (a line without "
                   "SEP is refused).")
@click.option("--partition", "-p", type=int, help="Send every record to this partition.")
@click.option("--acks", type=click.Choice(["all", "1", "0"]), default="all", show_default=True)
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              default="none", show_default=True)
@click.option("--linger-ms", type=float, default=5, show_default=True)
@click.option("--no-idempotence", is_flag=True,
              help="Turn the idempotent producer off (required for --acks 1 or 0).")
@click.option("--header", "headers", multiple=True, metavar="NAME=VALUE",
              help="A header for every record (repeatable).")
def produce_cmd(topic: str, bootstrap: str | None, key_separator: str | None,
                partition: int | None, acks: str, compression: str, linger_ms: float,
                no_idempotence: bool, headers: tuple[str, ...]) -> None:
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
        n, failed = _run(_produce(topic, boot, sep_bytes, partition, acks, compression, linger_ms,
                                  idempotent, hdrs))
    except Exception as e:
        raise _fail(e) from None
    click.echo(f"produced {n} record(s) to {topic}"
               + (f", {failed} failed" if failed else ""), err=True)
    if failed:
        sys.exit(1)


async def _produce(topic: str, bootstrap: str, sep: bytes | None, partition: int | None,
                   acks: str, compression: str, linger_ms: float, idempotent: bool,
                   headers: list[tuple[str, bytes | None]]) -> tuple[int, int]:
    from api.client import AsyncProducer, ClientError

    loop = asyncio.get_running_loop()
    stdin = sys.stdin.buffer
    read: Callable[[], bytes] = (
        (lambda: stdin.read1(1 << 16)) if hasattr(stdin, "read1") else stdin.readline)
    futures: list[asyncio.Future[Any]] = []
    failed = 0
    n = 0
    async with AsyncProducer(bootstrap, acks=acks, compression=compression,
                             linger_ms=linger_ms, enable_idempotence=idempotent) as p:
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
                        raise ClientError("INVALID_RECORD",
                                          f"line {n + 1} has no key separator {sep!r}")
                    key, line = k, v
                futures.append(await p.send(topic, line, key=key, partition=partition,
                                            headers=headers or None))
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
@click.option("--from-beginning", is_flag=True,
              help="Start at the earliest offset (default: only new records).")
@click.option("--partition", "-p", type=int, multiple=True,
              help="Read only this partition (repeatable). Default: all.")
@click.option("--offset", type=int, help="Start at this offset (with one --partition).")
@click.option("--max-messages", type=int, help="Exit after this many records.")
@click.option("--timeout-ms", type=int,
              help="Exit when no record arrived for this long (default: wait forever).")
@click.option("--print-key", is_flag=True, help="Print KEY<TAB>VALUE.")
@click.option("--print-offset", is_flag=True, help="Prefix PARTITION:OFFSET<TAB>.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per record (non-UTF-8 bytes as {\"base64\": ...}).")
def consume_cmd(topic: str, bootstrap: str | None, from_beginning: bool,
                partition: tuple[int, ...], offset: int | None, max_messages: int | None,
                timeout_ms: int | None, print_key: bool, print_offset: bool,
                as_json: bool) -> None:
    """Print the records of TOPIC, one per line."""
    if offset is not None and len(partition) != 1:
        raise click.UsageError("--offset needs exactly one --partition")
    boot = resolve_bootstrap(bootstrap)
    try:
        n = _run(_consume(topic, boot, from_beginning, list(partition), offset, max_messages,
                          timeout_ms, print_key, print_offset, as_json))
    except KeyboardInterrupt:
        return
    except Exception as e:
        raise _fail(e) from None
    click.echo(f"Processed a total of {n} messages", err=True)


async def _consume(topic: str, bootstrap: str, from_beginning: bool, partitions: list[int],
                   offset: int | None, max_messages: int | None, timeout_ms: int | None,
                   print_key: bool, print_offset: bool, as_json: bool) -> int:
    from api.client import AsyncConsumer, TopicPartition

    out = sys.stdout.buffer
    n = 0
    loop = asyncio.get_running_loop()
    async with AsyncConsumer(bootstrap,
                             auto_offset_reset="earliest" if from_beginning else "latest",
                             max_wait_ms=500) as c:
        parts = partitions or await c.partitions_for(topic)
        tps = [TopicPartition(topic, p) for p in parts]
        c.assign(tps)
        if offset is not None:
            c.seek(tps[0], offset)
        elif from_beginning:
            await c.seek_to_beginning(*tps)
        else:
            await c.seek_to_end(*tps)
        idle_deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
        try:
            while max_messages is None or n < max_messages:
                wait = 1000 if idle_deadline is None else max(
                    0, int((idle_deadline - loop.time()) * 1000))
                left = None if max_messages is None else max_messages - n
                records = await c.poll(wait, max_records=left)
                if not records:
                    if idle_deadline is not None and loop.time() >= idle_deadline:
                        break
                    continue
                if timeout_ms is not None:
                    idle_deadline = loop.time() + timeout_ms / 1000
                lines = []
                for r in records:
                    if as_json:
                        lines.append(orjson.dumps({
                            "topic": r.topic, "partition": r.partition, "offset": r.offset,
                            "timestamp": r.timestamp, "key": _json_field(r.key),
                            "value": _json_field(r.value),
                            "headers": [[h, _json_field(v)] for h, v in r.headers]}))
                        continue
                    s = _text(r.value)
                    if print_key:
                        s = f"{_text(r.key)}\t{s}"
                    if print_offset:
                        s = f"{r.partition}:{r.offset}\t{s}"
                    lines.append(s.encode())
                out.write(b"\n".join(lines) + b"\n")
                out.flush()
                n += len(records)
        except (BrokenPipeError, asyncio.CancelledError):
            pass
    return n
