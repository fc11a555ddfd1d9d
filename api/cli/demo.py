"""``longboat demo``: write a small partition log with the storage engine and show it.

Until the cluster exists this is what ``./scripts/run.sh`` runs: it appends batches as a
leader over two leader epochs, rolls segments, compacts, closes cleanly, reopens, reads and
looks up by timestamp, then prints the ``longboat log dump|verify`` commands to try.
"""

from __future__ import annotations

import os
import tempfile

import click

from api.cli.common import main


@main.command("demo")
@click.option(
    "--dir",
    "dir_path",
    type=click.Path(file_okay=False),
    default=None,
    help="Where to write the log (default: a new temporary directory).",
)
def demo(dir_path: str | None) -> None:
    """Write a small demo partition log and print what happened."""
    from storage.batch import decode_records, encode_batch, iter_batches
    from storage.config import LogConfig
    from storage.fileio import default_file_layer
    from storage.log import PartitionLog

    root = dir_path or tempfile.mkdtemp(prefix="longboat-demo-")
    log_dir = os.path.join(root, "orders-0")
    config = LogConfig.from_kafka(
        {
            "segment.bytes": "4096",
            "index.interval.bytes": "512",
            "cleanup.policy": "compact,delete",
            "retention.ms": "-1",
        }
    )
    now_ms = 1_700_000_000_000
    log = PartitionLog.open(log_dir, config, default_file_layer(), now_ms)
    click.echo(f"opened {log_dir}: log start {log.log_start_offset}, end {log.log_end_offset}")
    for i in range(40):
        epoch = 0 if i < 20 else 1
        records = [
            (
                f"customer-{(i * 5 + j) % 60}".encode(),
                f"order {i * 5 + j}".encode(),
                now_ms + i * 1000 + j,
                [("source", b"demo")],
            )
            for j in range(5)
        ]
        base, last = log.append(encode_batch(records), leader_epoch=epoch, now_ms=now_ms)
        if i in (0, 19, 20, 39):
            click.echo(f"appended batch {i}: offsets {base}..{last} in leader epoch {epoch}")
    log.flush()
    click.echo(
        f"flushed: recovery point {log.flushed_offset}; "
        f"{len(log.segments)} segments of segment.bytes={config.segment_bytes}"
    )
    click.echo(
        f"leader epochs (epoch, start offset): {log.leader_epoch_cache.entries}; "
        f"end offset of epoch 0: {log.end_offset_for_epoch(0)}"
    )
    if log.maybe_compact(now_ms + 3_600_000):
        click.echo(
            "compacted the closed segments: latest order per customer kept, offsets unchanged"
        )
    log.close()
    log = PartitionLog.open(log_dir, config, default_file_layer(), now_ms)
    r = log.read(0, 2048)
    first = [(p, h.base_offset, h.last_offset) for p, h in iter_batches(r.data)]
    click.echo(
        f"reopened (clean shutdown): read(0, 2048) gave {len(r.data)} bytes, "
        f"batches (position, base, last) {first}"
    )
    ts = now_ms + 25_000
    off = log.offset_for_timestamp(ts)
    click.echo(f"offset_for_timestamp({ts}) = {off}")
    if off is not None:
        batch = log.read(off, 1).data
        rec = next(r for r in decode_records(batch) if r.offset >= off)
        click.echo(f"  -> {rec.key!r}: {rec.value!r} at {rec.timestamp}")
    log.close()  # (segment paths stay valid for the hint below)
    click.echo("")
    click.echo("Try:")
    click.echo(f"  longboat log dump {log_dir} --records | head -20")
    click.echo(f"  longboat log dump {log_dir} --json | head -3")
    click.echo(f"  longboat log verify {log_dir}")
    seg = next(s.log_path for s in log.segments if s.size_bytes > 200)
    click.echo("  # flip a byte and verify again (exit status 1, with file and position):")
    click.echo(
        f"  printf '\\xff' | dd of={seg} bs=1 seek=100 conv=notrunc 2>/dev/null; "
        f"longboat log verify {log_dir}"
    )
