"""The broker's clean-shutdown marker (KIP-966): taken once, durably, and only trusted whole."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.clean_shutdown import MARKER_NAME, take_marker, write_marker
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
