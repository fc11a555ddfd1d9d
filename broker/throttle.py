"""A token bucket for replication traffic (Kafka's ``follower.replication.throttled.rate``).

A broker's followers that fetch as *adding* replicas of a reassignment (KIP-455) share one
bucket, so moving a partition onto this broker cannot take more than the configured bytes per
second from the leaders' disks and the network, and producers keep their share. The rate
comes from the broker's dynamic config (``ConfigRecord`` of the broker, or of the cluster
default, in the metadata log), so it changes without a restart.

Pure: time comes in as an argument (seconds, any monotonic origin); no I/O, no clock.
"""

from __future__ import annotations

from common.invariant import invariant

THROTTLE_RATE_CONFIG = "follower.replication.throttled.rate"
"""Bytes per second for fetches of adding replicas; absent or <= 0: unthrottled."""


class TokenBucket:
    """``rate_bytes_per_s`` sustained, bursts of up to ``burst_bytes`` (one second's worth
    by default). Taking more than there is drives the balance negative; ``take`` says how
    long to wait before the next request so that the average stays at the rate.

    Invariant: ``tokens <= burst_bytes``.
    """

    def __init__(self, rate_bytes_per_s: int, now_s: float, burst_bytes: int | None = None):
        invariant(rate_bytes_per_s > 0, "token bucket rate must be positive")
        self.rate_bytes_per_s = rate_bytes_per_s
        self.burst_bytes = burst_bytes if burst_bytes is not None else rate_bytes_per_s
        self.tokens = float(self.burst_bytes)
        self._last_s = now_s

    def set_rate(self, rate_bytes_per_s: int, now_s: float) -> None:
        """A new rate from now on (the balance earned so far is kept, capped by the burst)."""
        invariant(rate_bytes_per_s > 0, "token bucket rate must be positive")
        self._refill(now_s)
        self.rate_bytes_per_s = rate_bytes_per_s
        self.burst_bytes = rate_bytes_per_s
        self.tokens = min(self.tokens, float(self.burst_bytes))

    def _refill(self, now_s: float) -> None:
        elapsed = max(0.0, now_s - self._last_s)
        self._last_s = max(self._last_s, now_s)
        self.tokens = min(float(self.burst_bytes), self.tokens + elapsed * self.rate_bytes_per_s)

    def delay_s(self, now_s: float) -> float:
        """How long to wait before sending another request (0: at once)."""
        self._refill(now_s)
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate_bytes_per_s

    def take(self, n_bytes: int, now_s: float) -> float:
        """Count ``n_bytes`` as sent now; the seconds to wait before the next request."""
        self._refill(now_s)
        self.tokens -= n_bytes
        return self.delay_s(now_s)

    def request_bytes_max(self) -> int:
        """The most one fetch should ask for: a second's worth, at least 1 KiB, so one answer
        cannot overdraw the bucket by more than that."""
        return max(1024, self.rate_bytes_per_s)
