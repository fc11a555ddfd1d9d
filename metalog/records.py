"""Typed metadata records and their msgpack codec.

The metadata log (KRaft's ``__cluster_metadata``, KIP-500) is a stream of these records; every
node builds its ``MetadataImage`` by replaying them in order (``metalog.delta``). This module owns
the record types, their stable type ids, their versions, and the bytes.

Wire format of one record: a msgpack array ``[type_id, version, field_1, ..., field_n]`` whose
fields are the record's fields *for that version*, in declaration order. Type ids follow
Kafka's ``metadata/src/main/resources/common/metadata/*.json`` so that a reader of Kafka's
schemas finds the same numbers.

Evolution: a record class lists, per version, the fields that version carries
(``FIELDS_BY_VERSION``). A new version appends fields (with defaults) and keeps the old ones.
A reader decodes every version it knows, filling absent fields with their defaults, and refuses
a type or version it does not know (``UnknownRecordTypeError``,
``UnsupportedRecordVersionError``): replaying a record you cannot read would silently fork the
metadata state. Encoding a record at an old version that cannot carry one of its fields is
refused too (``RecordVersionError``) rather than dropping data.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any, ClassVar, NamedTuple, NewType

import msgpack

BrokerId = NewType("BrokerId", int)
"""Id of a broker (``node.id``); -1 stands for none."""

TopicId = NewType("TopicId", str)
"""Kafka-style topic id: 22 characters of URL-safe base64 (a 128-bit uuid), fixed at creation."""

BrokerEpoch = NewType("BrokerEpoch", int)
"""Offset of the broker's ``RegisterBrokerRecord`` in the metadata log (KIP-631)."""

LeaderEpoch = NewType("LeaderEpoch", int)
"""Bumped on every change of a partition's leader (KIP-101, KIP-631)."""

PartitionEpoch = NewType("PartitionEpoch", int)
"""Bumped on every change of a partition's registration (KIP-631 ``PartitionEpoch``)."""

NO_LEADER = BrokerId(-1)
"""``leader`` value of a partition without a leader (offline)."""

NO_LEADER_CHANGE = BrokerId(-2)
"""``PartitionChangeRecord.leader`` value that leaves the leader unchanged (as in Kafka)."""

BROKER_EPOCH_FROM_OFFSET = BrokerEpoch(-1)
"""``RegisterBrokerRecord.broker_epoch`` value meaning "the offset this record commits at".

The active controller does not know the offset a proposal will get; replay fills it in. Records
in snapshots carry the explicit epoch instead.
"""


class LeaderRecoveryState(IntEnum):
    """KIP-704: whether the leader may have lost data through an unclean election."""

    RECOVERED = 0
    RECOVERING = 1


class ConfigResourceType(IntEnum):
    """Kinds of resources a ``ConfigRecord`` applies to (Kafka's ConfigResource.Type ids)."""

    TOPIC = 2
    BROKER = 4
    CLUSTER = 16


class Endpoint(NamedTuple):
    """A listener a broker serves on (``name`` like ``http``, ``internal``)."""

    name: str
    host: str
    port: int


# --------------------------------------------------------------------------- errors


class MetadataRecordError(ValueError):
    """Bytes that do not decode to a record, or a record that cannot be encoded."""


class UnknownRecordTypeError(MetadataRecordError):
    """The type id names no record this version of Longboat knows."""

    def __init__(self, type_id: object):
        self.type_id = type_id
        super().__init__(f"unknown metadata record type {type_id!r}")


class UnsupportedRecordVersionError(MetadataRecordError):
    """The record type is known but this version of it is not (written by a newer node?)."""

    def __init__(self, name: str, version: object, max_version: int):
        self.version = version
        super().__init__(
            f"unsupported {name} version {version!r} (this node reads versions 0..{max_version})"
        )


class CorruptMetadataRecordError(MetadataRecordError):
    """The bytes are not a well-formed record: bad msgpack, wrong arity, or a mistyped field."""


class RecordVersionError(MetadataRecordError):
    """Encoding a record at a version that cannot carry one of its set fields."""


# --------------------------------------------------------------------------- field kinds
# A kind checks a decoded value and returns it in its Python shape. Checks are strict:
# msgpack keeps bools apart from ints, and a bool where an int belongs is corruption.


def _int(v: object) -> int:
    if type(v) is not int:
        raise CorruptMetadataRecordError(f"expected int, got {v!r}")
    return v


def _str(v: object) -> str:
    if type(v) is not str:
        raise CorruptMetadataRecordError(f"expected str, got {v!r}")
    return v


