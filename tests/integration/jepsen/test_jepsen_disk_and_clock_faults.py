"""Disk faults on a real loop-mounted filesystem, corruption with restarts, and the wall-clock
shim in a child process."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jepsen_tests.history import Recorder
from jepsen_tests.nemesis import Fault
from jepsen_tests.nemesis.clock import WallClockNemesis, compiler
from jepsen_tests.nemesis.disk import DiskNemesis, NodeDisk, disk_unavailable_reason
from jepsen_tests.nemesis.process import NodeProcess, wait_until


def require_disks() -> None:
    reason = disk_unavailable_reason()
    if reason is not None:
        pytest.fail(f"cannot test disk faults on this machine: {reason}")


def test_a_full_disk_refuses_writes_until_the_ballast_goes(tmp_path: Path) -> None:
    require_disks()
    disk = NodeDisk("n1", tmp_path / "disks" / "n1.img", tmp_path / "data" / "n1", 64 << 20)
    disk.create()
    try:
        f = disk.mount_point / "seg"
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, b"x" * 4096)
        disk.fill()
        assert disk.free_bytes() < 4096
        with pytest.raises(OSError) as e:
            for _ in range(64):  # a short write first, then ENOSPC
                os.write(fd, b"y" * 65536)
        assert e.value.errno == errno.ENOSPC
        disk.unfill()
        os.write(fd, b"z" * 65536)
        os.fsync(fd)
        os.close(fd)
    finally:
        disk.destroy()
    assert not os.path.ismount(disk.mount_point)


def test_failed_write_back_is_eio_once_then_lost_as_in_fsyncgate(tmp_path: Path) -> None:
    require_disks()
    disk = NodeDisk("n1", tmp_path / "disks" / "n1.img", tmp_path / "data" / "n1", 64 << 20)
    disk.create()
    try:
        fd = os.open(disk.mount_point / "seg", os.O_RDWR | os.O_CREAT | os.O_APPEND)
        os.write(fd, b"a" * 8192)
        os.fsync(fd)
        disk.fail_writes()
        os.write(fd, b"b" * 8192)  # the page cache takes it
        with pytest.raises(OSError) as e:
            os.fsync(fd)
        assert e.value.errno == errno.EIO
        disk.restore_writes()
        os.fsync(fd)  # the next fsync succeeds: the failed pages were marked clean
        assert os.pread(fd, 4, 8192) == b"bbbb"  # still in the page cache
        disk.drop_page_cache()
        assert os.pread(fd, 4, 8192) == bytes(4)  # never reached the disk
        assert os.pread(fd, 4, 0) == b"aaaa"
        os.close(fd)
    finally:
        disk.destroy()


# A "node" that refuses to start when its file is not the one it wrote: it exits 3.
NODE = """
import os, sys, time
path = sys.argv[1]
if os.path.exists(path) and open(path, 'rb').read() != bytes(range(200)):
    print('corrupt file', path, flush=True)
    sys.exit(3)
open(path, 'wb').write(bytes(range(200)))
while True:
    time.sleep(1)
"""


def test_corrupt_kills_damages_and_a_refusing_node_gets_its_file_back(tmp_path: Path) -> None:
    require_disks()
    disk = NodeDisk("n1", tmp_path / "disks" / "n1.img", tmp_path / "data" / "n1", 64 << 20)
    disk.create()
    seg = disk.mount_point / "jepsen-0" / "00000000000000000000.log"
    seg.parent.mkdir()
    proc = NodeProcess("n1", [sys.executable, "-c", NODE, str(seg)], tmp_path / "n1.log")
    rec = Recorder()
    try:
        proc.start()
        assert wait_until(lambda: seg.exists() and seg.stat().st_size == 200, 5)
        nem = DiskNemesis({"n1": proc}, {"n1": disk}, rec, seed=1, watch_s=3)
        f = Fault("disk-corrupt", ("n1",), {"file": "snapshot", "how": "flip"})
        nem.start(f)
        assert not proc.alive()
        assert seg.read_bytes() != bytes(range(200))
        nem.stop(f)  # starts it; it refuses; the file is put back; it starts for good
        assert proc.alive() and proc.starts == 3
        assert seg.read_bytes() == bytes(range(200))
        ops = {o.f: o.value for o in rec.history().nemesis_ops()}
        assert ops["corrupt"]["file_class"] == "segment"  # no snapshot here: a segment
        assert ops["refused-start"]["returncode"] == 3
        assert ops["refused-start"]["last_log_line"].startswith("corrupt file")
        assert ops["refused-start"]["restored"] is True
    finally:
        proc.destroy()
        disk.destroy()


CLOCK_CHILD = """
import sys, time
for line in sys.stdin:
    print(f"{time.time()} {time.monotonic()}", flush=True)
