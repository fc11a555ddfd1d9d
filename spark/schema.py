"""The row schema of the ``longboat`` source: Spark's Kafka schema, column for column.

``api.client.arrow.kafka_schema`` is the same schema in Arrow terms (what the broker sends); a unit
test checks that Spark derives exactly that Arrow schema from this one.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)

_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]


def kafka_struct(include_headers: bool) -> StructType:
    fields = [*_FIELDS, StructField("headers", HEADERS_TYPE)] if include_headers else _FIELDS
    return StructType(list(fields))
