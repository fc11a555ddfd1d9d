"""The metadata log's bytes are pinned: every record type, at every version, encodes to exactly
the bytes it did when this test was written, and those bytes decode back to the record.

The hex strings were produced by the codec as it stood before the record fields were
declared once (each field was then declared three times: dataclass, encoder table, decoder
table). A change of the codec that moves one byte of any of them would make old metadata logs
and snapshots unreadable, or readable as something else: that must be a new record version,
never an edit of an old one.
"""

from __future__ import annotations

import dataclasses

import pytest

from metalog.records import (
    NO_LEADER,
    RECORD_TYPES,
    AccessControlEntryRecord,
    BrokerEpoch,
    BrokerId,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    FeatureLevelRecord,
    FenceBrokerRecord,
    LeaderEpoch,
    LeaderRecoveryState,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionEpoch,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    RetiredTopicRecord,
    TopicId,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    decode_record,
    decode_records,
    encode_record,
    encode_records,
)
from metalog.security import Operation, PatternType, Permission, ResourceType

B = BrokerId
TID = TopicId("tid")

SAMPLES: list[tuple[MetadataRecord, str]] = [
    (
        RegisterBrokerRecord(
            broker_id=B(101),
            incarnation_id="b101-inc1",
            endpoints=(
                Endpoint("http", "127.0.0.1", 9101),
                Endpoint("internal", "h\u00e9te", 65535),
            ),
            rack="r1",
            fenced=True,
            in_controlled_shutdown=False,
        ),
        "99000065a9623130312d696e6331ff9293a468747470a93132372e302e302e31cd238d93a8696e746572"
        "6e616ca568c3a97465cdffffa27231c3c2",
    ),
    (RegisterBrokerRecord(broker_id=B(0), incarnation_id=""), "99000000a0ff90c0c3c2"),
    (
        RegisterBrokerRecord(
            broker_id=B(7),
            incarnation_id="x",
            broker_epoch=BrokerEpoch(2**63 - 1),
            rack=None,
            fenced=False,
            in_controlled_shutdown=True,
        ),
        "99000007a178cf7fffffffffffffff90c0c2c3",
    ),
    (UnregisterBrokerRecord(broker_id=B(3), broker_epoch=BrokerEpoch(42)), "940100032a"),
    (
        TopicRecord(name="orders", topic_id=TopicId("AAAAAAAAAAAAAAAAAAAAAA")),
        "940200a66f7264657273b641414141414141414141414141414141414141414141",
    ),
    (
        PartitionRecord(
            topic_id=TID,
            partition=2,
            replicas=(B(1), B(2), B(3)),
            isr=(B(1), B(3)),
            leader=B(1),
            leader_epoch=LeaderEpoch(5),
            partition_epoch=PartitionEpoch(9),
            leader_recovery_state=LeaderRecoveryState.RECOVERING,
            eligible_leader_replicas=(B(2),),
            version=1,
        ),
        "9b0301a37469640293010203920103010509019102",
    ),
    (
        PartitionRecord(
            topic_id=TID, partition=0, replicas=(B(1),), isr=(B(1),), leader=B(1), version=1
        ),
        "9b0301a3746964009101910101000000c0",
    ),
    (
        PartitionRecord(
            topic_id=TID,
            partition=3,
            replicas=(B(1), B(2), B(3)),
            isr=(),
            leader=NO_LEADER,
            leader_epoch=LeaderEpoch(7),
            partition_epoch=PartitionEpoch(12),
            eligible_leader_replicas=(B(3),),
            last_known_elr=(B(1), B(2)),
            version=2,
        ),
        "9c0302a3746964039301020390ff070c009103920102",
    ),
    (
        PartitionRecord(
            topic_id=TID, partition=0, replicas=(B(1),), isr=(B(1),), leader=B(1), version=2
        ),
        "9c0302a3746964009101910101000000c0c0",
    ),
    (
        PartitionRecord(
            topic_id=TID,
            partition=0,
            replicas=(B(3), B(1)),
            isr=(B(1),),
            leader=B(1),
            removing_replicas=(B(1),),
            adding_replicas=(B(3),),
        ),
        "9e0303a374696400920301910101000000c0c091019103",
    ),
    (
        PartitionRecord(topic_id=TID, partition=0, replicas=(B(1),), isr=(B(1),), leader=B(1)),
        "9e0303a3746964009101910101000000c0c0c0c0",
    ),
    (
        PartitionRecord(
            topic_id=TID,
            partition=0,
            replicas=(B(1), B(2)),
            isr=(B(2),),
            leader=B(2),
            leader_epoch=LeaderEpoch(-1),
            version=0,
        ),
        "9a0300a374696400920102910202ff0000",
    ),
    (
        ConfigRecord(
            resource_type=ConfigResourceType.TOPIC,
            resource_name="orders",
            name="retention.ms",
            value="-1",
        ),
        "96040002a66f7264657273ac726574656e74696f6e2e6d73a22d31",
    ),
    (ConfigRecord(resource_type=16, resource_name="", name="x", value=None), "96040010a0a178c0"),
    (
        PartitionChangeRecord(
            topic_id=TID,
            partition=1,
            isr=(B(2), B(3)),
            leader=B(3),
            replicas=(B(1), B(2), B(3)),
            leader_recovery_state=0,
            eligible_leader_replicas=(),
            version=1,
        ),
        "990501a37469640192020303930102030090",
    ),
    (PartitionChangeRecord(topic_id=TID, partition=0, version=1), "990501a374696400c0fec0c0c0"),
    (
        PartitionChangeRecord(
            topic_id=TID,
            partition=1,
            isr=(),
            leader=NO_LEADER,
            eligible_leader_replicas=(B(2),),
            last_known_elr=(B(3),),
            version=2,
        ),
        "9a0502a37469640190ffc0c091029103",
    ),
    (PartitionChangeRecord(topic_id=TID, partition=0, version=2), "9a0502a374696400c0fec0c0c0c0"),
    (
        PartitionChangeRecord(
            topic_id=TID,
            partition=0,
            replicas=(B(3),),
            isr=(B(3),),
            leader=B(3),
            removing_replicas=(),
            adding_replicas=(),
        ),
        "9c0503a3746964009103039103c0c0c09090",
    ),
    (PartitionChangeRecord(topic_id=TID, partition=0), "9c0503a374696400c0fec0c0c0c0c0c0"),
    (
        PartitionChangeRecord(topic_id=TID, partition=4, leader=NO_LEADER, version=0),
        "980500a374696404c0ffc0c0",
    ),
    (FenceBrokerRecord(broker_id=B(5), broker_epoch=BrokerEpoch(17)), "9407000511"),
    (UnfenceBrokerRecord(broker_id=B(5), broker_epoch=BrokerEpoch(17)), "9408000511"),
    (RemoveTopicRecord(topic_id=TID), "930900a3746964"),
    (
        FeatureLevelRecord(name="metadata.version", feature_level=3),
        "940c00b06d657461646174612e76657273696f6e03",
    ),
    (
        ProducerIdsRecord(broker_id=B(1), broker_epoch=BrokerEpoch(4), next_producer_id=2**40),
        "950f000104cf0000010000000000",
    ),
    (
        BrokerRegistrationChangeRecord(
            broker_id=B(1), broker_epoch=BrokerEpoch(4), in_controlled_shutdown=True
        ),
        "9611000104c0c3",
    ),
    (
        BrokerRegistrationChangeRecord(
            broker_id=B(1),
            broker_epoch=BrokerEpoch(-(2**63)),
            fenced=False,
            in_controlled_shutdown=False,
        ),
        "96110001d38000000000000000c2c2",
    ),
    (NoOpRecord(), "921400"),
    (RetiredTopicRecord(topic_id=TID, deleted_at=123456), "941500a3746964ce0001e240"),
    (
        UserScramCredentialRecord(
            name="alice",
            mechanism="SCRAM-SHA-256",
            salt=b"salt",
            stored_key=b"\x01" * 4,
            server_key=b"\x02" * 4,
            iterations=4096,
        ),
        "980b00a5616c696365ad534352414d2d5348412d323536c40473616c74c40401010101c40402020202cd1000",
    ),
    (
        RemoveUserScramCredentialRecord(name="alice", mechanism="SCRAM-SHA-512"),
        "941600a5616c696365ad534352414d2d5348412d353132",
    ),
    (
        AccessControlEntryRecord(
            id="acl1",
            resource_type=ResourceType.TOPIC,
            resource_name="orders-",
            pattern_type=PatternType.PREFIXED,
            principal="User:alice",
            host="*",
            operation=Operation.READ,
            permission=Permission.ALLOW,
        ),
        "9a1700a461636c31a5544f504943a76f72646572732da85052454649584544aa557365723a616c696365a1"
        "2aa452454144a5414c4c4f57",
    ),
    (RemoveAccessControlEntryRecord(id="acl1"), "931800a461636c31"),
]