"""


def test_wall_clock_skew_and_strobe_leave_the_monotonic_clock_alone(tmp_path: Path) -> None:
    if compiler() is None:
        pytest.fail("cannot test the wall-clock shim: no C compiler (apt-get install gcc)")
    rec = Recorder()
    nem = WallClockNemesis(["n1"], tmp_path / "clock", rec)
    assert nem.unavailable is None
    env = {**os.environ, **nem.env_for("n1")}
    child = subprocess.Popen(
        [sys.executable, "-c", CLOCK_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdin is not None and child.stdout is not None

    def read() -> tuple[float, float]:
        child.stdin.write("\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        wall, mono = child.stdout.readline().split()  # type: ignore[union-attr]
        return float(wall) - time.time(), float(mono) - time.monotonic()

    try:
        off, mono0 = read()
        assert abs(off) < 0.5
        skew = Fault("clock-skew", ("n1",), {"delta_s": 3600})
        nem.start(skew)
        off, mono = read()
        assert 3599 < off < 3601
        assert abs(mono - mono0) < 0.5  # monotonic untouched
        nem.stop(skew)
        assert abs(read()[0]) < 0.5

        strobe = Fault("clock-strobe", ("n1",), {"delta_s": -120, "period_ms": 20})
        nem.start(strobe)
        seen = set()
        deadline = time.monotonic() + 3
        while len(seen) < 2 and time.monotonic() < deadline:
            seen.add(round(read()[0] / 60))
            time.sleep(0.007)
        assert seen == {0, -2}
        nem.heal_all()
        assert abs(read()[0]) < 0.5
        starts = [json.dumps(o.value) for o in rec.history().nemesis_ops() if o.f == "start"]
        assert len(starts) == 2
    finally:
        child.kill()
        child.wait()
        nem.close()


def test_a_soak_samples_every_node_and_fails_on_growth_past_its_bound(tmp_path: Path) -> None:
    # The toy cluster, so it takes seconds; "RSS <= 0 x baseline + 0 MB" is a bound no process
    # can meet, which shows the failing path end to end (exit status, anomaly, report).
    out = tmp_path / "soak"
    argv = [
        sys.executable,
        "-m",
        "jepsen_tests",
        "soak",
        "--cluster",
        "toy",
        "--netns",
        "off",
        "--nemesis",
        "pause",
        "--minutes",
        "0.15",
        "--seed",
        "3",
        "--out",
        str(out),
        "--resource-interval",
        "1",
        "--resource-warmup",
        "2",
        "--rss-factor",
        "0",
        "--rss-slack-mb",
        "0",
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    res = json.loads((out / "results.json").read_text())
    growth = res["resources"]
    assert growth["checked"] == 3 and not growth["ok"]
    assert set(growth["violations"]) == {"n1", "n2", "n3"}
    assert res["result"]["valid"] is False
    assert res["result"]["anomaly_types"] == ["resource-growth"]  # the history itself is fine
    lines = (out / "resources.jsonl").read_text().splitlines()
    assert len(lines) >= 3 * 4  # every node, every second, plus the end
    assert "Resources (RSS &lt;= 0 x baseline + 0 MB" in (out / "report.html").read_text()
    assert "resources (" in p.stdout and "RSS" in growth["violations"]["n1"]


# A "node" on storage's lazy layer: on each line of stdin, append to its file and fsync; it
# prints "ok" or the errno name of what failed.
LAZY_NODE = """
import errno, sys
from storage.fileio import default_file_layer
f = default_file_layer().open(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    try:
        f.write(b"x" * 1000)
        f.fsync()
        print("ok", flush=True)
    except OSError as e:
        print(errno.errorcode[e.errno], flush=True)
"""


def test_lazy_layer_faults_are_armed_in_a_running_process(tmp_path: Path) -> None:
    from jepsen_tests.nemesis.lazydisk import LazyDiskNemesis

    rec = Recorder()
    procs: dict[str, NodeProcess] = {}
    nem = LazyDiskNemesis(procs, tmp_path / "lazyfs", rec)
    env = {**os.environ, **nem.env_for("n1")}
    child = subprocess.Popen(
        [sys.executable, "-c", LAZY_NODE, str(tmp_path / "seg.log")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdin is not None and child.stdout is not None

    class Running(NodeProcess):
        def alive(self) -> bool:
            return child.poll() is None

    procs["n1"] = Running("n1", ["true"], tmp_path / "n1.log")

    def step() -> str:
        child.stdin.write("\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        return child.stdout.readline().strip()  # type: ignore[union-attr]

    try:
        assert child.stdout.readline().strip() == "ready"
        assert step() == "ok"
        assert nem.command("n1", ["fail-fsync 2 EIO .log"])
        assert not (tmp_path / "lazyfs" / "n1.control").exists()  # taken
        assert [step(), step(), step()] == ["ok", "EIO", "ok"]  # the 2nd fails, the next not
        assert nem.command("n1", ["free-bytes 500"])
        assert step() == "ENOSPC"
        assert nem.command("n1", ["free-bytes none"])
        assert step() == "ok"
    finally:
        child.kill()
        child.wait()
    # a node that is not running gets nothing, and the history says so
    assert not nem.command("n1", ["free-bytes 0"], "7")
    assert not (tmp_path / "lazyfs" / "n1.control").exists()
    notes = [o.value for o in rec.history().nemesis_ops() if o.f == "not-armed"]
    assert notes == [{"id": "7", "node": "n1", "why": "not running", "commands": ["free-bytes 0"]}]
