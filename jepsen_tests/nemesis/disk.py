"""Disk faults: each node on a filesystem of its own that the harness fills, fails or corrupts.

Nothing here needs a hook in the product: the faults come from the kernel (ENOSPC, EIO from
write-back) or are made on the files of a node that is not running. When a disk kind is in
the run, every node's data directory is its own ext4 filesystem (`NodeDisk`): a sparse image
``<run>/disks/<node>.img``, made with ``mkfs.ext4 -O ^has_journal -m 0`` and loop-mounted
with ``errors=continue`` on ``<run>/data/<node>``. The images stay after the run; ``mount -o
loop <run>/disks/b1.img /mnt`` shows a node's files as it left them.

Fault kinds (`DiskNemesis`):

* ``disk-full``: a ballast file takes every free block of the targets' filesystems, so
  their writes fail with ENOSPC (after a short write), as on a full disk. Stop deletes the
  ballast; a node must take appends again by itself. One that exited is started again (and
  the history says so).
* ``disk-eio``: the image file is made immutable (``chattr +i``): the loop device's writes
  to it fail, so every write-back of the node's filesystem fails and fsync returns EIO, with
  Linux's semantics since 4.13 ("fsyncgate"): the pages whose write-back failed are marked
  clean, only one fsync hears of it, the next succeeds, and the bytes never reach the disk.
  Stop makes the image writable again, waits `settle_s` (the node runs on a disk that works
  again, holding whatever it concluded about the failure), drops the node's file pages from
  the page cache so reads see the disk (zeros where write-back failed, as after eviction or
  a reboot), and restarts the node, as an operator restarts a broker whose log directory
  went offline (Kafka keeps a failed directory offline until then).
* ``disk-corrupt``: SIGKILL the targets, then damage one file each: a bit flipped at a
  random byte, or the file truncated at a random length, in a file of the class
  ``params.file`` (``segment``: ``*.log``; ``index``: ``*.index``/``*.timeindex``;
  ``checkpoint``: the ``*-checkpoint`` files and ``quorum-state``; ``snapshot``: the newest
  Raft snapshot). A node without a file of that class gets another class it has. The file,
  position and bit are drawn from the fault id, and recorded in the history (a nemesis op
  ``corrupt``). Stop starts the node on the damaged files and watches it for `watch_s`: a
  node that exits then (it refused to start, or stopped on what it read) is recorded as a
  nemesis op ``refused-start`` with its exit status and last log line, and the operator's
  repair follows: the file's original bytes (kept when it was damaged) are put back and the
  node is started again. Refusing to start with the file named is an accepted outcome (the
  issue's "or refuses to start with the segment named"); the repair keeps the cluster's
  quorum for the rest of the run, where damage would otherwise pile up run after run.

Why no journal: with one, the first failed journal write aborts the journal and ext4
remounts read-only, so an EIO window could only end with an unmount, a fsck and a restart.
Without it a failed write-back fails those pages only, the filesystem keeps going, and a
transient failure is exactly the fsyncgate case. ``-m 0``: nodes run as root, which would
otherwise write into the reserved blocks of a "full" disk.

`plan_corruption` and `classify` are pure; `apply_corruption` does the damage.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jepsen_tests import cleanup
from jepsen_tests.history import NEMESIS, Recorder
from jepsen_tests.nemesis import Fault, FaultInjectionUnavailable, Nemesis
from jepsen_tests.nemesis.process import NodeProcess

FILE_CLASSES = ("segment", "index", "checkpoint", "snapshot")
CORRUPTIONS = ("flip", "truncate")
BALLAST = ".jepsen-ballast"
IMAGE_BYTES = 256 << 20  # sparse: only what the node writes takes space
_CHECKPOINT_NAMES = frozenset({"quorum-state"})


# ---- corruption (pure) ------------------------------------------------------------------


def classify(path: str | Path) -> str | None:
    """The file class of a node's file, by name, or None for files no fault touches."""
    p = Path(path)
    name = p.name
    if name.endswith(".log") and name[:-4].isdigit():
        return "segment"
    if (name.endswith(".index") and name[:-6].isdigit()) or (
        name.endswith(".timeindex") and name[:-10].isdigit()
    ):
        return "index"
    if p.parent.name == "snapshots" and name.endswith(".checkpoint"):
        return "snapshot"
    if name.endswith("-checkpoint") or name in _CHECKPOINT_NAMES:
        return "checkpoint"
    return None


