"""broker.errors: every error names its Kafka code, and says whether a retry may succeed."""

from __future__ import annotations

import pytest

from broker import errors

EXPECTED = {
    "NotLeaderOrFollowerError": ("NOT_LEADER_OR_FOLLOWER", True),
    "FencedLeaderEpochError": ("FENCED_LEADER_EPOCH", True),
    "UnknownLeaderEpochError": ("UNKNOWN_LEADER_EPOCH", True),
    "OffsetNotAvailableError": ("OFFSET_NOT_AVAILABLE", True),
    "InvalidRequiredAcksError": ("INVALID_REQUIRED_ACKS", False),
    "NotEnoughReplicasError": ("NOT_ENOUGH_REPLICAS", True),
    "NotEnoughReplicasAfterAppendError": ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
    "RequestTimedOutError": ("REQUEST_TIMED_OUT", True),
    "OutOfOrderSequenceError": ("OUT_OF_ORDER_SEQUENCE_NUMBER", False),
    "InvalidProducerEpochError": ("INVALID_PRODUCER_EPOCH", False),
    "InvalidRecordError": ("INVALID_RECORD", False),
    "CorruptProducerSnapshotError": ("KAFKA_STORAGE_ERROR", False),
    "InvalidTxnStateError": ("INVALID_TXN_STATE", False),
    "TransactionCoordinatorFencedError": ("TRANSACTION_COORDINATOR_FENCED", False),
}


@pytest.mark.parametrize(("name", "code_retriable"), sorted(EXPECTED.items()))
def test_error_carries_its_kafka_code(name, code_retriable) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, errors.BrokerError) and name.endswith("Error")
    assert (cls.code, cls.retriable) == code_retriable
    assert str(cls("why")) == "why"


def test_every_broker_error_is_listed() -> None:
    defined = {
        n
        for n, v in vars(errors).items()
        if isinstance(v, type) and issubclass(v, errors.BrokerError)
    }
    assert defined - {"BrokerError"} == set(EXPECTED)
