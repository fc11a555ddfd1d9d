"""``longboat log dump|verify``: inspect partition log directories, as kafka-dump-log does.

Both read the segment files directly and change nothing (no recovery runs). ``verify``
exits 0 when every batch is whole with a valid CRC and offsets increase, 1 otherwise,
printing each problem as ``FILE: byte POSITION: reason``.
"""

from __future__ import annotations

import json
import sys

import click

from api.cli.common import main


@main.group("log")
def log_group() -> None:
    """Inspect and verify partition log directories."""


@log_group.command("dump")
@click.argument("path", type=click.Path(exists=True))
@click.option("--records", is_flag=True, help="Also print every record of every batch.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per batch per line.")
def dump(path: str, records: bool, as_json: bool) -> None:
    """Print the batches (and records) of a log directory or one .log file."""
    from storage.dump import BatchInfo, format_batch, format_record, segment_files, walk_segment

    problems = 0
    segments = segment_files(path)
    if not segments:
        raise click.ClickException(f"{path} holds no segment files (*.log)")
    for seg_path in segments:
        if not as_json:
            click.echo(f"Dumping {seg_path}")
        for item in walk_segment(seg_path, records=records):
            if not isinstance(item, BatchInfo):
                problems += 1
                if as_json:
                    click.echo(
                        json.dumps(
                            {"path": item.path, "position": item.position, "problem": item.reason}
                        )
                    )
                else:
                    click.echo(f"problem at byte {item.position}: {item.reason}")
                continue
            if as_json:
                click.echo(json.dumps(item.to_json()))
                continue
            click.echo(format_batch(item))
            if item.records_error:
                click.echo(f"| records do not decode: {item.records_error}")
            for r in item.records or []:
                click.echo(format_record(r, control=item.header.is_control))
    if problems:
        sys.exit(1)


@log_group.command("verify")
@click.argument("path", type=click.Path(exists=True))
def verify(path: str) -> None:
    """Check every batch's header and CRC; exit 1 with file and byte position if any is bad."""
    from storage.dump import segment_files, verify_dir

    files = len(segment_files(path))
    if files == 0:
        # An empty answer would read as "clean": name the likely mistake instead.
        raise click.ClickException(
            f"{path} holds no segment files (*.log); point at a partition log directory, "
            "e.g. DATA_DIR/<topic>-<partition> or DATA_DIR/__cluster_metadata-0/log"
        )
    count, problems = verify_dir(path)
    for p in problems:
        click.echo(str(p), err=True)
    if problems:
        click.echo(f"{len(problems)} problem(s) in {count} batches, {files} segment(s)", err=True)
        sys.exit(1)
    click.echo(f"ok: {count} batches in {files} segment(s), all CRCs valid")
