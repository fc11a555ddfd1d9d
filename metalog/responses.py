"""What the quorum controller answers each command with, once its records commit.

Frozen dataclasses, one per command (``metalog.commands``), carried back to the caller by
``metalog.wire``. A response may hold a per-item ``MetadataError`` (AlterPartition and
ElectLeaders answer each partition on its own).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from metalog.errors import MetadataError
from metalog.image import PartitionRegistration
from metalog.records import NO_LEADER, BrokerEpoch, BrokerId, ConfigResourceType, TopicId
from metalog.security import AclBinding


@dataclass(frozen=True, slots=True)
class CreateTopicResponse:
    name: str
    topic_id: TopicId
    num_partitions: int
    replication_factor: int
    assignments: tuple[tuple[BrokerId, ...], ...]
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class LookupTopicResponse:
    name: str
    topic_id: TopicId


@dataclass(frozen=True, slots=True)
class DeleteTopicResponse:
    name: str
    topic_id: TopicId


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    name: str
    total_count: int
    new_assignments: tuple[tuple[BrokerId, ...], ...]


@dataclass(frozen=True, slots=True)
class AlterConfigsResponse:
    resource_type: ConfigResourceType
    resource_name: str
    changed: Mapping[str, str | None]


@dataclass(frozen=True, slots=True)
class BrokerRegistrationResponse:
    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    """-1 in ``ControllerResult.response``; ``response_at(base_offset)`` fills it in."""


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    is_caught_up: bool
    is_fenced: bool
    should_shutdown: bool


@dataclass(frozen=True, slots=True)
class UnregisterBrokerResponse:
    broker_id: BrokerId


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """The partition's registration after the change, or ``error``."""

    topic_id: TopicId
    partition: int
    error: MetadataError | None = None
    registration: PartitionRegistration | None = None


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    results: tuple[AlterPartitionResult, ...]


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    broker_id: BrokerId
    first_producer_id: int
    size: int


@dataclass(frozen=True, slots=True)
class ElectLeadersResult:
    topic: str
    partition: int
    error: MetadataError | None = None
    leader: BrokerId = NO_LEADER


@dataclass(frozen=True, slots=True)
class ElectLeadersResponse:
    results: tuple[ElectLeadersResult, ...]


@dataclass(frozen=True, slots=True)
class AclEntry:
    """An ACL binding and the id its record gave it."""

    id: str
    binding: AclBinding


@dataclass(frozen=True, slots=True)
class CreateAclsResponse:
    entries: tuple[AclEntry, ...]
    """One per binding asked for, in order (a binding already present with its old id)."""


@dataclass(frozen=True, slots=True)
class DeleteAclsResponse:
    deleted: tuple[AclEntry, ...]
    """Every binding removed (matched by any filter), by id."""


@dataclass(frozen=True, slots=True)
class AlterUserScramCredentialsResponse:
    upserted: tuple[tuple[str, str], ...]
    """(user, mechanism) of every credential set."""
    deleted: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    """One partition of an AlterPartitionReassignments answer."""

    topic: str
    partition: int
    error: MetadataError | None = None


@dataclass(frozen=True, slots=True)
class AlterPartitionReassignmentsResponse:
    results: tuple[ReassignmentResult, ...]


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """A partition being reassigned: its replicas now (targets and the ones leaving) and
    which of them are being added and removed (Kafka's OngoingPartitionReassignment)."""

    topic: str
    partition: int
    replicas: tuple[BrokerId, ...]
    adding_replicas: tuple[BrokerId, ...]
    removing_replicas: tuple[BrokerId, ...]


@dataclass(frozen=True, slots=True)
class ListPartitionReassignmentsResponse:
    reassignments: tuple[OngoingReassignment, ...]
