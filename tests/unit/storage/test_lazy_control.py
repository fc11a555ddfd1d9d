"""The lazy layer's control file: how a harness arms disk faults inside a running node."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest

from storage.fileio import LazyFileLayer


def test_commands_arm_the_faults_they_name(tmp_path: Path) -> None:
    layer = LazyFileLayer()
    layer.apply_command("fail-fsync 2 EIO seg")
    layer.apply_command("free-bytes 100")
    f = layer.open(str(tmp_path / "seg.log"))
    f.write(b"x" * 10)
    f.fsync()  # the first fsync of a matching file passes
    f.write(b"y" * 10)
    with pytest.raises(OSError) as e:
        f.fsync()
    assert e.value.errno == errno.EIO
    with pytest.raises(OSError) as e:
        f.write(b"z" * 200)
    assert e.value.errno == errno.ENOSPC
    layer.apply_command("free-bytes none")
    f.write(b"z" * 200)


@pytest.mark.parametrize("line", ["explode", "free-bytes", "fail-fsync x", "fail-write 1 NOSUCH"])
def test_a_bad_command_is_refused(line: str) -> None:
    with pytest.raises((ValueError, AttributeError)):
        LazyFileLayer().apply_command(line)


def test_the_watcher_applies_a_command_file_once_and_removes_it(tmp_path: Path) -> None:
    layer = LazyFileLayer()
    control = tmp_path / "control"
    layer.watch_control_file(str(control), interval_s=0.01)
    control.write_text("nonsense\nfail-write 1 ENOSPC\n")
    deadline = time.monotonic() + 5
    while control.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not control.exists()
    f = layer.open(str(tmp_path / "a.log"))
    with pytest.raises(OSError) as e:
        f.write(b"abc")
    assert e.value.errno == errno.ENOSPC
    f.write(b"abc")  # applied once: the next write goes through
