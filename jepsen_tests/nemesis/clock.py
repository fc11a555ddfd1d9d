"""Clock jumps for one node's process, through libfaketime.

A node the run may bend the clock of is started with libfaketime preloaded and a per-node
offset file (`ClockNemesis.env_for`): ``FAKETIME_TIMESTAMP_FILE`` names the file and
``FAKETIME_NO_CACHE=1`` makes every clock read consult it, so writing ``+30s`` into the file
moves that process's clock 30 s forward at once, and ``+0`` puts it back.

libfaketime shifts CLOCK_MONOTONIC too (as observed on these machines: with
``FAKETIME_DONT_FAKE_MONOTONIC=1`` Python's ``time.sleep`` breaks). So a forward jump makes
pending timers fire early, and the jump back at the end of the window makes timers armed
during it wait that much longer: keep `delta_s` to seconds, not hours.

Where libfaketime is missing the nemesis says so loudly (stderr and a nemesis op marked
``unavailable`` in the history, which the report shows) and does nothing.

Skew and strobe (`WallClockNemesis`) move the wall clock only. libfaketime cannot: it shifts
CLOCK_MONOTONIC with the wall clock (and with ``FAKETIME_DONT_FAKE_MONOTONIC=1``
``time.sleep`` fails with EINVAL and thread waits with a timeout outlast it by the offset),
while an NTP step or a skewed clock on a real machine leaves the monotonic clock alone, and
Longboat's timeouts are meant to run on it. So the harness compiles a shim of its own
(``wallclock_shim.c``, with the machine's C compiler) that wraps the wall-clock reads and
adds an offset it maps from a per-node file; the nemesis stores a new offset there and the
next clock read sees it. Kinds:

* ``clock-skew``   the targets' wall clocks run ``params.delta_s`` off for the window;
* ``clock-strobe`` the targets' wall clocks flip between their true time and
                   ``params.delta_s`` off every ``params.period_ms`` (Jepsen's strobe).

Both mostly target the active controller (resolved when the fault starts). Without a C
compiler the nemesis is unavailable, loudly, as the libfaketime one.
"""

from __future__ import annotations

import ctypes
import glob
import mmap
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from jepsen_tests.history import NEMESIS, Recorder
from jepsen_tests.nemesis import Fault, Nemesis

LIB_GLOBS = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


def find_libfaketime() -> str | None:
    for pattern in LIB_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    return None


def faketime_unavailable_reason() -> str | None:
    if find_libfaketime() is None:
        hint = "" if shutil.which("apt-get") is None else " (apt-get install -y faketime)"
        return "libfaketime is not installed" + hint + "; run scripts/setup-jepsen.sh"
    return None


class ClockNemesis(Nemesis):
    kinds = ("clock-bump",)

    def __init__(
        self, nodes: Sequence[str], state_dir: str | Path, recorder: Recorder | None = None
    ) -> None:
        super().__init__(recorder)
        self.nodes = list(nodes)
        self.state_dir = Path(state_dir)
        self.lib = find_libfaketime()
        self.unavailable = faketime_unavailable_reason()
        if self.unavailable:
            print(
                f"\n!!! clock nemesis UNAVAILABLE: {self.unavailable}. Clock faults in this "
                "run will be recorded as skipped and change nothing. !!!\n",
                file=sys.stderr,
            )

    def offset_file(self, node: str) -> Path:
        return self.state_dir / f"faketime-{node}"

    def env_for(self, node: str) -> dict[str, str]:
        """Environment a node must start with for its clock to be bendable (empty if not)."""
        if self.lib is None:
            return {}
        self.state_dir.mkdir(parents=True, exist_ok=True)
        f = self.offset_file(node)
        if not f.exists():
            f.write_text("+0\n")
        preload = os.environ.get("LD_PRELOAD", "")
        return {
            "LD_PRELOAD": f"{self.lib} {preload}".strip(),
            "FAKETIME_TIMESTAMP_FILE": str(f),
            "FAKETIME_NO_CACHE": "1",
        }

    def _write(self, node: str, text: str) -> None:
        tmp = self.offset_file(node).with_suffix(".tmp")
        tmp.write_text(text + "\n")
        os.replace(tmp, self.offset_file(node))  # atomic: a reader never sees half

    def _start(self, fault: Fault) -> None:
        if _skipped_as_unavailable(self.unavailable, self.recorder, fault):
            return
        delta = float(fault.params.get("delta_s", 5))
        for n in fault.targets:
            self._write(n, f"{delta:+.3f}s")

    def _stop(self, fault: Fault) -> None:
        if self.unavailable:
            return
        for n in fault.targets:
            self._write(n, "+0")

    def _heal(self) -> None:
        if self.unavailable:
            return
        for n in self.nodes:
            if self.offset_file(n).exists():
                self._write(n, "+0")


SHIM_SOURCE = Path(__file__).with_name("wallclock_shim.c")
WALLCLOCK_ENV = "LBJT_WALLCLOCK_FILE"