BATCH_HEX = (
    "94c43b99000065a9623130312d696e6331ff9293a468747470a93132372e302e302e31cd238d93a8696e7465"
    "726e616ca568c3a97465cdffffa27231c3c2c40a99000000a0ff90c0c3c2c41399000007a178cf7fffffffff"
    "ffffff90c0c2c3c405940100032a"
)


def _id(sample: tuple[MetadataRecord, str]) -> str:
    return f"{type(sample[0]).__name__}-v{sample[0].version}"


@pytest.mark.parametrize("sample", SAMPLES, ids=[_id(s) for s in SAMPLES])
def test_record_encodes_to_its_pinned_bytes(sample: tuple[MetadataRecord, str]) -> None:
    record, pinned = sample
    assert encode_record(record).hex() == pinned


@pytest.mark.parametrize("sample", SAMPLES, ids=[_id(s) for s in SAMPLES])
def test_pinned_bytes_decode_to_the_record(sample: tuple[MetadataRecord, str]) -> None:
    record, pinned = sample
    assert decode_record(bytes.fromhex(pinned)) == record


def test_a_batch_of_records_encodes_to_its_pinned_bytes() -> None:
    records = [r for r, _ in SAMPLES[:4]]
    assert encode_records(records).hex() == BATCH_HEX
    assert decode_records(bytes.fromhex(BATCH_HEX)) == records


def test_every_record_type_and_version_is_pinned() -> None:
    pinned = {(type(r), r.version) for r, _ in SAMPLES}
    for t in RECORD_TYPES:
        newest = next(f.default for f in dataclasses.fields(t) if f.name == "version")
        assert isinstance(newest, int)
        for version in range(newest + 1):
            assert (t, version) in pinned, f"{t.__name__} v{version} has no pinned bytes"
