"""Controller membership changes: remove a voter from the metadata quorum, then add it back.

Fault kind ``membership``: `start` removes the target controller from the Raft voters,
`stop` adds it back (it is still running, with its data; the leader adds it as an observer,
waits until it has caught up, then promotes it: KIP-853's rule). Both go through the
operator's command line, ``longboat quorum remove-voter|add-voter``, run inside the run's
namespace (``wrap``), as an operator would; the harness imports no server code.

A change the quorum refuses (one change at a time, no leader) is recorded as a nemesis
``error`` op with the command's output, and the window stays recorded: the history shows
the attempt, and the report the window.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping

from jepsen_tests.history import NEMESIS, Recorder
from jepsen_tests.nemesis import Fault, Nemesis

Wrap = Callable[[list[str]], list[str]]


class MembershipNemesis(Nemesis):
    kinds = ("membership",)

    def __init__(
        self,
        voters: Mapping[str, tuple[int, str]],
        wrap: Wrap,
        recorder: Recorder | None = None,
        timeout_s: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`voters`: controller name -> (node id, URL); `env`: added to the command's
        environment (a secure cluster's ``LONGBOAT_SSL_*`` admin certificate)."""
        super().__init__(recorder)
        self.voters = dict(voters)
        self.env = {**os.environ, **(env or {})}
        self.wrap = wrap
        self.timeout_s = timeout_s
        self.removed: set[str] = set()

    def _cli(self, fault: Fault, *args: str) -> bool:
        # One controller at a time as the bootstrap: the command asks its first bootstrap
        # controller who leads, and a removed voter does not know (it answers "not the
        # leader" with no leader to follow), so try each in turn.
        ok, outs = False, []
        for _, url in self.voters.values():
            argv = self.wrap([sys.executable, "-m", "api", "quorum", *args, "--bootstrap", url])
            try:
                r = subprocess.run(
                    argv, capture_output=True, text=True, timeout=self.timeout_s, env=self.env
                )
                ok, out = r.returncode == 0, (r.stdout + r.stderr).strip()
            except subprocess.TimeoutExpired:
                ok, out = False, f"timed out after {self.timeout_s} s"
            outs.append(f"{url}: {out}")
            if ok:
                break
        out = "; ".join(outs)
        if not ok:
            print(f"membership {args[0]}: {out}", file=sys.stderr)
            if self.recorder is not None:
                self.recorder.info(
                    NEMESIS, "error", {**fault.describe(), "op": args[0], "output": out[-500:]}
                )
        return ok

    def _start(self, fault: Fault) -> None:
        for t in fault.targets:
            node_id, _ = self.voters[t]
            if self._cli(fault, "remove-voter", "--node-id", str(node_id)):
                self.removed.add(t)

    def _stop(self, fault: Fault) -> None:
        for t in fault.targets:
            if t in self.removed:
                node_id, url = self.voters[t]
                if self._cli(fault, "add-voter", "--node-id", str(node_id), "--url", url):
                    self.removed.discard(t)

    def _heal(self) -> None:
        for t in sorted(self.removed):
            node_id, url = self.voters[t]
            if self._cli(
                Fault("membership", (t,), {"heal": True}),
                "add-voter",
                "--node-id",
                str(node_id),
                "--url",
                url,
            ):
                self.removed.discard(t)
