"""The commands callers send the quorum controller (Kafka's controller requests).

Frozen dataclasses: brokers (registration, heartbeats, AlterPartition, producer ids) and the
HTTP API (topics, configs, elections, ACLs and SCRAM users) build them, ``metalog.wire`` carries them to the active
controller, and ``QuorumController.handle`` turns each into records and a response
(``metalog.responses``). Every command may carry the controller epoch its sender believes in;
a mismatch is refused.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from metalog.records import (
    BrokerEpoch,
    BrokerId,
    ConfigResourceType,
    Endpoint,
    LeaderEpoch,
    LeaderRecoveryState,
    PartitionEpoch,
    TopicId,
)
from metalog.security import AclBinding, AclBindingFilter

_NO_EPOCH = BrokerEpoch(-1)


@dataclass(frozen=True, kw_only=True)
class Command:
    controller_epoch: int | None = None


@dataclass(frozen=True, kw_only=True)
class CreateTopic(Command):
    """Kafka's CreateTopics for one topic. ``assignments`` (partition -> replicas) excludes
    ``num_partitions``/``replication_factor``; None for those means the cluster default."""

    name: str
    num_partitions: int | None = None
    replication_factor: int | None = None
    assignments: Mapping[int, tuple[BrokerId, ...]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    validate_only: bool = False
    topic_id: TopicId | None = None
    """Chosen by the caller to make the create idempotent: a retry whose first attempt took
    effect (its answer lost to a failover) finds the topic with this id and is answered as
    the first attempt would have been, not with TOPIC_ALREADY_EXISTS."""


@dataclass(frozen=True, kw_only=True)
class DeleteTopic(Command):
    """By name, or by id when ``topic_id`` is given."""

    name: str | None = None
    topic_id: TopicId | None = None


@dataclass(frozen=True, kw_only=True)
class LookupTopic(Command):
    """The id of the topic named ``name`` in the active controller's latest image (pending
    changes included): a read with no records, so a caller can delete *that* incarnation by
    id, and a retried delete never removes a topic of the same name created meanwhile."""

    name: str


@dataclass(frozen=True, kw_only=True)
class CreatePartitions(Command):
    """Grow ``name`` to ``total_count`` partitions; ``assignments`` lists the new ones'
    replicas, in order."""

    name: str
    total_count: int
    assignments: tuple[tuple[BrokerId, ...], ...] | None = None
    validate_only: bool = False


@dataclass(frozen=True, kw_only=True)
class AlterConfigs(Command):
    """Kafka's IncrementalAlterConfigs for one resource: ``ops`` maps a key to a new value,
    or to None to delete it (back to the default)."""

    resource_type: ConfigResourceType
    resource_name: str
    ops: Mapping[str, str | None]
    validate_only: bool = False


@dataclass(frozen=True, kw_only=True)
class RegisterBroker(Command):
    broker_id: BrokerId
    incarnation_id: str
    endpoints: tuple[Endpoint, ...] = ()
    rack: str | None = None
    previous_broker_epoch: BrokerEpoch = _NO_EPOCH
    """KIP-966: the epoch of the incarnation whose clean shutdown left this broker's logs
    whole (its clean-shutdown marker), or the epoch this process registered with before;
    -1 after an unclean shutdown. Unless it is the epoch of the registration being replaced,
    the broker may have lost unflushed writes and leaves every ISR and ELR."""
    previous_incarnation_id: str | None = None
    """The incarnation that held this broker's data directory before this process locked it
    (``broker.clean_shutdown.claim_data_dir``), or None when unknown. It proves that
    incarnation dead, so the controller replaces its registration at once instead of waiting
    out its session (``DUPLICATE_BROKER_REGISTRATION``): a broker restarted after a crash
    fetches again, and its old leaderships move, seconds sooner."""


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """Where one replica's log ends (KIP-966's GetReplicaLogInfo answer), for a partition
    that has no leader, no ISR and no ELR: unclean recovery elects the longest log."""

    topic_id: TopicId
    partition: int
    partition_epoch: PartitionEpoch
    """The partition epoch of the registration the broker saw: a report is only good for it."""
    last_leader_epoch: LeaderEpoch
    """The latest leader epoch in the replica's log (-1: none)."""
    log_end_offset: int


