"""The file layers: real, and lazy (loses unsynced bytes on crash)."""

from __future__ import annotations

import errno
import os
import random

import pytest

from storage.fileio import (
    LAZYFS_ENV,
    LazyFileLayer,
    RealFileLayer,
    default_file_layer,
)


@pytest.mark.parametrize("layer", [RealFileLayer, LazyFileLayer])
def test_append_pread_truncate_size(layer, tmp_path) -> None:
    fl = layer()
    f = fl.open(str(tmp_path / "a"))
    assert f.write(b"hello") == 0
    assert f.writev([b" ", memoryview(b"world")]) == 5
    assert f.size() == 11
    assert f.pread(5, 6) == b"world"
    assert f.pread(100, 9) == b"ld"
    f.truncate(5)
    assert f.size() == 5 and f.pread(100, 0) == b"hello"
    f.fsync()
    f.close()
    assert fl.read_file(str(tmp_path / "a")) == b"hello"


@pytest.mark.parametrize("layer", [RealFileLayer, LazyFileLayer])
def test_write_file_atomic_replaces_and_fsyncs_the_directory(layer, tmp_path) -> None:
    fl = layer()
    p = str(tmp_path / "cp")
    fl.write_file_atomic(p, b"one")
    fl.write_file_atomic(p, b"two")
    assert fl.read_file(p) == b"two"
    assert sorted(fl.listdir(str(tmp_path))) == ["cp"]
    if isinstance(fl, LazyFileLayer):
        assert fl.dir_fsyncs == 2


def test_lazy_layer_keeps_unsynced_bytes_off_disk(tmp_path) -> None:
    fl = LazyFileLayer()
    f = fl.open(str(tmp_path / "a"))
    f.write(b"synced")
    f.fsync()
    f.write(b"-pending")
    assert os.path.getsize(tmp_path / "a") == 6
    assert f.pread(100, 0) == b"synced-pending"
    assert fl.unsynced_bytes() == 8
    fl.crash()
    with pytest.raises(OSError):
        f.pread(1, 0)
    assert (tmp_path / "a").read_bytes() == b"synced"


def test_lazy_layer_unsynced_truncate_is_lost_too(tmp_path) -> None:
    fl = LazyFileLayer()
    f = fl.open(str(tmp_path / "a"))
    f.write(b"0123456789")
    f.fsync()
    f.truncate(3)
    f.write(b"abc")
    assert f.pread(100, 0) == b"012abc"
    fl.crash()
    assert (tmp_path / "a").read_bytes() == b"0123456789"


def test_lazy_crash_with_rng_leaves_a_prefix_of_what_was_written(tmp_path) -> None:
    seen = set()
    for seed in range(40):
        p = tmp_path / f"f{seed}"
        fl = LazyFileLayer()
        f = fl.open(str(p))
        f.write(b"A" * 10)
        f.fsync()
        f.write(b"B" * 20)
        fl.crash(random.Random(seed))
        data = p.read_bytes()
        assert data.startswith(b"A" * 10)
        rest = data[10:]
        n = len(rest.rstrip(b"\0"))
        assert rest[:n] == b"B" * n and set(rest[n:]) <= {0} and len(rest) <= 20
        seen.add("zeros" if n < len(rest) else ("none" if not rest else "prefix"))
    assert seen == {"zeros", "none", "prefix"}


def test_lazy_handles_survive_a_rename_over_their_file(tmp_path) -> None:
    fl = LazyFileLayer()
    old = fl.open(str(tmp_path / "seg"))
    old.write(b"old data")
    new = fl.open(str(tmp_path / "seg.cleaned"))
    new.write(b"new")
    new.fsync()
    fl.replace(str(tmp_path / "seg.cleaned"), str(tmp_path / "seg"))
    assert old.pread(100, 0) == b"old data"  # the old inode, as on POSIX
    assert new.pread(100, 0) == b"new"
    assert fl.read_file(str(tmp_path / "seg")) == b"new"


def test_default_file_layer_follows_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(LAZYFS_ENV, raising=False)
    assert isinstance(default_file_layer(), RealFileLayer)
    monkeypatch.setenv(LAZYFS_ENV, "1")
    assert isinstance(default_file_layer(), LazyFileLayer)


# --------------------------------------------------------------------------- fault injection


def test_a_failed_fsync_loses_its_bytes_though_the_next_fsync_succeeds(tmp_path) -> None:
    """Linux's behaviour since 4.13, the reason for "fsyncgate": the error is reported once,
    the failed pages are marked clean, and a later fsync succeeds without them."""
    fl = LazyFileLayer()
    p = tmp_path / "a"
    f = fl.open(str(p))
    f.write(b"one-")
    f.fsync()
    f.write(b"two-")
    fl.fail_fsync(1)
    with pytest.raises(OSError) as ei:
        f.fsync()
    assert ei.value.errno == errno.EIO
    assert f.pread(100, 0) == b"one-two-"  # still in the page cache
    f.write(b"three")
    f.fsync()  # succeeds: the error was reported once
    assert p.read_bytes() == b"one-" + bytes(4) + b"three"
    assert f.pread(100, 0) == b"one-" + bytes(4) + b"three"


def test_fail_fsync_counts_only_matching_paths(tmp_path) -> None:
    fl = LazyFileLayer()
    a, b = fl.open(str(tmp_path / "x.log")), fl.open(str(tmp_path / "x.index"))
    fl.fail_fsync(2, match=".log")
    b.fsync()
    a.fsync()
    b.fsync()
    with pytest.raises(OSError):
        a.fsync()
    a.fsync()


def test_a_failed_write_may_append_part_of_its_bytes_first(tmp_path) -> None:
    fl = LazyFileLayer()
    f = fl.open(str(tmp_path / "a"))
    f.write(b"ok")
    fl.fail_write(1, partial_bytes=3)
    with pytest.raises(OSError) as ei:
        f.writev([b"abcd", b"efgh"])
    assert ei.value.errno == errno.EIO
    assert f.pread(100, 0) == b"okabc" and f.size() == 5
    assert f.writev([b"!"]) == 5


def test_a_full_disk_makes_a_short_write_then_enospc_and_frees_space_on_truncate(tmp_path) -> None:
    fl = LazyFileLayer()
    f = fl.open(str(tmp_path / "a"))
    fl.set_free_bytes(6)
    f.write(b"1234")
    with pytest.raises(OSError) as ei:
        f.write(b"5678")
    assert ei.value.errno == errno.ENOSPC
    assert f.pread(100, 0) == b"123456" and fl.free_bytes == 0
    f.truncate(4)  # roll the short write back: its two bytes are free again
    assert fl.free_bytes == 2
    f.write(b"56")
    fl.unlink(str(tmp_path / "a"))
    assert fl.free_bytes == 6
    fl.set_free_bytes(None)


def test_flip_bit_reaches_the_disk_or_the_unsynced_tail(tmp_path) -> None:
    fl = LazyFileLayer()
    p = tmp_path / "a"
    f = fl.open(str(p))
    f.write(b"\x00\x00")
    f.fsync()
    f.write(b"\x00")
    fl.flip_bit(str(p), 0, bit=1)  # durable: on disk
    fl.flip_bit(str(p), 2, bit=7)  # unsynced: in the tail
    assert p.read_bytes() == b"\x02\x00"
    assert f.pread(3, 0) == b"\x02\x00\x80"