def compiler() -> str | None:
    for cc in ("cc", "gcc", "clang"):
        if shutil.which(cc):
            return cc
    return None


def build_wallclock_shim(out_dir: Path) -> Path:
    """Compile the shim into out_dir; RuntimeError with the compiler's message if it fails."""
    cc = compiler()
    if cc is None:
        raise RuntimeError(
            "no C compiler (cc) to build the wall-clock shim; apt-get install -y gcc"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / "libwallclock.so"
    r = subprocess.run(
        [cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(SHIM_SOURCE), "-ldl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if r.returncode != 0:
        raise RuntimeError(f"building the wall-clock shim failed: {r.stderr.strip()}")
    return lib


class WallClockNemesis(Nemesis):
    """Wall-clock skew and strobe through the preloaded shim (module docstring).

    Overlapping faults on one node add up: each holds its own share of the node's offset.
    """

    kinds = ("clock-skew", "clock-strobe")

    def __init__(
        self, nodes: Sequence[str], state_dir: str | Path, recorder: Recorder | None = None
    ) -> None:
        super().__init__(recorder)
        self.nodes = list(nodes)
        self.state_dir = Path(state_dir)
        self.lib: Path | None = None
        self.unavailable: str | None = None
        try:
            self.lib = build_wallclock_shim(self.state_dir)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            self.unavailable = str(e)
            print(
                f"\n!!! wall-clock nemesis UNAVAILABLE: {e}. Skew and strobe faults in "
                "this run will be recorded as skipped and change nothing. !!!\n",
                file=sys.stderr,
            )
        self._maps: dict[str, mmap.mmap] = {}
        self._shares: dict[str, dict[str, int]] = {n: {} for n in self.nodes}
        self._strobes: dict[str, tuple[threading.Event, threading.Thread]] = {}
        self._offsets_lock = threading.Lock()

    def offset_file(self, node: str) -> Path:
        return self.state_dir / f"wallclock-{node}"

    def env_for(self, node: str) -> dict[str, str]:
        """What a node must start with for its wall clock to be movable (empty if not)."""
        if self.lib is None:
            return {}
        f = self.offset_file(node)
        if node not in self._maps:
            fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, 8)
                self._maps[node] = mmap.mmap(fd, 8)
            finally:
                os.close(fd)
        return {"LD_PRELOAD": str(self.lib), WALLCLOCK_ENV: str(f)}

    def offset_ns(self, node: str) -> int:
        m = self._maps.get(node)
        return int(ctypes.c_int64.from_buffer(m).value) if m is not None else 0

    def _apply(self, node: str) -> None:
        with self._offsets_lock:
            m = self._maps.get(node)
            if m is not None:
                # One aligned 8-byte store: the shim never reads half of it.
                ctypes.c_int64.from_buffer(m).value = sum(self._shares[node].values())

    def _share(self, node: str, fid: str, ns: int | None) -> None:
        with self._offsets_lock:
            if ns is None:
                self._shares[node].pop(fid, None)
            else:
                self._shares[node][fid] = ns
        self._apply(node)

    def _start(self, fault: Fault) -> None:
        if _skipped_as_unavailable(self.unavailable, self.recorder, fault):
            return
        delta_ns = int(float(fault.params.get("delta_s", 5)) * 1e9)
        targets = [n for n in fault.targets if n in self._shares]
        if fault.kind == "clock-skew":
            for n in targets:
                self._share(n, fault.id, delta_ns)
            return
        period_s = float(fault.params.get("period_ms", 100)) / 1000
        stop = threading.Event()

        def strobe() -> None:
            on = True
            while not stop.is_set():
                for n in targets:
                    self._share(n, fault.id, delta_ns if on else 0)
                on = not on
                stop.wait(period_s)

        t = threading.Thread(target=strobe, name=f"strobe-{fault.id}", daemon=True)
        self._strobes[fault.id] = (stop, t)
        t.start()

    def _stop(self, fault: Fault) -> None:
        strobe = self._strobes.pop(fault.id, None)
        if strobe is not None:
            strobe[0].set()
            strobe[1].join(timeout=5)
        for n in fault.targets:
            if n in self._shares:
                self._share(n, fault.id, None)

    def _heal(self) -> None:
        for stop, t in list(self._strobes.values()):
            stop.set()
            t.join(timeout=5)
        self._strobes.clear()
        for n in self.nodes:
            with self._offsets_lock:
                self._shares[n].clear()
            self._apply(n)

    def close(self) -> None:
        self._heal()
        for m in self._maps.values():
            m.close()
        self._maps.clear()


def _skipped_as_unavailable(reason: str | None, recorder: Recorder | None, fault: Fault) -> bool:
    """Where the clock cannot be bent here (no libfaketime, no compiler for the shim), a
    fault is recorded as ``unavailable`` with the reason, for the report, and skipped."""
    if not reason:
        return False
    if recorder is not None:
        recorder.info(NEMESIS, "unavailable", {**fault.describe(), "reason": reason})
    return True