def snapshot_order(name: str) -> tuple[int, int]:
    """KIP-630 names ``<index>-<term>.checkpoint``: newest is the highest (index, term)."""
    stem = name.split(".", 1)[0]
    index, _, term = stem.partition("-")
    try:
        return int(index), int(term or 0)
    except ValueError:
        return -1, -1


@dataclass(frozen=True)
class Corruption:
    """One damaged file: ``flip`` bit `bit` of the byte at `position`, or ``truncate`` it
    to `position` bytes."""

    path: str
    file_class: str
    how: str
    position: int
    bit: int = 0
    size_before: int = 0

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def plan_corruption(
    files: Mapping[str, int], want: str, how: str, rng: random.Random
) -> Corruption | None:
    """Choose what to damage among `files` (path -> size): a non-empty file of class `want`
    (the newest snapshot for ``snapshot``), else of another class, in `FILE_CLASSES` order;
    None if no file can be damaged. Pure: the same files and rng give the same plan."""
    if want not in FILE_CLASSES:
        raise ValueError(f"unknown file class {want!r}; known: {FILE_CLASSES}")
    if how not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {how!r}; known: {CORRUPTIONS}")
    by_class: dict[str, list[str]] = {}
    for path in sorted(files):
        cls = classify(path)
        if cls is not None and files[path] > 0:
            by_class.setdefault(cls, []).append(path)
    for cls in (want, *(c for c in FILE_CLASSES if c != want)):
        paths = by_class.get(cls)
        if not paths:
            continue
        if cls == "snapshot":
            path = max(paths, key=lambda p: snapshot_order(Path(p).name))
        else:
            path = rng.choice(paths)
        size = files[path]
        if how == "flip":
            return Corruption(path, cls, how, rng.randrange(size), rng.randrange(8), size)
        return Corruption(path, cls, how, rng.randrange(size), 0, size)
    return None


def apply_corruption(c: Corruption) -> None:
    """Damage the file as planned (the node must not be running)."""
    if c.how == "truncate":
        os.truncate(c.path, c.position)
        return
    with open(c.path, "r+b") as f:
        f.seek(c.position)
        byte = f.read(1)
        if len(byte) != 1:
            raise ValueError(f"{c.path} has no byte {c.position}")
        f.seek(c.position)
        f.write(bytes([byte[0] ^ (1 << c.bit)]))


def file_sizes(root: str | Path) -> dict[str, int]:
    """Every regular file under root (the ballast excepted) with its size."""
    out: dict[str, int] = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            if n == BALLAST:
                continue
            p = os.path.join(dirpath, n)
            with contextlib.suppress(OSError):
                out[p] = os.path.getsize(p)
    return out


# ---- one node's filesystem --------------------------------------------------------------


def _run(argv: Sequence[str]) -> str:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()}"
        )
    return r.stdout


