"""Nouns shared by the consumer-group core.

Pure: no I/O.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic; ordered by topic then partition, which every assignor relies on."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class GroupState(StrEnum):
    """The classic group states, named as Kafka's DescribeGroups and the v3 REST API show them."""

    EMPTY = "EMPTY"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"
    DEAD = "DEAD"


class RebalanceProtocol(StrEnum):
    """How a member gives up partitions in a rebalance (KIP-429).

    ``EAGER``: the member revokes everything before it (re)joins. ``COOPERATIVE``: it keeps its
    partitions and gives up only those the new plan moves away from it.
    """

    EAGER = "eager"
    COOPERATIVE = "cooperative"


class ErrorCode(StrEnum):
    """Errors answered to group requests; the names are Kafka's (``Errors.java``)."""

    NONE = "NONE"
    UNKNOWN_MEMBER_ID = "UNKNOWN_MEMBER_ID"
    ILLEGAL_GENERATION = "ILLEGAL_GENERATION"
    REBALANCE_IN_PROGRESS = "REBALANCE_IN_PROGRESS"
    INCONSISTENT_GROUP_PROTOCOL = "INCONSISTENT_GROUP_PROTOCOL"
    INVALID_SESSION_TIMEOUT = "INVALID_SESSION_TIMEOUT"
    GROUP_MAX_SIZE_REACHED = "GROUP_MAX_SIZE_REACHED"
    COORDINATOR_NOT_AVAILABLE = "COORDINATOR_NOT_AVAILABLE"
    NON_EMPTY_GROUP = "NON_EMPTY_GROUP"
    GROUP_ID_NOT_FOUND = "GROUP_ID_NOT_FOUND"
    INVALID_GROUP_ID = "INVALID_GROUP_ID"
    # OffsetDelete (KIP-496) of a topic that a live member subscribes to.
    GROUP_SUBSCRIBED_TO_TOPIC = "GROUP_SUBSCRIBED_TO_TOPIC"
    # KIP-848's name for an assignor the coordinator does not have.
    UNSUPPORTED_ASSIGNOR = "UNSUPPORTED_ASSIGNOR"
