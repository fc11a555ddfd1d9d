#!/usr/bin/env python3
"""Run every benchmark in ``--quick`` mode and print all their figures (JSON lines).

Each benchmark is a separate process so one that crashes does not hide the others; its
standard error passes through (progress), its standard output (figures) is collected.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    scripts = sorted(p for p in HERE.glob("*.py") if p.name != "all.py" and not p.name.startswith("_"))
    scripts = [p for p in scripts if p.read_text().lstrip().startswith(("#!", '"""'))]
    failed = []
    for script in scripts:
        text = script.read_text()
        if "--quick" not in text:
            continue  # helper modules and per-process servers, not benchmarks
        print(f"==> {script.name} --quick", file=sys.stderr, flush=True)
        # -P: do not put scripts/bench on sys.path, where storage.py and raft.py would
        # shadow the packages of the same names.
        proc = subprocess.run([sys.executable, "-P", str(script), "--quick"],
                              stdout=subprocess.PIPE, text=True)
        sys.stdout.write(proc.stdout)
        sys.stdout.flush()
        if proc.returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
