"""The refusals of the quorum controller: ``MetadataError`` and its subclasses.

A command the controller will not carry out raises one of these (``metalog.controller``); it
travels back to the caller over the controller route (``metalog.wire`` rebuilds it by class
name), and brokers and the HTTP API catch them by class. ``code`` is Kafka's error name, which
the HTTP API shows.

Pure: no I/O.
"""

from __future__ import annotations

from typing import ClassVar


class MetadataError(Exception):
    """An expected refusal of a controller command; ``code`` is Kafka's error name."""

    code: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    after_uncertain_attempt: bool = False
    """Set by ``metalog.client.ControllerClient``: an earlier attempt of the same command
    may have been applied, so this refusal may be that attempt's own trace."""


class NotControllerError(MetadataError):
    """This node is not the active controller (or a newer controller epoch exists)."""

    code = "NOT_CONTROLLER"


class StaleControllerEpochError(MetadataError):
    """The request names an older controller epoch than the current one."""

    code = "STALE_CONTROLLER_EPOCH"


class InvalidRequestError(MetadataError):
    code = "INVALID_REQUEST"


class InvalidTopicError(MetadataError):
    code = "INVALID_TOPIC_EXCEPTION"


class TopicExistsError(MetadataError):
    code = "TOPIC_ALREADY_EXISTS"


class UnknownTopicOrPartitionError(MetadataError):
    code = "UNKNOWN_TOPIC_OR_PARTITION"


class TopicIdRetiredError(MetadataError):
    """A create names the id of a topic deleted since. Ids are chosen per request (the HTTP
    API's ``random_topic_id``), so this is the retry of a create whose earlier attempt took
    effect: the create happened, and the topic was deleted after it. Not a ``TOPIC_ALREADY_
    EXISTS``: the caller answers "created" (finding 4 of docs/fault-injection.md)."""

    code = "TOPIC_ID_RETIRED"


class InvalidPartitionsError(MetadataError):
    code = "INVALID_PARTITIONS"


class InvalidReplicationFactorError(MetadataError):
    code = "INVALID_REPLICATION_FACTOR"


class InvalidReplicaAssignmentError(MetadataError):
    code = "INVALID_REPLICA_ASSIGNMENT"


class InvalidConfigurationError(MetadataError):
    code = "INVALID_CONFIG"


class BrokerIdNotRegisteredError(MetadataError):
    code = "BROKER_ID_NOT_REGISTERED"


class StaleBrokerEpochError(MetadataError):
    code = "STALE_BROKER_EPOCH"


class DuplicateBrokerRegistrationError(MetadataError):
    """Another incarnation of this broker id holds a live session."""

    code = "DUPLICATE_BROKER_REGISTRATION"


class BrokerRegistrationPendingError(MetadataError):
    """The broker's registration is proposed but not committed, so its epoch is not known
    yet; retry once it commits. (Longboat's own code: Kafka's controller knows the offset it
    writes at, ours learns it at commit.)"""

    code = "BROKER_REGISTRATION_PENDING"


class FencedLeaderEpochError(MetadataError):
    """AlterPartition from a leader of an older leader epoch."""

    code = "FENCED_LEADER_EPOCH"


class NotLeaderOrFollowerError(MetadataError):
    """AlterPartition from a broker that is not the partition's leader."""

    code = "NOT_LEADER_OR_FOLLOWER"


class InvalidUpdateVersionError(MetadataError):
    """AlterPartition based on an older partition epoch (a change it has not seen)."""

    code = "INVALID_UPDATE_VERSION"


class IneligibleReplicaError(MetadataError):
    """A proposed ISR member is fenced, shutting down, unknown, or of a stale broker epoch."""

    code = "INELIGIBLE_REPLICA"


class ElectionNotNeededError(MetadataError):
    code = "ELECTION_NOT_NEEDED"


class PreferredLeaderNotAvailableError(MetadataError):
    code = "PREFERRED_LEADER_NOT_AVAILABLE"


class EligibleLeadersNotAvailableError(MetadataError):
    code = "ELIGIBLE_LEADERS_NOT_AVAILABLE"


class ResourceNotFoundError(MetadataError):
    """A deletion names a SCRAM credential that does not exist (KIP-554)."""

    code = "RESOURCE_NOT_FOUND"


class DuplicateResourceError(MetadataError):
    """One request names the same SCRAM credential twice (KIP-554)."""

    code = "DUPLICATE_RESOURCE"


class UnsupportedSaslMechanismError(MetadataError):
    code = "UNSUPPORTED_SASL_MECHANISM"


class UnacceptableCredentialError(MetadataError):
    """A SCRAM credential that cannot be right: too few or too many iterations, an empty
    salt, keys of the wrong length for the mechanism's hash, an empty user name."""

    code = "UNACCEPTABLE_CREDENTIAL"


class NoReassignmentInProgressError(MetadataError):
    """A cancel for a partition that is not being reassigned (KIP-455)."""

    code = "NO_REASSIGNMENT_IN_PROGRESS"
