"""``longboat log dump|verify``: inspect partition log directories, as kafka-dump-log does.

Both read the segment files directly and change nothing (no recovery runs). ``dump`` also
prints index files (a ``.index``/``.timeindex``/``.txnindex`` path, or ``--indexes`` for a
directory's), checking each entry against its segment, and decodes the records of the two internal logs
(kafka-dump-log's ``--cluster-metadata-decoder`` and ``--offsets-decoder``): the metadata
log's Raft entries (their ``metalog.records``, or the membership of a configuration entry)
and ``__consumer_offsets``' commits, tombstones and group metadata. ``verify``
exits 0 when every batch is whole with a valid CRC and offsets increase, 1 otherwise,
printing each problem as ``FILE: byte POSITION: reason``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import click

from api.cli.common import main


@main.group("log")
def log_group() -> None:
    """Inspect and verify partition log directories."""


def _jsonable(obj: Any) -> Any:
    """A decoded record as plain JSON: dataclass fields, bytes as hex, ids as text."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: _jsonable(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.name != "TYPE_ID"
        }
    if isinstance(obj, list | tuple | frozenset | set):
        return [_jsonable(x) for x in obj]
    if isinstance(obj, bytes):
        return obj.hex()
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    return str(obj)


def _decode_metadata(key: bytes | None, value: bytes | None) -> Any:
    """A metadata log record: one Raft entry (the key is its ``EntryKind``)."""
    from metalog.records import decode_records
    from raft.types import ConfState, EntryKind

    kind = key[0] if key else EntryKind.NORMAL
    if kind == EntryKind.CONF_CHANGE:
        cs = ConfState.from_bytes(value or b"")
        return {"conf_change": {"voters": sorted(cs.voters), "observers": sorted(cs.observers)}}
    if not value:
        return {"no_op": "the leader's first entry of its term"}
    return [
        {"type": type(r).__name__, "version": r.version, "data": _jsonable(r)}
        for r in decode_records(value)
    ]


def _decode_offsets(key: bytes | None, value: bytes | None) -> Any:
    from broker.groups.records import decode_record

    r = decode_record(key or b"", value)
    return {"type": type(r).__name__, "data": _jsonable(r)}


def _decoder(metadata: bool, offsets: bool) -> Any:
    if metadata and offsets:
        raise click.UsageError(
            "--cluster-metadata-decoder and --offsets-decoder exclude each other"
        )
    return _decode_metadata if metadata else _decode_offsets if offsets else None


def _decoded(decode: Any, key: bytes | None, value: bytes | None) -> Any:
    try:
        return decode(key, value)
    except Exception as e:  # a record of another log, or damaged: say so, go on
        return {"undecodable": f"{type(e).__name__}: {e}"}


def _dump_indexes(paths: list[str], as_json: bool) -> int:
    from storage.dump import Problem, walk_index

    problems = 0
    for path in paths:
        if not as_json:
            click.echo(f"Dumping {path}")
        for item in walk_index(path):
            if isinstance(item, Problem):
                problems += 1
                if as_json:
                    click.echo(
                        json.dumps(
                            {"path": item.path, "position": item.position, "problem": item.reason}
                        )
                    )
                else:
                    click.echo(f"problem at byte {item.position}: {item.reason}")
            elif as_json:
                click.echo(json.dumps(item.to_json()))
            else:
                click.echo(str(item))
    return problems


@log_group.command("dump")
@click.argument("path", type=click.Path(exists=True))
@click.option("--records", is_flag=True, help="Also print every record of every batch.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per batch per line.")
@click.option(
    "--indexes",
    is_flag=True,
    help="Dump the directory's .index/.timeindex/.txnindex files (a path to one index file "
    "needs no flag).",
)
@click.option(
    "--cluster-metadata-decoder",
    is_flag=True,
    help="Decode the records of the metadata log (DATA_DIR/__cluster_metadata-0/log); "
    "implies --records.",
)
@click.option(
    "--offsets-decoder",
    is_flag=True,
    help="Decode the records of __consumer_offsets partitions; implies --records.",
)
def dump(
    path: str,
    records: bool,
    as_json: bool,
    indexes: bool,
    cluster_metadata_decoder: bool,
    offsets_decoder: bool,
) -> None:
    """Print the batches (and records) of a log directory or one .log file, or the entries
    of index files."""
    from storage.dump import (
        BatchInfo,
        format_batch,
        format_record,
        index_files,
        is_index_file,
        segment_files,
        walk_segment,
    )

    decode = _decoder(cluster_metadata_decoder, offsets_decoder)
    if indexes or is_index_file(path):
        files = index_files(path)
        if not files:
            raise click.ClickException(
                f"{path} holds no index files (*.index, *.timeindex, *.txnindex): a segment's "
                "are written when it rolls and when the node stops cleanly"
            )
        if _dump_indexes(files, as_json):
            sys.exit(1)
        return
    records = records or decode is not None
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
                out = item.to_json()
                if decode is not None:
                    for r, j in zip(item.records or [], out.get("records", []), strict=True):
                        j["decoded"] = _decoded(decode, r.key, r.value)
                click.echo(json.dumps(out))
                continue
            click.echo(format_batch(item))
            if item.records_error:
                click.echo(f"| records do not decode: {item.records_error}")
            for r in item.records or []:
                if decode is None:
                    click.echo(format_record(r, control=item.header.is_control))
                else:
                    decoded = json.dumps(_decoded(decode, r.key, r.value), sort_keys=True)
                    click.echo(f"| offset: {r.offset} CreateTime: {r.timestamp} payload: {decoded}")
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
