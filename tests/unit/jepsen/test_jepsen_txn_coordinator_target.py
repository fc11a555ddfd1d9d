"""The harness finds a transactional id's coordinator partition as the brokers do (it may not
import their code, so it has its own copy of Kafka's ``partitionFor``)."""

from __future__ import annotations

from broker.group_coordinator import java_string_hash as broker_hash
from broker.group_coordinator import kafka_abs
from jepsen_tests.longboat import java_string_hash, txn_state_partition


def test_partition_for_matches_the_brokers() -> None:
    ids = [f"jepsen-txn-{i}" for i in range(40)] + ["", "é-ünïcode", "polygenelubricants"]
    for tid in ids:
        assert java_string_hash(tid) == broker_hash(tid)
        for n in (1, 3, 50):
            assert txn_state_partition(tid, n) == kafka_abs(broker_hash(tid)) % n


def test_smallest_int_hash_maps_to_partition_zero() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE in Java.
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert txn_state_partition("polygenelubricants", 7) == 0
