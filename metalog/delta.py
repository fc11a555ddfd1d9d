"""``MetadataDelta``: replay records on top of an image, then ``apply()`` a new image.

The only way metadata state changes (Kafka's ``MetadataDelta``)::

    delta = MetadataDelta(image)
    for offset, record in committed:
        delta.replay(record, offset)
    image = delta.apply()

``replay`` records the change in small dicts keyed by what changed; ``apply`` builds the next
image by updating the base image's persistent maps (``PMap``) with just those entries, so its
cost is proportional to the changes, not to the cluster. The base image is never touched.

The delta also says what changed, which brokers need in order to become leader or follower:
``created_topics``, ``deleted_topics``, ``changed_partitions`` and
``local_changes(broker_id)``.

A record that cannot apply (a partition of an unknown topic, a fence of a stale broker epoch)
raises ``InvariantError``: committed metadata is never wrong, so it means a bug or corruption.

Snapshots (KIP-630's content, not its file framing): ``encode_snapshot(image)`` is the image's
``records()`` plus its offset and epoch; ``decode_snapshot`` replays them onto ``EMPTY``.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack

from common.invariant import invariant
from metalog.image import (
    DELETE,
    RETIRED_TOPIC_IDS_MAX,
    AclsImage,
    BrokerRegistration,
    BrokersImage,
    ConfigResource,
    ConfigsImage,
    FeaturesImage,
    MetadataImage,
    PartitionRegistration,
    PMap,
    ProducerIdsImage,
    ScramImage,
    TopicImage,
    TopicsImage,
    acl_of_record,
)
from metalog.records import (
    BROKER_EPOCH_FROM_OFFSET,
    AccessControlEntryRecord,
    BrokerEpoch,
    BrokerId,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    CorruptMetadataRecordError,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
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
    encode_record,
)
from metalog.security import AclBinding, ScramCredential


@dataclass(slots=True)
class _TopicChange:
    """A topic touched by the delta: its name, whether it is new, its changed partitions."""

    name: str
    created: bool
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """What one broker must do after a delta (Kafka's ``LocalReplicaChanges``).

    ``leaders``/``followers``: partitions (created or changed) it now leads or follows, with
    their registrations; ``deletes``: partitions it must drop (topic deleted, or it is no
    longer a replica).
    """

    leaders: dict[tuple[TopicId, int], PartitionRegistration]
    followers: dict[tuple[TopicId, int], PartitionRegistration]
    deletes: set[tuple[TopicId, int]]


class MetadataDelta:
    """Changes accumulated on top of ``image``; ``apply()`` returns the next image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._offset = image.offset
        self._epoch = image.epoch
        self._topics: dict[TopicId, _TopicChange] = {}
        self._deleted: dict[TopicId, TopicImage] = {}
        """Topics of the base image that this delta deleted."""
        self._retired: dict[TopicId, int] = {}
        """Ids of topics this delta deleted (or a snapshot remembers) -> deletion offset."""
        self._names: dict[str, TopicId | None] = {}
        """Changes to the by-name index (None: name freed)."""
        self._brokers: dict[BrokerId, BrokerRegistration | None] = {}
        self._configs: dict[ConfigResource, dict[str, str | None]] = {}
        self._deleted_resources: set[ConfigResource] = set()
        self._next_producer_id: int | None = None
        self._features: dict[str, int] = {}
        self._acls: dict[str, AclBinding | None] = {}
        """ACL bindings added, or (None) removed, by id."""
        self._scram: dict[tuple[str, str], ScramCredential | None] = {}
        """SCRAM credentials set, or (None) removed, by (user, mechanism)."""

    # ---------------------------------------------------------------- lookups through the delta

    def topic_name(self, topic_id: TopicId) -> str | None:
        tc = self._topics.get(topic_id)
        if tc is not None:
            return tc.name
        if topic_id in self._deleted:
            return None
        t = self.image.topics.by_id.get(topic_id)
        return None if t is None else t.name

    def topic_id(self, name: str) -> TopicId | None:
        if name in self._names:
            return self._names[name]
        return self.image.topics.by_name.get(name)

    def partition(self, topic_id: TopicId, partition: int) -> PartitionRegistration | None:
        tc = self._topics.get(topic_id)
        if tc is not None:
            reg = tc.partitions.get(partition)
            if reg is not None or tc.created:
                return reg
        if topic_id in self._deleted:
            return None
        t = self.image.topics.by_id.get(topic_id)
        return None if t is None else t.partitions.get(partition)

    def is_deleted(self, topic_id: TopicId) -> bool:
        """Whether this delta deleted ``topic_id`` from the base image."""
        return topic_id in self._deleted

    def is_retired(self, topic_id: TopicId) -> bool:
        """Whether ``topic_id`` belonged to a topic deleted since: by this delta, or one the
        base image remembers (``TopicsImage.retired``)."""
        return topic_id in self._retired or topic_id in self.image.topics.retired

    def changed_partitions_of(self, topic_id: TopicId) -> Mapping[int, PartitionRegistration]:
        """Partitions of ``topic_id`` this delta created or changed (empty if none)."""
        tc = self._topics.get(topic_id)
        return {} if tc is None else tc.partitions

    def broker(self, broker_id: BrokerId) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self.image.brokers.brokers.get(broker_id)

    def acl(self, acl_id: str) -> AclBinding | None:
        if acl_id in self._acls:
            return self._acls[acl_id]
        return self.image.acls.by_id.get(acl_id)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        if (user, mechanism) in self._scram:
            return self._scram[(user, mechanism)]
        return self.image.scram.get(user, mechanism)

    # ---------------------------------------------------------------- replay

    def replay(self, record: MetadataRecord, offset: int | None, epoch: int | None = None) -> None:
        """Apply one record. ``offset`` is its index in the metadata log, or None for a record
        not yet committed (the controller's pending view; the image offset does not move and a
        registration's epoch stays unknown, -1)."""
        if offset is not None:
            invariant(offset > self._offset, "replay at offset %s after %s", offset, self._offset)
            self._offset = offset
        if epoch is not None:
            invariant(epoch >= self._epoch, "replay at epoch %s after %s", epoch, self._epoch)
            self._epoch = epoch
        handler = _HANDLERS.get(type(record))
        invariant(handler is not None, "no replay for %r", record)
        assert handler is not None
        handler(self, record, offset)

    def replay_all(self, records: Iterable[MetadataRecord], base_offset: int | None) -> None:
        for i, r in enumerate(records):
            self.replay(r, None if base_offset is None else base_offset + i)

    def _replay_topic(self, r: TopicRecord, offset: int | None) -> None:
        existing = self.topic_id(r.name)
        invariant(existing is None, "topic %s already exists as %s", r.name, existing)
        invariant(
            self.topic_name(r.topic_id) is None and r.topic_id not in self._topics,
            "topic id %s already in use",
            r.topic_id,
        )
        self._topics[r.topic_id] = _TopicChange(r.name, created=True)
        self._names[r.name] = r.topic_id

    def _topic_change(self, topic_id: TopicId) -> _TopicChange:
        tc = self._topics.get(topic_id)
        if tc is None:
            name = self.topic_name(topic_id)
            invariant(name is not None, "unknown topic id %s", topic_id)
            assert name is not None
            tc = self._topics[topic_id] = _TopicChange(name, created=False)
        return tc

    def _replay_partition(self, r: PartitionRecord, offset: int | None) -> None:
        reg = PartitionRegistration.from_record(r)
        reg.check((r.topic_id, r.partition))
        self._topic_change(r.topic_id).partitions[r.partition] = reg

    def _replay_partition_change(self, r: PartitionChangeRecord, offset: int | None) -> None:
        cur = self.partition(r.topic_id, r.partition)
        invariant(cur is not None, "change to unknown partition %s-%s", r.topic_id, r.partition)
        assert cur is not None
        reg = cur.merge(r)
        reg.check((r.topic_id, r.partition))
        self._topic_change(r.topic_id).partitions[r.partition] = reg

    def _replay_remove_topic(self, r: RemoveTopicRecord, offset: int | None) -> None:
        name = self.topic_name(r.topic_id)
        invariant(name is not None, "remove of unknown topic %s", r.topic_id)
        assert name is not None
        tc = self._topics.pop(r.topic_id, None)
        if tc is None or not tc.created:
            base = self.image.topics.by_id.get(r.topic_id)
            if base is not None:
                self._deleted[r.topic_id] = base
        self._names[name] = None
        self._retired[r.topic_id] = -1 if offset is None else offset
        # The topic's configs go with it (Kafka's ConfigurationsDelta on RemoveTopicRecord).
        res = (int(ConfigResourceType.TOPIC), name)
        self._configs.pop(res, None)
        self._deleted_resources.add(res)

    def _replay_retired_topic(self, r: RetiredTopicRecord, offset: int | None) -> None:
        self._retired[r.topic_id] = r.deleted_at

    def _replay_config(self, r: ConfigRecord, offset: int | None) -> None:
        res = (int(r.resource_type), r.resource_name)
        self._configs.setdefault(res, {})[r.name] = r.value

    def _replay_register_broker(self, r: RegisterBrokerRecord, offset: int | None) -> None:
        epoch = r.broker_epoch
        if epoch == BROKER_EPOCH_FROM_OFFSET and offset is not None:
            epoch = BrokerEpoch(offset)
        self._brokers[r.broker_id] = BrokerRegistration(
            broker_id=r.broker_id,
            incarnation_id=r.incarnation_id,
            broker_epoch=epoch,
            endpoints=r.endpoints,
            rack=r.rack,
            fenced=r.fenced,
            in_controlled_shutdown=r.in_controlled_shutdown,
        )

    def _registered(self, broker_id: BrokerId, broker_epoch: BrokerEpoch) -> BrokerRegistration:
        b = self.broker(broker_id)
        invariant(b is not None, "unknown broker %s", broker_id)
        assert b is not None
        invariant(
            b.broker_epoch == broker_epoch,
            "broker %s epoch %s, record says %s",
            broker_id,
            b.broker_epoch,
            broker_epoch,
        )
        return b

    def _set_broker(
        self, b: BrokerRegistration, *, fenced: bool | None, in_controlled_shutdown: bool | None
    ) -> None:
        self._brokers[b.broker_id] = BrokerRegistration(
            broker_id=b.broker_id,
            incarnation_id=b.incarnation_id,
            broker_epoch=b.broker_epoch,
            endpoints=b.endpoints,
            rack=b.rack,
            fenced=b.fenced if fenced is None else fenced,
            in_controlled_shutdown=(
                b.in_controlled_shutdown
                if in_controlled_shutdown is None
                else in_controlled_shutdown
            ),
        )

    def _replay_unregister_broker(self, r: UnregisterBrokerRecord, offset: int | None) -> None:
        self._registered(r.broker_id, r.broker_epoch)
        self._brokers[r.broker_id] = None

    def _replay_fence(self, r: FenceBrokerRecord, offset: int | None) -> None:
        b = self._registered(r.broker_id, r.broker_epoch)
        self._set_broker(b, fenced=True, in_controlled_shutdown=None)

    def _replay_unfence(self, r: UnfenceBrokerRecord, offset: int | None) -> None:
        b = self._registered(r.broker_id, r.broker_epoch)
        self._set_broker(b, fenced=False, in_controlled_shutdown=None)

    def _replay_registration_change(
        self, r: BrokerRegistrationChangeRecord, offset: int | None
    ) -> None:
        b = self._registered(r.broker_id, r.broker_epoch)
        self._set_broker(b, fenced=r.fenced, in_controlled_shutdown=r.in_controlled_shutdown)

    def _replay_producer_ids(self, r: ProducerIdsRecord, offset: int | None) -> None:
        cur = self.next_producer_id
        invariant(
            r.next_producer_id >= cur, "producer ids go back: %s < %s", r.next_producer_id, cur
        )
        self._next_producer_id = r.next_producer_id

    def _replay_feature(self, r: FeatureLevelRecord, offset: int | None) -> None:
        self._features[r.name] = r.feature_level

    def _replay_noop(self, r: NoOpRecord, offset: int | None) -> None:
        pass

    def _replay_acl(self, r: AccessControlEntryRecord, offset: int | None) -> None:
        invariant(self.acl(r.id) is None, "ACL id %s already in use", r.id)
        self._acls[r.id] = acl_of_record(r)

    def _replay_remove_acl(self, r: RemoveAccessControlEntryRecord, offset: int | None) -> None:
        invariant(self.acl(r.id) is not None, "remove of unknown ACL id %s", r.id)
        self._acls[r.id] = None

    def _replay_scram(self, r: UserScramCredentialRecord, offset: int | None) -> None:
        # An upsert: setting a user's password again replaces the credential (KIP-554).
        self._scram[(r.name, r.mechanism)] = ScramCredential(
            r.mechanism, r.salt, r.iterations, r.stored_key, r.server_key
        )

    def _replay_remove_scram(self, r: RemoveUserScramCredentialRecord, offset: int | None) -> None:
        invariant(
            self.scram_credential(r.name, r.mechanism) is not None,
            "remove of unknown SCRAM credential %s/%s",
            r.name,
            r.mechanism,
        )
        self._scram[(r.name, r.mechanism)] = None

    @property
    def next_producer_id(self) -> int:
        if self._next_producer_id is not None:
            return self._next_producer_id
        return self.image.producer_ids.next_producer_id

    # ---------------------------------------------------------------- what changed

    @property
    def created_topics(self) -> dict[TopicId, str]:
        """Topics created by this delta (and still present), id -> name."""
        return {tid: tc.name for tid, tc in self._topics.items() if tc.created}

    @property
    def deleted_topics(self) -> dict[TopicId, str]:
        """Topics of the base image deleted by this delta, id -> name."""
        return {tid: t.name for tid, t in self._deleted.items()}

    @property
    def changed_partitions(self) -> dict[tuple[TopicId, int], PartitionRegistration]:
        """Partitions created or changed (in surviving topics), with their new registration."""
        return {
            (tid, p): reg for tid, tc in self._topics.items() for p, reg in tc.partitions.items()
        }

    @property
    def changed_brokers(self) -> dict[BrokerId, BrokerRegistration | None]:
        """Brokers registered, changed or (None) unregistered."""
        return dict(self._brokers)

    def local_changes(self, broker_id: BrokerId) -> LocalReplicaChanges:
        """What ``broker_id`` must do: lead, follow, or delete which partitions."""
        leaders: dict[tuple[TopicId, int], PartitionRegistration] = {}
        followers: dict[tuple[TopicId, int], PartitionRegistration] = {}
        deletes: set[tuple[TopicId, int]] = set()
        for tid, t in self._deleted.items():
            for p, reg in t.partitions.items():
                if broker_id in reg.replicas:
                    deletes.add((tid, p))
        for (tid, p), reg in self.changed_partitions.items():
            if broker_id in reg.replicas:
                if reg.leader == broker_id:
                    leaders[(tid, p)] = reg
                else:
                    followers[(tid, p)] = reg
            else:
                prev = self.image.topics.partition(tid, p)
                if prev is not None and broker_id in prev.replicas:
                    deletes.add((tid, p))
        return LocalReplicaChanges(leaders, followers, deletes)

    # ---------------------------------------------------------------- apply

    def apply(self) -> MetadataImage:
        """The image after every replayed record. The delta stays usable (and unchanged)."""
        base = self.image
        return MetadataImage(
            offset=self._offset,
            epoch=self._epoch,
            features=self._apply_features(base.features),
            topics=self._apply_topics(base.topics),
            brokers=self._apply_brokers(base.brokers),
            configs=self._apply_configs(base.configs),
            producer_ids=(
                base.producer_ids
                if self._next_producer_id is None
                else ProducerIdsImage(self._next_producer_id)
            ),
            acls=self._apply_acls(base.acls),
            scram=self._apply_scram(base.scram),
        )

    def _apply_acls(self, base: AclsImage) -> AclsImage:
        if not self._acls:
            return base
        return AclsImage.of(
            base.by_id.update({k: (DELETE if v is None else v) for k, v in self._acls.items()})
        )

    def _apply_scram(self, base: ScramImage) -> ScramImage:
        if not self._scram:
            return base
        return ScramImage(
            base.credentials.update(
                {k: (DELETE if v is None else v) for k, v in self._scram.items()}
            )
        )

    def _apply_features(self, base: FeaturesImage) -> FeaturesImage:
        if not self._features:
            return base
        return FeaturesImage(
            base.levels.update({k: (DELETE if v == 0 else v) for k, v in self._features.items()})
        )

    def _apply_topics(self, base: TopicsImage) -> TopicsImage:
        if not self._topics and not self._deleted and not self._retired:
            return base
        by_id: dict[TopicId, TopicImage] = dict.fromkeys(self._deleted, DELETE)
        for tid, tc in self._topics.items():
            if tc.created:
                by_id[tid] = TopicImage(tc.name, tid, PMap(tc.partitions))
            else:
                old = base.by_id[tid]
                by_id[tid] = TopicImage(old.name, tid, old.partitions.update(tc.partitions))
        by_name = {n: (DELETE if tid is None else tid) for n, tid in self._names.items()}
        return TopicsImage(
            base.by_id.update(by_id),
            base.by_name.update(by_name),
            _retire(base.retired, self._retired),
        )

    def _apply_brokers(self, base: BrokersImage) -> BrokersImage:
        if not self._brokers:
            return base
        return BrokersImage(
            base.brokers.update({k: (DELETE if v is None else v) for k, v in self._brokers.items()})
        )

    def _apply_configs(self, base: ConfigsImage) -> ConfigsImage:
        if not self._configs and not self._deleted_resources:
            return base
        changes: dict[ConfigResource, PMap[str, str]] = dict.fromkeys(
            self._deleted_resources, DELETE
        )
        for res, kv in self._configs.items():
            old = (
                PMap[str, str]()
                if res in self._deleted_resources
                else base.resources.get(res, PMap[str, str]())
            )
            assert old is not None
            new = old.update({k: (DELETE if v is None else v) for k, v in kv.items()})
            changes[res] = DELETE if len(new) == 0 else new
        return ConfigsImage(base.resources.update(changes))


def _retire(base: PMap[TopicId, int], new: dict[TopicId, int]) -> PMap[TopicId, int]:
    """``base`` plus ``new``, keeping the latest ``RETIRED_TOPIC_IDS_MAX`` deletions. Past the
    limit it drops down to 90% of it at once, so the sort runs once per 10,000 deletions."""
    merged = base.update(new)
    if len(merged) <= RETIRED_TOPIC_IDS_MAX:
        return merged
    keep = RETIRED_TOPIC_IDS_MAX * 9 // 10
    oldest = sorted(merged.items(), key=lambda kv: (kv[1], kv[0]))[: len(merged) - keep]
    return merged.update(dict.fromkeys((tid for tid, _ in oldest), DELETE))


_HANDLERS: Mapping[type, Callable[[MetadataDelta, Any, int | None], None]] = {
    TopicRecord: MetadataDelta._replay_topic,
    PartitionRecord: MetadataDelta._replay_partition,
    PartitionChangeRecord: MetadataDelta._replay_partition_change,
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,
    ConfigRecord: MetadataDelta._replay_config,
    RegisterBrokerRecord: MetadataDelta._replay_register_broker,
    UnregisterBrokerRecord: MetadataDelta._replay_unregister_broker,
    FenceBrokerRecord: MetadataDelta._replay_fence,
    UnfenceBrokerRecord: MetadataDelta._replay_unfence,
    BrokerRegistrationChangeRecord: MetadataDelta._replay_registration_change,
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,
    FeatureLevelRecord: MetadataDelta._replay_feature,
    NoOpRecord: MetadataDelta._replay_noop,
    RetiredTopicRecord: MetadataDelta._replay_retired_topic,
    AccessControlEntryRecord: MetadataDelta._replay_acl,
    RemoveAccessControlEntryRecord: MetadataDelta._replay_remove_acl,
    UserScramCredentialRecord: MetadataDelta._replay_scram,
    RemoveUserScramCredentialRecord: MetadataDelta._replay_remove_scram,
}


# --------------------------------------------------------------------------- snapshots

SNAPSHOT_VERSION = 0


def encode_snapshot(image: MetadataImage) -> bytes:
    """``[version, offset, epoch, [record bytes...]]`` in msgpack: the records that rebuild
    ``image`` from ``EMPTY`` (KIP-630), tagged with the offset and epoch they stand for."""
    return msgpack.packb(
        [SNAPSHOT_VERSION, image.offset, image.epoch, [encode_record(r) for r in image.records()]],
        use_bin_type=True,
    )


def decode_snapshot(data: bytes) -> MetadataImage:
    """The image a snapshot stands for: its records replayed onto ``EMPTY``."""
    try:
        items = msgpack.unpackb(data, use_list=False, raw=False)
    except Exception as e:
        raise CorruptMetadataRecordError(f"snapshot is not msgpack: {e}") from e
    if (
        type(items) is not tuple
        or len(items) != 4
        or items[0] != SNAPSHOT_VERSION
        or type(items[1]) is not int
        or type(items[2]) is not int
        or type(items[3]) is not tuple
    ):
        raise CorruptMetadataRecordError("not a metadata snapshot (or an unknown version)")
    _, offset, epoch, blobs = items
    delta = MetadataDelta(MetadataImage.EMPTY)
    for b in blobs:
        if type(b) is not bytes:
            raise CorruptMetadataRecordError("snapshot record is not bytes")
        delta.replay(decode_record(b), None)
    # ``replace`` carries every part of the image, so a part added later cannot be dropped
    # from restored snapshots by forgetting it here.
    return replace(delta.apply(), offset=offset, epoch=epoch)
