"""Distinct integer types shared by the data plane.

``NewType`` costs nothing at run time and lets mypy catch an offset passed where a leader
epoch was meant. Units go last in names elsewhere (``retention_ms``); these are the nouns.

Pure: no I/O.
"""

from __future__ import annotations

from typing import NewType

Offset = NewType("Offset", int)
"""Position of a record in a partition log (0-based, dense at append, gaps after compaction)."""

LeaderEpoch = NewType("LeaderEpoch", int)
"""Epoch of the partition leader that appended a batch (KIP-101); -1 when unknown."""

TimestampMs = NewType("TimestampMs", int)
"""Milliseconds since the Unix epoch, as Kafka's record timestamps."""

ProducerId = NewType("ProducerId", int)
ProducerEpoch = NewType("ProducerEpoch", int)

NO_PRODUCER_ID = ProducerId(-1)
NO_PRODUCER_EPOCH = ProducerEpoch(-1)
NO_SEQUENCE = -1
NO_LEADER_EPOCH = LeaderEpoch(-1)
