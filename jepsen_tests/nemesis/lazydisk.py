"""Disk faults armed inside a running node, through storage's lazy file layer.

Nodes of a run with these kinds start with ``LONGBOAT_LAZYFS=1`` (storage keeps what was not
fsynced in process memory, so a SIGKILL loses it, as for ``lose-unsynced``) and
``LONGBOAT_LAZYFS_CONTROL=<run>/lazyfs/<node>.control``: the node's lazy layer polls that file,
applies each line and removes it (``storage.fileio.LazyFileLayer.watch_control_file``). The
nemesis writes the file atomically (a temporary file renamed over it) and waits until it is
gone, so a fault starts only once it is armed. Commands (``LazyFileLayer.apply_command``):
``fail-fsync N ERRNO MATCH``, ``free-bytes N|none``.

Fault kinds (`LazyDiskNemesis`):

* ``lazy-fsync-eio``: the ``params.nth`` fsync from now of a file whose path contains
  ``params.match`` (any file, segments ``.log``, or ``checkpoint`` files) fails with EIO, with
  Linux's semantics since 4.13 as the lazy layer models them: the bytes that fsync should have
  made durable are lost (zeros once the file is written back), reads see them until then, and
  the next fsync succeeds. Stop is a power cut and a restart (SIGKILL: the lazy layer loses what
  was not synced, and the failed range reads as zeros), as an operator restarts a broker whose
  log directory failed; a node that had already stopped itself (a broker does, with exit
  status 70) is recorded as ``exited`` and started. Unlike ``disk-eio`` the failure is exact:
  one chosen fsync, in the node's own file layer.
* ``lazy-disk-full``: the disk has ``params.free_bytes`` left (0, 4 KiB or 64 KiB): a write
  that does not fit appends what does and fails with ENOSPC. Stop gives the space back
  (``free-bytes none``); a node must take appends again by itself (one that exited is started
  again, and the history says so).

What `kill` adds to these (losing unsynced bytes) is why they need ``LONGBOAT_LAZYFS``; it also
means every kill in such a run is a power cut.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jepsen_tests.history import NEMESIS, Recorder
from jepsen_tests.nemesis import Fault, Nemesis
from jepsen_tests.nemesis.process import LAZYFS_ENV, NodeProcess, wait_until

CONTROL_ENV = "LONGBOAT_LAZYFS_CONTROL"
FSYNC_MATCHES = ("", ".log", "checkpoint")


def fail_fsync_command(nth: int, match: str = "", errno_name: str = "EIO") -> str:
    """The control line for "the nth fsync from now (of a path containing match) fails"."""
    if nth < 1:
        raise ValueError(f"nth must be at least 1, not {nth}")
    if any(c.isspace() for c in match):
        raise ValueError(f"a match cannot hold spaces: {match!r}")
    return f"fail-fsync {nth} {errno_name}" + (f" {match}" if match else "")


def free_bytes_command(free_bytes: int | None) -> str:
    if free_bytes is not None and free_bytes < 0:
        raise ValueError(f"free bytes cannot be negative: {free_bytes}")
    return f"free-bytes {'none' if free_bytes is None else free_bytes}"


class LazyDiskNemesis(Nemesis):
    kinds = ("lazy-fsync-eio", "lazy-disk-full")

    def __init__(
        self,
        processes: Mapping[str, NodeProcess],
        state_dir: str | Path,
        recorder: Recorder | None = None,
        *,
        apply_timeout_s: float = 5.0,
    ) -> None:
        super().__init__(recorder)
        self.processes = processes
        self.state_dir = Path(state_dir)
        self.apply_timeout_s = apply_timeout_s

    def control_file(self, node: str) -> Path:
        return self.state_dir / f"{node}.control"

    def env_for(self, node: str) -> dict[str, str]:
        """What a node must start with for its lazy layer to take commands."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return {**LAZYFS_ENV, CONTROL_ENV: str(self.control_file(node))}

    def _note(self, what: str, value: dict[str, Any]) -> None:
        if self.recorder is not None:
            self.recorder.info(NEMESIS, what, value)

    def command(self, node: str, lines: list[str], fid: str = "") -> bool:
        """Hand `lines` to the node's lazy layer; True once it took them. A node that is not
        running, or does not take them in time, gets none (the file is removed, so that they
        do not fire later, at a time the history does not show)."""
        p = self.processes[node]
        path = self.control_file(node)
        if not p.alive():
            self._note(
                "not-armed", {"id": fid, "node": node, "why": "not running", "commands": lines}
            )
            return False
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        os.replace(tmp, path)
        if wait_until(lambda: not path.exists(), self.apply_timeout_s, 0.02):
            return True
        path.unlink(missing_ok=True)
        self._note(
            "not-armed",
            {
                "id": fid,
                "node": node,
                "commands": lines,
                "why": f"not taken within {self.apply_timeout_s} s",
            },
        )
        return False

    def _start(self, fault: Fault) -> None:
        for n in fault.targets:
            if fault.kind == "lazy-fsync-eio":
                line = fail_fsync_command(
                    int(fault.params.get("nth", 1)), str(fault.params.get("match", ""))
                )
            else:
                line = free_bytes_command(int(fault.params.get("free_bytes", 0)))
            self.command(n, [line], fault.id)

    def _stop(self, fault: Fault) -> None:
        for n in fault.targets:
            p = self.processes[n]
            if fault.kind == "lazy-disk-full" and p.alive():
                self.command(n, [free_bytes_command(None)], fault.id)
                continue
            if p.proc is not None and not p.alive():
                self._exited(fault, p)
            else:
                p.kill()  # a power cut: the lazy layer's unsynced bytes are gone
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
        # Armed faults die with the process at the next restart; space comes back now.
        for n, p in self.processes.items():
            if p.alive() and self.control_file(n).parent.exists():
                self.command(n, [free_bytes_command(None)], "heal")
