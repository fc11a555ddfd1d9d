"""The exactly-once writer's options (issue 19) and its transactional ids."""

from __future__ import annotations

import pytest

from spark.exactly_once import BatchTask
from spark.options import LongboatOptionError, parse_sink_options

SINK = {"bootstrap": "http://127.0.0.1:8082", "topic": "out"}


def test_exactly_once_is_off_by_default_and_named_after_query_and_partition() -> None:
    assert not parse_sink_options(SINK).exactly_once
    o = parse_sink_options(
        {
            **SINK,
            "exactlyOnce": "true",
            "transactionalIdPrefix": "orders-etl.",
            "kafka.transaction.timeout.ms": "30000",
        }
    )
    assert (o.exactly_once, o.transaction_timeout_ms) == (True, 30_000)
    # The query id survives restarts from the checkpoint, so a rerun of a batch uses the
    # same ids (and fences what an older attempt left).
    assert BatchTask("q-1", 5, 3).transactional_id(o) == "orders-etl.q-1-3"
    assert BatchTask("q-1", 6, 3).transactional_id(o) == "orders-etl.q-1-3"


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"exactlyOnce": "true", "acks": "1"}, "needs acks=all"),
        ({"exactlyOnce": "yes"}, "must be true or false"),
        ({"transactionalIdPrefix": "a b"}, "may hold letters"),
        ({"transaction.timeout.ms": "10"}, "at least 1000"),
    ],
)
def test_bad_exactly_once_options_are_refused(opts: dict[str, str], message: str) -> None:
    with pytest.raises(LongboatOptionError, match=message):
        parse_sink_options({**SINK, **opts})


def test_a_batch_write_refuses_exactly_once() -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    from spark.source import LongboatDataSource

    schema = StructType([StructField("value", BinaryType())])
    ds = LongboatDataSource({**SINK, "exactlyOnce": "true"})
    with pytest.raises(LongboatOptionError, match="is for writeStream"):
        ds.writer(schema, False)
    assert ds.streamWriter(schema, False).sink.exactly_once
