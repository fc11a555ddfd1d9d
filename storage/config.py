"""``LogConfig``: a partition log's settings, under Kafka's topic config names.

Users and the metadata log speak Kafka's dotted names with string values
(``{"segment.bytes": "1048576", "cleanup.policy": "compact,delete"}``); the code reads typed
fields whose names are those with dots turned to underscores. ``from_kafka`` parses and
checks a dict once, with an error that names the key and the accepted range.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"

_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1


class LogConfigError(ValueError):
    """A topic config that is unknown, unparsable or out of range."""


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log. Defaults are Kafka's.

    ``-1`` in ``retention_ms``/``retention_bytes`` means no limit, as in Kafka;
    ``flush_messages``/``flush_ms`` of ``None`` mean "never flush on a count or timer of
    this log's own", leaving durability to group commit and replication (Kafka's default).
    """

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: frozenset[str] = frozenset({CLEANUP_DELETE})
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    flush_messages: int | None = None
    flush_ms: int | None = None

    def __post_init__(self) -> None:
        for name, lo, hi in _RANGES:
            v = getattr(self, name)
            if v is None:
                continue
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise LogConfigError(
                    f"{_kafka_name(name)}={v!r} is out of range: expected an integer in "
                    f"[{lo}, {hi}]"
                )
        bad = set(self.cleanup_policy) - {CLEANUP_DELETE, CLEANUP_COMPACT}
        if bad or not self.cleanup_policy:
            raise LogConfigError(
                f"cleanup.policy={','.join(sorted(self.cleanup_policy))!r}: expected "
                "'delete', 'compact' or 'compact,delete'"
            )

    @property
    def compact(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return CLEANUP_DELETE in self.cleanup_policy

    @classmethod
    def from_kafka(cls, configs: Mapping[str, str | int | None]) -> LogConfig:
        """Parse Kafka-style topic configs (string values); unknown keys are an error."""
        kwargs: dict[str, Any] = {}
        fields = {f.name for f in dataclasses.fields(cls)}
        for key, raw in configs.items():
            name = key.replace(".", "_")
            if name not in fields or "_" in key:
                known = ", ".join(sorted(_kafka_name(f) for f in fields))
                raise LogConfigError(f"unknown log config {key!r}; known: {known}")
            if name == "cleanup_policy":
                parts = [p.strip() for p in str(raw or "").split(",") if p.strip()]
                kwargs[name] = frozenset(parts)
                continue
            if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "none")):
                if name in ("flush_messages", "flush_ms"):
                    kwargs[name] = None
                    continue
                raise LogConfigError(f"{key} needs a value")
            try:
                kwargs[name] = int(raw)
            except (TypeError, ValueError):
                raise LogConfigError(f"{key}={raw!r} is not an integer") from None
        return cls(**kwargs)

    def to_kafka(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "cleanup_policy":
                out[_kafka_name(f.name)] = ",".join(sorted(v))
            else:
                out[_kafka_name(f.name)] = "" if v is None else str(v)
        return out


def _kafka_name(field: str) -> str:
    return field.replace("_", ".")


_RANGES: tuple[tuple[str, int, int], ...] = (
    # A segment's positions are 32-bit in the offset index (as in Kafka).
    ("segment_bytes", 14, _INT32_MAX),
    ("segment_ms", 1, _INT64_MAX),
    ("retention_ms", -1, _INT64_MAX),
    ("retention_bytes", -1, _INT64_MAX),
    ("delete_retention_ms", 0, _INT64_MAX),
    ("min_compaction_lag_ms", 0, _INT64_MAX),
    ("index_interval_bytes", 0, _INT32_MAX),
    ("max_message_bytes", 0, _INT32_MAX),
    ("flush_messages", 1, _INT64_MAX),
    ("flush_ms", 0, _INT64_MAX),
)