@dataclass(frozen=True, kw_only=True)
class BrokerHeartbeat(Command):
    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    current_metadata_offset: int
    want_fence: bool = False
    want_shutdown: bool = False
    replica_logs: tuple[ReplicaLogInfo, ...] = ()
    """The broker's replicas of partitions awaiting an unclean recovery."""


@dataclass(frozen=True, kw_only=True)
class UnregisterBroker(Command):
    broker_id: BrokerId


_UNCHECKED_EPOCH = _NO_EPOCH


@dataclass(frozen=True, slots=True)
class IsrMember:
    """A proposed ISR member and the broker epoch the leader knows it by (-1: unchecked)."""

    broker_id: BrokerId
    broker_epoch: BrokerEpoch = _UNCHECKED_EPOCH


@dataclass(frozen=True, slots=True)
class PartitionStateChange:
    """One partition of an AlterPartition request: the leader's view and its proposal."""

    topic_id: TopicId
    partition: int
    leader_epoch: LeaderEpoch
    partition_epoch: PartitionEpoch
    new_isr: tuple[IsrMember, ...]
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED


@dataclass(frozen=True, kw_only=True)
class AlterPartition(Command):
    """ISR changes proposed by a partition leader (KIP-497, KIP-903)."""

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    partitions: tuple[PartitionStateChange, ...]


@dataclass(frozen=True, kw_only=True)
class AllocateProducerIds(Command):
    broker_id: BrokerId
    broker_epoch: BrokerEpoch


class ElectionType(Enum):
    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, kw_only=True)
class ElectLeaders(Command):
    """Kafka's ElectLeaders: ``partitions`` as (topic name, partition), or None for all."""

    election: ElectionType = ElectionType.PREFERRED
    partitions: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True, kw_only=True)
class CreateAcls(Command):
    """Kafka's CreateAcls, all or nothing: every binding is checked before any is added; a
    binding equal to one already present is not added twice (and answers with its id)."""

    bindings: tuple[AclBinding, ...]


@dataclass(frozen=True, kw_only=True)
class DeleteAcls(Command):
    """Kafka's DeleteAcls: removes every binding that any of ``filters`` matches."""

    filters: tuple[AclBindingFilter, ...]


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """A user's credential for one mechanism, derived by the caller
    (``metalog.security.ScramCredential.derive``): the password never reaches the
    controller, let alone the log (KIP-554 sends the salted password the same way)."""

    name: str
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    name: str
    mechanism: str


@dataclass(frozen=True, kw_only=True)
class AlterUserScramCredentials(Command):
    """KIP-554's AlterUserScramCredentials, all or nothing."""

    upsertions: tuple[ScramUpsertion, ...] = ()
    deletions: tuple[ScramDeletion, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicaReassignment:
    """One partition of an AlterPartitionReassignments request: its target replicas, in
    order (the first is the preferred leader), or None to cancel the reassignment in
    progress (KIP-455)."""

    topic: str
    partition: int
    replicas: tuple[BrokerId, ...] | None


@dataclass(frozen=True, kw_only=True)
class AlterPartitionReassignments(Command):
    """Kafka's AlterPartitionReassignments (KIP-455): start, change or cancel the moves of
    ``reassignments``; each partition is answered on its own."""

    reassignments: tuple[ReplicaReassignment, ...]


@dataclass(frozen=True, kw_only=True)
class ListPartitionReassignments(Command):
    """Kafka's ListPartitionReassignments: the reassignments in progress of ``partitions``
    ((topic, partition) pairs), or of every partition when None. A read: no records."""

    partitions: tuple[tuple[str, int], ...] | None = None
