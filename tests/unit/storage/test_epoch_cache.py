"""Leader epoch cache: KIP-101/KIP-279 answers, truncation, persistence."""

from __future__ import annotations

import crc32c
import pytest

from storage.epoch_cache import LeaderEpochCache
from storage.errors import CorruptCheckpointError
from storage.fileio import RealFileLayer


@pytest.fixture
def cache(tmp_path) -> LeaderEpochCache:
    c = LeaderEpochCache.load(str(tmp_path), RealFileLayer())
    for epoch, start in ((1, 0), (2, 10), (5, 30)):
        assert c.assign(epoch, start)
    return c


@pytest.mark.parametrize(
    ("epoch", "answer"),
    [
        (5, (5, 50)),  # the latest epoch: the log end
        (2, (2, 30)),  # a known epoch: where the next one starts
        (3, (2, 30)),  # an unknown epoch between: the floor epoch, the next start
        (4, (2, 30)),
        (1, (1, 10)),
        (0, (0, 0)),  # below every known epoch: the first known start
        (6, (-1, -1)),  # above every known epoch
        (-1, (-1, -1)),
    ],
)
def test_end_offset_for_epoch_answers_as_kafka(cache, epoch, answer) -> None:
    assert cache.end_offset_for_epoch(epoch, log_end_offset=50) == answer


def test_assign_only_adds_new_epochs(cache) -> None:
    assert not cache.assign(5, 40)
    assert not cache.assign(3, 45)  # an older epoch after a newer one is ignored
    assert cache.assign(7, 60)
    assert cache.entries == [(1, 0), (2, 10), (5, 30), (7, 60)]


def test_assign_below_the_latest_start_replaces_the_divergent_entries(cache) -> None:
    assert cache.assign(6, 20)
    assert cache.entries == [(1, 0), (2, 10), (6, 20)]


def test_truncation_from_end_and_start_and_persistence(cache, tmp_path) -> None:
    cache.truncate_from_end(30)
    assert cache.entries == [(1, 0), (2, 10)]
    cache.truncate_from_start(15)
    assert cache.entries == [(2, 15)]
    body = "1\n1\n2 15\n"
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == (
        body + f"{crc32c.crc32c(body.encode()):08x}\n"
    )
    assert LeaderEpochCache.load(str(tmp_path), RealFileLayer()).entries == [(2, 15)]
    assert cache.epoch_for_offset(14) == -1 and cache.epoch_for_offset(99) == 2


def test_a_version_0_checkpoint_without_a_checksum_still_loads(tmp_path) -> None:
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n1 0\n3 7\n")
    assert LeaderEpochCache.load(str(tmp_path), RealFileLayer()).entries == [(1, 0), (3, 7)]


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b.replace(b"2 10", b"2 18"),  # a flipped bit that still parses
        lambda b: b[:-3],  # cut short
        lambda b: b.replace(b"\n2 10", b"\n9 10"),  # entries no longer increase
        lambda b: b"",
    ],
)
def test_a_damaged_checkpoint_is_corrupt_checkpoint_error(cache, tmp_path, damage) -> None:
    p = tmp_path / "leader-epoch-checkpoint"
    p.write_bytes(damage(p.read_bytes()))
    with pytest.raises(CorruptCheckpointError) as ei:
        LeaderEpochCache.load(str(tmp_path), RealFileLayer())
    assert ei.value.path == str(p)


def test_a_failed_write_leaves_the_cache_as_the_file_says(cache, tmp_path) -> None:
    from storage.fileio import LazyFileLayer

    files = LazyFileLayer()
    c = LeaderEpochCache.load(str(tmp_path), files)
    files.set_free_bytes(0)
    with pytest.raises(OSError):
        c.assign(9, 70)
    assert c.entries == cache.entries == LeaderEpochCache.load(str(tmp_path), files).entries
