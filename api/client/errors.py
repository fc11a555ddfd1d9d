"""The client's errors: one class, ``ClientError``, carrying Kafka's error name.

A broker answers a refusal with a Kafka error name (``NOT_LEADER_OR_FOLLOWER``,
``NOT_ENOUGH_REPLICAS``, ...); the client keeps that name in ``code`` so users can match on
what Kafka's documentation calls it, and says whether the same request may be retried.
Connection failures are ``NETWORK_EXCEPTION`` (retriable), a request that ran out of time
``REQUEST_TIMED_OUT``.
"""

from __future__ import annotations

RETRIABLE = frozenset(
    {
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "REQUEST_TIMED_OUT",
        "NETWORK_EXCEPTION",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "COORDINATOR_NOT_AVAILABLE",
        "KAFKA_STORAGE_ERROR",
        "CORRUPT_MESSAGE",
        "BROKER_NOT_AVAILABLE",
        "CONCURRENT_TRANSACTIONS",
        "THROTTLING_QUOTA_EXCEEDED",
        "UNSTABLE_OFFSET_COMMIT",
    }
)
"""Kafka's ``RetriableException`` subclasses among the codes Longboat answers.
``UNKNOWN_TOPIC_OR_PARTITION`` is retriable as in Kafka: a topic just created may not have
reached every broker's metadata yet. ``THROTTLING_QUOTA_EXCEEDED`` (new producer ids past the
broker's rate, KIP-936) is retried after the usual back-off."""

METADATA_STALE = frozenset(
    {
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "NETWORK_EXCEPTION",
        "BROKER_NOT_AVAILABLE",
        "REQUEST_TIMED_OUT",
        "KAFKA_STORAGE_ERROR",
    }
)
"""Errors after which the client refreshes its cluster metadata before retrying.
``REQUEST_TIMED_OUT``: a paused or cut-off leader answers nothing while leadership moves
(Kafka's client drops the connection and asks for metadata); ``KAFKA_STORAGE_ERROR``: the
replica's log directory is offline and leadership is moving (Kafka's
``KafkaStorageException`` is an ``InvalidMetadataException``). Refreshes are single-flight
and at most one per ``MetadataCache.MIN_REFRESH_INTERVAL_S``."""


SSL_AUTHENTICATION_FAILED = "SSL_AUTHENTICATION_FAILED"
"""A broker's certificate the client does not trust (expired, another CA, another name):
Kafka's ``SslAuthenticationException``, which has no error code of its own. Not retriable,
as in Kafka: every broker would be refused the same way."""


class ClientError(Exception):
    """A refusal or failure, with Kafka's error name in ``code``."""

    def __init__(self, code: str, message: str = "", *, leader_id: int = -1) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.leader_id = leader_id

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE

    @property
    def refresh_metadata(self) -> bool:
        return self.code in METADATA_STALE


class CommitFailedError(ClientError):
    """A group commit the coordinator refused because this member no longer owns what it
    committed: it was removed from the group (``UNKNOWN_MEMBER_ID``) or the group moved on
    to a newer generation (``ILLEGAL_GENERATION``), or a rebalance did not finish in time
    (``REBALANCE_IN_PROGRESS``). Kafka's ``CommitFailedException``: the partitions may have
    been handed to another member, whose position a commit would overwrite; the consumer
    rejoins and its next ``poll`` carries on from the group's committed offsets."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(code, message)

    @property
    def retriable(self) -> bool:
        return False


class ProducerFencedError(ClientError):
    """Fatal for a transactional producer (Kafka's ``ProducerFencedException``): another
    producer initialised the same transactional id with a newer epoch, or the coordinator
    aborted this producer's transaction (its timeout passed) and bumped the epoch. Nothing
    this producer does can commit any more: close it; a new one (``init_transactions``)
    takes over the id."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(code, message)

    @property
    def retriable(self) -> bool:
        return False


class TransactionAbortedError(ClientError):
    """Abortable (Kafka's ``TransactionAbortedException`` and abortable errors): a send of
    the current transaction failed, so it cannot commit. ``abort_transaction()`` and start
    again; the producer stays usable."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(code, message)

    @property
    def retriable(self) -> bool:
        return False
