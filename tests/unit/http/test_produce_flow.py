"""The produce path flows one way (api.http.produce's docstring): routes -> produce -> pure
helpers, with the HttpContext a container that calls none of them.

Checked on each module's own import statements (lazy ones inside functions too), so that a
helper reaching back up (records.py and fast_produce.py once imported context.py, and
fast_produce.py drove the router itself) fails here by name.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROUTES = {"api.http.v3", "api.http.v2", "api.http.app"}
IO = {"asyncio", "aiohttp", "socket", "time", "threading", "os", "random"}


def imports_of(module: str) -> set[str]:
    """Every module ``module``'s source imports (``from a import b`` counts as ``a`` and, when
    ``a.b`` is a module, ``a.b``)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            out.add(node.module)
            out.update(
                f"{node.module}.{a.name}"
                for a in node.names
                if _is_module(f"{node.module}.{a.name}")
            )
    return out


def _is_module(name: str) -> bool:
    try:  # the parent is not a package, or has no such submodule
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def reaches(imported: set[str], forbidden: set[str]) -> set[str]:
    return {m for m in imported if any(m == f or m.startswith(f + ".") for f in forbidden)}


@pytest.mark.parametrize("module", ["api.http.records", "api.http.fast_produce"])
def test_the_pure_helpers_know_no_context_no_broker_and_do_no_io(module: str) -> None:
    forbidden = {"api.http.context", "api.http.produce", "broker", *ROUTES, *IO}
    assert reaches(imports_of(module), forbidden) == set()


def test_the_produce_module_calls_down_only() -> None:
    assert reaches(imports_of("api.http.produce"), ROUTES) == set()


def test_the_context_calls_no_route_and_no_produce_step() -> None:
    forbidden = {"api.http.produce", "api.http.records", "api.http.fast_produce", *ROUTES}
    assert reaches(imports_of("api.http.context"), forbidden) == set()


def test_the_route_modules_do_not_import_each_other() -> None:
    assert reaches(imports_of("api.http.v2"), {"api.http.v3"}) == set()
    assert reaches(imports_of("api.http.v3"), {"api.http.v2"}) == set()
