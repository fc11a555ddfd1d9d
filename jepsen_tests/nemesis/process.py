"""Node processes, and the nemesis that kills, pauses and restarts them.

`NodeProcess` starts one node with ``subprocess.Popen(..., start_new_session=True)`` so it has
its own process group (a signal to the group reaches anything it forked, and Ctrl-C in the
terminal reaches only the harness), with stdout and stderr appended to a log file that
survives restarts. Signals go to the exact process group we started, never by name.

`ProcessNemesis` fault kinds:

* ``kill``           SIGKILL the targets; stop restarts them with the same argv and env.
* ``pause``          SIGSTOP the targets; stop sends SIGCONT. Paused nodes accept nothing:
                     connects to them time out.
* ``freeze``         freeze the node's whole process tree with the cgroup-v1 freezer (the
                     group's pids into ``/sys/fs/cgroup/freezer/lbjt-<pid>-<node>``, then
                     ``FROZEN``); stop thaws it and removes the cgroup. Unlike SIGSTOP it is
                     atomic over every thread and child and invisible to the process.
* ``lose-unsynced``  like kill, for nodes started with ``LONGBOAT_LAZYFS=1`` (storage's
                     `LazyFileLayer` keeps bytes that were not fsynced in process memory, so the
                     kill loses them, as power loss would). `LAZYFS_ENV` is what the cluster
                     must add to the nodes' environment when this nemesis is in the run; the
                     nemesis refuses to start the fault on a node that lacks it, loudly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jepsen_tests import cleanup
from jepsen_tests.history import Recorder
from jepsen_tests.nemesis import Fault, FaultInjectionUnavailable, Nemesis

LAZYFS_ENV = {"LONGBOAT_LAZYFS": "1"}


class NodeProcess:
    """One node process that can be started, signalled, killed and restarted."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: str | Path,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.env = dict(env or {})
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.starts = 0
        self._token: int | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        with open(self.log_path, "ab") as log:
            log.write(
                f"\n==== jepsen_tests: start #{self.starts + 1} of {self.name}: "
                f"{' '.join(self.argv)}\n".encode()
            )
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
            )
        self.starts += 1
        self.paused = False
        if self._token is None:
            self._token = cleanup.register(f"process {self.name}", self.destroy)

    def signal(self, sig: int) -> None:
        """Signal the node's whole process group (it leads its own session)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL and reap. A paused process dies too (SIGKILL needs no SIGCONT)."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM (after SIGCONT), then SIGKILL if it does not exit in time."""
        if not self.alive():
            return
        self.resume()
        self.signal(signal.SIGTERM)
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def restart(self) -> None:
        self.kill()
        self.start()

    def destroy(self) -> None:
        """Stop for good; used by cleanup."""
        if self.alive():
            self.resume()
            self.kill()
        if self._token is not None:
            cleanup.unregister(self._token)
            self._token = None

    def log_tail(self, n_bytes: int = 2000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-n_bytes:].decode(errors="replace")

    def exit_report(self) -> dict[str, Any]:
        """How the process ended, for a nemesis that found it gone: its node, exit status
        and last log line (a fail-stop's names the task and the error)."""
        rc = self.proc.returncode if self.proc is not None else None
        tail = [ln for ln in self.log_tail(4000).splitlines() if ln.strip()]
        return {
            "node": self.name,
            "returncode": rc,
            "last_log_line": tail[-1][-300:] if tail else "",
        }


FREEZER_ROOT = Path("/sys/fs/cgroup/freezer")


def freezer_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return f"the cgroup freezer needs root (running as uid {os.geteuid()})"
    if not (FREEZER_ROOT / "cgroup.procs").exists():
        return f"no cgroup-v1 freezer mounted at {FREEZER_ROOT}"
    return None


def group_pids(pgid: int) -> list[int]:
    """Every live process in process group pgid (field 5 of /proc/PID/stat)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            out.append(int(d))
    return out


class Freezer:
    """One freezer cgroup for one node's process tree."""

    def __init__(self, node: str) -> None:
        self.dir = FREEZER_ROOT / f"lbjt-{os.getpid()}-{node}"
        self._token: int | None = None

    def _state(self) -> str:
        return (self.dir / "freezer.state").read_text().strip()

    def freeze(self, pgid: int) -> None:
        reason = freezer_unavailable_reason()
        if reason is not None:
            raise FaultInjectionUnavailable(reason)
        self.dir.mkdir(exist_ok=True)
        if self._token is None:
            self._token = cleanup.register(f"freezer {self.dir.name}", self.thaw)
        for pid in group_pids(pgid):
            try:
                (self.dir / "cgroup.procs").write_text(str(pid))
            except ProcessLookupError:
                pass
        (self.dir / "freezer.state").write_text("FROZEN")
        if not wait_until(lambda: self._state() == "FROZEN", 5):
            raise RuntimeError(f"{self.dir} did not reach FROZEN: {self._state()}")

    def thaw(self) -> None:
        if not self.dir.exists():
            return
        (self.dir / "freezer.state").write_text("THAWED")
        for pid in (self.dir / "cgroup.procs").read_text().split():
            try:
                (FREEZER_ROOT / "cgroup.procs").write_text(pid)
            except ProcessLookupError:
                pass
        try:
            self.dir.rmdir()
        except OSError:
            pass
        if self._token is not None:
            cleanup.unregister(self._token)
            self._token = None


class ProcessNemesis(Nemesis):
    kinds = ("kill", "pause", "freeze", "lose-unsynced")

    def __init__(
        self, processes: Mapping[str, NodeProcess], recorder: Recorder | None = None
    ) -> None:
        super().__init__(recorder)
        self.processes = processes
        self.freezers = {name: Freezer(name) for name in processes}

    def _targets(self, fault: Fault) -> list[NodeProcess]:
        unknown = [t for t in fault.targets if t not in self.processes]
        if unknown:
            raise ValueError(f"{fault.kind}: unknown nodes {unknown}")
        return [self.processes[t] for t in fault.targets]

    def _start(self, fault: Fault) -> None:
        procs = self._targets(fault)
        if fault.kind == "lose-unsynced":
            missing = [p.name for p in procs if p.env.get("LONGBOAT_LAZYFS") != "1"]
            if missing:
                raise FaultInjectionUnavailable(
                    f"lose-unsynced: {missing} were not started with LONGBOAT_LAZYFS=1, so a "
                    "kill would lose nothing (the page cache survives SIGKILL)"
                )
        for p in procs:
            if fault.kind == "pause":
                p.pause()
            elif fault.kind == "freeze":
                if p.pid is not None and p.alive():
                    self.freezers[p.name].freeze(p.pid)
            else:
                p.kill()

    def _stop(self, fault: Fault) -> None:
        for p in self._targets(fault):
            if fault.kind == "pause":
                p.resume()
            elif fault.kind == "freeze":
                self.freezers[p.name].thaw()
            elif not p.alive():
                p.start()

    def _heal(self) -> None:
        for f in self.freezers.values():
            f.thaw()
        for p in self.processes.values():
            if p.paused:
                p.resume()


def wait_until(pred: object, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll a zero-argument predicate until true or the timeout passes (bounded)."""
    assert callable(pred)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval_s)
    return bool(pred())
