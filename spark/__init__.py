"""spark: a PySpark data source for Longboat topics. Talks to the cluster only as a client.

    from spark import register
    register(spark_session)          # then spark.read.format("longboat")...

See docs/spark.md. PySpark and pyarrow come with the ``spark`` extra.
"""

from __future__ import annotations

from typing import Any

FORMAT = "longboat"


def register(session: Any) -> None:
    """Make ``format("longboat")`` available in ``session`` (registration is per session)."""
    from spark.source import LongboatDataSource

    session.dataSource.register(LongboatDataSource)
