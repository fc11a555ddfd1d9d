"""Test-suite wiring shared by every directory under tests/.

Hypothesis runs every property test without its per-example deadline (200 ms by default) and
without the too-slow health check: both measure the machine, not the code, and on CI's shared
2 cores an example that takes 80 ms when quiet took 294 ms once and failed the run
(``DeadlineExceeded``, reported as ``FlakyFailure`` when the replay was fast). A failure also
prints the ``@reproduce_failure`` blob, since CI keeps no example database between runs.

Tests run with ``--import-mode=importlib`` so two test files may share a basename in
different directories (``tests/unit/api/test_config.py`` and
``tests/unit/storage/test_config.py``). Helper modules that tests import by bare name
(``from storage_harness import ...``) live beside their tests; their directories are put on
``sys.path`` here, so their basenames must be unique across the tree, which is checked.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from hypothesis import HealthCheck, settings

_TESTS = Path(__file__).resolve().parent


def _helper_dirs() -> list[Path]:
    by_name: dict[str, list[Path]] = defaultdict(list)
    for p in _TESTS.rglob("*.py"):
        if p.name.startswith("test_") or p.name in ("__init__.py", "conftest.py"):
            continue
        by_name[p.stem].append(p)
    clashes = {n: ps for n, ps in by_name.items() if len(ps) > 1}
    if clashes:
        raise RuntimeError(
            "test helper modules must have unique basenames (they are imported by bare name): "
            + "; ".join(f"{n}: {', '.join(str(p) for p in ps)}" for n, ps in clashes.items())
        )
    return sorted({p.parent for ps in by_name.values() for p in ps})


for _d in _helper_dirs():
    if str(_d) not in sys.path:
        sys.path.append(str(_d))


settings.register_profile(
    "longboat", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("longboat")
