"""The ``longboat`` command line.

Click gives us nested command groups (``longboat log dump``, ``longboat topics create``),
generated help and a test runner; each subcommand module registers itself on ``main``.
"""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="longboat")
def main() -> None:
    """Longboat: a Kafka-style event log service."""


def _register() -> None:
    # Subcommand modules import heavy things; keep `longboat --help` fast by importing
    # them here, once, and tolerate none missing: each is part of the package.
    from api import (  # noqa: F401
        cli_broker,
        cli_cluster,
        cli_demo,
        cli_dev,
        cli_groups,
        cli_log,
        cli_produce,
        cli_quorum,
        cli_topics,
    )


_register()