def _bool(v: object) -> bool:
    if type(v) is not bool:
        raise CorruptMetadataRecordError(f"expected bool, got {v!r}")
    return v


def _ints(v: object) -> tuple[int, ...]:
    if type(v) is not tuple or any(type(x) is not int for x in v):
        raise CorruptMetadataRecordError(f"expected array of int, got {v!r}")
    return v


def _opt(kind: Callable[[object], Any]) -> Callable[[object], Any]:
    def check(v: object) -> Any:
        return None if v is None else kind(v)

    return check


def _endpoints(v: object) -> tuple[Endpoint, ...]:
    if type(v) is not tuple:
        raise CorruptMetadataRecordError(f"expected array of endpoints, got {v!r}")
    out = []
    for e in v:
        if type(e) is not tuple or len(e) != 3:
            raise CorruptMetadataRecordError(f"expected [name, host, port], got {e!r}")
        out.append(Endpoint(_str(e[0]), _str(e[1]), _int(e[2])))
    return tuple(out)


INT = _int
STR = _str
BOOL = _bool
INTS = _ints
OPT_INT = _opt(_int)
OPT_STR = _opt(_str)
OPT_BOOL = _opt(_bool)
OPT_INTS = _opt(_ints)
ENDPOINTS = _endpoints


# --------------------------------------------------------------------------- records
# Every record: frozen, slotted, keyword-only; ``version`` last, defaulting to the newest.
# ``TYPE_ID`` is stable forever; ``FIELDS_BY_VERSION[v]`` lists the fields version v carries;
# ``KINDS`` says how each field is checked on decode.


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord:
    """A broker (re-)registered. Its epoch is the offset of this record (KIP-631)."""

    TYPE_ID: ClassVar[int] = 0
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("broker_id", "incarnation_id", "broker_epoch", "endpoints", "rack", "fenced",
         "in_controlled_shutdown"),
    )
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {
        "broker_id": INT, "incarnation_id": STR, "broker_epoch": INT, "endpoints": ENDPOINTS,
        "rack": OPT_STR, "fenced": BOOL, "in_controlled_shutdown": BOOL,
    }

    broker_id: BrokerId
    incarnation_id: str
    broker_epoch: BrokerEpoch = BROKER_EPOCH_FROM_OFFSET
    endpoints: tuple[Endpoint, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRecord:
    """A broker's registration is removed (admin action)."""

    TYPE_ID: ClassVar[int] = 1
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (("broker_id", "broker_epoch"),)
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {"broker_id": INT, "broker_epoch": INT}

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord:
    """A topic is created (its partitions follow as ``PartitionRecord``s)."""

    TYPE_ID: ClassVar[int] = 2
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (("name", "topic_id"),)
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {"name": STR, "topic_id": STR}

    name: str
    topic_id: TopicId
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord:
    """The full registration of one partition (creation, and in snapshots).

    v1 adds ``eligible_leader_replicas`` (KIP-966), absent (None) in v0.
    """

    TYPE_ID: ClassVar[int] = 3
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("topic_id", "partition", "replicas", "isr", "leader", "leader_epoch",
         "partition_epoch", "leader_recovery_state"),
        ("topic_id", "partition", "replicas", "isr", "leader", "leader_epoch",
         "partition_epoch", "leader_recovery_state", "eligible_leader_replicas"),
    )
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {
        "topic_id": STR, "partition": INT, "replicas": INTS, "isr": INTS, "leader": INT,
        "leader_epoch": INT, "partition_epoch": INT, "leader_recovery_state": INT,
        "eligible_leader_replicas": OPT_INTS,
    }

    topic_id: TopicId
    partition: int
    replicas: tuple[BrokerId, ...]
    isr: tuple[BrokerId, ...]
    leader: BrokerId
    leader_epoch: LeaderEpoch = LeaderEpoch(0)
    partition_epoch: PartitionEpoch = PartitionEpoch(0)
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED
    eligible_leader_replicas: tuple[BrokerId, ...] | None = None
    version: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord:
    """Sets (``value`` a string) or deletes (``value`` None) one config key of a resource."""

    TYPE_ID: ClassVar[int] = 4
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("resource_type", "resource_name", "name", "value"),
    )
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {
        "resource_type": INT, "resource_name": STR, "name": STR, "value": OPT_STR,
    }

    resource_type: int
    resource_name: str
    name: str
    value: str | None
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChangeRecord:
    """A change to one partition; unset (None) fields are unchanged.

    ``leader``: ``NO_LEADER_CHANGE`` (-2) keeps it, ``NO_LEADER`` (-1) means offline; any
    explicit leader bumps the leader epoch. Every change bumps the partition epoch.
    v1 adds ``eligible_leader_replicas`` (KIP-966).
    """

    TYPE_ID: ClassVar[int] = 5
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("topic_id", "partition", "isr", "leader", "replicas", "leader_recovery_state"),
        ("topic_id", "partition", "isr", "leader", "replicas", "leader_recovery_state",
         "eligible_leader_replicas"),
    )
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {
        "topic_id": STR, "partition": INT, "isr": OPT_INTS, "leader": INT,
        "replicas": OPT_INTS, "leader_recovery_state": OPT_INT,
        "eligible_leader_replicas": OPT_INTS,
    }

    topic_id: TopicId
    partition: int
    isr: tuple[BrokerId, ...] | None = None
    leader: BrokerId = NO_LEADER_CHANGE
    replicas: tuple[BrokerId, ...] | None = None
    leader_recovery_state: int | None = None
    eligible_leader_replicas: tuple[BrokerId, ...] | None = None
    version: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBrokerRecord:
    """The broker may no longer lead or be in an ISR (session expired, or it asked)."""

    TYPE_ID: ClassVar[int] = 7
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (("broker_id", "broker_epoch"),)
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {"broker_id": INT, "broker_epoch": INT}

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBrokerRecord:
    """The broker caught up with the metadata log and may serve again."""

    TYPE_ID: ClassVar[int] = 8
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (("broker_id", "broker_epoch"),)
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {"broker_id": INT, "broker_epoch": INT}

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord:
    """The topic, its partitions and its configs are gone."""

    TYPE_ID: ClassVar[int] = 9
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (("topic_id",),)
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {"topic_id": STR}

    topic_id: TopicId
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureLevelRecord:
    """Finalized level of a feature (``metadata.version`` and friends); level 0 removes it."""

    TYPE_ID: ClassVar[int] = 12
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (("name", "feature_level"),)
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {"name": STR, "feature_level": INT}

    name: str
    feature_level: int
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsRecord:
    """A block of producer ids was handed out; ``next_producer_id`` is the first free one."""

    TYPE_ID: ClassVar[int] = 15
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("broker_id", "broker_epoch", "next_producer_id"),
    )
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {
        "broker_id": INT, "broker_epoch": INT, "next_producer_id": INT,
    }

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    next_producer_id: int
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationChangeRecord:
    """Changes flags of a registration: ``fenced``, ``in_controlled_shutdown`` (None: keep)."""

    TYPE_ID: ClassVar[int] = 17
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("broker_id", "broker_epoch", "fenced", "in_controlled_shutdown"),
    )
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {
        "broker_id": INT, "broker_epoch": INT, "fenced": OPT_BOOL,
        "in_controlled_shutdown": OPT_BOOL,
    }

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RetiredTopicRecord:
    """Snapshots only: ``topic_id`` belonged to a topic deleted at metadata offset
    ``deleted_at``. The image remembers the ids of deleted topics (the latest
    ``RETIRED_TOPIC_IDS_MAX``) so that a create retried with the id its lost first attempt
    used is not carried out a second time after the topic was deleted (finding 4 of
    docs/fault-injection.md); a snapshot must carry that memory across."""

    TYPE_ID: ClassVar[int] = 21
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = (("topic_id", "deleted_at"),)
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {"topic_id": STR, "deleted_at": INT}

    topic_id: TopicId
    deleted_at: int
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class NoOpRecord:
    """Changes nothing; the active controller writes one periodically so that the committed
    offset advances and brokers can tell they are caught up (KAFKA-13955)."""

    TYPE_ID: ClassVar[int] = 20
    FIELDS_BY_VERSION: ClassVar[tuple[tuple[str, ...], ...]] = ((),)
    KINDS: ClassVar[dict[str, Callable[[object], Any]]] = {}

    version: int = 0


