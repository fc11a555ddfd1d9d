"""The ``longboat`` command line: the entry point (``longboat = api.cli.main:main``).

Click gives us nested command groups (``longboat log dump``, ``longboat topics create``),
generated help and a test runner. The root group lives in ``api.cli.common``; each
subcommand module registers itself on it when imported here, once.
"""

from __future__ import annotations

from api.cli import (  # noqa: F401  (imported for their registrations)
    acls,
    broker,
    brokers,
    cluster,
    demo,
    dev,
    groups,
    leaders,
    log,
    partitions,
    produce,
    quorum,
    records,
    topics,
    users,
)
from api.cli.common import main

__all__ = ["main"]
