"""LogConfig from Kafka-style string configs."""

from __future__ import annotations

import pytest

from storage.config import LogConfig, LogConfigError


def test_kafka_names_map_to_typed_fields() -> None:
    c = LogConfig.from_kafka(
        {
            "segment.bytes": "1048576",
            "retention.ms": "-1",
            "cleanup.policy": "compact, delete",
            "min.compaction.lag.ms": "5",
            "flush.messages": "10",
            "flush.ms": "",
        }
    )
    assert c.segment_bytes == 1 << 20 and c.retention_ms == -1
    assert c.compact and c.delete and c.min_compaction_lag_ms == 5
    assert c.flush_messages == 10 and c.flush_ms is None
    assert LogConfig.from_kafka(c.to_kafka()) == c


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"segment.byte": "1"}, "unknown log config 'segment.byte'"),
        ({"segment_bytes": "100"}, "unknown log config"),
        ({"segment.bytes": "big"}, "segment.bytes='big' is not an integer"),
        ({"segment.bytes": "10"}, r"segment.bytes=10 is out of range"),
        ({"retention.bytes": "-2"}, "retention.bytes=-2 is out of range"),
        ({"cleanup.policy": "forever"}, "cleanup.policy='forever'"),
        ({"retention.ms": None}, "retention.ms needs a value"),
    ],
)
def test_bad_configs_are_named_in_the_error(configs, message) -> None:
    with pytest.raises(LogConfigError, match=message):
        LogConfig.from_kafka(configs)