MetadataRecord = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | ConfigRecord
    | PartitionChangeRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | RemoveTopicRecord
    | FeatureLevelRecord
    | ProducerIdsRecord
    | BrokerRegistrationChangeRecord
    | NoOpRecord
    | RetiredTopicRecord
)

RECORD_TYPES: tuple[type[MetadataRecord], ...] = (
    RegisterBrokerRecord, UnregisterBrokerRecord, TopicRecord, PartitionRecord, ConfigRecord,
    PartitionChangeRecord, FenceBrokerRecord, UnfenceBrokerRecord, RemoveTopicRecord,
    FeatureLevelRecord, ProducerIdsRecord, BrokerRegistrationChangeRecord, NoOpRecord,
    RetiredTopicRecord,
)
"""Every record type, by ``TYPE_ID``."""


class _Codec(NamedTuple):
    cls: type[MetadataRecord]
    # Per version: (field names, their checks).
    versions: tuple[tuple[tuple[str, ...], tuple[Callable[[object], Any], ...]], ...]
    defaults: dict[str, Any]


def _build_codecs() -> dict[int, _Codec]:
    codecs: dict[int, _Codec] = {}
    for cls in RECORD_TYPES:
        if cls.TYPE_ID in codecs:
            raise AssertionError(f"duplicate metadata record type id {cls.TYPE_ID}")
        declared = {f.name: f for f in fields(cls)}
        defaults = {n: f.default for n, f in declared.items() if n != "version"}
        versions = []
        for names in cls.FIELDS_BY_VERSION:
            for n in names:
                if n not in declared or n not in cls.KINDS:
                    raise AssertionError(f"{cls.__name__}: field {n} is not declared")
            versions.append((names, tuple(cls.KINDS[n] for n in names)))
        codecs[cls.TYPE_ID] = _Codec(cls, tuple(versions), defaults)
    return codecs


