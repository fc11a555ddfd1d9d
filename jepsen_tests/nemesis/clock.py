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
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from jepsen_tests.history import NEMESIS, Recorder
from jepsen_tests.nemesis import Fault, Nemesis

LIB_GLOBS = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
             "/usr/local/lib/faketime/libfaketime.so.1")


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

    def __init__(self, nodes: Sequence[str], state_dir: str | Path,
                 recorder: Recorder | None = None) -> None:
        super().__init__(recorder)
        self.nodes = list(nodes)
        self.state_dir = Path(state_dir)
        self.lib = find_libfaketime()
        self.unavailable = faketime_unavailable_reason()
        if self.unavailable:
            print(f"\n!!! clock nemesis UNAVAILABLE: {self.unavailable}. Clock faults in this "
                  "run will be recorded as skipped and change nothing. !!!\n", file=sys.stderr)

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
        return {"LD_PRELOAD": f"{self.lib} {preload}".strip(),
                "FAKETIME_TIMESTAMP_FILE": str(f), "FAKETIME_NO_CACHE": "1"}

    def _write(self, node: str, text: str) -> None:
        tmp = self.offset_file(node).with_suffix(".tmp")
        tmp.write_text(text + "\n")
        os.replace(tmp, self.offset_file(node))  # atomic: a reader never sees half

    def _start(self, fault: Fault) -> None:
        if self.unavailable:
            if self.recorder is not None:
                self.recorder.info(NEMESIS, "unavailable",
                                   {**fault.describe(), "reason": self.unavailable})
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
