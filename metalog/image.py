"""Immutable metadata images: what the cluster looks like after a prefix of the metadata log.

A ``MetadataImage`` is a value. Nothing mutates it; ``MetadataDelta(image).replay(...)``
then ``.apply()`` (``metalog.delta``) builds the next one. Images share structure: the big
maps (topics, partitions) are ``PMap``s, hash-sharded persistent maps, so the next image after a
change to one partition of a 100,000-partition cluster copies one shard, not the cluster.

Parts (Kafka's ``MetadataImage``): ``TopicsImage`` (by id and by name, each topic with its
partition registrations), ``BrokersImage`` (registrations), ``ConfigsImage`` (per resource
overrides), ``ProducerIdsImage`` (next free producer id), ``FeaturesImage``, ``AclsImage``
and ``ScramImage`` (issue 18: ACL bindings, SCRAM credentials); plus ``offset`` and ``epoch``: Raft
index and term of the last record applied (-1 for ``EMPTY``).

Invariants of a partition registration (checked by ``PartitionRegistration.check``): replicas
distinct and non-empty; ``isr`` a subset of ``replicas``, empty only without a leader
(KIP-966); ``leader`` is -1 or a member of ``isr``; the eligible leader replicas outside the
ISR, the last known ones outside both.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from common.invariant import invariant
from metalog.records import (
    NO_LEADER,
    AccessControlEntryRecord,
    BrokerEpoch,
    BrokerId,
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    FeatureLevelRecord,
    LeaderEpoch,
    LeaderRecoveryState,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionEpoch,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RetiredTopicRecord,
    TopicId,
    TopicRecord,
    UserScramCredentialRecord,
)
from metalog.security import (
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    PatternType,
    ResourceType,
    ScramCredential,
)

K = TypeVar("K")
V = TypeVar("V")

# --------------------------------------------------------------------------- PMap

_SHARD_BITS = 8
_SHARDS = 1 << _SHARD_BITS
_MASK = _SHARDS - 1


class _Delete:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DELETE"


DELETE: Any = _Delete()
"""Value in a ``PMap.update`` mapping that removes the key."""


class PMap(Generic[K, V]):
    """An immutable map sharded by ``hash(key)`` into 256 dicts.

    ``update`` copies the tuple of shard references and only the shards it touches: applying a
    change to one key of a million-key map copies ~4,000 entries, and the new map shares the
    other 255 shards with the old one. Iteration order is by shard, stable within a process.
    """

    __slots__ = ("_len", "_shards")

    _shards: tuple[dict[K, V], ...] | None
    _len: int

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        shards: list[dict[K, V]] | None = None
        for k, v in pairs:
            if shards is None:
                shards = [{} for _ in range(_SHARDS)]
            shards[hash(k) & _MASK][k] = v
        self._shards = tuple(shards) if shards is not None else None
        self._len = sum(len(s) for s in shards) if shards is not None else 0

    @classmethod
    def _make(cls, shards: tuple[dict[K, V], ...] | None, length: int) -> PMap[K, V]:
        m: PMap[K, V] = cls.__new__(cls)
        m._shards = shards if length else None
        m._len = length
        return m

    def get(self, key: K, default: V | None = None) -> V | None:
        if self._shards is None:
            return default
        return self._shards[hash(key) & _MASK].get(key, default)

    def __getitem__(self, key: K) -> V:
        if self._shards is None:
            raise KeyError(key)
        return self._shards[hash(key) & _MASK][key]

    def __contains__(self, key: object) -> bool:
        return self._shards is not None and key in self._shards[hash(key) & _MASK]

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        if self._shards is not None:
            for s in self._shards:
                yield from s

    def keys(self) -> Iterator[K]:
        return iter(self)

    def values(self) -> Iterator[V]:
        if self._shards is not None:
            for s in self._shards:
                yield from s.values()

    def items(self) -> Iterator[tuple[K, V]]:
        if self._shards is not None:
            for s in self._shards:
                yield from s.items()

    def update(self, changes: Mapping[K, V]) -> PMap[K, V]:
        """A new map with ``changes`` applied (a value of ``DELETE`` removes the key)."""
        if not changes:
            return self
        shards = list(self._shards) if self._shards is not None else [{}] * _SHARDS
        copied: set[int] = set()
        length = self._len
        for k, v in changes.items():
            i = hash(k) & _MASK
            if i not in copied:
                shards[i] = dict(shards[i])
                copied.add(i)
            s = shards[i]
            if v is DELETE:
                if k in s:
                    del s[k]
                    length -= 1
            else:
                if k not in s:
                    length += 1
                s[k] = v
        return PMap._make(tuple(shards), length)

    def to_dict(self) -> dict[K, V]:
        return dict(self.items())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PMap):
            return NotImplemented
        if self._len != other._len:
            return False
        if self._shards is other._shards:
            return True
        return all(k in other and other[k] == v for k, v in self.items())

    def __hash__(self) -> int:
        raise TypeError("PMap is not hashable")

    def __repr__(self) -> str:
        return f"PMap({self.to_dict()!r})"


# --------------------------------------------------------------------------- topics


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition as the controller sees it (Kafka's ``PartitionRegistration``).

    KIP-966: ``elr`` (eligible leader replicas) are replicas that left the ISR while it was
    below ``min.insync.replicas``; the HW could not move after that, so each holds every
    committed offset and may lead when the ISR is empty. ``last_known_elr`` are replicas
    that were in the ISR or ELR then but lost that standing by an unclean shutdown: the ones
    an unclean recovery waits for. Records without them (v0, v1) replay as ``()``.
    """

    replicas: tuple[BrokerId, ...]
    isr: tuple[BrokerId, ...]
    """Invariant: a subset of ``replicas``; empty only without a leader (KIP-966)."""
    leader: BrokerId
    """Invariant: ``NO_LEADER`` or a member of ``isr``."""
    leader_epoch: LeaderEpoch
    partition_epoch: PartitionEpoch
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED
    elr: tuple[BrokerId, ...] = ()
    """Invariant: a subset of ``replicas``, disjoint from ``isr``."""
    last_known_elr: tuple[BrokerId, ...] = ()
    """Invariant: a subset of ``replicas``, disjoint from ``isr`` and ``elr``."""
    removing: tuple[BrokerId, ...] = ()
    """KIP-455: replicas a reassignment in progress will remove. Invariant: a subset of
    ``replicas``, disjoint from ``adding``."""
    adding: tuple[BrokerId, ...] = ()
    """KIP-455: replicas a reassignment in progress is adding (they catch up, then join the
    ISR). Invariant: a subset of ``replicas``."""

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> tuple[BrokerId, ...]:
        """The replicas once the reassignment in progress completes (``replicas`` if none)."""
        return tuple(b for b in self.replicas if b not in self.removing)

    @property
    def original_replicas(self) -> tuple[BrokerId, ...]:
        """The replicas before the reassignment in progress (what a cancel goes back to)."""
        return tuple(b for b in self.replicas if b not in self.adding)

    @staticmethod
    def from_record(r: PartitionRecord) -> PartitionRegistration:
        return PartitionRegistration(
            replicas=r.replicas,
            isr=r.isr,
            leader=r.leader,
            leader_epoch=r.leader_epoch,
            partition_epoch=r.partition_epoch,
            leader_recovery_state=r.leader_recovery_state,
            elr=r.eligible_leader_replicas or (),
            last_known_elr=r.last_known_elr or (),
            removing=r.removing_replicas or (),
            adding=r.adding_replicas or (),
        )

    def merge(self, r: PartitionChangeRecord) -> PartitionRegistration:
        """The registration after ``r``: partition epoch +1; leader epoch +1 if the record sets
        a leader (Kafka's ``PartitionRegistration.merge``)."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if r.leader >= NO_LEADER:  # not NO_LEADER_CHANGE
            leader, leader_epoch = r.leader, LeaderEpoch(self.leader_epoch + 1)
        return PartitionRegistration(
            replicas=self.replicas if r.replicas is None else r.replicas,
            isr=self.isr if r.isr is None else r.isr,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=PartitionEpoch(self.partition_epoch + 1),
            leader_recovery_state=(
                self.leader_recovery_state
                if r.leader_recovery_state is None
                else r.leader_recovery_state
            ),
            elr=self.elr if r.eligible_leader_replicas is None else r.eligible_leader_replicas,
            last_known_elr=self.last_known_elr if r.last_known_elr is None else r.last_known_elr,
            removing=self.removing if r.removing_replicas is None else r.removing_replicas,
            adding=self.adding if r.adding_replicas is None else r.adding_replicas,
        )

    def check(self, where: object) -> None:
        """Raise ``InvariantError`` unless the registration is well formed."""
        invariant(len(self.replicas) > 0, "%s: no replicas", where)
        invariant(
            len(set(self.replicas)) == len(self.replicas),
            "%s: duplicate replicas %s",
            where,
            self.replicas,
        )
        invariant(
            len(self.isr) > 0 or self.leader == NO_LEADER,
            "%s: empty ISR with leader %s",
            where,
            self.leader,
        )
        invariant(
            set(self.isr) <= set(self.replicas),
            "%s: ISR %s not within replicas %s",
            where,
            self.isr,
            self.replicas,
        )
        invariant(
            self.leader == NO_LEADER or self.leader in self.isr,
            "%s: leader %s not in ISR %s",
            where,
            self.leader,
            self.isr,
        )
        invariant(
            set(self.elr) <= set(self.replicas) and not set(self.elr) & set(self.isr),
            "%s: ELR %s not within replicas %s outside ISR %s",
            where,
            self.elr,
            self.replicas,
            self.isr,
        )
        invariant(
            set(self.last_known_elr) <= set(self.replicas)
            and not set(self.last_known_elr) & (set(self.isr) | set(self.elr)),
            "%s: last known ELR %s not within replicas %s outside ISR %s and ELR %s",
            where,
            self.last_known_elr,
            self.replicas,
            self.isr,
            self.elr,
        )
        invariant(
            set(self.removing) <= set(self.replicas)
            and set(self.adding) <= set(self.replicas)
            and not set(self.removing) & set(self.adding),
            "%s: removing %s and adding %s not disjoint within replicas %s",
            where,
            self.removing,
            self.adding,
            self.replicas,
        )

    @property
    def preferred_leader(self) -> BrokerId:
        return self.replicas[0]

    def to_record(self, topic_id: TopicId, partition: int) -> PartitionRecord:
        return PartitionRecord(
            topic_id=topic_id,
            partition=partition,
            replicas=self.replicas,
            isr=self.isr,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            leader_recovery_state=self.leader_recovery_state,
            eligible_leader_replicas=self.elr,
            last_known_elr=self.last_known_elr,
            removing_replicas=self.removing,
            adding_replicas=self.adding,
        )


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: TopicId
    partitions: PMap[int, PartitionRegistration] = field(default_factory=PMap)


RETIRED_TOPIC_IDS_MAX = 100_000
"""How many ids of deleted topics an image remembers (the latest deletions). A retried create
arrives within seconds of its first attempt; this many deletions in between is far beyond
any retry window, and 100,000 ids cost ~3 MB in the image and the snapshot."""


@dataclass(frozen=True, slots=True)
class TopicsImage:
    by_id: PMap[TopicId, TopicImage] = field(default_factory=PMap)
    by_name: PMap[str, TopicId] = field(default_factory=PMap)
    """Invariant: ``by_name[t.name] == t.topic_id`` for every topic, and nothing else."""
    retired: PMap[TopicId, int] = field(default_factory=PMap)
    """Ids of deleted topics -> metadata offset of the deletion (-1 if replayed from a pending
    view): the latest ``RETIRED_TOPIC_IDS_MAX``. The controller refuses to create a topic
    under a retired id, so a create whose first attempt took effect, and whose topic was
    deleted since, cannot bring that topic back when its retry arrives (finding 4)."""

    def get(self, name: str) -> TopicImage | None:
        tid = self.by_name.get(name)
        return None if tid is None else self.by_id[tid]

    def get_by_id(self, topic_id: TopicId) -> TopicImage | None:
        return self.by_id.get(topic_id)

    def partition(self, topic_id: TopicId, partition: int) -> PartitionRegistration | None:
        t = self.by_id.get(topic_id)
        return None if t is None else t.partitions.get(partition)

    def __len__(self) -> int:
        return len(self.by_id)

    def partitions(self) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Every partition, as (topic, partition index, registration)."""
        for t in self.by_id.values():
            for p, reg in t.partitions.items():
                yield t, p, reg

    def partitions_led_by(self, broker_id: BrokerId) -> list[tuple[TopicId, int]]:
        """The partitions whose leader is ``broker_id`` (sorted). Scans: O(partitions)."""
        return sorted((t.topic_id, p) for t, p, reg in self.partitions() if reg.leader == broker_id)

    def partitions_replicated_by(self, broker_id: BrokerId) -> list[tuple[TopicId, int]]:
        """The partitions with a replica on ``broker_id`` (sorted). Scans: O(partitions)."""
        return sorted(
            (t.topic_id, p) for t, p, reg in self.partitions() if broker_id in reg.replicas
        )


