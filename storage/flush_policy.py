"""``FlushPolicy``: when a log's own settings ask for an fsync, independent of waiters.

Kafka's ``flush.messages`` and ``flush.ms`` (and a byte bound Kafka lacks) decide when a log
is flushed even though nobody awaits durability; ``GroupCommitter`` asks this policy after
every append and when its timer fires. A caller awaiting ``durable()`` is flushed for at once
regardless: the policy only adds flushes, it never delays one.

Pure: no I/O, no clock (``now_ms`` comes in), no global random.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Unflushed:
    """What a log has appended since its last flush began."""

    bytes_: int = 0
    messages: int = 0
    since_ms: int | None = None
    """When the first unflushed append happened; None when nothing is unflushed."""

    def after_append(self, size_bytes: int, messages: int, now_ms: int) -> Unflushed:
        return Unflushed(
            self.bytes_ + size_bytes,
            self.messages + messages,
            now_ms if self.since_ms is None else self.since_ms,
        )


CLEAN = Unflushed()


@dataclasses.dataclass(frozen=True)
class FlushPolicy:
    """Flush when any bound is reached; all None means "only when someone waits"."""

    bytes_max: int | None = None
    messages_max: int | None = None
    interval_ms: int | None = None

    @classmethod
    def every_append(cls) -> FlushPolicy:
        return cls(messages_max=1)

    @classmethod
    def on_demand(cls) -> FlushPolicy:
        return cls()

    def should_flush(self, state: Unflushed, now_ms: int) -> bool:
        if state.since_ms is None:
            return False
        if self.bytes_max is not None and state.bytes_ >= self.bytes_max:
            return True
        if self.messages_max is not None and state.messages >= self.messages_max:
            return True
        return self.interval_ms is not None and now_ms - state.since_ms >= self.interval_ms

    def deadline_ms(self, state: Unflushed) -> int | None:
        """When ``should_flush`` turns true by time alone; None if it never will."""
        if state.since_ms is None or self.interval_ms is None:
            return None
        return state.since_ms + self.interval_ms
