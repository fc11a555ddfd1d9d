"""Typed metadata records and their msgpack codec.

The metadata log (KRaft's ``__cluster_metadata``, KIP-500) is a stream of these records; every
node builds its ``MetadataImage`` by replaying them in order (``metalog.delta``). This module owns
the record types, their stable type ids, their versions, and the bytes.

Wire format of one record: a msgpack array ``[type_id, version, field_1, ..., field_n]`` whose
fields are the record's fields *for that version*, in declaration order. Type ids follow
Kafka's ``metadata/src/main/resources/common/metadata/*.json`` so that a reader of Kafka's
schemas finds the same numbers.

Each field is declared once, as a dataclass field: its annotation says how it is checked and
its place where it sits in the array. The codec of every record is derived from those
declarations at import (``_build_codec``) and checks both ways alike: the encoder refuses
(``InvalidMetadataRecordError``) any record whose bytes the decoder would refuse
(``CorruptMetadataRecordError``) or read back different, so a record no node can replay is
never proposed.

Evolution: a field that a newer version adds is declared with ``since(version, default=...)``;
``version`` defaults to the newest version. Fields are never removed, retyped or reordered:
that would change the bytes of records already in logs and snapshots (the tests pin them). A
reader decodes every version it knows, filling absent fields with their defaults, and refuses a
type or version it does not know (``UnknownRecordTypeError``,
``UnsupportedRecordVersionError``): replaying a record you cannot read would silently fork the
metadata state. Encoding a record at an old version that cannot carry one of its fields is
refused too (``RecordVersionError``) rather than dropping data.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, field, fields
from enum import IntEnum, StrEnum
from types import UnionType
from typing import (
    Any,
    ClassVar,
    NamedTuple,
    NewType,
    TypeGuard,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import msgpack

from metalog.security import Operation, PatternType, Permission, ResourceType

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


class InvalidMetadataRecordError(MetadataRecordError):
    """Encoding a record with a field the decoder would refuse or read back different (a
    mistyped value, an int beyond msgpack's 64 bits, a str that is not UTF-8). Refused before
    it can be proposed: a committed record that no node can decode would stop every node's
    replay at it."""


# --------------------------------------------------------------------------- field kinds
# A field's wire kind follows from its annotation (``_kind_of``): int, str, bool, a tuple of
# ints, a tuple of endpoints, or one of them or None (``NewType``s count as what they wrap).
# A kind is one check that serves both directions, so the encoder refuses exactly what the
# decoder refuses:
# * decoding, it gets what msgpack produced and returns the field's Python value;
# * encoding, it gets the record's value and must accept it only if decoding its bytes gives
#   an equal value back. So it takes int, str and tuple subclasses (an ``IntEnum`` is packed
#   as its int), but never a bool for an int (msgpack keeps them apart) nor a list for a tuple
#   (it would come back a tuple, unequal: the controller matches its pending records against
#   the committed ones by equality).
# What a kind leaves to msgpack is its range: an int outside [-2**63, 2**64 - 1] or a str that
# is not UTF-8 (a lone surrogate) cannot be packed, and the encoder refuses those too.


def _is_int(v: object) -> TypeGuard[int]:
    return type(v) is int or (isinstance(v, int) and not isinstance(v, bool))


def _int(v: object) -> int:
    if type(v) is int or _is_int(v):
        return v
    raise CorruptMetadataRecordError(f"expected int, got {v!r}")


def _str(v: object) -> str:
    if isinstance(v, str):
        return v
    raise CorruptMetadataRecordError(f"expected str, got {v!r}")


def _bool(v: object) -> bool:
    if type(v) is bool:
        return v
    raise CorruptMetadataRecordError(f"expected bool, got {v!r}")


_ONLY_INT = frozenset({int})


def _ints(v: object) -> tuple[int, ...]:
    if isinstance(v, tuple) and (_ONLY_INT.issuperset(map(type, v)) or all(map(_is_int, v))):
        return v
    raise CorruptMetadataRecordError(f"expected array of int, got {v!r}")


def _endpoints(v: object) -> tuple[Endpoint, ...]:
    if not isinstance(v, tuple):
        raise CorruptMetadataRecordError(f"expected array of endpoints, got {v!r}")
    out = []
    for e in v:
        if not isinstance(e, tuple) or len(e) != 3:
            raise CorruptMetadataRecordError(f"expected [name, host, port], got {e!r}")
        out.append(Endpoint(_str(e[0]), _str(e[1]), _int(e[2])))
    return tuple(out)


def _bytes(v: object) -> bytes:
    if type(v) is bytes:
        return v
    raise CorruptMetadataRecordError(f"expected bytes, got {v!r}")


def _enum_kind(cls: type[StrEnum]) -> _Kind:
    """A ``StrEnum`` travels as its value (a str) and must be one of its members: a record
    naming an operation this node does not know could not be replayed the same everywhere."""
    members = {m.value: m for m in cls}

    def check(v: object) -> StrEnum:
        if isinstance(v, str) and v in members:
            return members[v]
        raise CorruptMetadataRecordError(
            f"expected a {cls.__name__} ({', '.join(members)}), got {v!r}"
        )

    return _Kind(check, frozenset({cls}), False)


def _opt(check: Callable[[object], Any]) -> Callable[[object], Any]:
    def check_opt(v: object) -> Any:
        return None if v is None else check(v)

    return check_opt


class _Kind(NamedTuple):
    check: Callable[[object], Any]
    """Refuses (``CorruptMetadataRecordError``) or returns the value in its Python shape."""
    plain: frozenset[type]
    """Exact types ``check`` accepts on sight: the encoder's fast path (``_Codec.plain``)."""
    deep: bool
    """Whether ``check`` must also look inside a value of a plain type (a tuple's items)."""


_NONE = type(None)
_SCALAR_KINDS = {
    # An IntEnum of this module is an int on the wire (and the controller builds records
    # with them), so the fast path takes it as it takes an int.
    int: _Kind(_int, frozenset({int, LeaderRecoveryState, ConfigResourceType}), False),
    str: _Kind(_str, frozenset({str}), False),
    bool: _Kind(_bool, frozenset({bool}), False),
    bytes: _Kind(_bytes, frozenset({bytes}), False),
}
_ENUM_KINDS = {cls: _enum_kind(cls) for cls in (ResourceType, PatternType, Operation, Permission)}
_TUPLE_KINDS = {
    int: _Kind(_ints, frozenset({tuple}), True),
    Endpoint: _Kind(_endpoints, frozenset({tuple}), True),
}


def _kind_of(annotation: Any) -> _Kind:
    """The wire kind of a field annotated ``annotation``; TypeError if it has none."""
    args = get_args(annotation)
    origin = get_origin(annotation)
    if origin in (Union, UnionType) and len(args) == 2 and _NONE in args:
        (inner,) = (a for a in args if a is not _NONE)
        k = _kind_of(inner)
        return _Kind(_opt(k.check), k.plain | {_NONE}, k.deep)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        kind = _TUPLE_KINDS.get(_unwrap(args[0]))
    else:
        kind = _SCALAR_KINDS.get(_unwrap(annotation)) or _ENUM_KINDS.get(annotation)
    if kind is None:
        raise TypeError(f"metadata record fields cannot be {annotation!r} (no wire kind)")
    return kind


def _unwrap(annotation: Any) -> Any:
    while isinstance(annotation, NewType):
        annotation = annotation.__supertype__
    return annotation


_SINCE = "longboat.metadata.since"


def since(version: int, *, default: Any) -> Any:
    """Declares a field that a record carries from ``version`` on, as
    ``eligible_leader_replicas: tuple[BrokerId, ...] | None = since(1, default=None)``.
    Older versions do not carry it; they decode with ``default``, and a record holding
    anything else cannot be encoded at them (``RecordVersionError``)."""
    return field(default=default, metadata={_SINCE: version})


# --------------------------------------------------------------------------- records
# Every record: frozen, slotted, keyword-only; ``version`` last, defaulting to the newest.
# ``TYPE_ID`` is stable forever. Each field is declared once, here: its annotation gives its
# wire kind, its place its position on the wire, and ``since(v, default=...)`` marks a field
# that versions before ``v`` do not carry. The codec is derived from these at import.


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord:
    """A broker (re-)registered. Its epoch is the offset of this record (KIP-631)."""

    TYPE_ID: ClassVar[int] = 0

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

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord:
    """A topic is created (its partitions follow as ``PartitionRecord``s)."""

    TYPE_ID: ClassVar[int] = 2

    name: str
    topic_id: TopicId
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord:
    """The full registration of one partition (creation, and in snapshots).

    v1 adds ``eligible_leader_replicas`` (KIP-966), absent (None) in v0; v2 adds
    ``last_known_elr`` (KIP-966's LastKnownElr), absent (None) in v0 and v1; v3 adds
    ``removing_replicas`` and ``adding_replicas`` (KIP-455: a reassignment in progress),
    absent (None) before. None and ``()`` mean the same: nobody.
    """

    TYPE_ID: ClassVar[int] = 3

    topic_id: TopicId
    partition: int
    replicas: tuple[BrokerId, ...]
    isr: tuple[BrokerId, ...]
    leader: BrokerId
    leader_epoch: LeaderEpoch = LeaderEpoch(0)
    partition_epoch: PartitionEpoch = PartitionEpoch(0)
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED
    eligible_leader_replicas: tuple[BrokerId, ...] | None = since(1, default=None)
    last_known_elr: tuple[BrokerId, ...] | None = since(2, default=None)
    removing_replicas: tuple[BrokerId, ...] | None = since(3, default=None)
    adding_replicas: tuple[BrokerId, ...] | None = since(3, default=None)
    version: int = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord:
    """Sets (``value`` a string) or deletes (``value`` None) one config key of a resource."""

    TYPE_ID: ClassVar[int] = 4

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
    v1 adds ``eligible_leader_replicas`` (KIP-966), v2 ``last_known_elr``, v3
    ``removing_replicas`` and ``adding_replicas`` (KIP-455); None keeps them.
    """

    TYPE_ID: ClassVar[int] = 5

    topic_id: TopicId
    partition: int
    isr: tuple[BrokerId, ...] | None = None
    leader: BrokerId = NO_LEADER_CHANGE
    replicas: tuple[BrokerId, ...] | None = None
    leader_recovery_state: int | None = None
    eligible_leader_replicas: tuple[BrokerId, ...] | None = since(1, default=None)
    last_known_elr: tuple[BrokerId, ...] | None = since(2, default=None)
    removing_replicas: tuple[BrokerId, ...] | None = since(3, default=None)
    adding_replicas: tuple[BrokerId, ...] | None = since(3, default=None)
    version: int = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBrokerRecord:
    """The broker may no longer lead or be in an ISR (session expired, or it asked)."""

    TYPE_ID: ClassVar[int] = 7

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBrokerRecord:
    """The broker caught up with the metadata log and may serve again."""

    TYPE_ID: ClassVar[int] = 8

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord:
    """The topic, its partitions and its configs are gone."""

    TYPE_ID: ClassVar[int] = 9

    topic_id: TopicId
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureLevelRecord:
    """Finalized level of a feature (``metadata.version`` and friends); level 0 removes it."""

    TYPE_ID: ClassVar[int] = 12

    name: str
    feature_level: int
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsRecord:
    """A block of producer ids was handed out; ``next_producer_id`` is the first free one."""

    TYPE_ID: ClassVar[int] = 15

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    next_producer_id: int
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationChangeRecord:
    """Changes flags of a registration: ``fenced``, ``in_controlled_shutdown`` (None: keep)."""

    TYPE_ID: ClassVar[int] = 17

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

    topic_id: TopicId
    deleted_at: int
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class NoOpRecord:
    """Changes nothing; the active controller writes one periodically so that the committed
    offset advances and brokers can tell they are caught up (KAFKA-13955)."""

    TYPE_ID: ClassVar[int] = 20

    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredentialRecord:
    """Sets the SCRAM credential of a user for one mechanism (KIP-554): what RFC 5802 keeps
    of a salted password. The password itself never enters the log."""

    TYPE_ID: ClassVar[int] = 11

    name: str
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveUserScramCredentialRecord:
    """Removes the SCRAM credential of a user for one mechanism (KIP-554)."""

    TYPE_ID: ClassVar[int] = 22

    name: str
    mechanism: str
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntryRecord:
    """Adds one ACL binding (``metalog.security.AclBinding``) under ``id`` (KIP-801's
    StandardAuthorizer keeps ACLs as these records). The enums travel as their names."""

    TYPE_ID: ClassVar[int] = 23

    id: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveAccessControlEntryRecord:
    """Removes the ACL binding added under ``id``."""

    TYPE_ID: ClassVar[int] = 24

    id: str
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
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
)

RECORD_TYPES: tuple[type[MetadataRecord], ...] = (
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
    TopicRecord,
    PartitionRecord,
    ConfigRecord,
    PartitionChangeRecord,
    FenceBrokerRecord,
    UnfenceBrokerRecord,
    RemoveTopicRecord,
    FeatureLevelRecord,
    ProducerIdsRecord,
    BrokerRegistrationChangeRecord,
    NoOpRecord,
    RetiredTopicRecord,
    UserScramCredentialRecord,
    RemoveUserScramCredentialRecord,
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
)
"""Every record type, by ``TYPE_ID``."""


class _Codec(NamedTuple):
    """One record class's codec; every tuple below is indexed by version."""

    cls: type[MetadataRecord]
    type_id: int
    names: tuple[tuple[str, ...], ...]
    """The fields each version carries, in wire (declaration) order."""
    checks: tuple[tuple[Callable[[object], Any], ...], ...]
    """Their kinds' checks."""
    get: tuple[Callable[[Any], tuple[Any, ...]], ...]
    """A record's values of those fields, as a tuple."""
    plain: tuple[frozenset[tuple[type, ...]], ...]
    """Every tuple of exact value types whose values the checks accept on sight, but for the
    ``deep`` ones: the encoder's fast path (one set lookup instead of a call per field)."""
    deep: tuple[tuple[int, ...], ...]
    """Positions of the fields whose check must look inside the value (tuples)."""
    absent: tuple[tuple[tuple[str, Any], ...], ...]
    """The fields each version does not carry, with the default they decode to."""


def _build_codec(cls: type[MetadataRecord]) -> _Codec:
    """The codec of one record class, from its dataclass fields and their annotations."""
    hints = get_type_hints(cls)
    declared = [f for f in fields(cls) if f.name != "version"]
    newest = next(f.default for f in fields(cls) if f.name == "version")
    if type(newest) is not int or newest < 0:
        raise TypeError(f"{cls.__name__}: 'version' must default to the newest version")
    since_of = {f.name: f.metadata.get(_SINCE, 0) for f in declared}
    for f in declared:
        if not 0 <= since_of[f.name] <= newest:
            raise TypeError(
                f"{cls.__name__}.{f.name}: since({since_of[f.name]}) is not a version 0..{newest}"
            )
        if since_of[f.name] > 0 and f.default is MISSING:
            raise TypeError(
                f"{cls.__name__}.{f.name}: a field added in a later version "
                "needs a default for the versions before it"
            )
    kind_of = {f.name: _kind_of(hints[f.name]) for f in declared}
    names, checks, get, plain, deep, absent = [], [], [], [], [], []
    for v in range(newest + 1):
        carried = tuple(f.name for f in declared if since_of[f.name] <= v)
        kinds = [kind_of[n] for n in carried]
        names.append(carried)
        checks.append(tuple(k.check for k in kinds))
        get.append(_getter(carried))
        plain.append(frozenset(itertools.product(*(k.plain for k in kinds))))
        deep.append(tuple(i for i, k in enumerate(kinds) if k.deep))
        absent.append(tuple((f.name, f.default) for f in declared if since_of[f.name] > v))
    return _Codec(
        cls,
        cls.TYPE_ID,
        tuple(names),
        tuple(checks),
        tuple(get),
        tuple(plain),
        tuple(deep),
        tuple(absent),
    )


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda record: (one(record),)
    if not names:
        return lambda record: ()
    return operator.attrgetter(*names)


def _build_codecs() -> dict[int, _Codec]:
    codecs: dict[int, _Codec] = {}
    for cls in RECORD_TYPES:
        if cls.TYPE_ID in codecs:
            raise TypeError(f"duplicate metadata record type id {cls.TYPE_ID}")
        codecs[cls.TYPE_ID] = _build_codec(cls)
    return codecs


_CODECS = _build_codecs()
"""Type id -> codec, for decoding; built once, at import."""
_ENCODERS: dict[type, _Codec] = {c.cls: c for c in _CODECS.values()}
"""Record class -> codec, for encoding."""


def wire_fields(record_type: type[MetadataRecord], version: int) -> tuple[str, ...]:
    """The fields ``version`` of ``record_type`` carries, in the order they are on the wire."""
    return _ENCODERS[record_type].names[version]


def encode_record(record: MetadataRecord) -> bytes:
    """The msgpack bytes of one record, at ``record.version``.

    Refuses, with ``InvalidMetadataRecordError`` naming the field, a record that decoding its
    bytes would refuse or give back different (an ``int`` incarnation id, a list for a tuple,
    an int beyond 64 bits): such a record must never be committed, since every node would
    then fail to replay it.
    """
    codec = _ENCODERS.get(type(record))
    if codec is None:
        raise UnknownRecordTypeError(type(record).__name__)
    version = record.version
    if not (type(version) is int or _is_int(version)) or not 0 <= version < len(codec.names):
        raise UnsupportedRecordVersionError(codec.cls.__name__, version, len(codec.names) - 1)
    values = codec.get[version](record)
    try:
        _checked(codec, version, values)
    except CorruptMetadataRecordError:
        raise _invalid(codec, version, values) from None
    for n, default in codec.absent[version]:
        if getattr(record, n) != default:
            raise RecordVersionError(
                f"{codec.cls.__name__} v{version} cannot carry {n}={getattr(record, n)!r}"
            )
    try:
        packed: bytes = msgpack.packb([codec.type_id, version, *values], use_bin_type=True)
    except (OverflowError, ValueError):  # beyond msgpack's ints, or not UTF-8
        raise _invalid(codec, version, values) from None
    return packed


def _checked(codec: _Codec, version: int, values: tuple[Any, ...]) -> Sequence[Any]:
    """``values`` of the fields of ``version``, checked by their kinds and in their Python
    shape; ``CorruptMetadataRecordError`` if one does not fit. The decoder keeps the result,
    the encoder only asks: one check for both, so the encoder refuses what the decoder would.
    """
    checks = codec.checks[version]
    if tuple(map(type, values)) in codec.plain[version]:
        deep = codec.deep[version]
        if not deep:
            return values
        out = list(values)
        for i in deep:
            if out[i] is not None:
                out[i] = checks[i](out[i])
        return out
    return [check(v) for check, v in zip(checks, values, strict=True)]


def _invalid(codec: _Codec, version: int, values: tuple[Any, ...]) -> InvalidMetadataRecordError:
    """The error naming the first field in ``values`` that cannot be encoded (slow path)."""
    for n, check, value in zip(codec.names[version], codec.checks[version], values, strict=True):
        try:
            check(value)
            msgpack.packb(value, use_bin_type=True)
        except (CorruptMetadataRecordError, OverflowError, ValueError) as e:
            return InvalidMetadataRecordError(f"{codec.cls.__name__}.{n}: {e}")
    return InvalidMetadataRecordError(f"{codec.cls.__name__}: cannot be encoded")


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
    if type(version) is not int or not 0 <= version < len(codec.names):
        raise UnsupportedRecordVersionError(codec.cls.__name__, version, len(codec.names) - 1)
    names = codec.names[version]
    if len(items) != 2 + len(names):
        raise CorruptMetadataRecordError(
            f"{codec.cls.__name__} v{version} has {len(names)} fields, got {len(items) - 2}"
        )
    values = _checked(codec, version, items[2:])
    return codec.cls(version=version, **dict(zip(names, values, strict=True)))


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
