"""``longboat log dump|verify``: inspect partition log directories (filled in by storage)."""

from __future__ import annotations

from api.cli import main


@main.group("log")
def log_group() -> None:
    """Inspect and verify partition log directories."""