# --------------------------------------------------------------------------- brokers


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: BrokerId
    incarnation_id: str
    broker_epoch: BrokerEpoch
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool

    @property
    def usable(self) -> bool:
        """May lead, join an ISR, or receive new replicas."""
        return not self.fenced and not self.in_controlled_shutdown

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(
            broker_id=self.broker_id,
            incarnation_id=self.incarnation_id,
            broker_epoch=self.broker_epoch,
            endpoints=self.endpoints,
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown,
        )


@dataclass(frozen=True, slots=True)
class BrokersImage:
    brokers: PMap[BrokerId, BrokerRegistration] = field(default_factory=PMap)

    def get(self, broker_id: BrokerId) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def __len__(self) -> int:
        return len(self.brokers)

    def is_usable(self, broker_id: BrokerId) -> bool:
        b = self.brokers.get(broker_id)
        return b is not None and b.usable

    def usable(self) -> list[BrokerRegistration]:
        """Unfenced brokers not in controlled shutdown, by id."""
        return sorted((b for b in self.brokers.values() if b.usable), key=lambda b: b.broker_id)


# --------------------------------------------------------------------------- configs

ConfigResource = tuple[int, str]
"""(``ConfigResourceType``, resource name); the cluster-wide resource is (CLUSTER, "")."""

