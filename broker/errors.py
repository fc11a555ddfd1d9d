"""Errors of the broker's data path: replication, produce acknowledgements, idempotence.

Each class names the Kafka error it stands for in ``code`` (the names of Kafka's
``Errors.java``), so the shells can answer HTTP/JSON and msgpack clients with the code a Kafka
user already knows, and map it to an HTTP status in one table. ``retriable`` says whether a
client may retry the same request unchanged (Kafka's ``RetriableException``).

These are expected operating errors, not bugs: a broken invariant raises
``common.invariant.InvariantError`` instead.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

from typing import ClassVar


class BrokerError(Exception):
    """An expected refusal on the data path; ``code`` is Kafka's error name."""

    code: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False


# --------------------------------------------------------------------------- leadership


class NotLeaderOrFollowerError(BrokerError):
    """This broker does not lead the partition (or no longer does: every pending acks=all
    produce fails with this when leadership is lost)."""

    code = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class FencedLeaderEpochError(BrokerError):
    """The request carries an older leader epoch than this replica knows (KIP-320)."""

    code = "FENCED_LEADER_EPOCH"
    retriable = True


class UnknownLeaderEpochError(BrokerError):
    """The request carries a newer leader epoch than this replica knows: its metadata lags
    (KIP-320); the sender retries."""

    code = "UNKNOWN_LEADER_EPOCH"
    retriable = True


class OffsetNotAvailableError(BrokerError):
    """A new leader's high watermark still lags the start of its epoch, so "latest" is not
    known yet (KIP-207; Kafka's ``Partition.fetchOffsetForTimestamp``)."""

    code = "OFFSET_NOT_AVAILABLE"
    retriable = True


# --------------------------------------------------------------------------- acks


class InvalidRequiredAcksError(BrokerError):
    """``acks`` is not 0, 1 or -1 ("all")."""

    code = "INVALID_REQUIRED_ACKS"


class NotEnoughReplicasError(BrokerError):
    """acks=all refused *before* the append: the ISR is smaller than
    ``min.insync.replicas``. Nothing was written."""

    code = "NOT_ENOUGH_REPLICAS"
    retriable = True


class NotEnoughReplicasAfterAppendError(BrokerError):
    """acks=all: the batch was appended and reached the high watermark, but the ISR had
    shrunk below ``min.insync.replicas`` meanwhile. The data is in the log; a retry by an
    idempotent producer is answered as a duplicate."""

    code = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    retriable = True


class RequestTimedOutError(BrokerError):
    """acks=all: the high watermark did not pass the batch before the request's deadline.
    The batch may still be committed later."""

    code = "REQUEST_TIMED_OUT"
    retriable = True


# --------------------------------------------------------------------------- idempotence


class OutOfOrderSequenceError(BrokerError):
    """The batch's first sequence does not follow the producer's last appended sequence
    (and it is not a duplicate of one of the last five batches), or a new producer epoch does
    not start at sequence 0."""

    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(BrokerError):
    """The batch's producer epoch is older than the one this partition has seen: a zombie
    producer instance (Kafka 2.7+ answers INVALID_PRODUCER_EPOCH rather than the fatal
    PRODUCER_FENCED)."""

    code = "INVALID_PRODUCER_EPOCH"


class InvalidRecordError(BrokerError):
    """A batch header that cannot be valid (an idempotent batch without a sequence)."""

    code = "INVALID_RECORD"


class CorruptProducerSnapshotError(BrokerError):
    """A producer state snapshot failed its checksum or did not decode; the caller drops it
    and rebuilds producer state from the log."""

    code = "KAFKA_STORAGE_ERROR"


# --------------------------------------------------------------------------- transactions


class InvalidTxnStateError(BrokerError):
    """A write that does not fit the producer's transaction in this partition: a
    non-transactional batch while its transaction is open, or a transactional batch the
    coordinator did not confirm (KIP-890 part 1)."""

    code = "INVALID_TXN_STATE"


class TransactionCoordinatorFencedError(BrokerError):
    """A transaction marker from a coordinator epoch older than the last marker's: a
    coordinator that lost its partition of ``__transaction_state`` (Kafka's
    ``TRANSACTION_COORDINATOR_FENCED``)."""

    code = "TRANSACTION_COORDINATOR_FENCED"