_CODECS = _build_codecs()
_PACKER_OPTS: dict[str, Any] = {"use_bin_type": True}


def encode_record(record: MetadataRecord) -> bytes:
    """The msgpack bytes of one record, at ``record.version``."""
    cls = type(record)
    codec = _CODECS.get(cls.TYPE_ID)
    if codec is None or codec.cls is not cls:
        raise UnknownRecordTypeError(cls.__name__)
    version = record.version
    if not 0 <= version < len(codec.versions):
        raise UnsupportedRecordVersionError(cls.__name__, version, len(codec.versions) - 1)
    names = codec.versions[version][0]
    out: list[Any] = [cls.TYPE_ID, version]
    out.extend(getattr(record, n) for n in names)
    if version != len(codec.versions) - 1:
        for n, default in codec.defaults.items():
            if n not in names and getattr(record, n) != default:
                raise RecordVersionError(
                    f"{cls.__name__} v{version} cannot carry {n}={getattr(record, n)!r}"
                )
    return msgpack.packb(out, **_PACKER_OPTS)


def decode_record(data: bytes) -> MetadataRecord:
    """The record in ``data``; refuses unknown types and versions, and mistyped fields."""
    try:
        items = msgpack.unpackb(data, use_list=False, raw=False)
    except Exception as e:  # msgpack raises several unrelated exception types
        raise CorruptMetadataRecordError(f"not msgpack: {e}") from e
    return _from_items(items)


def _from_items(items: object) -> MetadataRecord:
    if type(items) is not tuple or len(items) < 2:
        raise CorruptMetadataRecordError(f"expected [type_id, version, ...], got {items!r}")
    type_id, version = items[0], items[1]
    codec = _CODECS.get(type_id) if type(type_id) is int else None
    if codec is None:
        raise UnknownRecordTypeError(type_id)
    if type(version) is not int or not 0 <= version < len(codec.versions):
        raise UnsupportedRecordVersionError(
            codec.cls.__name__, version, len(codec.versions) - 1
        )
    names, kinds = codec.versions[version]
    if len(items) != 2 + len(names):
        raise CorruptMetadataRecordError(
            f"{codec.cls.__name__} v{version} has {len(names)} fields, got {len(items) - 2}"
        )
    kwargs = {n: k(v) for n, k, v in zip(names, kinds, items[2:], strict=True)}
    return codec.cls(version=version, **kwargs)


def encode_records(records: list[MetadataRecord] | tuple[MetadataRecord, ...]) -> bytes:
    """Several records as one msgpack array of encoded records (a batch or a snapshot body)."""
    return msgpack.packb([encode_record(r) for r in records], use_bin_type=True)


def decode_records(data: bytes) -> list[MetadataRecord]:
    """The inverse of ``encode_records``."""
    try:
        items = msgpack.unpackb(data, use_list=False, raw=False)
    except Exception as e:
        raise CorruptMetadataRecordError(f"not msgpack: {e}") from e
    if type(items) is not tuple or any(type(b) is not bytes for b in items):
        raise CorruptMetadataRecordError("expected an array of encoded records")
    return [decode_record(b) for b in items]