CLUSTER_RESOURCE: ConfigResource = (ConfigResourceType.CLUSTER, "")

TOPIC_CONFIG_DEFAULTS: Mapping[str, str] = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "index.interval.bytes": "4096",
    "max.compaction.lag.ms": "9223372036854775807",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}
"""Kafka's defaults for the topic configs Longboat knows (``TopicConfig`` / ``LogConfig``)."""


@dataclass(frozen=True, slots=True)
class ConfigsImage:
    resources: PMap[ConfigResource, PMap[str, str]] = field(default_factory=PMap)

    def get(self, resource_type: int, name: str) -> Mapping[str, str]:
        """The explicit overrides of one resource (empty when none)."""
        m = self.resources.get((resource_type, name))
        return {} if m is None else m.to_dict()

    def topic_config(self, topic: str, key: str) -> str | None:
        """Effective value: topic override, else cluster-wide override, else Kafka's default."""
        t = self.resources.get((ConfigResourceType.TOPIC, topic))
        if t is not None and key in t:
            return t[key]
        c = self.resources.get(CLUSTER_RESOURCE)
        if c is not None and key in c:
            return c[key]
        return TOPIC_CONFIG_DEFAULTS.get(key)

    def topic_configs(self, topic: str) -> dict[str, str]:
        """Every effective topic config (known keys plus the topic's overrides)."""
        out = dict(TOPIC_CONFIG_DEFAULTS)
        c = self.resources.get(CLUSTER_RESOURCE)
        if c is not None:
            out.update((k, v) for k, v in c.items() if k in TOPIC_CONFIG_DEFAULTS)
        t = self.resources.get((ConfigResourceType.TOPIC, topic))
        if t is not None:
            out.update(t.items())
        return out


