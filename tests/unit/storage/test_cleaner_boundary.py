"""The cleaner reaches the log through its public methods only.

An import contract cannot see attribute access, so this reads storage/cleaner.py's syntax
tree: ``x._name`` where ``x`` is not ``self`` or ``cls`` is a reach into another object's
private state, as ``log._lock``, ``log._close_retired_locked()`` and ``log._swap_segments``
once were (issue 23). Dunders (``x.__class__``) are not private.
"""

from __future__ import annotations

import ast
from pathlib import Path

import storage.cleaner


def private_reaches(source: str) -> list[str]:
    """``"line N: x._name"`` for every private attribute of another object in ``source``."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [f"line {line}: {text}" for line, _, text in sorted(found)]


def test_cleaner_touches_no_private_member_of_another_object() -> None:
    source = Path(storage.cleaner.__file__).read_text(encoding="utf-8")
    assert private_reaches(source) == []


def test_private_reaches_finds_a_reach_and_spares_self_and_dunders() -> None:
    source = (
        "def compact(log):\n"
        "    with log._lock:\n"
        "        log.segments[0]._retire()\n"
        "    return log.__class__, log.config\n"
        "class C:\n"
        "    def f(self):\n"
        "        return self._x\n"
    )
    assert private_reaches(source) == ["line 2: log._lock", "line 3: log.segments[0]._retire"]
