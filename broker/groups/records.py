"""Records of the compacted ``__consumer_offsets`` topic.

Every change the group core makes durable is one of these records; the coordinator shell
appends them to the group's ``__consumer_offsets`` partition, and a new coordinator rebuilds
every group by replaying that partition (``GroupCoordinatorState.replay``).

Each record has a key and a value (``encode_record`` -> ``(key, value)``). Compaction keeps
the last value per key, so:

* ``OffsetCommitRecord`` and ``OffsetTombstoneRecord`` share the key
  ``["offset", group, topic, partition]``; the tombstone's value is ``None``.
* ``GroupMetadataRecord`` and ``GroupTombstoneRecord`` share the key ``["group", group]``.

Keys and values are msgpack arrays. The first element of a value is a format version (0), so
fields can be added later as Kafka's schemas do. A key or value that does not decode to a
known record raises ``CorruptRecordError``.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.groups.types import RebalanceProtocol, TopicPartition
from broker.record_fields import int_field as _int
from broker.record_fields import pack as _pack
from broker.record_fields import str_field as _str
from broker.record_fields import unpack as _unpack
from storage.errors import CorruptRecordError

_VERSION = 0


@dataclass(frozen=True)
class OffsetCommitRecord:
    """A committed offset: the next offset the group will read from the partition."""

    group: str
    topic: str
    partition: int
    offset: int
    metadata: str
    commit_ts_ms: int


@dataclass(frozen=True)
class OffsetTombstoneRecord:
    """Deletes a committed offset (expiry after ``offsets.retention.minutes``, group deletion)."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class MemberMetadata:
    """One member as the group metadata record stores it."""

    member_id: str
    client_id: str
    protocol: RebalanceProtocol
    topics: frozenset[str]
    assignment: frozenset[TopicPartition]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    max_poll_interval_ms: int | None = None
    """Set when the coordinator enforces the member's poll interval (KIP-62)."""


@dataclass(frozen=True)
class GroupMetadataRecord:
    """A group's generation and its members with their assignments.

    Written when a rebalance computes a new plan and when the group becomes empty.
    ``assignor`` is ``None`` for a group that never had members. ``state_ts_ms`` is when the
    record was written: for an empty group, the moment it became empty, from which the
    retention of its offsets counts (KIP-211).
    """

    group: str
    generation: int
    protocol: RebalanceProtocol | None
    assignor: str | None
    leader: str | None
    state_ts_ms: int
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True)
class GroupTombstoneRecord:
    """Deletes a group's metadata: the group is dead."""

    group: str


GroupRecord = (
    OffsetCommitRecord | OffsetTombstoneRecord | GroupMetadataRecord | GroupTombstoneRecord
)


def encode_record(record: GroupRecord) -> tuple[bytes, bytes | None]:
    """``(key, value)`` for the compacted topic; the value is ``None`` for a tombstone."""
    match record:
        case OffsetCommitRecord():
            key = _pack(["offset", record.group, record.topic, record.partition])
            value = _pack([_VERSION, record.offset, record.metadata, record.commit_ts_ms])
            return key, value
        case OffsetTombstoneRecord():
            return _pack(["offset", record.group, record.topic, record.partition]), None
        case GroupMetadataRecord():
            members = [
                [
                    m.member_id,
                    m.client_id,
                    m.protocol.value,
                    sorted(m.topics),
                    [[tp.topic, tp.partition] for tp in sorted(m.assignment)],
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.max_poll_interval_ms,
                ]
                for m in record.members
            ]
            value = _pack(
                [
                    _VERSION,
                    record.generation,
                    None if record.protocol is None else record.protocol.value,
                    record.assignor,
                    record.leader,
                    record.state_ts_ms,
                    members,
                ]
            )
            return _pack(["group", record.group]), value
        case GroupTombstoneRecord():
            return _pack(["group", record.group]), None


def decode_record(key: bytes, value: bytes | None) -> GroupRecord:
    """The record stored under ``key`` with ``value``; ``CorruptRecordError`` if malformed."""
    try:
        return _decode(_unpack(key), None if value is None else _unpack(value))
    except CorruptRecordError:
        raise
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise CorruptRecordError(f"bad __consumer_offsets record: {e}") from e


def _decode(k: Any, v: Any) -> GroupRecord:
    if not isinstance(k, list) or not k:
        raise CorruptRecordError("record key is not a non-empty array")
    if k[0] == "offset" and len(k) == 4:
        group, topic, partition = _str(k[1]), _str(k[2]), _int(k[3])
        if v is None:
            return OffsetTombstoneRecord(group, topic, partition)
        _check_value(v, 4)
        return OffsetCommitRecord(group, topic, partition, _int(v[1]), _str(v[2]), _int(v[3]))
    if k[0] == "group" and len(k) == 2:
        group = _str(k[1])
        if v is None:
            return GroupTombstoneRecord(group)
        _check_value(v, 7)
        members = []
        for m in v[6]:
            if not isinstance(m, list) or len(m) != 8:
                raise CorruptRecordError("bad member in group metadata")
            members.append(
                MemberMetadata(
                    member_id=_str(m[0]),
                    client_id=_str(m[1]),
                    protocol=RebalanceProtocol(m[2]),
                    topics=frozenset(_str(t) for t in m[3]),
                    assignment=frozenset(TopicPartition(_str(t), _int(p)) for t, p in m[4]),
                    session_timeout_ms=_int(m[5]),
                    rebalance_timeout_ms=_int(m[6]),
                    max_poll_interval_ms=None if m[7] is None else _int(m[7]),
                )
            )
        return GroupMetadataRecord(
            group=group,
            generation=_int(v[1]),
            protocol=None if v[2] is None else RebalanceProtocol(v[2]),
            assignor=None if v[3] is None else _str(v[3]),
            leader=None if v[4] is None else _str(v[4]),
            state_ts_ms=_int(v[5]),
            members=tuple(members),
        )
    raise CorruptRecordError(f"unknown record key {k!r}")


def _check_value(v: Any, n: int) -> None:
    if not isinstance(v, list) or len(v) != n or v[0] != _VERSION:
        raise CorruptRecordError(f"record value is not a version-{_VERSION} array of {n}")