# --------------------------------------------------------------------------- the rest


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    next_producer_id: int = 0
    """The first producer id not yet handed out. Invariant: never decreases."""


@dataclass(frozen=True, slots=True)
class FeaturesImage:
    levels: PMap[str, int] = field(default_factory=PMap)


# --------------------------------------------------------------------------- security


@dataclass(frozen=True, slots=True)
class AclsImage:
    """The ACL bindings (issue 18), by the id their ``AccessControlEntryRecord`` gave them.

    ``by_type`` holds the same bindings grouped by resource type, and ``on_resource`` picks
    out of them the few that can match one resource (its literal name, the literal ``*``,
    the prefixes it starts with), which is what ``metalog.security.authorize`` checks for
    one decision: a scan of every binding of the type cost 0.5 ms per decision at 1,000
    ACLs, and Kafka's authorizer indexes them the same way. ACLs change rarely, so
    ``MetadataDelta.apply`` rebuilds the indexes whole when they do.
    """

    by_id: PMap[str, AclBinding] = field(default_factory=PMap)
    by_type: Mapping[ResourceType, tuple[AclBinding, ...]] = field(default_factory=dict)
    """Invariant: the bindings of ``by_id``, grouped by ``resource_type``, sorted by id."""

    literal: Mapping[tuple[ResourceType, str], tuple[AclBinding, ...]] = field(default_factory=dict)
    """LITERAL bindings by (resource type, name); ``*`` is a name here."""
    prefixed: Mapping[tuple[ResourceType, str], tuple[AclBinding, ...]] = field(
        default_factory=dict
    )
    """PREFIXED bindings by (resource type, prefix)."""
    prefix_lengths: Mapping[ResourceType, tuple[int, ...]] = field(default_factory=dict)
    """The lengths of the prefixes in ``prefixed``, per resource type."""

    @staticmethod
    def of(by_id: PMap[str, AclBinding]) -> AclsImage:
        grouped: dict[ResourceType, list[AclBinding]] = {}
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        for _, acl in sorted(by_id.items()):
            grouped.setdefault(acl.resource_type, []).append(acl)
            index = prefixed if acl.pattern_type is PatternType.PREFIXED else literal
            index.setdefault((acl.resource_type, acl.resource_name), []).append(acl)
        lengths: dict[ResourceType, set[int]] = {}
        for t, prefix in prefixed:
            lengths.setdefault(t, set()).add(len(prefix))
        return AclsImage(
            by_id,
            {t: tuple(v) for t, v in grouped.items()},
            {k: tuple(v) for k, v in literal.items()},
            {k: tuple(v) for k, v in prefixed.items()},
            {t: tuple(sorted(n)) for t, n in lengths.items()},
        )

    def __len__(self) -> int:
        return len(self.by_id)

    def for_type(self, resource_type: ResourceType) -> tuple[AclBinding, ...]:
        """The bindings that can match a resource of ``resource_type``: pass them to
        ``metalog.security.authorize``."""
        return self.by_type.get(resource_type, ())

    def on_resource(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The bindings that can match the resource ``name`` of ``resource_type`` (each
        ``matches_resource`` it): pass them to ``metalog.security.authorize``."""
        out = [
            *self.literal.get((resource_type, name), ()),
            *(self.literal.get((resource_type, WILDCARD), ()) if name != WILDCARD else ()),
        ]
        for n in self.prefix_lengths.get(resource_type, ()):
            if n > len(name):
                break
            out += self.prefixed.get((resource_type, name[:n]), ())
        return out

    def matching(self, flt: AclBindingFilter) -> list[tuple[str, AclBinding]]:
        """(id, binding) of every binding ``flt`` matches, sorted by id."""
        return sorted((i, acl) for i, acl in self.by_id.items() if flt.matches(acl))

    def id_of(self, acl: AclBinding) -> str | None:
        """The id of a binding equal to ``acl``, if there is one."""
        for i, other in self.by_id.items():
            if other == acl:
                return i
        return None


@dataclass(frozen=True, slots=True)
class ScramImage:
    """SCRAM credentials (KIP-554): (user name, mechanism) -> credential."""

    credentials: PMap[tuple[str, str], ScramCredential] = field(default_factory=PMap)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.credentials.get((user, mechanism))

    def __len__(self) -> int:
        return len(self.credentials)

    def users(self) -> dict[str, list[ScramCredential]]:
        """User name -> its credentials (by mechanism), sorted."""
        out: dict[str, list[ScramCredential]] = {}
        for (user, _), cred in sorted(self.credentials.items()):
            out.setdefault(user, []).append(cred)
        return out


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The cluster metadata after the record at ``offset`` (term ``epoch``)."""

    offset: int = -1
    epoch: int = -1
    features: FeaturesImage = field(default_factory=FeaturesImage)
    topics: TopicsImage = field(default_factory=TopicsImage)
    brokers: BrokersImage = field(default_factory=BrokersImage)
    configs: ConfigsImage = field(default_factory=ConfigsImage)
    producer_ids: ProducerIdsImage = field(default_factory=ProducerIdsImage)
    acls: AclsImage = field(default_factory=AclsImage)
    scram: ScramImage = field(default_factory=ScramImage)

    EMPTY: ClassVar[MetadataImage]
    """The image before any record."""

    def records(self) -> list[MetadataRecord]:
        """Records that rebuild this image from ``EMPTY`` (a KRaft snapshot's content).

        Order: features, brokers, topics with their partitions, configs, retired topic ids
        (oldest deletion first), producer ids, SCRAM credentials, ACLs;
        sorted within each part so equal images give equal snapshots.
        """
        out: list[MetadataRecord] = []
        for name, level in sorted(self.features.levels.items()):
            out.append(FeatureLevelRecord(name=name, feature_level=level))
        for _, b in sorted(self.brokers.brokers.items()):
            out.append(b.to_record())
        for _, t in sorted(self.topics.by_id.items()):
            out.append(TopicRecord(name=t.name, topic_id=t.topic_id))
            for p, reg in sorted(t.partitions.items()):
                out.append(reg.to_record(t.topic_id, p))
        for (rtype, rname), kv in sorted(self.configs.resources.items()):
            for k, v in sorted(kv.items()):
                out.append(ConfigRecord(resource_type=rtype, resource_name=rname, name=k, value=v))
        for tid, at in sorted(self.topics.retired.items(), key=lambda kv: (kv[1], kv[0])):
            out.append(RetiredTopicRecord(topic_id=tid, deleted_at=at))
        if self.producer_ids.next_producer_id:
            out.append(
                ProducerIdsRecord(
                    broker_id=BrokerId(-1),
                    broker_epoch=BrokerEpoch(-1),
                    next_producer_id=self.producer_ids.next_producer_id,
                )
            )
        for (user, mechanism), cred in sorted(self.scram.credentials.items()):
            out.append(
                UserScramCredentialRecord(
                    name=user,
                    mechanism=mechanism,
                    salt=cred.salt,
                    stored_key=cred.stored_key,
                    server_key=cred.server_key,
                    iterations=cred.iterations,
                )
            )
        for acl_id, acl in sorted(self.acls.by_id.items()):
            out.append(acl_record(acl_id, acl))
        return out

    def check(self) -> None:
        """Raise ``InvariantError`` unless every part is internally consistent (tests call it
        after every record; O(partitions))."""
        invariant(
            len(self.topics.by_id) == len(self.topics.by_name),
            "topics by id and by name differ in size",
        )
        for name, tid in self.topics.by_name.items():
            t = self.topics.by_id.get(tid)
            invariant(t is not None and t.name == name, "topic %s/%s misindexed", name, tid)
        for t, p, reg in self.topics.partitions():
            reg.check((t.name, p))


MetadataImage.EMPTY = MetadataImage()


def acl_record(acl_id: str, acl: AclBinding) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=acl_id,
        resource_type=acl.resource_type,
        resource_name=acl.resource_name,
        pattern_type=acl.pattern_type,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission=acl.permission,
    )


def acl_of_record(r: AccessControlEntryRecord) -> AclBinding:
    return AclBinding(
        principal=r.principal,
        host=r.host,
        resource_type=r.resource_type,
        resource_name=r.resource_name,
        pattern_type=r.pattern_type,
        operation=r.operation,
        permission=r.permission,
    )
