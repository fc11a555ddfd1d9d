"""The file layer: every byte the storage package puts on disk goes through here.

Owns: opening append-only files, writes (``writev`` so a batch and its patched header go
down in one system call), ``pread``, ``fsync``, truncation, and the directory operations a
log needs (atomic rename, unlink, listdir, directory fsync). It must not know anything about
batches or logs.

Two implementations:

* ``RealFileLayer``: ``os.open``/``os.writev``/``os.pread``/``os.fsync``, nothing more.
* ``LazyFileLayer``: fault injection. Bytes written (and truncations made) since the last
  ``fsync`` of a file stay in process memory; the file on disk holds exactly the synced
  content. Reads see both, as they would through a page cache. ``crash(rng)`` drops the
  unsynced state, optionally writing back a random, possibly torn prefix of the unsynced
  tail (or that prefix followed by zeros up to the written length, as delayed allocation on
  ext4 can leave), the way a kernel may have written some dirty pages before power failed.
  In a real process, ``LONGBOAT_LAZYFS=1`` makes ``default_file_layer()`` return one, so a
  SIGKILL of the process loses what was not synced (the fault-injection suite uses it).

  The lazy layer models lost *data*, not lost *directory entries*: creates, renames and
  unlinks reach the disk at once (each atomic, as on any POSIX file system). Callers still
  fsync the directory wherever the real layer needs it; the lazy layer counts those calls
  (``dir_fsyncs``) so tests can assert they happen.

  It also injects disk faults, each armed by a test: ``fail_fsync`` (an error from the Nth
  fsync, with Linux's semantics since "fsyncgate": the bytes that fsync should have written
  are lost, yet the next fsync succeeds), ``fail_write`` (an error from the Nth write,
  optionally after part of it was written), ``set_free_bytes`` (ENOSPC once the disk is
  full, after a short write) and ``flip_bit`` (bit rot in a file's content).

Files are append-only: ``write``/``writev`` always write at the end. Small files that
must change (checkpoints) are replaced whole with ``write_file_atomic``: write a temporary
file, fsync it, rename it over the old one, fsync the directory.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import os
import random
import threading
from collections.abc import Sequence

Buffer = bytes | bytearray | memoryview

LAZYFS_ENV = "LONGBOAT_LAZYFS"
LAZYFS_CONTROL_ENV = "LONGBOAT_LAZYFS_CONTROL"
"""A file through which a fault-injection harness arms the lazy layer of a running process
(``LazyFileLayer.watch_control_file``); only read with ``LONGBOAT_LAZYFS=1``."""


class FsyncError(OSError):
    """An fsync (of a file or a directory) failed. Distinct from other ``OSError``s because
    the bytes it should have made durable may be gone although the next fsync succeeds
    (storage.logdir): whatever its errno, ENOSPC included, the caller must stop trusting
    the directory."""


def _fsync_error(e: OSError, path: str) -> FsyncError:
    return FsyncError(e.errno, e.strerror or str(e), path)


class FileHandle(abc.ABC):
    """An open, append-only file."""

    path: str

    @abc.abstractmethod
    def write(self, data: Buffer) -> int:
        """Append ``data``; returns the file position it was written at."""

    @abc.abstractmethod
    def writev(self, parts: Sequence[Buffer]) -> int:
        """Append ``parts`` back to back in one call; returns the position of the first."""

    @abc.abstractmethod
    def pread(self, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` (fewer only at the end of the file)."""

    @abc.abstractmethod
    def fsync(self) -> None:
        """Make every byte written so far durable; ``FsyncError`` if it failed."""

    @abc.abstractmethod
    def truncate(self, size: int) -> None: ...

    @abc.abstractmethod
    def size(self) -> int: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    @abc.abstractmethod
    def closed(self) -> bool: ...

    def fileno(self) -> int | None:
        """The OS descriptor when ``os.sendfile`` can use it (real layer only), else None."""
        return None

    def drop_cache(self, offset: int, length: int) -> None:
        """Ask the kernel to drop ``[offset, offset + length)`` from the page cache: clean
        pages go now, dirty ones start writing back (a later call drops them). Only a hint:
        what is read later comes from the disk. A no-op where there is no page cache."""
        return None


