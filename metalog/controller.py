"""The quorum controller's logic: commands in, ``ControllerResult(records, response)`` out.

Kafka's ``QuorumController`` minus its event loop (KIP-500, KIP-631). Every controller node
builds its image by replaying committed records; the active one (the Raft leader) also turns
commands into records. It validates each command against the latest image *including* its
pending records (proposed, not yet committed), so two commands in flight cannot both create
topic ``a``. It never mutates an image: the records do that, once committed, through
``replay``.

Pure: no I/O, no clock (time comes in as ``now_ms``), no global random (topic ids come from an
injected factory, defaulting to a hash; placement draws come from the topic name).

Driving it (``metalog.driver.ControllerDriver`` does this for a Raft node)::

    ctl = QuorumController(node_id)
    # On every node, for every committed metadata entry, in log order:
    ctl.replay(record, offset, epoch)            # epoch: the entry's Raft term
    # When Raft installs a snapshot: ctl.restore(decode_snapshot(data))

    # When this node becomes Raft leader of term T, *after* it has replayed every entry
    # before the term's first entry (so no record of an older term is still to come):
    ctl.become_active(T, now_ms)
    # When it stops being leader (or a proposal failed):
    ctl.become_standby()

    # Active only. A request from a broker or the API:
    result = ctl.handle(command, now_ms)         # may raise a MetadataError: answer it now
    # (or ctl.handle_steps(command, now_ms): the same in steps of bounded work, a generator
    # whose return value is the result; see its docstring for what may happen in between)
    if not result.records:
        reply(result.response)                   # nothing to commit (validate_only, no-op)
    else:
        base = raft.propose(result.records)      # all records in one entry batch, atomically
        # ... when the entry at `base` commits (and its records were replayed above):
        reply(result.response_at(base))          # e.g. the broker epoch = offset of its record

    # Timers. Call at least by the returned deadline (and after each heartbeat is fine):
    records, deadline_ms = ctl.poll(now_ms)      # fences expired sessions, NoOps, rebalance
    if records: raft.propose(records)

Records returned by ``handle``/``poll`` are already counted as pending: the shell must propose
them, in order, or call ``become_standby()`` (which forgets them), or ``withdraw(records)``
them if they cannot be encoded. If a committed record is not the next pending one (a proposal
was lost), the controller forgets its pending records.

Broker lifecycle (KIP-631): ``RegisterBroker`` -> registered and fenced, epoch = offset of its
``RegisterBrokerRecord`` -> heartbeats every 2 s; the first one with ``current_metadata_offset
>= epoch`` unfences it -> ``want_shutdown`` moves its leaderships away, marks it in controlled
shutdown, and once it leads nothing fences it and answers ``should_shutdown`` -> a session
without heartbeat for 9 s is fenced by ``poll``. A new incarnation registers while the old
one's session lives only if it names the old one as ``previous_incarnation_id`` (it took the
data directory the old one held, so that one is dead); its registration replaces the old one
at once, which leaves its ISRs and leaderships (and, unless its logs closed cleanly, its
ELRs) as a fencing does. Fencing removes the broker from every ISR
(into the ELR where the ISR is below ``min.insync.replicas``, KIP-966) and elects new leaders
from the ISR, or with an empty ISR from the ELR; with neither the leader is -1 unless the
topic has ``unclean.leader.election.enable=true``, and a partition whose replicas that held
its records all shut down uncleanly waits for an unclean recovery by longest log
(``partition_change``, ``QuorumController._maybe_recover``; docs/metadata.md).

Reassignment (KIP-455): ``AlterPartitionReassignments`` sets a partition's replicas to its
target followed by the replicas leaving, with ``adding``/``removing`` marked; the move
completes (replicas = target, leaving replicas out of the ISR, a leaving leader replaced by a
live target in the ISR) in the same batch as the ISR change that brings the last target into
the ISR, or at the next rebalance pass; until then the old replicas stay, so the ISR never
loses what it holds. A cancel goes back to the replicas minus the ones being added.

The commands live in ``metalog.commands``, their responses in ``metalog.responses`` and the
refusals (``MetadataError`` subclasses, Kafka's error names in ``code``) in ``metalog.errors``:
brokers and the API import those, not this module, which only the controller's owner (the
service, the simulator, tests) needs.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zlib
from collections import deque
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from common.invariant import invariant
from metalog.commands import (
    AllocateProducerIds,
    AlterConfigs,
    AlterPartition,
    AlterPartitionReassignments,
    AlterUserScramCredentials,
    BrokerHeartbeat,
    Command,
    CreateAcls,
    CreatePartitions,
    CreateTopic,
    DeleteAcls,
    DeleteTopic,
    ElectionType,
    ElectLeaders,
    ListPartitionReassignments,
    LookupTopic,
    PartitionStateChange,
    RegisterBroker,
    ReplicaReassignment,
    ScramUpsertion,
    UnregisterBroker,
)
from metalog.delta import MetadataDelta
from metalog.errors import (
    BrokerIdNotRegisteredError,
    BrokerRegistrationPendingError,
    DuplicateBrokerRegistrationError,
    DuplicateResourceError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    MetadataError,
    NoReassignmentInProgressError,
    NotControllerError,
    NotLeaderOrFollowerError,
    PreferredLeaderNotAvailableError,
    ResourceNotFoundError,
    StaleBrokerEpochError,
    StaleControllerEpochError,
    TopicExistsError,
    TopicIdRetiredError,
    UnacceptableCredentialError,
    UnknownTopicOrPartitionError,
    UnsupportedSaslMechanismError,
)
from metalog.image import (
    TOPIC_CONFIG_DEFAULTS,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    acl_record,
)
from metalog.placement import PlacementBroker, PlacementError, place
from metalog.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokerEpoch,
    BrokerId,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    FenceBrokerRecord,
    LeaderRecoveryState,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicId,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from metalog.responses import (
    AclEntry,
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    AlterPartitionResponse,
    AlterPartitionResult,
    AlterUserScramCredentialsResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    CreateAclsResponse,
    CreatePartitionsResponse,
    CreateTopicResponse,
    DeleteAclsResponse,
    DeleteTopicResponse,
    ElectLeadersResponse,
    ElectLeadersResult,
    ListPartitionReassignmentsResponse,
    LookupTopicResponse,
    OngoingReassignment,
    ProducerIdsBlock,
    ReassignmentResult,
    UnregisterBrokerResponse,
)
from metalog.security import (
    CLUSTER_NAME,
    PATTERN_FILTERS,
    SCRAM_MECHANISMS,
    SCRAM_MIN_ITERATIONS,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

R = TypeVar("R")


@dataclass(frozen=True)
class ControllerResult(Generic[R]):
    """Records to commit and the response to send once they have (Kafka's ControllerResult).

    Some responses depend on where the records land (a broker's epoch is the offset of its
    ``RegisterBrokerRecord``): ``response_at(base_offset)`` gives the final response, given
    the offset of the first record; ``response`` is what is known before.
    """

    records: tuple[MetadataRecord, ...]
    response: R
    resolve: Callable[[int], R] | None = None

    def response_at(self, base_offset: int) -> R:
        return self.response if self.resolve is None else self.resolve(base_offset)


# --------------------------------------------------------------------------- config


UNCLEAN_RECOVERY_STRATEGIES = ("balanced", "aggressive", "manual")


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    session_timeout_ms: int = 9_000
    """KRaft ``broker.session.timeout.ms``: no heartbeat for this long fences a broker."""
    heartbeat_interval_ms: int = 2_000
    """KRaft ``broker.heartbeat.interval.ms``, what brokers should use (informational here)."""
    default_num_partitions: int = 1
    default_replication_factor: int = 1
    producer_id_block_size: int = 1_000
    noop_interval_ms: int | None = 500
    """KAFKA-13955: a NoOpRecord this often keeps the committed offset moving (None: off)."""
    leader_imbalance_check_interval_ms: int | None = 300_000
    """``leader.imbalance.check.interval.seconds``: preferred-leader rebalance (None: off)."""
    max_partitions_per_topic: int = 100_000
    max_partitions: int = 200_000
    """Partitions in the whole cluster: every partition costs each broker and controller
    memory and metadata, so a client's create is refused past it (issue 17's bounds)."""
    eligible_leader_replicas_enabled: bool = True
    """KIP-966 (Kafka's ``eligible.leader.replicas.version``, on in new 4.1 clusters): a
    replica leaving an ISR that is below ``min.insync.replicas`` stays eligible to lead (ELR),
    the ISR may become empty, and a broker back from an unclean shutdown loses both. Off: the
    last ISR member stays in the ISR and leads again when it returns (Kafka 3.x)."""
    unclean_recovery_strategy: str = "balanced"
    """What happens to a partition left with no ISR and no ELR (every replica that held its
    committed records had an unclean shutdown), KIP-966's ``unclean.recovery.strategy``:
    ``balanced`` elects the longest log once every live replica and every last known ELR
    member (every replica if there is none) has reported its log end, or the timeout passed;
    ``aggressive`` once every live replica has; ``manual`` never (``ElectLeaders`` UNCLEAN does). A topic with
    ``unclean.leader.election.enable=true`` elects the first live replica at once instead."""
    unclean_recovery_timeout_ms: int = 300_000
    """KIP-966's ``unclean.recovery.timeout.ms``: after this long waiting for reports, elect
    the longest log among the live replicas that reported."""
    partition_changes_per_poll_max: int = 500
    """Partition changes one ``poll`` decides, for fencing expired sessions and for the
    preferred-leader rebalance; the rest follow in the next polls (Kafka bounds the same work:
    ``maxElectionsPerImbalance``, and its controller's records per batch). Each change costs
    the leader ~20-60 µs to decide and every node as much again to encode, decode and replay,
    all on the event loop that also runs Raft: fencing three brokers of 10,000 partitions in
    one poll (30,003 records) held the leader's loop for seconds on a loaded machine, past the
    election timeout, and each next leader did the same (finding 13)."""
    partitions_per_step: int = 500
    """New partitions a ``CreateTopic`` or ``CreatePartitions`` decides between two yields of
    ``handle_steps`` (the shell lets its event loop run there): a topic of 10,000 partitions
    is ~130 ms of deciding on an idle core, which must not hold the Raft node's heartbeats.
    Its records still commit as one entry, atomically."""

    def __post_init__(self) -> None:
        if self.unclean_recovery_strategy not in UNCLEAN_RECOVERY_STRATEGIES:
            raise ValueError(
                f"unclean_recovery_strategy must be one of "
                f"{', '.join(UNCLEAN_RECOVERY_STRATEGIES)}, got "
                f"{self.unclean_recovery_strategy!r}"
            )


_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
TOPIC_NAME_LENGTH_MAX = 249


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: 1..249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    if not name:
        raise InvalidTopicError("topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('topic name cannot be "." or ".."')
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidTopicError(
            f"topic name is illegal, it can't be longer than {TOPIC_NAME_LENGTH_MAX} characters"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def _long(lo: int) -> Callable[[str], None]:
    def check(v: str) -> None:
        try:
            n = int(v)
        except ValueError:
            raise ValueError("not an integer") from None
        if not lo <= n <= 2**63 - 1:
            raise ValueError(f"must be at least {lo}")

    return check


def _one_of(*allowed: str) -> Callable[[str], None]:
    def check(v: str) -> None:
        if v not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")

    return check


def _policy(v: str) -> None:
    parts = [p.strip() for p in v.split(",")]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError("must be a list of delete, compact")


def _ratio(v: str) -> None:
    try:
        x = float(v)
    except ValueError:
        raise ValueError("not a number") from None
    if not 0.0 <= x <= 1.0:
        raise ValueError("must be between 0 and 1")


TOPIC_CONFIG_CHECKS: Mapping[str, Callable[[str], None]] = {
    "cleanup.policy": _policy,
    "compression.type": _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
    "delete.retention.ms": _long(0),
    "file.delete.delay.ms": _long(0),
    "flush.messages": _long(1),
    "flush.ms": _long(0),
    "index.interval.bytes": _long(0),
    "max.compaction.lag.ms": _long(1),
    "max.message.bytes": _long(0),
    "message.timestamp.type": _one_of("CreateTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": _ratio,
    "min.compaction.lag.ms": _long(0),
    "min.insync.replicas": _long(1),
    "retention.bytes": _long(-1),
    "retention.ms": _long(-1),
    "segment.bytes": _long(14),
    "segment.index.bytes": _long(4),
    "segment.ms": _long(1),
    "unclean.leader.election.enable": _one_of("true", "false"),
}
"""Validators of the topic configs Longboat knows (limits as Kafka's ``LogConfig``)."""

invariant(
    set(TOPIC_CONFIG_CHECKS) == set(TOPIC_CONFIG_DEFAULTS),
    "every known topic config has a default and a check",
)


def validate_topic_config(key: str, value: str, *, unknown_ok: bool = False) -> None:
    check = TOPIC_CONFIG_CHECKS.get(key)
    if check is None:
        if unknown_ok:
            return
        raise InvalidConfigurationError(f"unknown topic config {key!r}")
    try:
        check(value)
    except ValueError as e:
        raise InvalidConfigurationError(f"invalid value {value!r} for {key}: {e}") from None


def default_topic_id(seed: str) -> TopicId:
    """A Kafka-style topic id (22 chars of URL-safe base64 of 128 bits) derived from ``seed``."""
    digest = hashlib.blake2b(seed.encode(), digest_size=16).digest()
    return TopicId(base64.urlsafe_b64encode(digest).rstrip(b"=").decode())


# --------------------------------------------------------------------------- ACLs and SCRAM

ACL_OPERATIONS: Mapping[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset(
        {
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DESCRIBE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {
            Operation.CREATE,
            Operation.CLUSTER_ACTION,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.IDEMPOTENT_WRITE,
            Operation.ALTER,
            Operation.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE}),
}
"""The operations an ACL may name per resource type, besides ALL (Kafka's
``AclEntry.supportedOperations``): kafka-acls refuses the others, and so do we."""

ACL_BINDINGS_PER_REQUEST_MAX = 1_000
SCRAM_ITERATIONS_MAX = 16_384
"""Kafka's ``ScramMechanism.maxIterations``."""
SCRAM_USER_NAME_CHARS_MAX = 256


def validate_acl(acl: AclBinding) -> None:
    """Raise ``InvalidRequestError`` unless ``acl`` may be stored (Kafka's
    ``AclControlManager.validateNewAcl`` and kafka-acls' checks)."""
    for name, cls in (
        ("resource_type", ResourceType),
        ("pattern_type", PatternType),
        ("operation", Operation),
        ("permission", Permission),
    ):
        if not isinstance(getattr(acl, name), cls):
            raise InvalidRequestError(
                f"{name} must be one of {', '.join(cls)}, got {getattr(acl, name)!r}"
            )
    kind, sep, who = acl.principal.partition(":")
    if kind != "User" or not sep or not who:
        raise InvalidRequestError(
            f"principal must be 'User:<name>' (or 'User:*'), got {acl.principal!r}"
        )
    if not acl.host:
        raise InvalidRequestError("host must not be empty ('*' for every host)")
    if not acl.resource_name:
        raise InvalidRequestError("resource_name must not be empty")
    if acl.pattern_type is PatternType.PREFIXED and acl.resource_name == WILDCARD:
        raise InvalidRequestError(
            "a PREFIXED pattern cannot be '*' (use LITERAL '*' for every resource)"
        )
    if acl.resource_type is ResourceType.CLUSTER and (
        acl.resource_name != CLUSTER_NAME or acl.pattern_type is not PatternType.LITERAL
    ):
        raise InvalidRequestError(f"the CLUSTER resource is the LITERAL {CLUSTER_NAME!r}")
    if acl.operation is not Operation.ALL and acl.operation not in ACL_OPERATIONS.get(
        acl.resource_type, frozenset()
    ):
        allowed = ", ".join(sorted(ACL_OPERATIONS[acl.resource_type]))
        raise InvalidRequestError(
            f"{acl.resource_type} supports the operations ALL, {allowed}; not {acl.operation}"
        )


def validate_acl_filter(flt: AclBindingFilter) -> None:
    if flt.pattern_type not in PATTERN_FILTERS:
        raise InvalidRequestError(
            f"pattern_type must be one of {', '.join(PATTERN_FILTERS)}, got {flt.pattern_type!r}"
        )
    for name, cls in (
        ("resource_type", ResourceType),
        ("operation", Operation),
        ("permission", Permission),
    ):
        v = getattr(flt, name)
        if v is not None and not isinstance(v, cls):
            raise InvalidRequestError(f"{name} must be one of {', '.join(cls)}, got {v!r}")


def acl_id(acl: AclBinding) -> str:
    """A binding's id: a hash of its fields, so equal bindings get one id and a create that
    is retried after a lost answer adds nothing the second time. 22 characters of URL-safe
    base64, as Kafka's ids."""
    fields = (
        acl.principal,
        acl.host,
        acl.resource_type,
        acl.resource_name,
        acl.pattern_type,
        acl.operation,
        acl.permission,
    )
    return default_topic_id("\0".join(fields))


def validate_scram_credential(u: ScramUpsertion) -> None:
    digest = SCRAM_MECHANISMS.get(u.mechanism)
    if digest is None:
        raise UnsupportedSaslMechanismError(
            f"unknown SCRAM mechanism {u.mechanism!r} (one of {', '.join(SCRAM_MECHANISMS)})"
        )
    _check_scram_user(u.name)
    if not SCRAM_MIN_ITERATIONS <= u.iterations <= SCRAM_ITERATIONS_MAX:
        raise UnacceptableCredentialError(
            f"iterations must be {SCRAM_MIN_ITERATIONS}..{SCRAM_ITERATIONS_MAX}, got {u.iterations}"
        )
    if not u.salt:
        raise UnacceptableCredentialError("the salt must not be empty")
    size = hashlib.new(digest).digest_size
    if len(u.stored_key) != size or len(u.server_key) != size:
        raise UnacceptableCredentialError(f"{u.mechanism} keys are {size} bytes long")


def _check_scram_user(name: str) -> None:
    if not name or len(name) > SCRAM_USER_NAME_CHARS_MAX or not name.isprintable():
        raise UnacceptableCredentialError(
            f"a user name is 1..{SCRAM_USER_NAME_CHARS_MAX} printable characters, got {name!r}"
        )


# --------------------------------------------------------------------------- the controller


@dataclass(frozen=True, slots=True)
class _LogReport:
    """One replica's log end as its broker reported it (``ReplicaLogInfo``), and the
    broker epoch it came with: a report outlives neither that incarnation nor that version
    of the partition."""

    broker_epoch: BrokerEpoch
    partition_epoch: int
    last_leader_epoch: int
    log_end_offset: int

    @property
    def length(self) -> tuple[int, int]:
        """What "longest log" compares: the latest leader epoch first, then the end offset
        (a longer log of an older epoch holds a tail the newer leader never had)."""
        return self.last_leader_epoch, self.log_end_offset


class _Batch:
    """Records of one command, replayed as they are added onto a view of the latest image,
    so later decisions in the same command see earlier ones."""

    __slots__ = ("delta", "image", "records")

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.delta = MetadataDelta(image)
        self.records: list[MetadataRecord] = []

    def add(self, record: MetadataRecord) -> None:
        self.delta.replay(record, None)
        self.records.append(record)

    def usable(self, broker_id: BrokerId) -> bool:
        b = self.delta.broker(broker_id)
        return b is not None and b.usable

    def partitions(
        self, broker_id: BrokerId | None = None
    ) -> Iterator[tuple[str, TopicId, int, PartitionRegistration]]:
        """Partitions of the view (with a replica on ``broker_id`` if given), as
        (topic name, topic id, index, registration). Topics created by this batch are not
        included. A scan of every partition: ~0.3 µs each when the delta has not touched it."""
        delta = self.delta
        for t in self.image.topics.by_id.values():
            if delta.is_deleted(t.topic_id):
                continue
            changed = delta.changed_partitions_of(t.topic_id)
            for p, reg in t.partitions.items():
                if changed:
                    reg = changed.get(p, reg)
                if broker_id is None or broker_id in reg.replicas:
                    yield t.name, t.topic_id, p, reg


class QuorumController:
    """See the module docstring for how to drive it."""

    def __init__(
        self,
        node_id: int,
        config: ControllerConfig | None = None,
        *,
        topic_id_factory: Callable[[str], TopicId] | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config or ControllerConfig()
        self._topic_id_factory = topic_id_factory
        self._image = MetadataImage.EMPTY
        self._committed: MetadataDelta | None = None
        """Committed records not yet folded into ``_image`` (applied lazily)."""
        self._pending: deque[MetadataRecord] = deque()
        self._pending_image: MetadataImage | None = None
        """Committed image plus pending records; None when stale or when nothing is pending."""
        self._epoch: int | None = None
        """The controller epoch (Raft term) while active; None on a standby."""
        self._sessions: dict[BrokerId, int] = {}
        """Broker -> time of its last heartbeat (active only; not in the log, as in Kafka)."""
        self._fencing: dict[BrokerId, BrokerEpoch] = {}
        """Brokers whose session expired and whose partitions are being handed over, a
        bounded number per poll, before their ``FenceBrokerRecord`` (active only), with the
        epoch of the registration being handed over (-1 before the first chunk). A
        heartbeat or registration (a new session) takes the broker out."""
        self._next_noop_ms = 0
        self._next_rebalance_ms = 0
        self._ids_made = 0
        self._log_reports: dict[tuple[TopicId, int], dict[BrokerId, _LogReport]] = {}
        """Partitions awaiting an unclean recovery -> where each replica's log ends, as its
        broker reported it (active only, memory only: reports are resent every heartbeat)."""
        self._recovery_since_ms: dict[tuple[TopicId, int], int] = {}
        """When this controller first heard a report for a partition awaiting recovery."""
        self._recovery_waits: dict[tuple[TopicId, int], tuple[BrokerId, ...]] = {}
        """The replicas each recovery last waited for (to note only changes)."""
        self._notes: deque[str] = deque(maxlen=1_000)
        """What unclean recoveries decided, for the shell to log (``drain_notes``)."""
        self._view_version = 0
        """Bumped whenever the latest image can change other than by the commit of a pending
        record (a proposal, a withdrawal, a lost proposal, a restore, a change of role): a
        command decided in steps checks it did not move under it."""

    # ---------------------------------------------------------------- state

    @property
    def image(self) -> MetadataImage:
        """The committed image."""
        if self._committed is not None:
            self._image = self._committed.apply()
            self._committed = None
        return self._image

    @property
    def latest_image(self) -> MetadataImage:
        """The committed image plus every pending record: what commands are checked against."""
        if not self._pending:
            return self.image
        if self._pending_image is None:
            d = MetadataDelta(self.image)
            for r in self._pending:
                d.replay(r, None)
            self._pending_image = d.apply()
        return self._pending_image

    def drain_notes(self) -> list[str]:
        """Lines worth an operator's attention since the last call (which replicas an unclean
        recovery waits for, whom it elected and why); the shell logs them."""
        out = list(self._notes)
        self._notes.clear()
        return out

    @property
    def pending_records(self) -> int:
        return len(self._pending)

    @property
    def is_active(self) -> bool:
        return self._epoch is not None

    @property
    def controller_epoch(self) -> int | None:
        return self._epoch

    # ---------------------------------------------------------------- log and role

    def replay(self, record: MetadataRecord, offset: int, epoch: int | None = None) -> None:
        """Apply a committed record (every node, in log order)."""
        if self._committed is None:
            self._committed = MetadataDelta(self.image)
        self._committed.replay(record, offset, epoch)
        if self._pending:
            if self._pending[0] == record:
                self._pending.popleft()
                if isinstance(record, RegisterBrokerRecord):
                    # The pending view holds the broker with epoch -1; now it is known.
                    self._pending_image = None
            else:
                self._pending.clear()
                self._view_version += 1
            if not self._pending:
                self._pending_image = None

    def restore(self, image: MetadataImage) -> None:
        """Start over from a snapshot's image (Raft installed a snapshot)."""
        self._image = image
        self._committed = None
        self._pending.clear()
        self._pending_image = None
        self._view_version += 1

    def become_active(self, controller_epoch: int, now_ms: int) -> None:
        """This node leads Raft term ``controller_epoch`` and has replayed every record of
        earlier terms. Every registered broker gets a fresh session (KAFKA-18138: the new
        controller must fence brokers that die during the failover)."""
        self._epoch = controller_epoch
        self._pending.clear()
        self._pending_image = None
        self._view_version += 1
        self._sessions = {b: now_ms for b in self.image.brokers.brokers}
        self._fencing.clear()
        self._log_reports.clear()
        self._recovery_since_ms.clear()
        self._recovery_waits.clear()
        if self.config.noop_interval_ms is not None:
            self._next_noop_ms = now_ms + self.config.noop_interval_ms
        if self.config.leader_imbalance_check_interval_ms is not None:
            self._next_rebalance_ms = now_ms + self.config.leader_imbalance_check_interval_ms

    def become_standby(self) -> None:
        """Not (or no longer) the active controller: forget pending records and sessions."""
        self._epoch = None
        self._pending.clear()
        self._pending_image = None
        self._view_version += 1
        self._sessions.clear()
        self._fencing.clear()
        self._log_reports.clear()
        self._recovery_since_ms.clear()
        self._recovery_waits.clear()

    def withdraw(self, records: Sequence[MetadataRecord]) -> None:
        """Forget ``records``, the last ones ``handle`` or ``poll`` returned, which the shell
        will not propose (they cannot be encoded): commands are checked against the latest
        image, and it must not hold records that will never commit."""
        n = len(records)
        if n == 0:
            return
        invariant(
            n <= len(self._pending) and list(self._pending)[-n:] == list(records),
            "withdrawn records are the last pending ones",
        )
        for _ in range(n):
            self._pending.pop()
        self._pending_image = None
        self._view_version += 1

    def _check_active(self, controller_epoch: int | None) -> None:
        if self._epoch is None:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        if controller_epoch is not None:
            if controller_epoch < self._epoch:
                raise StaleControllerEpochError(
                    f"controller epoch {controller_epoch} is older than {self._epoch}"
                )
            if controller_epoch > self._epoch:
                raise NotControllerError(
                    f"controller epoch {controller_epoch} is newer than ours ({self._epoch})"
                )

    def _propose(self, batch: _Batch) -> tuple[MetadataRecord, ...]:
        if batch.records:
            self._pending.extend(batch.records)
            self._pending_image = batch.delta.apply()
            self._view_version += 1
        return tuple(batch.records)

    # ---------------------------------------------------------------- commands

    @overload
    def handle(
        self, command: CreateTopic, now_ms: int
    ) -> ControllerResult[CreateTopicResponse]: ...

    @overload
    def handle(
        self, command: DeleteTopic, now_ms: int
    ) -> ControllerResult[DeleteTopicResponse]: ...

    @overload
    def handle(
        self, command: LookupTopic, now_ms: int
    ) -> ControllerResult[LookupTopicResponse]: ...

    @overload
    def handle(
        self, command: CreatePartitions, now_ms: int
    ) -> ControllerResult[CreatePartitionsResponse]: ...

    @overload
    def handle(
        self, command: AlterConfigs, now_ms: int
    ) -> ControllerResult[AlterConfigsResponse]: ...

    @overload
    def handle(
        self, command: RegisterBroker, now_ms: int
    ) -> ControllerResult[BrokerRegistrationResponse]: ...

    @overload
    def handle(
        self, command: BrokerHeartbeat, now_ms: int
    ) -> ControllerResult[BrokerHeartbeatResponse]: ...

    @overload
    def handle(
        self, command: UnregisterBroker, now_ms: int
    ) -> ControllerResult[UnregisterBrokerResponse]: ...

    @overload
    def handle(
        self, command: AlterPartition, now_ms: int
    ) -> ControllerResult[AlterPartitionResponse]: ...

    @overload
    def handle(
        self, command: AllocateProducerIds, now_ms: int
    ) -> ControllerResult[ProducerIdsBlock]: ...

    @overload
    def handle(
        self, command: ElectLeaders, now_ms: int
    ) -> ControllerResult[ElectLeadersResponse]: ...

    @overload
    def handle(self, command: CreateAcls, now_ms: int) -> ControllerResult[CreateAclsResponse]: ...

    @overload
    def handle(self, command: DeleteAcls, now_ms: int) -> ControllerResult[DeleteAclsResponse]: ...

    @overload
    def handle(
        self, command: AlterUserScramCredentials, now_ms: int
    ) -> ControllerResult[AlterUserScramCredentialsResponse]: ...

    @overload
    def handle(
        self, command: AlterPartitionReassignments, now_ms: int
    ) -> ControllerResult[AlterPartitionReassignmentsResponse]: ...

    @overload
    def handle(
        self, command: ListPartitionReassignments, now_ms: int
    ) -> ControllerResult[ListPartitionReassignmentsResponse]: ...

    @overload
    def handle(self, command: Command, now_ms: int) -> ControllerResult[Any]: ...

    def handle(self, command: Command, now_ms: int) -> ControllerResult[Any]:
        """Validate ``command`` against the latest image and turn it into records.

        Raises ``NotControllerError``/``StaleControllerEpochError`` unless active in the
        command's controller epoch, or the command's own ``MetadataError``. The records are
        pending from now on (see the module docstring).
        """
        steps = self.handle_steps(command, now_ms)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                result: ControllerResult[Any] = done.value
                return result

    def handle_steps(
        self, command: Command, now_ms: int
    ) -> Generator[None, None, ControllerResult[Any]]:
        """``handle`` in steps: a big ``CreateTopic`` or ``CreatePartitions`` yields every
        ``partitions_per_step`` partitions, so that the shell's event loop (and the Raft
        node on it) runs between steps; the result is the generator's return value. Between
        steps the caller may let records commit (``replay``) but must run no other command
        and no ``poll``: if the latest image moved other than by commits (this controller
        stood by, a proposal was lost) the command ends in ``NotControllerError``. Its
        records are pending from its last step on, as with ``handle``."""
        self._check_active(command.controller_epoch)
        handler = _COMMANDS.get(type(command))
        if handler is None:
            raise InvalidRequestError(f"unknown command {type(command).__name__}")
        batch = _Batch(self.latest_image)
        epoch, version = self._epoch, self._view_version
        decided = handler(self, batch, command, now_ms)
        if isinstance(decided, Generator):
            response, resolve = yield from decided
            if self._epoch != epoch or self._view_version != version:
                raise NotControllerError(
                    f"node {self.node_id}: the controller's view changed while "
                    f"{type(command).__name__} was decided (epoch {epoch} -> {self._epoch})"
                )
        else:
            response, resolve = decided
        return ControllerResult(self._propose(batch), response, resolve)

    # -- topics

    def _new_topic_id(self, name: str, view: MetadataDelta) -> TopicId:
        while True:
            self._ids_made += 1
            seed = f"{self._epoch}/{self.image.offset}/{self._ids_made}/{name}"
            tid = (self._topic_id_factory or default_topic_id)(seed)
            if view.topic_name(tid) is None and not view.is_retired(tid):
                return tid

    def _usable_brokers(self, batch: _Batch) -> list[PlacementBroker]:
        return [
            PlacementBroker(b.broker_id, b.rack)
            for b in batch.image.brokers.usable()
            if batch.usable(b.broker_id)
        ]

    def _place(
        self, batch: _Batch, name: str, count: int, rf: int, start: int
    ) -> list[tuple[BrokerId, ...]]:
        brokers = self._usable_brokers(batch)
        if rf > len(brokers):
            raise InvalidReplicationFactorError(
                f"unable to replicate the partition {rf} time(s): the target replication "
                f"factor of {rf} cannot be reached because only {len(brokers)} broker(s) "
                "are registered and unfenced"
            )
        # Kafka draws the start index and shift at random; a hash of the name spreads leaders
        # of different topics just as well and is the same on every controller.
        h = zlib.crc32(name.encode())
        try:
            return place(
                brokers, count, rf, start_partition=start, start_index=h, replica_shift=h >> 16
            )
        except PlacementError as e:
            raise InvalidReplicationFactorError(str(e)) from None

    def _check_assignment(self, batch: _Batch, p: int, replicas: tuple[BrokerId, ...]) -> None:
        if not replicas:
            raise InvalidReplicaAssignmentError(f"partition {p} has an empty replica list")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"partition {p} has duplicate replicas {replicas}")
        for b in replicas:
            if batch.delta.broker(b) is None:
                raise InvalidReplicaAssignmentError(
                    f"partition {p} names broker {b}, which is not registered"
                )
        if not any(batch.usable(b) for b in replicas):
            raise InvalidReplicaAssignmentError(
                f"all brokers of partition {p} are fenced or in controlled shutdown"
            )

    def _new_partition(
        self, batch: _Batch, tid: TopicId, p: int, replicas: tuple[BrokerId, ...]
    ) -> PartitionRecord:
        isr = tuple(b for b in replicas if batch.usable(b))
        return PartitionRecord(topic_id=tid, partition=p, replicas=replicas, isr=isr, leader=isr[0])

    def _create_topic(
        self, batch: _Batch, cmd: CreateTopic, now_ms: int
    ) -> Generator[None, None, tuple[CreateTopicResponse, None]]:
        name = cmd.name
        validate_topic_name(name)
        existing = batch.delta.topic_id(name)
        if existing is not None:
            if cmd.topic_id is not None and existing == cmd.topic_id and not cmd.validate_only:
                return self._created_before(batch, name, existing, cmd), None
            raise TopicExistsError(f"topic {name!r} already exists")
        if cmd.topic_id is not None and batch.delta.is_retired(cmd.topic_id):
            raise TopicIdRetiredError(
                f"topic id {cmd.topic_id!r} was created and its topic deleted since"
            )
        if cmd.topic_id is not None and (
            not cmd.topic_id or batch.delta.topic_name(cmd.topic_id) is not None
        ):
            raise InvalidRequestError(f"topic id {cmd.topic_id!r} is empty or in use")
        if "." in name or "_" in name:
            # Metric names replace '.' with '_'; Kafka refuses names that would collide.
            norm = name.replace(".", "_")
            for other in batch.image.topics.by_name:
                if other.replace(".", "_") == norm:
                    raise InvalidTopicError(
                        f"topic {name!r} collides with existing topic {other!r}"
                    )
        for k, v in cmd.configs.items():
            validate_topic_config(k, v)
        if cmd.assignments is not None:
            if cmd.num_partitions is not None or cmd.replication_factor is not None:
                raise InvalidRequestError(
                    "give either replica assignments or partitions and replication factor"
                )
            n = len(cmd.assignments)
            if n == 0 or sorted(cmd.assignments) != list(range(n)):
                raise InvalidReplicaAssignmentError(
                    "partitions in the assignment must be 0..n-1 with no gaps"
                )
            if n > self.config.max_partitions_per_topic:
                raise InvalidPartitionsError(
                    f"number of partitions must be 1..{self.config.max_partitions_per_topic}, "
                    f"got {n}"
                )
            assignments = [tuple(cmd.assignments[p]) for p in range(n)]
            for p, replicas in enumerate(assignments):
                self._check_assignment(batch, p, replicas)
            rfs = {len(r) for r in assignments}
            if len(rfs) != 1:
                raise InvalidReplicaAssignmentError(
                    "all partitions must have the same number of replicas"
                )
            rf = rfs.pop()
        else:
            n = (
                self.config.default_num_partitions
                if cmd.num_partitions is None
                else (cmd.num_partitions)
            )
            rf = (
                self.config.default_replication_factor
                if cmd.replication_factor is None
                else (cmd.replication_factor)
            )
            if n <= 0 or n > self.config.max_partitions_per_topic:
                raise InvalidPartitionsError(
                    f"number of partitions must be 1..{self.config.max_partitions_per_topic}, "
                    f"got {n}"
                )
            if rf <= 0:
                raise InvalidReplicationFactorError(
                    f"replication factor must be larger than 0, got {rf}"
                )
            assignments = self._place(batch, name, n, rf, 0)
        self._check_partition_budget(batch, n)
        configs = dict(cmd.configs)
        if cmd.validate_only:
            return CreateTopicResponse(name, TopicId(""), n, rf, tuple(assignments), configs), None
        tid = cmd.topic_id if cmd.topic_id is not None else self._new_topic_id(name, batch.delta)
        batch.add(TopicRecord(name=name, topic_id=tid))
        for k, v in sorted(configs.items()):
            batch.add(
                ConfigRecord(
                    resource_type=ConfigResourceType.TOPIC, resource_name=name, name=k, value=v
                )
            )
        step = self.config.partitions_per_step
        for p, replicas in enumerate(assignments):
            batch.add(self._new_partition(batch, tid, p, replicas))
            if p % step == step - 1:
                yield
        return CreateTopicResponse(name, tid, n, rf, tuple(assignments), configs), None

    def _check_partition_budget(self, batch: _Batch, adding: int) -> None:
        total = sum(len(t.partitions) for t in batch.image.topics.by_id.values())
        if total + adding > self.config.max_partitions:
            raise InvalidPartitionsError(
                f"the cluster has {total} partitions and allows at most "
                f"{self.config.max_partitions} (max_partitions): cannot add {adding}"
            )

    @staticmethod
    def _created_before(
        batch: _Batch, name: str, tid: TopicId, cmd: CreateTopic
    ) -> CreateTopicResponse:
        assignments: list[tuple[BrokerId, ...]] = []
        while (reg := batch.delta.partition(tid, len(assignments))) is not None:
            assignments.append(tuple(reg.replicas))
        rf = len(assignments[0]) if assignments else 0
        return CreateTopicResponse(
            name, tid, len(assignments), rf, tuple(assignments), dict(cmd.configs)
        )

    def _lookup_topic(
        self, batch: _Batch, cmd: LookupTopic, now_ms: int
    ) -> tuple[LookupTopicResponse, None]:
        tid = batch.delta.topic_id(cmd.name)
        if tid is None:
            raise UnknownTopicOrPartitionError(f"topic {cmd.name!r} does not exist")
        return LookupTopicResponse(cmd.name, tid), None

    def _delete_topic(
        self, batch: _Batch, cmd: DeleteTopic, now_ms: int
    ) -> tuple[DeleteTopicResponse, None]:
        if cmd.topic_id is not None:
            tid: TopicId | None = cmd.topic_id
            name = batch.delta.topic_name(cmd.topic_id)
        elif cmd.name is not None:
            name = cmd.name
            tid = batch.delta.topic_id(cmd.name)
        else:
            raise InvalidRequestError("give a topic name or id")
        if tid is None or name is None:
            raise UnknownTopicOrPartitionError(
                f"topic {cmd.name if cmd.topic_id is None else cmd.topic_id!r} does not exist"
            )
        batch.add(RemoveTopicRecord(topic_id=tid))
        return DeleteTopicResponse(name, tid), None

    def _create_partitions(
        self, batch: _Batch, cmd: CreatePartitions, now_ms: int
    ) -> Generator[None, None, tuple[CreatePartitionsResponse, None]]:
        tid = batch.delta.topic_id(cmd.name)
        topic = None if tid is None else batch.image.topics.by_id.get(tid)
        if tid is None or topic is None:
            raise UnknownTopicOrPartitionError(f"topic {cmd.name!r} does not exist")
        current = len(topic.partitions)
        if cmd.total_count < current:
            raise InvalidPartitionsError(
                f"topic currently has {current} partitions, which is higher than the "
                f"requested {cmd.total_count}"
            )
        if cmd.total_count == current:
            raise InvalidPartitionsError(f"topic already has {current} partitions")
        if cmd.total_count > self.config.max_partitions_per_topic:
            raise InvalidPartitionsError(
                f"at most {self.config.max_partitions_per_topic} partitions per topic"
            )
        first = topic.partitions.get(0)
        rf = len(first.replicas) if first is not None else self.config.default_replication_factor
        added = cmd.total_count - current
        self._check_partition_budget(batch, added)
        if cmd.assignments is not None:
            if len(cmd.assignments) != added:
                raise InvalidReplicaAssignmentError(
                    f"{len(cmd.assignments)} assignments for {added} new partitions"
                )
            assignments = [tuple(a) for a in cmd.assignments]
            for i, replicas in enumerate(assignments):
                self._check_assignment(batch, current + i, replicas)
                if len(replicas) != rf:
                    raise InvalidReplicaAssignmentError(
                        f"inconsistent replication factor: partition 0 has {rf}, partition "
                        f"{current + i} has {len(replicas)}"
                    )
        else:
            assignments = self._place(batch, cmd.name, added, rf, current)
        if not cmd.validate_only:
            step = self.config.partitions_per_step
            for i, replicas in enumerate(assignments):
                batch.add(self._new_partition(batch, tid, current + i, replicas))
                if i % step == step - 1:
                    yield
        return CreatePartitionsResponse(cmd.name, cmd.total_count, tuple(assignments)), None

    def _alter_configs(
        self, batch: _Batch, cmd: AlterConfigs, now_ms: int
    ) -> tuple[AlterConfigsResponse, None]:
        rtype, rname = cmd.resource_type, cmd.resource_name
        if rtype == ConfigResourceType.TOPIC:
            if batch.delta.topic_id(rname) is None:
                raise UnknownTopicOrPartitionError(f"topic {rname!r} does not exist")
            current = batch.image.configs.get(rtype, rname)
        elif rtype == ConfigResourceType.BROKER:
            if rname != "" and not rname.isdigit():
                raise InvalidRequestError(
                    f"broker resource name must be an id or '', got {rname!r}"
                )
            current = batch.image.configs.get(rtype, rname)
        elif rtype == ConfigResourceType.CLUSTER:
            if rname != "":
                raise InvalidRequestError("the cluster resource name is ''")
            current = batch.image.configs.get(rtype, rname)
        else:
            raise InvalidRequestError(f"unknown resource type {rtype!r}")
        for k, v in cmd.ops.items():
            if not k:
                raise InvalidConfigurationError("empty config name")
            if v is not None:
                validate_topic_config(k, v, unknown_ok=rtype != ConfigResourceType.TOPIC)
            elif rtype == ConfigResourceType.TOPIC and k not in TOPIC_CONFIG_CHECKS:
                raise InvalidConfigurationError(f"unknown topic config {k!r}")
        changed = {k: v for k, v in cmd.ops.items() if current.get(k) != v}
        if not cmd.validate_only:
            for k, v in sorted(changed.items()):
                batch.add(ConfigRecord(resource_type=rtype, resource_name=rname, name=k, value=v))
            if (
                rtype == ConfigResourceType.TOPIC
                and changed.get("unclean.leader.election.enable") == "true"
            ):
                # Allowing unclean election brings offline partitions back now, as Kafka does.
                self._elect_offline_partitions(
                    batch, None, topic=rname, unclean_election=True, now_ms=now_ms
                )
        return AlterConfigsResponse(rtype, rname, changed), None

    # -- ACLs and SCRAM credentials (issue 18)

    def _create_acls(
        self, batch: _Batch, cmd: CreateAcls, now_ms: int
    ) -> tuple[CreateAclsResponse, None]:
        if not cmd.bindings:
            raise InvalidRequestError("no ACL bindings given")
        if len(cmd.bindings) > ACL_BINDINGS_PER_REQUEST_MAX:
            raise InvalidRequestError(
                f"at most {ACL_BINDINGS_PER_REQUEST_MAX} ACL bindings per request"
            )
        for acl in cmd.bindings:
            validate_acl(acl)
        entries = []
        for acl in cmd.bindings:
            i = acl_id(acl)
            present = batch.delta.acl(i)
            invariant(present is None or present == acl, "ACL id %s names another binding", i)
            if present is None:
                batch.add(acl_record(i, acl))
            entries.append(AclEntry(i, acl))
        return CreateAclsResponse(tuple(entries)), None

    def _delete_acls(
        self, batch: _Batch, cmd: DeleteAcls, now_ms: int
    ) -> tuple[DeleteAclsResponse, None]:
        if not cmd.filters:
            raise InvalidRequestError("no ACL filters given")
        for flt in cmd.filters:
            validate_acl_filter(flt)
        deleted = []
        for i, acl in batch.image.acls.by_id.items():
            if any(flt.matches(acl) for flt in cmd.filters):
                deleted.append(AclEntry(i, acl))
        deleted.sort(key=lambda e: e.id)
        for e in deleted:
            batch.add(RemoveAccessControlEntryRecord(id=e.id))
        return DeleteAclsResponse(tuple(deleted)), None

    def _alter_scram(
        self, batch: _Batch, cmd: AlterUserScramCredentials, now_ms: int
    ) -> tuple[AlterUserScramCredentialsResponse, None]:
        if not cmd.upsertions and not cmd.deletions:
            raise InvalidRequestError("no SCRAM credentials to set or delete")
        seen: set[tuple[str, str]] = set()
        for key in [(u.name, u.mechanism) for u in cmd.upsertions] + [
            (d.name, d.mechanism) for d in cmd.deletions
        ]:
            if key in seen:
                raise DuplicateResourceError(
                    f"the request names the credential {key[0]!r}/{key[1]} twice"
                )
            seen.add(key)
        for u in cmd.upsertions:
            validate_scram_credential(u)
        for d in cmd.deletions:
            if d.mechanism not in SCRAM_MECHANISMS:
                raise UnsupportedSaslMechanismError(f"unknown SCRAM mechanism {d.mechanism!r}")
            if batch.delta.scram_credential(d.name, d.mechanism) is None:
                raise ResourceNotFoundError(f"user {d.name!r} has no {d.mechanism} credential")
        for u in cmd.upsertions:
            batch.add(
                UserScramCredentialRecord(
                    name=u.name,
                    mechanism=u.mechanism,
                    salt=u.salt,
                    stored_key=u.stored_key,
                    server_key=u.server_key,
                    iterations=u.iterations,
                )
            )
        for d in cmd.deletions:
            batch.add(RemoveUserScramCredentialRecord(name=d.name, mechanism=d.mechanism))
        return AlterUserScramCredentialsResponse(
            tuple((u.name, u.mechanism) for u in cmd.upsertions),
            tuple((d.name, d.mechanism) for d in cmd.deletions),
        ), None

    # -- brokers

    def _has_session(self, broker_id: BrokerId, now_ms: int) -> bool:
        last = self._sessions.get(broker_id)
        return last is not None and now_ms < last + self.config.session_timeout_ms

    def _register_broker(
        self, batch: _Batch, cmd: RegisterBroker, now_ms: int
    ) -> Generator[
        None, None, tuple[BrokerRegistrationResponse, Callable[[int], BrokerRegistrationResponse]]
    ]:
        if cmd.broker_id < 0:
            raise InvalidRequestError(f"broker id must be >= 0, got {cmd.broker_id}")
        existing = batch.delta.broker(cmd.broker_id)
        # Another incarnation holding a live session may still be running (two processes
        # given one id): wait for its session to expire (Kafka's
        # DUPLICATE_BROKER_REGISTRATION). Unless the new one names it as the incarnation
        # that held its data directory before it took the directory's lock: then that one
        # is dead, and waiting out its session would only keep the restarted broker from
        # fetching, and the dead one leading, for up to a session (finding 1b).
        if (
            existing is not None
            and existing.incarnation_id != cmd.incarnation_id
            and existing.incarnation_id != cmd.previous_incarnation_id
            and not existing.fenced
            and self._has_session(cmd.broker_id, now_ms)
        ):
            raise DuplicateBrokerRegistrationError(
                f"another incarnation of broker {cmd.broker_id} is alive "
                f"({existing.incarnation_id}); its session expires within "
                f"{self.config.session_timeout_ms} ms"
            )
        index = len(batch.records)
        batch.add(
            RegisterBrokerRecord(
                broker_id=cmd.broker_id,
                incarnation_id=cmd.incarnation_id,
                endpoints=tuple(Endpoint(*e) for e in cmd.endpoints),
                rack=cmd.rack,
                fenced=True,
            )
        )
        # KIP-966: a broker whose logs may have lost unflushed writes (no clean-shutdown
        # marker naming the registration it replaces) leaves every ISR and ELR; one that
        # shut down cleanly, or the same process registering again, only leaves the ISRs
        # and leaderships, as if fenced. Either way it rejoins once it has caught up.
        clean = existing is not None and (
            existing.incarnation_id == cmd.incarnation_id
            or 0 <= cmd.previous_broker_epoch == existing.broker_epoch
        )
        if existing is not None or self.config.eligible_leader_replicas_enabled:
            yield from self._remove_from_partitions_steps(
                batch, cmd.broker_id, unclean_shutdown=not clean
            )
        self._sessions[cmd.broker_id] = now_ms
        self._fencing.pop(cmd.broker_id, None)
        broker_id = cmd.broker_id

        def resolve(base_offset: int) -> BrokerRegistrationResponse:
            return BrokerRegistrationResponse(broker_id, BrokerEpoch(base_offset + index))

        return BrokerRegistrationResponse(broker_id, BrokerEpoch(-1)), resolve

    def _registered(
        self, batch: _Batch, broker_id: BrokerId, broker_epoch: BrokerEpoch
    ) -> BrokerRegistration:
        b = batch.delta.broker(broker_id)
        if b is None:
            raise BrokerIdNotRegisteredError(f"broker {broker_id} is not registered")
        if b.broker_epoch != broker_epoch or broker_epoch < 0:
            raise StaleBrokerEpochError(
                f"broker {broker_id} epoch is {b.broker_epoch}, request says {broker_epoch}"
            )
        return b

    def _heartbeat(
        self, batch: _Batch, cmd: BrokerHeartbeat, now_ms: int
    ) -> Generator[None, None, tuple[BrokerHeartbeatResponse, None]]:
        b = self._registered(batch, cmd.broker_id, cmd.broker_epoch)
        self._sessions[b.broker_id] = now_ms
        # Alive after all: stop handing its partitions over (those already moved come back
        # as it rejoins their ISRs, as after any shrink).
        self._fencing.pop(b.broker_id, None)
        caught_up = cmd.current_metadata_offset >= b.broker_epoch
        reported = self._note_log_reports(batch, b, cmd, now_ms)
        answer = yield from self._heartbeat_state(batch, b, cmd, now_ms, caught_up)
        for key in reported:  # after an unfencing: the reporter may now be a candidate
            self._maybe_recover(batch, key, now_ms)
        return answer

    def _heartbeat_state(
        self,
        batch: _Batch,
        b: BrokerRegistration,
        cmd: BrokerHeartbeat,
        now_ms: int,
        caught_up: bool,
    ) -> Generator[None, None, tuple[BrokerHeartbeatResponse, None]]:
        if cmd.want_shutdown:
            if not b.fenced:
                if not b.in_controlled_shutdown:
                    batch.add(
                        BrokerRegistrationChangeRecord(
                            broker_id=b.broker_id,
                            broker_epoch=b.broker_epoch,
                            in_controlled_shutdown=True,
                        )
                    )
                    # A clean shutdown never causes an unclean election.
                    yield from self._remove_from_partitions_steps(
                        batch, b.broker_id, unclean_election=False
                    )
                if not any(
                    reg.leader == b.broker_id for _, _, _, reg in batch.partitions(b.broker_id)
                ):
                    self._fence(batch, b, unclean_election=False)
            b2 = batch.delta.broker(b.broker_id)
            fenced = b2 is not None and b2.fenced
            if fenced:
                self._sessions.pop(b.broker_id, None)
                self._fencing.pop(b.broker_id, None)
            return BrokerHeartbeatResponse(caught_up, fenced, fenced), None
        if cmd.want_fence:
            if not b.fenced:
                self._fence(batch, b)
            return BrokerHeartbeatResponse(caught_up, True, False), None
        if b.fenced and caught_up and not b.in_controlled_shutdown:
            batch.add(UnfenceBrokerRecord(broker_id=b.broker_id, broker_epoch=b.broker_epoch))
            self._elect_offline_partitions(batch, b.broker_id, now_ms=now_ms)
            return BrokerHeartbeatResponse(True, False, False), None
        return BrokerHeartbeatResponse(caught_up, b.fenced, False), None

    def _unregister_broker(
        self, batch: _Batch, cmd: UnregisterBroker, now_ms: int
    ) -> Generator[None, None, tuple[UnregisterBrokerResponse, None]]:
        b = batch.delta.broker(cmd.broker_id)
        if b is None:
            raise BrokerIdNotRegisteredError(f"broker {cmd.broker_id} is not registered")
        if b.broker_epoch < 0:
            raise BrokerRegistrationPendingError(
                f"the registration of broker {cmd.broker_id} has not committed yet"
            )
        batch.add(UnregisterBrokerRecord(broker_id=b.broker_id, broker_epoch=b.broker_epoch))
        # Gone for good: it leaves the ELRs too, and recoveries stop waiting for it.
        yield from self._remove_from_partitions_steps(batch, b.broker_id, unclean_shutdown=True)
        self._sessions.pop(b.broker_id, None)
        self._fencing.pop(b.broker_id, None)
        return UnregisterBrokerResponse(b.broker_id), None

    def _fence(
        self, batch: _Batch, b: BrokerRegistration, *, unclean_election: bool = True
    ) -> None:
        batch.add(FenceBrokerRecord(broker_id=b.broker_id, broker_epoch=b.broker_epoch))
        self._remove_from_partitions(batch, b.broker_id, unclean_election=unclean_election)

    def _fence_bounded(self, batch: _Batch, b: BrokerRegistration, changes_max: int) -> int:
        """Fence ``b``, whose session expired, deciding at most ``changes_max`` partition
        changes: all of them and the ``FenceBrokerRecord`` if that is enough (what ``_fence``
        writes), else the first ``changes_max`` hand-overs only (out of the ISR, leadership
        to another member), leaving ``b`` in ``_fencing`` for the next poll. Until then ``b``
        is unfenced and leads what it has not handed over yet, as a broker in controlled
        shutdown does. The number of changes decided."""
        bid = b.broker_id
        todo = [
            (name, tid, p, reg)
            for name, tid, p, reg in batch.partitions(bid)
            if reg.leader == bid or bid in reg.isr
        ]
        if len(todo) <= changes_max:
            self._fencing.pop(bid, None)
            before = len(batch.records)
            self._fence(batch, b)
            return len(batch.records) - before - 1
        if self._fencing.get(bid) != b.broker_epoch:  # the first chunk
            self._notes.append(
                f"broker {bid} missed its session timeout: handing over its {len(todo)} "
                f"partitions, {changes_max} a poll at most, then fencing it"
            )
        self._fencing[bid] = b.broker_epoch
        decided = 0
        for name, tid, p, reg in todo:
            if decided >= changes_max:
                break
            rec = self._change(
                batch,
                name,
                tid,
                p,
                reg,
                remove=bid,
                unclean_allowed=self._unclean_allowed(batch, name),
            )
            if rec is not None:
                batch.add(rec)
                decided += 1
        if decided == 0:  # every one left is a last ISR member that stays (ELR off)
            self._fencing.pop(bid, None)
            self._fence(batch, b)
        return decided

    # -- partitions

    def _unclean_allowed(self, batch: _Batch, topic: str) -> bool:
        return batch.image.configs.topic_config(topic, "unclean.leader.election.enable") == "true"

    def _change(
        self, batch: _Batch, topic: str, tid: TopicId, p: int, reg: PartitionRegistration, **kw: Any
    ) -> PartitionChangeRecord | None:
        """``partition_change`` with this controller's ELR setting and the topic's
        effective ``min.insync.replicas``."""
        return partition_change(
            tid,
            p,
            reg,
            batch.usable,
            min_isr=self._min_isr(batch, topic, reg),
            elr_enabled=self.config.eligible_leader_replicas_enabled,
            **kw,
        )

    @staticmethod
    def _min_isr(batch: _Batch, topic: str, reg: PartitionRegistration) -> int:
        """The effective ``min.insync.replicas``: capped by the replication factor, as the
        leader's ``ReplicationConfig.effective_min_isr`` (Kafka's ``effectiveMinIsr``)."""
        try:
            configured = int(batch.image.configs.topic_config(topic, "min.insync.replicas") or 1)
        except ValueError:
            configured = 1
        return max(1, min(configured, len(reg.replicas)))

    def _remove_from_partitions(
        self,
        batch: _Batch,
        broker_id: BrokerId,
        *,
        unclean_election: bool = True,
        unclean_shutdown: bool = False,
    ) -> None:
        """Take ``broker_id`` out of every ISR and leadership (it is fenced, shutting down,
        unregistered, or a new incarnation); after an unclean shutdown out of every ELR too
        (KIP-966: it may have lost what it had not flushed)."""
        for _ in self._remove_from_partitions_steps(
            batch, broker_id, unclean_election=unclean_election, unclean_shutdown=unclean_shutdown
        ):
            pass

    def _remove_from_partitions_steps(
        self,
        batch: _Batch,
        broker_id: BrokerId,
        *,
        unclean_election: bool = True,
        unclean_shutdown: bool = False,
    ) -> Iterator[None]:
        """``_remove_from_partitions``, yielding every ``partitions_per_step`` changes (for a
        command decided in steps: a restarted broker of 10,000 partitions leaves 10,000
        ISRs or ELRs in its registration)."""
        step = self.config.partitions_per_step
        decided = 0
        for name, tid, p, reg in list(batch.partitions(broker_id)):
            if (
                reg.leader == broker_id
                or broker_id in reg.isr
                or (unclean_shutdown and broker_id in reg.elr)
            ):
                rec = self._change(
                    batch,
                    name,
                    tid,
                    p,
                    reg,
                    remove=broker_id,
                    unclean_shutdown=unclean_shutdown,
                    unclean_allowed=unclean_election and self._unclean_allowed(batch, name),
                )
                if rec is not None:
                    batch.add(rec)
                    decided += 1
                    if decided % step == 0:
                        yield

    def _elect_offline_partitions(
        self,
        batch: _Batch,
        broker_id: BrokerId | None,
        *,
        now_ms: int,
        topic: str | None = None,
        unclean_election: bool | None = None,
    ) -> None:
        """Give a leader to leaderless partitions (with a replica on ``broker_id``, or of
        ``topic``, or all): from the ISR, else the ELR, else uncleanly per the topic's
        config (unless ``unclean_election`` says), else by unclean recovery when it may."""
        for name, tid, p, reg in list(batch.partitions(broker_id)):
            if reg.leader == NO_LEADER and (topic is None or topic == name):
                allowed = (
                    self._unclean_allowed(batch, name)
                    if unclean_election is None
                    else unclean_election
                )
                rec = self._change(batch, name, tid, p, reg, unclean_allowed=allowed)
                if rec is not None:
                    batch.add(rec)
                else:
                    self._maybe_recover(batch, (tid, p), now_ms)

    # -- unclean recovery (KIP-966)

    @staticmethod
    def _awaits_recovery(reg: PartitionRegistration) -> bool:
        """No leader, and nobody who holds every committed record: neither ISR nor ELR."""
        return reg.leader == NO_LEADER and not reg.isr and not reg.elr

    def _note_log_reports(
        self, batch: _Batch, b: BrokerRegistration, cmd: BrokerHeartbeat, now_ms: int
    ) -> list[tuple[TopicId, int]]:
        """Keep the reports of ``cmd`` that describe a replica of a partition awaiting
        recovery in the version of it the controller has; the partitions they concern."""
        keys = []
        for info in cmd.replica_logs:
            key = (info.topic_id, info.partition)
            reg = batch.delta.partition(*key)
            if (
                reg is None
                or b.broker_id not in reg.replicas
                or not self._awaits_recovery(reg)
                or info.partition_epoch != reg.partition_epoch
            ):
                continue
            self._log_reports.setdefault(key, {})[b.broker_id] = _LogReport(
                b.broker_epoch, info.partition_epoch, info.last_leader_epoch, info.log_end_offset
            )
            self._recovery_since_ms.setdefault(key, now_ms)
            keys.append(key)
        return keys

    def _maybe_recover(self, batch: _Batch, key: tuple[TopicId, int], now_ms: int) -> None:
        """Elect the longest log of a partition awaiting unclean recovery, if the strategy
        says it has heard enough (``ControllerConfig.unclean_recovery_strategy``).

        The candidates are the live replicas whose report is current (this broker epoch,
        this partition epoch). Both strategies wait for a report from every live replica (one
        heartbeat: a replica outside the last known ELR may still hold everything, if nothing
        was written after it left the ISR); ``balanced`` also for every registered last known
        ELR member (every registered replica if there is none), so a replica that came back
        empty is not elected while one that may hold the acknowledged writes is on its way
        back. After ``unclean_recovery_timeout_ms`` either takes what it has. The winner has the highest (latest leader epoch, log end
        offset), the Raft "more up-to-date" order; ties go to replica order. It leads in
        ``RECOVERING`` (KIP-704) with an ISR of itself: whatever other replicas hold beyond
        its log is truncated when they follow it.
        """
        reg = batch.delta.partition(*key)
        reports = self._log_reports.get(key)
        if reg is None or not self._awaits_recovery(reg):
            self._log_reports.pop(key, None)
            self._recovery_since_ms.pop(key, None)
            self._recovery_waits.pop(key, None)
            return
        strategy = self.config.unclean_recovery_strategy
        if not reports or strategy == "manual" or not self.config.eligible_leader_replicas_enabled:
            return
        current = {
            b: r
            for b, r in reports.items()
            if r.partition_epoch == reg.partition_epoch
            and batch.usable(b)
            and (br := batch.delta.broker(b)) is not None
            and br.broker_epoch == r.broker_epoch
        }
        if not current:
            return
        awaited = [b for b in reg.replicas if batch.usable(b)]
        if strategy == "balanced":
            awaited += [
                b for b in (reg.last_known_elr or reg.replicas) if batch.delta.broker(b) is not None
            ]
        since = self._recovery_since_ms.setdefault(key, now_ms)
        missing = tuple(sorted({b for b in awaited if b not in current}))
        heard = ", ".join(
            f"{b}: epoch {r.last_leader_epoch} end {r.log_end_offset}"
            for b, r in sorted(current.items())
        )
        if missing and now_ms < since + self.config.unclean_recovery_timeout_ms:
            if self._recovery_waits.get(key) != missing:
                self._recovery_waits[key] = missing
                self._notes.append(
                    f"unclean recovery of {key[0]}-{key[1]} waits for log ends from "
                    f"{list(missing)} (have {heard}; last known ELR "
                    f"{list(reg.last_known_elr)}, {strategy})"
                )
            return
        winner = max(current, key=lambda b: (current[b].length, -reg.replicas.index(b)))
        self._notes.append(
            f"unclean recovery of {key[0]}-{key[1]}: broker {winner} leads, the longest log "
            f"of {heard}" + (f" (timed out waiting for {list(missing)})" if missing else "")
        )
        self._recovery_waits.pop(key, None)
        batch.add(
            PartitionChangeRecord(
                topic_id=key[0],
                partition=key[1],
                isr=(winner,),
                leader=winner,
                leader_recovery_state=(
                    None
                    if reg.leader_recovery_state == LeaderRecoveryState.RECOVERING
                    else LeaderRecoveryState.RECOVERING
                ),
                last_known_elr=() if reg.last_known_elr else None,
            )
        )
        del self._log_reports[key]
        self._recovery_since_ms.pop(key, None)

    def _recovery_deadlines(self, batch: _Batch, now_ms: int) -> list[int]:
        """Retry recoveries whose timeout passed; forget partitions that no longer await one.
        The deadlines still ahead."""
        timeout = self.config.unclean_recovery_timeout_ms
        for key, since in list(self._recovery_since_ms.items()):
            if now_ms >= since + timeout:
                self._maybe_recover(batch, key, now_ms)
        for key in [k for k in self._log_reports if k not in self._recovery_since_ms]:
            del self._log_reports[key]
        # Past ones need no timer: the next report elects at once.
        return [
            since + timeout
            for since in self._recovery_since_ms.values()
            if since + timeout > now_ms
        ]

    def _alter_partition(
        self, batch: _Batch, cmd: AlterPartition, now_ms: int
    ) -> Generator[None, None, tuple[AlterPartitionResponse, None]]:
        self._registered(batch, cmd.broker_id, cmd.broker_epoch)
        results = []
        step = self.config.partitions_per_step
        for n, ps in enumerate(cmd.partitions):
            if n and n % step == 0:
                yield  # a broker sends every pending ISR change at once: thousands
            try:
                reg = self._check_alter_partition(batch, cmd.broker_id, ps)
            except MetadataError as e:
                results.append(AlterPartitionResult(ps.topic_id, ps.partition, error=e))
                continue
            new_isr = tuple(m.broker_id for m in ps.new_isr)
            topic = batch.delta.topic_name(ps.topic_id) or ""
            elr, lke = eligible_leader_replicas(
                reg,
                new_isr,
                min_isr=self._min_isr(batch, topic, reg),
                enabled=self.config.eligible_leader_replicas_enabled,
            )
            rec = PartitionChangeRecord(
                topic_id=ps.topic_id,
                partition=ps.partition,
                isr=None if new_isr == reg.isr else new_isr,
                leader_recovery_state=(
                    None
                    if ps.leader_recovery_state == reg.leader_recovery_state
                    else ps.leader_recovery_state
                ),
                eligible_leader_replicas=None if set(elr) == set(reg.elr) else elr,
                last_known_elr=None if set(lke) == set(reg.last_known_elr) else lke,
            )
            if (
                rec.isr is not None
                or rec.leader_recovery_state is not None
                or rec.eligible_leader_replicas is not None
                or rec.last_known_elr is not None
            ):
                batch.add(rec)
                # KIP-455: an adding replica that joined the ISR may complete a move.
                self._maybe_complete_reassignment(batch, ps.topic_id, ps.partition)
            results.append(
                AlterPartitionResult(
                    ps.topic_id,
                    ps.partition,
                    registration=batch.delta.partition(ps.topic_id, ps.partition),
                )
            )
        return AlterPartitionResponse(tuple(results)), None

    def _check_alter_partition(
        self, batch: _Batch, broker_id: BrokerId, ps: PartitionStateChange
    ) -> PartitionRegistration:
        """The partition's registration if ``ps`` may apply; else the specific error
        (the order of Kafka's ``ReplicationControlManager.validateAlterPartitionData``)."""
        reg = batch.delta.partition(ps.topic_id, ps.partition)
        if reg is None:
            raise UnknownTopicOrPartitionError(f"no partition {ps.topic_id}-{ps.partition}")
        if ps.leader_epoch > reg.leader_epoch or ps.partition_epoch > reg.partition_epoch:
            # The leader has seen a newer state than we have: we are probably deposed.
            raise NotControllerError("request carries epochs newer than this controller's")
        if ps.leader_epoch < reg.leader_epoch:
            raise FencedLeaderEpochError(
                f"leader epoch {ps.leader_epoch} is older than {reg.leader_epoch}"
            )
        if reg.leader != broker_id:
            raise NotLeaderOrFollowerError(
                f"broker {broker_id} is not the leader ({reg.leader}) of "
                f"{ps.topic_id}-{ps.partition}"
            )
        if ps.partition_epoch < reg.partition_epoch:
            raise InvalidUpdateVersionError(
                f"partition epoch {ps.partition_epoch} is older than {reg.partition_epoch}"
            )
        new_isr = [m.broker_id for m in ps.new_isr]
        if ps.leader_recovery_state not in (0, 1):
            raise InvalidRequestError(f"bad leader recovery state {ps.leader_recovery_state}")
        if (
            ps.leader_recovery_state == LeaderRecoveryState.RECOVERING
            and reg.leader_recovery_state == LeaderRecoveryState.RECOVERED
        ):
            raise InvalidRequestError("a recovered partition cannot go back to RECOVERING")
        if ps.leader_recovery_state == LeaderRecoveryState.RECOVERING and len(new_isr) > 1:
            raise InvalidRequestError("the ISR of a RECOVERING partition holds only its leader")
        if not new_isr or len(set(new_isr)) != len(new_isr):
            raise InvalidRequestError(f"the ISR must be non-empty and distinct: {new_isr}")
        if not set(new_isr) <= set(reg.replicas):
            raise InvalidRequestError(f"ISR {new_isr} is not within replicas {reg.replicas}")
        if broker_id not in new_isr:
            raise InvalidRequestError(f"the ISR {new_isr} must contain the leader {broker_id}")
        for m in ps.new_isr:
            b = batch.delta.broker(m.broker_id)
            if (
                b is None
                or not b.usable
                or (m.broker_epoch != -1 and m.broker_epoch != b.broker_epoch)
            ):
                why = (
                    "not registered"
                    if b is None
                    else "fenced"
                    if b.fenced
                    else "in controlled shutdown"
                    if b.in_controlled_shutdown
                    else f"of epoch {b.broker_epoch}, not {m.broker_epoch}"
                )
                raise IneligibleReplicaError(
                    f"broker {m.broker_id} cannot join the ISR of "
                    f"{ps.topic_id}-{ps.partition}: {why}"
                )
        return reg

    def _elect_leaders(
        self, batch: _Batch, cmd: ElectLeaders, now_ms: int
    ) -> tuple[ElectLeadersResponse, None]:
        if cmd.partitions is None:
            targets = [(n, tid, p) for n, tid, p, _ in batch.partitions()]
        else:
            targets = []
        results: list[ElectLeadersResult] = []
        for name, p in cmd.partitions or ():
            tid = batch.delta.topic_id(name)
            if tid is None or batch.delta.partition(tid, p) is None:
                results.append(
                    ElectLeadersResult(
                        name, p, UnknownTopicOrPartitionError(f"no partition {name}-{p}")
                    )
                )
            else:
                targets.append((name, tid, p))
        for name, tid, p in targets:
            reg = batch.delta.partition(tid, p)
            assert reg is not None
            if cmd.election is ElectionType.PREFERRED:
                if reg.leader == reg.preferred_leader:
                    err: MetadataError | None = ElectionNotNeededError("preferred leader leads")
                    rec = None
                else:
                    rec = self._change(batch, name, tid, p, reg, preferred=True)
                    err = None
                    if rec is None or rec.leader != reg.preferred_leader:
                        rec = None
                        err = PreferredLeaderNotAvailableError(
                            f"preferred leader {reg.preferred_leader} of {name}-{p} is not an "
                            "ISR member that is alive"
                        )
            else:
                if reg.leader != NO_LEADER:
                    err, rec = ElectionNotNeededError("the partition has a leader"), None
                else:
                    rec = self._change(batch, name, tid, p, reg, unclean_allowed=True)
                    err = (
                        None
                        if rec is not None and rec.leader >= 0
                        else (EligibleLeadersNotAvailableError(f"no live replica of {name}-{p}"))
                    )
                    if err is not None:
                        rec = None
            if rec is not None:
                batch.add(rec)
            if cmd.partitions is not None or rec is not None:
                after = batch.delta.partition(tid, p)
                assert after is not None
                results.append(ElectLeadersResult(name, p, err, after.leader))
        return ElectLeadersResponse(tuple(results)), None

    def _allocate_producer_ids(
        self, batch: _Batch, cmd: AllocateProducerIds, now_ms: int
    ) -> tuple[ProducerIdsBlock, None]:
        b = self._registered(batch, cmd.broker_id, cmd.broker_epoch)
        first = batch.delta.next_producer_id
        size = self.config.producer_id_block_size
        if first + size > 2**63 - 1:
            raise MetadataError("producer ids are exhausted")
        batch.add(
            ProducerIdsRecord(
                broker_id=b.broker_id, broker_epoch=b.broker_epoch, next_producer_id=first + size
            )
        )
        return ProducerIdsBlock(b.broker_id, first, size), None

    # -- reassignment (KIP-455)

    def _alter_reassignments(
        self, batch: _Batch, cmd: AlterPartitionReassignments, now_ms: int
    ) -> tuple[AlterPartitionReassignmentsResponse, None]:
        results = []
        for ra in cmd.reassignments:
            try:
                self._reassign(batch, ra)
                results.append(ReassignmentResult(ra.topic, ra.partition))
            except MetadataError as e:
                results.append(ReassignmentResult(ra.topic, ra.partition, e))
        return AlterPartitionReassignmentsResponse(tuple(results)), None

    def _reassign(self, batch: _Batch, ra: ReplicaReassignment) -> None:
        """Start, replace or cancel the move of one partition (Kafka's
        ``ReplicationControlManager.changePartitionReassignment``).

        Start (or replace): the replicas become the target followed by the original replicas
        leaving, with ``adding`` and ``removing`` set; the new ones start fetching as
        followers. Cancel: back to the original replicas; the ones being added leave.
        Either way the move completes at once if every target replica is already in the
        ISR (a pure removal or reordering).
        """
        tid = batch.delta.topic_id(ra.topic)
        reg = None if tid is None else batch.delta.partition(tid, ra.partition)
        if tid is None or reg is None:
            raise UnknownTopicOrPartitionError(f"no partition {ra.topic}-{ra.partition}")
        if ra.replicas is None:
            if not reg.is_reassigning:
                raise NoReassignmentInProgressError(
                    f"no reassignment of {ra.topic}-{ra.partition} is in progress"
                )
            rec = self._replicas_change(
                batch, ra.topic, tid, ra.partition, reg, reg.original_replicas, (), ()
            )
        else:
            target = tuple(ra.replicas)
            self._check_assignment(batch, ra.partition, target)
            original = reg.original_replicas
            removing = tuple(b for b in original if b not in target)
            adding = tuple(b for b in target if b not in original)
            replicas = target + removing
            if replicas == reg.replicas and adding == reg.adding and removing == reg.removing:
                return  # already that (Kafka answers such a request with no error too)
            rec = self._replicas_change(
                batch, ra.topic, tid, ra.partition, reg, replicas, adding, removing
            )
        batch.add(rec)
        self._maybe_complete_reassignment(batch, tid, ra.partition)

    def _replicas_change(
        self,
        batch: _Batch,
        topic: str,
        tid: TopicId,
        p: int,
        reg: PartitionRegistration,
        replicas: tuple[BrokerId, ...],
        adding: tuple[BrokerId, ...],
        removing: tuple[BrokerId, ...],
    ) -> PartitionChangeRecord:
        """The change that gives the partition ``replicas`` (with ``adding``/``removing``):
        the ISR, ELR and last known ELR keep only members that stay, and a leader that
        leaves hands over to the first live ISR member in the new replica order. Refused if
        no member of the ISR stays (they alone are known to hold every committed record) or
        no live one can lead."""
        keep = set(replicas)
        isr = tuple(b for b in reg.isr if b in keep)
        if reg.isr and not isr:
            raise InvalidReplicaAssignmentError(
                f"{topic}-{p}: no member of the ISR {list(reg.isr)} would stay a replica"
            )
        leader = reg.leader
        if leader != NO_LEADER and leader not in keep:
            live = [b for b in replicas if b in isr and batch.usable(b)]
            if not live:
                raise InvalidReplicaAssignmentError(
                    f"{topic}-{p}: leader {leader} would leave and no live ISR member of "
                    f"{list(replicas)} can take over"
                )
            leader = live[0]
        elr = tuple(b for b in reg.elr if b in keep)
        lke = tuple(b for b in reg.last_known_elr if b in keep)
        return PartitionChangeRecord(
            topic_id=tid,
            partition=p,
            replicas=replicas,
            isr=None if isr == reg.isr else isr,
            leader=NO_LEADER_CHANGE if leader == reg.leader else leader,
            eligible_leader_replicas=None if elr == reg.elr else elr,
            last_known_elr=None if lke == reg.last_known_elr else lke,
            removing_replicas=removing,
            adding_replicas=adding,
        )

    def _maybe_complete_reassignment(self, batch: _Batch, tid: TopicId, p: int) -> bool:
        """Finish the move of ``tid``-``p`` if every target replica is in the ISR: the
        replicas become the target, the leaving ones drop out of the ISR (and lose their
        leadership to a target). Whether it did."""
        reg = batch.delta.partition(tid, p)
        if reg is None or not reg.is_reassigning:
            return False
        target = reg.target_replicas
        if not set(target) <= set(reg.isr):
            return False
        topic = batch.delta.topic_name(tid) or ""
        try:
            rec = self._replicas_change(batch, topic, tid, p, reg, target, (), ())
        except InvalidReplicaAssignmentError:
            return False  # no live target to lead yet: a later ISR change retries
        batch.add(rec)
        return True

    def _list_reassignments(
        self, batch: _Batch, cmd: ListPartitionReassignments, now_ms: int
    ) -> tuple[ListPartitionReassignmentsResponse, None]:
        if cmd.partitions is None:
            found = [(n, p, reg) for n, _, p, reg in batch.partitions() if reg.is_reassigning]
        else:
            found = []
            for name, p in cmd.partitions:
                tid = batch.delta.topic_id(name)
                reg = None if tid is None else batch.delta.partition(tid, p)
                if reg is not None and reg.is_reassigning:
                    found.append((name, p, reg))
        return ListPartitionReassignmentsResponse(
            tuple(
                OngoingReassignment(name, p, reg.replicas, reg.adding, reg.removing)
                for name, p, reg in sorted(found, key=lambda x: (x[0], x[1]))
            )
        ), None

    # ---------------------------------------------------------------- timers

    def poll(self, now_ms: int) -> tuple[tuple[MetadataRecord, ...], int | None]:
        """Records due at ``now_ms`` and the time of the next deadline (None: none).

        Fences brokers whose session expired, moves leadership back to preferred leaders
        every ``leader_imbalance_check_interval_ms`` (and elects leaders for offline
        partitions that can now have one), and writes a ``NoOpRecord`` every
        ``noop_interval_ms``. At most ``partition_changes_per_poll_max`` partition changes
        a call: the rest comes with the next calls (the deadline is then ``now_ms``). A
        standby returns nothing.
        """
        if self._epoch is None:
            return (), None
        batch = _Batch(self.latest_image)
        timeout = self.config.session_timeout_ms
        for broker_id, last in sorted(self._sessions.items()):
            if now_ms >= last + timeout:
                del self._sessions[broker_id]
                b = batch.delta.broker(broker_id)
                if b is not None and not b.fenced:
                    self._fencing[broker_id] = BrokerEpoch(-1)  # no chunk handed over yet
        # Bounded work per poll (finding 13): one broker's hand-overs at a time, in order.
        budget = self.config.partition_changes_per_poll_max
        for broker_id, epoch in sorted(self._fencing.items()):
            b = batch.delta.broker(broker_id)
            if b is None or b.fenced or epoch not in (-1, b.broker_epoch):
                del self._fencing[broker_id]
                continue
            if budget <= 0:
                break
            budget -= self._fence_bounded(batch, b, budget)
        interval = self.config.leader_imbalance_check_interval_ms
        if interval is not None and now_ms >= self._next_rebalance_ms:
            self._next_rebalance_ms = now_ms + interval
            if not self._rebalance(batch, max(budget, 0)):
                self._next_rebalance_ms = now_ms  # more to move: go on at the next poll
        deadlines = self._recovery_deadlines(batch, now_ms)
        if self.config.noop_interval_ms is not None and now_ms >= self._next_noop_ms:
            self._next_noop_ms = now_ms + self.config.noop_interval_ms
            if not batch.records:
                batch.add(NoOpRecord())
        deadlines += [
            last + timeout
            for b, last in self._sessions.items()
            if (reg := batch.delta.broker(b)) is not None and not reg.fenced
        ]
        if interval is not None:
            deadlines.append(self._next_rebalance_ms)
        if self._fencing:
            deadlines.append(now_ms)  # hand-overs left: poll again at once
        if self.config.noop_interval_ms is not None:
            deadlines.append(self._next_noop_ms)
        return self._propose(batch), (min(deadlines) if deadlines else None)

    def _rebalance(self, batch: _Batch, changes_max: int) -> bool:
        """Preferred leaders back, offline partitions elected, finished moves completed: at
        most ``changes_max`` changes. True if the pass went through every partition."""
        decided = 0
        for name, tid, p, reg in list(batch.partitions()):
            if decided >= changes_max:
                return False
            if reg.leader == NO_LEADER:
                rec = self._change(
                    batch, name, tid, p, reg, unclean_allowed=self._unclean_allowed(batch, name)
                )
            elif reg.leader != reg.preferred_leader:
                rec = self._change(batch, name, tid, p, reg, preferred=True)
            else:
                rec = None
            if rec is not None:
                batch.add(rec)
                decided += 1
            # A move whose last target rejoined the ISR through another path (an election,
            # an unfencing) completes here at the latest.
            if reg.is_reassigning and self._maybe_complete_reassignment(batch, tid, p):
                decided += 1
        return True


def eligible_leader_replicas(
    reg: PartitionRegistration,
    isr: tuple[BrokerId, ...],
    *,
    min_isr: int,
    enabled: bool,
    lost: BrokerId | None = None,
) -> tuple[tuple[BrokerId, ...], tuple[BrokerId, ...]]:
    """The ELR and last known ELR once the ISR becomes ``isr`` (Kafka's
    ``PartitionChangeBuilder.maybePopulateTargetElr``, KIP-966), in replica order.

    With the ISR at ``min_isr`` or above, both are empty: the ISR holds the committed records.
    Below it, the high watermark cannot move (``broker.replica_state``), so every replica
    that was in the ISR or the ELR holds every committed offset and stays eligible, except
    ``lost``, a broker back from an unclean shutdown, which may have lost its unflushed tail:
    it joins the last known ELR, with everyone who was eligible and no longer is (the
    replicas an unclean recovery waits for). ``enabled`` False: both empty (Kafka 3.x).
    """
    if not enabled or len(isr) >= min_isr:
        return (), ()
    members = set(isr)
    was = set(reg.isr) | set(reg.elr)
    elr = tuple(b for b in reg.replicas if b in was and b not in members and b != lost)
    lke = tuple(
        b
        for b in reg.replicas
        if (b in was or b in reg.last_known_elr) and b not in members and b not in elr
    )
    return elr, lke


def partition_change(
    topic_id: TopicId,
    partition: int,
    reg: PartitionRegistration,
    usable: Callable[[BrokerId], bool],
    *,
    min_isr: int,
    elr_enabled: bool,
    remove: BrokerId | None = None,
    unclean_shutdown: bool = False,
    preferred: bool = False,
    unclean_allowed: bool = False,
) -> PartitionChangeRecord | None:
    """The change that removes ``remove`` from the ISR and gives the partition the right
    leader, or None if nothing changes (Kafka's ``PartitionChangeBuilder``).

    * ISR: without ``remove``. With ``elr_enabled`` it may become empty; the ELR and last
      known ELR follow ``eligible_leader_replicas`` (``remove`` after an
      ``unclean_shutdown`` is not eligible). Without, the last member stays, since it holds
      every committed record and should lead again when it returns (Kafka 3.x).
    * Leader: the preferred replica if ``preferred`` and it is a live ISR member; else the
      current leader if it is still a live ISR member; else the first live ISR member in
      replica order; else, with an empty ISR, the first live ELR member, which becomes the
      ISR (KIP-966); else, if ``unclean_allowed``, the first live replica, which becomes the
      whole ISR, in ``RECOVERING`` state (KIP-704: data may be lost); else none (-1), and a
      partition with neither ISR nor ELR awaits an unclean recovery
      (``QuorumController._maybe_recover``). A new leader bumps the leader epoch.
    """
    isr = reg.isr
    if remove is not None and remove in isr and (elr_enabled or len(isr) > 1):
        isr = tuple(b for b in isr if b != remove)
    elr, lke = eligible_leader_replicas(
        reg, isr, min_isr=min_isr, enabled=elr_enabled, lost=remove if unclean_shutdown else None
    )
    recovery = reg.leader_recovery_state

    def live(b: BrokerId) -> bool:
        return b != remove and usable(b)

    leader = reg.leader
    if preferred and reg.preferred_leader in isr and live(reg.preferred_leader):
        leader = reg.preferred_leader
    elif leader == NO_LEADER or leader not in isr or not live(leader):
        from_isr = [b for b in reg.replicas if b in isr and live(b)]
        from_elr = [b for b in reg.replicas if b in elr and live(b)] if not isr else []
        alive = [b for b in reg.replicas if live(b)]
        if from_isr:
            leader = from_isr[0]
        elif from_elr:
            leader, isr = from_elr[0], (from_elr[0],)
            elr = tuple(b for b in elr if b != leader)
        elif unclean_allowed and alive:
            leader, isr = alive[0], (alive[0],)
            elr, lke = (), ()
            recovery = LeaderRecoveryState.RECOVERING
        else:
            leader = NO_LEADER
    rec = PartitionChangeRecord(
        topic_id=topic_id,
        partition=partition,
        isr=None if isr == reg.isr else isr,
        leader=NO_LEADER_CHANGE if leader == reg.leader else leader,
        leader_recovery_state=None if recovery == reg.leader_recovery_state else recovery,
        eligible_leader_replicas=None if set(elr) == set(reg.elr) else elr,
        last_known_elr=None if set(lke) == set(reg.last_known_elr) else lke,
    )
    if (
        rec.isr is None
        and rec.leader == NO_LEADER_CHANGE
        and rec.leader_recovery_state is None
        and rec.eligible_leader_replicas is None
        and rec.last_known_elr is None
    ):
        return None
    return rec


_Handler = Callable[[QuorumController, _Batch, Any, int], Any]
"""A command's handler: returns (response, resolve), or is a generator that yields between
steps and returns them (``QuorumController.handle_steps``)."""
_COMMANDS: Mapping[type, _Handler] = {
    CreateTopic: QuorumController._create_topic,
    DeleteTopic: QuorumController._delete_topic,
    LookupTopic: QuorumController._lookup_topic,
    CreatePartitions: QuorumController._create_partitions,
    AlterConfigs: QuorumController._alter_configs,
    RegisterBroker: QuorumController._register_broker,
    BrokerHeartbeat: QuorumController._heartbeat,
    UnregisterBroker: QuorumController._unregister_broker,
    AlterPartition: QuorumController._alter_partition,
    AllocateProducerIds: QuorumController._allocate_producer_ids,
    ElectLeaders: QuorumController._elect_leaders,
    CreateAcls: QuorumController._create_acls,
    DeleteAcls: QuorumController._delete_acls,
    AlterUserScramCredentials: QuorumController._alter_scram,
    AlterPartitionReassignments: QuorumController._alter_reassignments,
    ListPartitionReassignments: QuorumController._list_reassignments,
}