def disk_unavailable_reason() -> str | None:
    """Why this machine cannot give nodes filesystems of their own, or None if it can."""
    if os.geteuid() != 0:
        return f"loop-mounted filesystems need root (running as uid {os.geteuid()})"
    for tool in ("mkfs.ext4", "mount", "umount", "chattr", "losetup"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (e2fsprogs, mount, util-linux)"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control is missing)"
    return None


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


class NodeDisk:
    """One node's filesystem: a sparse ext4 image loop-mounted on its data directory."""

    def __init__(
        self, node: str, image: Path, mount_point: Path, size_bytes: int = IMAGE_BYTES
    ) -> None:
        self.node = node
        self.image = Path(image)
        self.mount_point = Path(mount_point)
        self.size_bytes = size_bytes
        self.mounted = False
        self.immutable = False
        self._token: int | None = None

    @property
    def ballast(self) -> Path:
        return self.mount_point / BALLAST

    def create(self) -> None:
        """Make the image and mount it (the mount point must exist and be empty)."""
        self.image.parent.mkdir(parents=True, exist_ok=True)
        self.mount_point.mkdir(parents=True, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(self.size_bytes)
        _run(
            [
                "mkfs.ext4",
                "-q",
                "-F",
                "-O",
                "^has_journal",
                "-m",
                "0",
                "-L",
                f"lbjt-{self.node}"[:16],
                str(self.image),
            ]
        )
        self._token = cleanup.register(f"disk {self.image}", self.destroy)
        _run(["mount", "-o", "loop,errors=continue", str(self.image), str(self.mount_point)])
        self.mounted = True
        # The node owns the directory; e2fsck puts lost+found back when it needs one.
        with contextlib.suppress(OSError):
            (self.mount_point / "lost+found").rmdir()

    def free_bytes(self) -> int:
        st = os.statvfs(self.mount_point)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Take every free block with the ballast; returns its size. Allocation, not
        writing: fallocate is instant, and the image stays sparse."""
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            chunk = self.free_bytes()
            while chunk >= 4096:
                try:
                    os.posix_fallocate(fd, size, chunk)
                    size += chunk
                    chunk = self.free_bytes()
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    chunk //= 2
            # Whatever fallocate could not place (blocks its own extent tree needed).
            with contextlib.suppress(OSError):
                while True:
                    size += os.pwrite(fd, bytes(4096), size)
            return size
        finally:
            os.close(fd)

    def unfill(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.ballast.unlink()

    def fail_writes(self) -> None:
        """From now on every write-back to this filesystem fails (EIO at fsync)."""
        _run(["chattr", "+i", str(self.image)])
        self.immutable = True

    def restore_writes(self) -> None:
        if self.image.exists():
            _run(["chattr", "-i", str(self.image)])
        self.immutable = False

    def drop_page_cache(self) -> None:
        """Write back what is dirty, then drop every file's pages, so that reads come from
        the disk: where write-back failed they show what the disk has (zeros), as after
        eviction."""
        fd = os.open(self.mount_point, os.O_RDONLY)
        try:
            _libc().syncfs(fd)
        finally:
            os.close(fd)
        for path in file_sizes(self.mount_point):
            with contextlib.suppress(OSError):
                f = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(f, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(f)

    def destroy(self) -> None:
        """Unmount (the node must be stopped); the image stays for post-mortems."""
        with contextlib.suppress(Exception):
            self.restore_writes()
        if self.mounted:
            r = subprocess.run(["umount", str(self.mount_point)], capture_output=True, timeout=60)
            if r.returncode != 0:  # something still holds it: detach now, free when closed
                subprocess.run(
                    ["umount", "-l", str(self.mount_point)], capture_output=True, timeout=60
                )
            self.mounted = False
        if self._token is not None:
            cleanup.unregister(self._token)
            self._token = None


def make_disks(
    data_dirs: Mapping[str, Path], images_dir: Path, size_bytes: int = IMAGE_BYTES
) -> dict[str, NodeDisk]:
    """A mounted filesystem on every node's data directory; undone by `destroy_disks`."""
    reason = disk_unavailable_reason()
    if reason is not None:
        raise FaultInjectionUnavailable(f"disk faults: {reason}")
    sweep_stale_mounts()
    images_dir.mkdir(parents=True, exist_ok=True)
    (images_dir / "owner").write_text(f"{os.getpid()}\n")
    disks: dict[str, NodeDisk] = {}
    try:
        for node, d in data_dirs.items():
            disk = NodeDisk(node, images_dir / f"{node}.img", d, size_bytes)
            disks[node] = disk
            disk.create()
        probe = next(iter(disks.values()), None)
        if probe is not None:  # chattr +i needs a file system that supports it
            try:
                probe.fail_writes()
            except RuntimeError as e:
                raise FaultInjectionUnavailable(
                    f"disk-eio: cannot make {probe.image} immutable: {e}"
                ) from e
            finally:
                probe.restore_writes()
    except BaseException:
        destroy_disks(disks)
        raise
    return disks


def destroy_disks(disks: Mapping[str, NodeDisk]) -> None:
    for d in disks.values():
        d.destroy()


def sweep_stale_mounts() -> list[str]:
    """Unmount node filesystems left by a harness that died (SIGKILL): loop mounts of
    ``.../disks/<node>.img`` whose ``disks/owner`` pid is gone."""
    removed: list[str] = []
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return removed
    for line in mounts:
        parts = line.split()
        if len(parts) < 2 or not parts[0].startswith("/dev/loop"):
            continue
        dev, mnt = parts[0], parts[1]
        try:
            backing = Path(f"/sys/block/{Path(dev).name}/loop/backing_file").read_text().strip()
        except OSError:
            continue
        img = Path(backing)
        if img.parent.name != "disks" or img.suffix != ".img":
            continue
        try:
            owner = int((img.parent / "owner").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if owner == os.getpid() or os.path.exists(f"/proc/{owner}"):
            continue
        subprocess.run(["chattr", "-i", str(img)], capture_output=True, timeout=30)
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=60)
        removed.append(mnt)
    return removed


# ---- the nemesis ------------------------------------------------------------------------


class DiskNemesis(Nemesis):
    kinds = ("disk-full", "disk-eio", "disk-corrupt")

    def __init__(
        self,
        processes: Mapping[str, NodeProcess],
        disks: Mapping[str, NodeDisk],
        recorder: Recorder | None = None,
        *,
        seed: int = 0,
        settle_s: float = 3.0,
        watch_s: float = 10.0,
    ) -> None:
        super().__init__(recorder)
        self.processes = processes
        self.disks = disks
        self.seed = seed
        self.settle_s = settle_s
        self.watch_s = watch_s
        self._originals: dict[tuple[str, str], tuple[str, bytes]] = {}

    def _targets(self, fault: Fault) -> list[str]:
        unknown = [t for t in fault.targets if t not in self.disks]
        if unknown:
            raise ValueError(f"{fault.kind}: no disk for {unknown}")
        return list(fault.targets)

    def _note(self, what: str, value: dict[str, Any]) -> None:
        if self.recorder is not None:
            self.recorder.info(NEMESIS, what, value)

    def _start(self, fault: Fault) -> None:
        for n in self._targets(fault):
            disk = self.disks[n]
            if fault.kind == "disk-full":
                size = disk.fill()
                self._note("ballast", {"id": fault.id, "node": n, "bytes": size})
            elif fault.kind == "disk-eio":
                disk.fail_writes()
            else:
                self.processes[n].kill()
                rng = random.Random(f"{self.seed}/{fault.id}/{n}")
                plan = plan_corruption(
                    file_sizes(disk.mount_point),
                    str(fault.params.get("file", "segment")),
                    str(fault.params.get("how", "flip")),
                    rng,
                )
                if plan is None:
                    self._note("corrupt", {"id": fault.id, "node": n, "nothing": True})
                    continue
                self._originals[(fault.id, n)] = (plan.path, Path(plan.path).read_bytes())
                apply_corruption(plan)
                self._note(
                    "corrupt",
                    {
                        "id": fault.id,
                        "node": n,
                        **plan.describe(),
                        "path": os.path.relpath(plan.path, disk.mount_point),
                    },
                )

    def _stop(self, fault: Fault) -> None:
        targets = self._targets(fault)
        if fault.kind == "disk-full":
            for n in targets:
                self.disks[n].unfill()
            self._start_exited(fault, targets)
        elif fault.kind == "disk-eio":
            for n in targets:
                self.disks[n].restore_writes()
            time.sleep(self.settle_s)
            for n in targets:
                p = self.processes[n]
                was_alive = p.alive()
                p.kill()
                self.disks[n].drop_page_cache()
                if not was_alive:
                    self._exited(fault, p)
                p.start()
        else:
            restarted = [self.processes[n] for n in targets if not self.processes[n].alive()]
            for p in restarted:
                p.start()
            deadline = time.monotonic() + self.watch_s
            watching = list(restarted)
            while watching and time.monotonic() < deadline:
                time.sleep(0.2)
                for p in [p for p in watching if not p.alive()]:
                    watching.remove(p)
                    self._refused(fault, p)
            for n in targets:
                self._originals.pop((fault.id, n), None)

    def _refused(self, fault: Fault, p: NodeProcess) -> None:
        """The node exited soon after starting on a damaged file: record it, put the file's
        original bytes back, start it again."""
        rc = p.proc.returncode if p.proc is not None else None
        tail = [ln for ln in p.log_tail(4000).splitlines() if ln.strip()]
        original = self._originals.pop((fault.id, p.name), None)
        self._note(
            "refused-start",
            {
                "id": fault.id,
                "node": p.name,
                "returncode": rc,
                "last_log_line": tail[-1][-300:] if tail else "",
                "restored": original is not None,
            },
        )
        print(
            f"disk-corrupt: {p.name} exited ({rc}) after starting on a damaged file; "
            "restoring the file",
            file=sys.stderr,
        )
        if original is not None:
            path, data = original
            with open(path, "wb") as f:
                f.write(data)
        p.start()

    def _start_exited(self, fault: Fault, targets: Sequence[str]) -> None:
        for n in targets:
            p = self.processes[n]
            if p.proc is not None and not p.alive():
                self._exited(fault, p)
                p.start()

    def _exited(self, fault: Fault, p: NodeProcess) -> None:
        """The node had exited during the fault: say so, with its last log line."""
        report = p.exit_report()
        self._note("exited", {"id": fault.id, **report})
        print(
            f"{fault.kind}: {p.name} had exited ({report['returncode']}); starting it again",
            file=sys.stderr,
        )

    def _heal(self) -> None:
        for d in self.disks.values():
            with contextlib.suppress(Exception):
                d.restore_writes()
            d.unfill()