class FileLayer(abc.ABC):
    """Files and directories, as the storage package needs them."""

    @abc.abstractmethod
    def open(self, path: str, *, create: bool = True) -> FileHandle:
        """Open ``path`` for append and pread, creating it (empty) when ``create``."""

    @abc.abstractmethod
    def replace(self, src: str, dst: str) -> None:
        """Atomically rename ``src`` over ``dst``. Does not fsync the directory."""

    @abc.abstractmethod
    def unlink(self, path: str) -> None: ...

    # Names and directories themselves are never lost by a layer (a lazy one loses data,
    # not directory entries), so these three are the operating system's for every layer.
    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def mkdir(self, path: str) -> None:
        """Create ``path`` and missing parents; no error when it exists."""
        os.makedirs(path, exist_ok=True)

    @abc.abstractmethod
    def fsync_dir(self, path: str) -> None:
        """Make creates, renames and unlinks in directory ``path`` durable."""

    # Helpers built on the primitives above.

    def rename(self, src: str, dst: str) -> None:
        """Same as ``replace``: POSIX rename replaces ``dst`` atomically."""
        self.replace(src, dst)

    def read_file(self, path: str) -> bytes:
        f = self.open(path, create=False)
        try:
            return f.pread(f.size(), 0)
        finally:
            f.close()

    def write_file_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` so that a crash leaves the old or the new content.

        Write ``path.tmp``, fsync it, rename it over ``path``, fsync the directory.
        """
        tmp = path + ".tmp"
        if self.exists(tmp):
            self.unlink(tmp)
        f = self.open(tmp)
        try:
            f.write(data)
            f.fsync()
        finally:
            f.close()
        self.replace(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")


# --------------------------------------------------------------------------- real


class ForwardingFileHandle(FileHandle):
    """A handle that passes every call to ``inner``: the base of a wrapper that counts or
    records some calls (a benchmark's fsync counter, a test's ordering recorder) and
    overrides only those."""

    def __init__(self, inner: FileHandle) -> None:
        self._inner = inner
        self.path = inner.path

    def write(self, data: Buffer) -> int:
        return self._inner.write(data)

    def writev(self, parts: Sequence[Buffer]) -> int:
        return self._inner.writev(parts)

    def pread(self, size: int, offset: int) -> bytes:
        return self._inner.pread(size, offset)

    def fsync(self) -> None:
        self._inner.fsync()

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def size(self) -> int:
        return self._inner.size()

    def close(self) -> None:
        self._inner.close()

    @property
    def closed(self) -> bool:
        return self._inner.closed

    def fileno(self) -> int | None:
        return self._inner.fileno()

    def drop_cache(self, offset: int, length: int) -> None:
        self._inner.drop_cache(offset, length)


class RealFileHandle(FileHandle):
    __slots__ = ("_fd", "_size", "path")

    def __init__(self, path: str, fd: int):
        self.path = path
        self._fd = fd
        # Only this handle appends to the file, so its size is tracked here rather than
        # asked of the kernel (an fstat) on every append.
        self._size = os.fstat(fd).st_size

    def write(self, data: Buffer) -> int:
        pos = self._size
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
            self._size += n
        return pos

    def writev(self, parts: Sequence[Buffer]) -> int:
        pos = self._size
        total = sum(len(p) for p in parts)
        n = os.writev(self._fd, parts)
        self._size += n
        if n < total:  # a short write (rare on regular files): finish the rest
            rest = b"".join(bytes(p) for p in parts)[n:]
            self.write(rest)
        return pos

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def fsync(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as e:
            raise _fsync_error(e, self.path) from e

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self._size = size

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int | None:
        return self._fd if self._fd >= 0 else None

    def drop_cache(self, offset: int, length: int) -> None:
        if self._fd >= 0 and length > 0:
            os.posix_fadvise(self._fd, offset, length, os.POSIX_FADV_DONTNEED)


class RealFileLayer(FileLayer):
    """The operating system's files, with nothing added."""

    def open(self, path: str, *, create: bool = True) -> FileHandle:
        flags = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags |= os.O_CREAT
        return RealFileHandle(path, os.open(path, flags, 0o644))

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        except OSError as e:
            raise _fsync_error(e, path) from e
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- lazy


class _LazyFile:
    """One file as the lazy layer sees it: its descriptor and what a crash would lose.

    Invariant: the current content (what reads see) is ``disk[:durable_len] + tail``, and
    the file on disk holds exactly the content as of the last fsync (``disk_len`` bytes).
    ``durable_len <= disk_len``; ``durable_len < disk_len`` only after an unsynced truncate.
    """

    __slots__ = ("disk_len", "durable_len", "fd", "handles", "lost", "path", "tail")

    def __init__(self, path: str, fd: int):
        self.path = path
        self.fd = fd
        self.handles = 0
        self.disk_len = os.fstat(fd).st_size
        self.durable_len = self.disk_len
        self.tail = bytearray()
        self.lost: list[tuple[int, int]] = []
        """File ranges ``[start, end)`` of the tail whose fsync failed: they never reach
        the disk (zeros are written back in their place), as when Linux marks the pages
        of a failed write-back clean. Reads see them until then."""

    @property
    def dirty(self) -> bool:
        return bool(self.tail) or self.durable_len != self.disk_len

    @property
    def size(self) -> int:
        return self.durable_len + len(self.tail)

    def write_back(self, n: int) -> None:
        """Put the durable prefix plus ``n`` bytes of the tail on disk (not fsynced)."""
        if self.durable_len < self.disk_len:
            os.ftruncate(self.fd, self.durable_len)
        if n:
            chunk = bytearray(self.tail[:n])
            start = self.durable_len
            for lo, hi in self.lost:
                a, b = max(lo, start), min(hi, start + n)
                if a < b:
                    chunk[a - start : b - start] = bytes(b - a)
            os.pwrite(self.fd, chunk, start)
        self.durable_len += n
        del self.tail[:n]
        self.disk_len = self.durable_len
        self.lost = [(lo, hi) for lo, hi in self.lost if hi > self.durable_len]

    def cut(self, size: int) -> None:
        """Truncate the content (as reads see it) to ``size``."""
        if size >= self.durable_len:
            del self.tail[size - self.durable_len :]
        else:
            self.durable_len = size
            self.tail.clear()
        self.lost = [(lo, min(hi, size)) for lo, hi in self.lost if lo < size]


class LazyFileHandle(FileHandle):
    __slots__ = ("_closed", "_f", "_layer", "path")

    def __init__(self, layer: LazyFileLayer, f: _LazyFile):
        self._layer = layer
        self._f = f
        self.path = f.path
        self._closed = False

    def _file(self) -> _LazyFile:
        if self._closed:
            raise OSError(errno.EBADF, "file handle is closed", self.path)
        if self._f.fd < 0:
            raise OSError(errno.EBADF, "the lazy layer crashed under this handle", self.path)
        return self._f

    def write(self, data: Buffer) -> int:
        return self.writev([data])

    def writev(self, parts: Sequence[Buffer]) -> int:
        with self._layer._lock:
            f = self._file()
            pos = f.size
            total = sum(len(p) for p in parts)
            allowed, error = self._layer._before_write(f.path, total)
            if error:
                f.tail += b"".join(bytes(p) for p in parts)[:allowed]
                raise OSError(error, os.strerror(error), self.path)
            for p in parts:
                f.tail += p
            return pos

    def pread(self, size: int, offset: int) -> bytes:
        with self._layer._lock:
            f = self._file()
            out = b""
            if offset < f.durable_len:
                out = os.pread(f.fd, min(size, f.durable_len - offset), offset)
                size -= len(out)
                offset += len(out)
            if size > 0 and offset >= f.durable_len:
                rel = offset - f.durable_len
                out += bytes(f.tail[rel : rel + size])
            return out

    def fsync(self) -> None:
        with self._layer._lock:
            f = self._file()
            error = self._layer._fsync_fault(f.path)
            if error is not None:
                # Linux since 4.13 ("fsyncgate"): the failed write-back's pages are marked
                # clean, their data never reaches the disk, and only this call hears of
                # it. The next fsync succeeds without them.
                if f.tail:
                    f.lost.append((f.durable_len, f.size))
                raise FsyncError(error, os.strerror(error), self.path)
            f.write_back(len(f.tail))
            if self._layer.sync_to_disk:
                os.fsync(f.fd)
            self._layer.fsyncs += 1

    def truncate(self, size: int) -> None:
        with self._layer._lock:
            f = self._file()
            if size < f.size:
                self._layer._freed(f.size - size)
            f.cut(size)

    def size(self) -> int:
        with self._layer._lock:
            return self._file().size

    def close(self) -> None:
        # Closing does not sync: unsynced bytes stay in the layer (the "page cache") until
        # the file is fsynced or the layer crashes.
        with self._layer._lock:
            if not self._closed:
                self._closed = True
                self._layer._release(self._f)

    @property
    def closed(self) -> bool:
        return self._closed


class LazyFileLayer(FileLayer):
    """Loses whatever was not fsynced when it ``crash``es (or its process is killed).

    Thread-safe: a group commit fsyncs from a worker thread while the event loop appends.
    """

    def __init__(self, *, sync_to_disk: bool = False) -> None:
        """``sync_to_disk``: also ``os.fsync`` on fsync. Off by default: the layer models
        a power failure itself (``crash``), and what it has written back survives a SIGKILL
        in the kernel's page cache, so a real fsync (milliseconds each) buys nothing."""
        self.sync_to_disk = sync_to_disk
        self._lock = threading.RLock()
        # Files reachable by name. A file stays here while a handle is open or while it
        # holds unsynced bytes (the page cache keeps them after close).
        self._files: dict[str, _LazyFile] = {}
        self.fsyncs = 0
        self.dir_fsyncs = 0
        self._fsync_faults: list[_Fault] = []
        self._write_faults: list[_Fault] = []
        self._free_bytes: int | None = None

    # ------------------------------------------------------------------ fault injection

    def fail_fsync(self, nth: int = 1, *, error: int = errno.EIO, match: str = "") -> None:
        """Make the ``nth`` fsync from now (of a file whose path contains ``match``) fail
        with ``error``. The bytes it should have made durable are lost (zeros on disk once
        a later fsync or a crash writes the file back), but reads see them until then and
        the next fsync succeeds: what Linux does, and why a caller must never take a
        later fsync's success for the earlier data ("fsyncgate")."""
        with self._lock:
            self._fsync_faults.append(_Fault(nth, error, match))

    def fail_write(
        self, nth: int = 1, *, error: int = errno.EIO, match: str = "", partial_bytes: int = 0
    ) -> None:
        """Make the ``nth`` write from now (to a path containing ``match``) fail with
        ``error`` after appending ``partial_bytes`` of it (a short write, then the error)."""
        with self._lock:
            self._write_faults.append(_Fault(nth, error, match, partial_bytes))

    def set_free_bytes(self, free_bytes: int | None) -> None:
        """The disk has ``free_bytes`` left (None: unlimited). A write that does not fit
        appends what does (a short write) and fails with ENOSPC; truncating and unlinking
        give space back."""
        with self._lock:
            self._free_bytes = free_bytes

    @property
    def free_bytes(self) -> int | None:
        with self._lock:
            return self._free_bytes

    def flip_bit(self, path: str, position: int, bit: int = 0) -> None:
        """Flip one bit of the byte at ``position`` of ``path`` as reads see it: on disk
        if that byte is durable (bit rot, or a misdirected write), else in the unsynced
        tail."""
        path = os.path.abspath(path)
        mask = 1 << bit
        with self._lock:
            f = self._files.get(path)
            if f is not None and position >= f.durable_len:
                f.tail[position - f.durable_len] ^= mask
                return
            fd = f.fd if f is not None else os.open(path, os.O_RDWR)
            try:
                byte = os.pread(fd, 1, position)
                if len(byte) != 1:
                    raise ValueError(f"{path} has no byte {position}")
                os.pwrite(fd, bytes([byte[0] ^ mask]), position)
            finally:
                if f is None:
                    os.close(fd)

    def apply_command(self, line: str) -> None:
        """Arm a fault from one line of text, as a harness writes them to the control file:
        ``fail-fsync [N] [ERRNO-NAME] [MATCH]``, ``fail-write [N] [ERRNO-NAME] [MATCH]``,
        ``free-bytes N|none``. ``ValueError`` for anything else."""
        words = line.split()
        if not words:
            return
        op, args = words[0], words[1:]
        if op in ("fail-fsync", "fail-write"):
            nth = int(args[0]) if args else 1
            code = getattr(errno, args[1]) if len(args) > 1 else errno.EIO
            match = args[2] if len(args) > 2 else ""
            (self.fail_fsync if op == "fail-fsync" else self.fail_write)(
                nth, error=code, match=match
            )
        elif op == "free-bytes" and len(args) == 1:
            self.set_free_bytes(None if args[0] == "none" else int(args[0]))
        else:
            raise ValueError(f"unknown lazy-layer command {line!r}")

    def watch_control_file(self, path: str, interval_s: float = 0.05) -> None:
        """Poll ``path`` from a daemon thread; each time it appears, apply its lines
        (``apply_command``) and remove it, so every command is applied once. For a
        fault-injection harness that must arm faults inside a running node process: it
        writes the file atomically (a temporary file renamed over ``path``) and knows the
        faults are armed once the file is gone."""

        def poll() -> None:
            while True:
                try:
                    with open(path) as f:
                        text = f.read()
                except OSError:  # not there (the usual case), or unreadable: nothing to do
                    text = ""
                for line in text.splitlines():
                    try:
                        self.apply_command(line)
                    except (ValueError, AttributeError, IndexError) as e:
                        # A harness's typo must not end the node: say so and go on.
                        os.write(2, f"lazy layer: ignored {line!r}: {e}\n".encode())
                if text:
                    with contextlib.suppress(OSError):
                        os.unlink(path)  # after applying: the harness waits for this
                threading.Event().wait(interval_s)

        threading.Thread(target=poll, name="lazyfs-control", daemon=True).start()

    def _fsync_fault(self, path: str) -> int | None:
        fault = _take_fault(self._fsync_faults, path)
        return None if fault is None else fault.error

    def _before_write(self, path: str, size: int) -> tuple[int, int]:
        """How many of ``size`` bytes a write to ``path`` appends, and the error it then
        fails with (0: none, every byte appended)."""
        allowed, error = size, 0
        fault = _take_fault(self._write_faults, path)
        if fault is not None:
            allowed, error = min(size, fault.partial_bytes), fault.error
        if self._free_bytes is not None and self._free_bytes < allowed:
            allowed, error = self._free_bytes, errno.ENOSPC
        if self._free_bytes is not None:
            self._free_bytes -= allowed
        return allowed, error

    def _freed(self, n: int) -> None:
        if self._free_bytes is not None:
            self._free_bytes += n

    def open(self, path: str, *, create: bool = True) -> FileHandle:
        path = os.path.abspath(path)
        with self._lock:
            f = self._files.get(path)
            if f is None:
                flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
                if create:
                    flags |= os.O_CREAT
                f = _LazyFile(path, os.open(path, flags, 0o644))
                self._files[path] = f
            f.handles += 1
            return LazyFileHandle(self, f)

    def _release(self, f: _LazyFile) -> None:
        f.handles -= 1
        if f.handles > 0:
            return
        if self._files.get(f.path) is f:
            if f.dirty:
                return  # the page cache keeps unsynced bytes after close
            del self._files[f.path]
        self._close_fd(f)

    @staticmethod
    def _close_fd(f: _LazyFile) -> None:
        if f.fd >= 0:
            fd, f.fd = f.fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)

    def _detach(self, path: str) -> None:
        """``path`` no longer names this file; open handles keep the old inode."""
        f = self._files.pop(path, None)
        if f is not None and f.handles == 0:
            self._close_fd(f)

    def _size_of(self, path: str) -> int:
        f = self._files.get(path)
        if f is not None:
            return f.size
        try:
            return os.path.getsize(path)
        except OSError:
            return 0

    def replace(self, src: str, dst: str) -> None:
        src, dst = os.path.abspath(src), os.path.abspath(dst)
        with self._lock:
            if self._free_bytes is not None and src != dst:
                self._freed(self._size_of(dst))
            os.replace(src, dst)
            self._detach(dst)
            f = self._files.pop(src, None)
            if f is not None:
                f.path = dst
                self._files[dst] = f

    def unlink(self, path: str) -> None:
        path = os.path.abspath(path)
        with self._lock:
            if self._free_bytes is not None:
                self._freed(self._size_of(path))
            os.unlink(path)
            self._detach(path)

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            self.dir_fsyncs += 1

    def unsynced_bytes(self) -> int:
        """Bytes a crash right now would lose (before any torn write-back)."""
        with self._lock:
            return sum(len(f.tail) for f in self._files.values())

    def crash(self, rng: random.Random | None = None) -> None:
        """Lose every unsynced byte, as a power failure would, and close every handle.

        With ``rng``, each dirty file may keep a random prefix of its unsynced tail, cut at
        any byte, sometimes followed by zeros up to the length that was written (pages
        written out of order: extent allocated, data not). Without ``rng``, every unsynced
        byte is lost. Handles opened before the crash fail with EBADF afterwards; the
        layer itself stays usable, as a freshly mounted disk.
        """
        with self._lock:
            for f in self._files.values():
                # 40%: nothing of the tail reached the disk; an unsynced truncate reaches
                # it half of the time, and only then does any tail follow it.
                lucky = f.dirty and rng is not None and rng.random() >= 0.4
                if (
                    lucky
                    and rng is not None
                    and not (f.durable_len < f.disk_len and rng.random() < 0.5)
                ):
                    written = len(f.tail)
                    keep = rng.randrange(written + 1)
                    f.write_back(keep)
                    if keep < written and rng.random() < 0.3:
                        os.pwrite(f.fd, bytes(written - keep), f.durable_len)
                self._close_fd(f)
            self._files.clear()


class _Fault:
    """One armed fault: fires at the ``countdown``-th matching call."""

    __slots__ = ("countdown", "error", "match", "partial_bytes")

    def __init__(self, nth: int, error: int, match: str, partial_bytes: int = 0) -> None:
        if nth < 1:
            raise ValueError(f"nth must be at least 1, not {nth}")
        self.countdown = nth
        self.error = error
        self.match = match
        self.partial_bytes = partial_bytes


def _take_fault(faults: list[_Fault], path: str) -> _Fault | None:
    """Count one call on ``path`` against every armed fault; the first that fires."""
    fired = None
    for fault in list(faults):
        if fault.match in path:
            fault.countdown -= 1
            if fault.countdown == 0:
                faults.remove(fault)
                if fired is None:
                    fired = fault
    return fired


_process_layers: dict[bool, FileLayer] = {}
_process_layers_lock = threading.Lock()


def default_file_layer() -> FileLayer:
    """The file layer a process should use: lazy when ``LONGBOAT_LAZYFS=1``, else real.

    One instance per process (per kind), so every log of a process shares the lazy layer's
    view of unsynced bytes: two lazy layers opening the same file would disagree about it.
    """
    lazy = os.environ.get(LAZYFS_ENV, "") == "1"
    with _process_layers_lock:
        layer = _process_layers.get(lazy)
        if layer is None:
            layer = LazyFileLayer() if lazy else RealFileLayer()
            _process_layers[lazy] = layer
            control = os.environ.get(LAZYFS_CONTROL_ENV, "")
            if lazy and control:
                assert isinstance(layer, LazyFileLayer)
                layer.watch_control_file(control)
        return layer
