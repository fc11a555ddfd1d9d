"""The broker's clean-shutdown marker (KIP-966): taken once, durably, and only trusted whole;
the data directory's lock and the incarnation that held it before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.clean_shutdown import (
    INCARNATION_NAME,
    MARKER_NAME,
    claim_data_dir,
    take_marker,
    write_marker,
)
from storage.fileio import LazyFileLayer


def test_no_marker_means_an_unclean_shutdown(tmp_path: Path) -> None:
    assert take_marker(tmp_path, LazyFileLayer()) is None


def test_a_marker_is_read_once_and_deleted_durably(tmp_path: Path) -> None:
    files = LazyFileLayer()
    write_marker(tmp_path, 1234, files)
    files.crash()  # written with fsyncs: a power cut right after keeps it
    dir_fsyncs = files.dir_fsyncs
    assert take_marker(tmp_path, files) == 1234
    assert not (tmp_path / MARKER_NAME).exists()
    assert files.dir_fsyncs > dir_fsyncs  # the deletion is made durable
    assert take_marker(tmp_path, files) is None  # a crash of this process is unclean


def test_write_creates_the_data_directory(tmp_path: Path) -> None:
    where = tmp_path / "new"
    write_marker(where, 7, LazyFileLayer())
    assert take_marker(where, LazyFileLayer()) == 7


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'{"version": 1, "broker_epoch": 5}',
        b'{"version": 0}',
        b'{"version": 0, "broker_epoch": "5"}',
        b'{"version": 0, "broker_epoch": -3}',
        b'{"version": 0, "broker_epoch": true}',
        b"\xff\xfe",
    ],
)
def test_a_damaged_marker_counts_as_unclean_and_is_removed(tmp_path: Path, body: bytes) -> None:
    (tmp_path / MARKER_NAME).write_bytes(body)
    assert take_marker(tmp_path, LazyFileLayer()) is None
    assert not os.path.exists(tmp_path / MARKER_NAME)


# --------------------------------------------------------------------------- data dir claim


def test_the_next_holder_of_the_data_directory_names_the_previous_incarnation(
    tmp_path: Path,
) -> None:
    files = LazyFileLayer()
    first = claim_data_dir(tmp_path, "a", files)
    assert first.lock_fd is not None and first.previous_incarnation_id is None
    files.crash()  # recorded with fsyncs before registering: a power cut keeps it
    first.release()  # the kernel drops a dead process's lock
    second = claim_data_dir(tmp_path, "b", files)
    assert second.previous_incarnation_id == "a"
    second.release()


def test_a_directory_another_process_holds_proves_nothing(tmp_path: Path) -> None:
    """Two processes given one data directory: the second must not name the first as dead,
    nor overwrite the record of the live holder."""
    files = LazyFileLayer()
    holder = claim_data_dir(tmp_path, "a", files)
    try:
        code = (
            "import sys; from broker.clean_shutdown import claim_data_dir; "
            "c = claim_data_dir(sys.argv[1], 'b'); "
            "print(c.lock_fd is None, c.previous_incarnation_id)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        ).stdout.split()
        assert out == ["True", "None"]
    finally:
        holder.release()
    again = claim_data_dir(tmp_path, "c", files)
    assert again.previous_incarnation_id == "a"
    again.release()


@pytest.mark.parametrize(
    "body", [b"", b"{", b"[]", b'{"version": 1, "incarnation_id": "a"}', b'{"version": 0}']
)
def test_a_damaged_incarnation_record_names_no_one(tmp_path: Path, body: bytes) -> None:
    (tmp_path / INCARNATION_NAME).write_bytes(body)
    claim = claim_data_dir(tmp_path, "b", LazyFileLayer())
    assert claim.previous_incarnation_id is None
    claim.release()
    assert claim_data_dir(tmp_path, "c", LazyFileLayer()).previous_incarnation_id == "b"
