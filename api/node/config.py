"""Node configuration: a TOML file with command-line overrides.

Keys follow the design (``node_id``, ``roles``, ``listen``, ``controller_quorum``,
``data_dir``, ``rack``); anything Kafka users know by another name keeps Kafka's meaning.
Validation happens here, once, so the rest of the process can trust its config.
"""

from __future__ import annotations

import re
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from raft.types import NODE_ID_MAX

Role = Literal["broker", "controller"]

_HOSTPORT = re.compile(r"^(?P<host>[A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")


class ConfigError(ValueError):
    """A node configuration that cannot run, with a message for the operator."""


_NUMBERS = (int, float, int | None, float | None)


class QuorumVoter(BaseModel):
    model_config = ConfigDict(frozen=True)
    node_id: int
    host: str
    port: int
    scheme: Literal["http", "https"] = "http"
    """``https`` when the controller listener is SSL or SASL_SSL (``NodeConfig.voters``)."""

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


class SecurityProtocol(StrEnum):
    """Kafka's names. SSL: TLS, and a client certificate may authenticate; SASL_*: the HTTP
    ``Authorization`` header (Basic or Bearer) authenticates, over TLS with SASL_SSL."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def http_auth(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


class ListenerKind(StrEnum):
    """Which routes a listener serves (``api.node.listeners.route_kind``)."""

    CLIENT = "client"
    BROKER = "broker"
    CONTROLLER = "controller"
    SCHEMA_REGISTRY = "schema_registry"
    """Only the Schema Registry's routes (``schema_registry_listen``); client listeners serve
    them too."""


class ListenerSettings(BaseModel):
    """One listener's TLS and authentication (``[listener_settings.NAME]`` in the TOML).

    The certificate and key are also what this node presents when it dials another node's
    listener of the same name (Kafka uses one keystore per listener both ways)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_cafile: Path | None = None
    """The CAs client certificates (server side) and servers (client side) must chain to."""
    ssl_client_auth: Literal["none", "requested", "required"] = "none"
    """Kafka's ``ssl.client.auth``: whether this listener asks clients for a certificate."""
    ssl_principal_mapping_rules: str = "DEFAULT"
    """Kafka's ``ssl.principal.mapping.rules``: ``RULE:pattern/replacement/[LU]`` entries
    (comma-separated) tried in order on the certificate subject, then ``DEFAULT`` (the whole
    distinguished name)."""
    http_auth_mechanisms: tuple[Literal["basic", "bearer"], ...] = ("basic",)
    """What a SASL_* listener accepts in the ``Authorization`` header."""
    allow_anonymous: bool | None = None
    """Requests without credentials act as ``User:ANONYMOUS``. Default: only on PLAINTEXT."""
    jwt_public_key_file: Path | None = None
    """PEM public key bearer tokens are signed with (RS256/ES256/EdDSA)."""
    jwt_jwks_file: Path | None = None
    """A JWKS document (RFC 7517) holding the issuer's keys, chosen by the token's ``kid``."""
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_principal_claim: str = "sub"
    """The claim naming the user (Kafka's ``sasl.oauthbearer.sub.claim.name``)."""
    sasl_enabled_mechanisms: tuple[
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"], ...
    ] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    """A SASL_* Kafka listener's mechanisms (Kafka's ``sasl.enabled.mechanisms``).
    OAUTHBEARER validates tokens with the ``jwt_*`` settings above."""


class ListenerSpec(BaseModel):
    """A named listener of this node, resolved from ``listeners`` and the protocol map."""

    model_config = ConfigDict(frozen=True)
    name: str
    host: str
    port: int
    protocol: SecurityProtocol
    kinds: frozenset[ListenerKind]
    settings: ListenerSettings

    @property
    def scheme(self) -> Literal["http", "https"]:
        return "https" if self.protocol.tls else "http"

    @property
    def anonymous_allowed(self) -> bool:
        if self.settings.allow_anonymous is not None:
            return self.settings.allow_anonymous
        return self.protocol is SecurityProtocol.PLAINTEXT


KAFKA_LISTENER_NAME = "KAFKA"
"""The name of the Kafka listener ``kafka_listen`` adds (its protocol map entry and
``listener_settings`` key)."""

SCHEMA_REGISTRY_LISTENER = "SCHEMA_REGISTRY"
"""The name of the listener ``schema_registry_listen`` adds."""

_LISTENER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_]*)://(?P<addr>.+)$")


def parse_listeners(spec: str) -> list[tuple[str, str, int]]:
    """``"CLIENT://127.0.0.1:9092,BROKER://127.0.0.1:9093"`` -> (name, host, port), as
    Kafka's ``listeners``. Names are upper-cased and unique."""
    out: list[tuple[str, str, int]] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        m = _LISTENER.match(part)
        hp = _HOSTPORT.match(m["addr"]) if m else None
        if m is None or hp is None or not 0 < int(hp["port"]) < 65536:
            raise ConfigError(f"bad listeners entry {part!r}: expected NAME://HOST:PORT")
        out.append((m["name"].upper(), hp["host"].strip("[]"), int(hp["port"])))
    names = [n for n, _, _ in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"listeners names a listener twice: {spec!r}")
    return out


def parse_protocol_map(spec: str) -> dict[str, SecurityProtocol]:
    """``"CLIENT:SSL,BROKER:SASL_SSL"`` -> name -> protocol (``listener.security.protocol.map``)."""
    out: dict[str, SecurityProtocol] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, proto = part.partition(":")
        try:
            out[name.strip().upper()] = SecurityProtocol(proto.strip().upper())
        except ValueError:
            raise ConfigError(
                f"bad listener_security_protocol_map entry {part!r}: expected NAME:PROTOCOL "
                f"with PROTOCOL one of {', '.join(SecurityProtocol)}"
            ) from None
        if not sep:
            raise ConfigError(f"bad listener_security_protocol_map entry {part!r}")
    return out


def parse_quorum(spec: str) -> list[QuorumVoter]:
    """``"1@127.0.0.1:9301,2@127.0.0.1:9302"`` -> voters, as Kafka's ``controller.quorum.voters``.

    A voter's id is in [1, NODE_ID_MAX] (0 is Raft's "nobody") and its port in [1, 65535].
    """
    voters: list[QuorumVoter] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        node, sep, addr = part.partition("@")
        m = _HOSTPORT.match(addr)
        if not sep or not node.isdigit() or not m:
            raise ConfigError(f"bad controller_quorum entry {part!r}: expected ID@HOST:PORT")
        if not 0 < int(node) <= NODE_ID_MAX:
            raise ConfigError(
                f"bad controller_quorum entry {part!r}: a voter's id must be in [1, {NODE_ID_MAX}]"
            )
        if not 0 < int(m["port"]) < 65536:
            raise ConfigError(
                f"bad controller_quorum entry {part!r}: the port must be in [1, 65535]"
            )
        voters.append(QuorumVoter(node_id=int(node), host=m["host"], port=int(m["port"])))
    ids = [v.node_id for v in voters]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"controller_quorum names a node id twice: {spec!r}")
    return voters


class NodeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node_id: int = Field(ge=0, le=NODE_ID_MAX)
    """Kafka's ``node.id``: an int32 (brokers may use 0; controllers, Raft voters, from 1)."""
    roles: tuple[Role, ...] = ("broker",)
    listen: str = "127.0.0.1:8082"
    controller_quorum: str = ""
    data_dir: Path
    rack: str | None = None
    cluster_id: str | None = None
    advertised_url: str | None = None
    kafka_listen: str | None = None
    """HOST:PORT of the broker's Kafka protocol listener (docs/kafka-protocol.md); off when
    unset. Registered as the broker's ``kafka`` endpoint, so Metadata answers name it."""
    schema_registry_listen: str | None = None
    """HOST:PORT where the broker also serves the Schema Registry's routes alone (and the
    health/metrics routes every listener has), as Confluent's registry on a port of its own;
    off when unset. It is a listener named ``SCHEMA_REGISTRY`` with the security protocol
    and ``listener_settings`` of the (first) client listener: the same TLS, authentication
    and ACLs. The client listeners keep serving the registry as well."""
    kafka_listeners: str = ""
    """More Kafka protocol listeners, ``NAME://HOST:PORT,...`` as Kafka's ``listeners``; each
    takes its security protocol from ``listener_security_protocol_map`` and its TLS and
    SASL settings from ``listener_settings.NAME`` (docs/security.md). ``kafka_listen`` is the
    listener named ``KAFKA`` (PLAINTEXT unless the map names it)."""
    kafka_request_bytes_max: int = Field(default=100 << 20, ge=1 << 20)
    """The largest Kafka request frame; a larger size prefix closes the connection (Kafka's
    ``socket.request.max.bytes``)."""
    auto_create_topics_enable: bool = False
    """A Kafka client's Metadata request for a topic that does not exist creates it
    (``default_num_partitions``, ``default_replication_factor`` of the controllers), as
    Kafka's ``auto.create.topics.enable``. Off by default, unlike Kafka: a typo in a
    producer's topic name should fail, not make a topic."""
    kafka_produce_pipeline_depth: int = Field(default=5, ge=1, le=64)
    """Produce requests of one Kafka connection in flight at once: the next is started once
    the previous one's batches are appended, and their acks=all waits overlap (answers keep
    the request order). 1 serves one request at a time, as Kafka's broker does."""
    kafka_fetch_zero_copy: bool = True
    """Plaintext Kafka listeners send a Fetch answer's stored Kafka batches with
    ``os.sendfile`` from the segment files (``api.kafka.zerocopy``); false copies them
    through the process, as TLS listeners always do."""
    # Controller (Kafka's configs of the same names, dots as underscores).
    broker_session_timeout_ms: int = Field(default=9_000, ge=100)
    """A broker without a heartbeat for this long is fenced and loses its leaderships."""
    broker_heartbeat_interval_ms: int = Field(default=2_000, ge=10)
    """How often a broker heartbeats (brokers read it from their own config)."""
    leader_imbalance_check_interval_ms: int = Field(default=300_000, ge=0)
    """How often leadership moves back to preferred replicas; 0 turns it off."""
    max_partitions_per_topic: int = Field(default=100_000, ge=1)
    """A topic create or partition increase beyond this is refused (INVALID_PARTITIONS)."""
    max_partitions: int = Field(default=200_000, ge=1)
    """Partitions in the whole cluster, all topics together (internal ones too); a create
    or increase past it is refused. Every partition costs memory on each controller and
    broker, so a client must not be able to create without bound."""
    default_num_partitions: int = Field(default=1, ge=1)
    default_replication_factor: int = Field(default=1, ge=1)
    eligible_leader_replicas_enable: bool = True
    """KIP-966: a replica leaving an ISR below ``min.insync.replicas`` stays eligible to lead,
    and a broker back from an unclean shutdown (no clean-shutdown marker) leaves every ISR
    and ELR. Off: Kafka 3.x (the last ISR member leads again whatever it lost)."""
    unclean_recovery_strategy: Literal["balanced", "aggressive", "manual"] = "balanced"
    """A partition with neither ISR nor ELR (every replica that held its acknowledged writes
    shut down uncleanly): elect the longest log once every live replica and every last known
    ELR member reported its log end (balanced), once every live replica did (aggressive), or
    never (manual: ``ElectLeaders`` UNCLEAN)."""
    unclean_recovery_timeout_ms: int = Field(default=300_000, ge=0)
    """How long an unclean recovery waits for the replicas it wants before it elects the
    longest log among those that answered."""
    producer_ids_per_second_max: float = Field(default=1_000.0, gt=0)
    """New producer ids one broker hands out per second (a second's worth at once), KIP-936:
    each id costs a producer-state entry in every partition it writes to until it expires,
    so a client asking for ids in a loop must not grow the brokers' memory without bound.
    Past it, ``init_producer_id`` answers ``THROTTLING_QUOTA_EXCEEDED``."""
    # Consumer groups (Kafka's broker configs of the same names, dots as underscores).
    offsets_topic_num_partitions: int = Field(default=10, ge=1)
    """Partitions of ``__consumer_offsets`` when it is created (Kafka: 50). Only read at
    creation: changing the count of an existing topic would move groups to other partitions."""
    offsets_topic_replication_factor: int = Field(default=3, ge=1)
    """Replication factor of ``__consumer_offsets``, capped at the usable brokers then."""
    offsets_commit_timeout_ms: int = Field(default=5_000, ge=1)
    """How long an append to ``__consumer_offsets`` waits for acks=all."""
    offsets_retention_minutes: int = Field(default=10_080, ge=1)
    group_min_session_timeout_ms: int = Field(default=6_000, ge=1)
    group_max_session_timeout_ms: int = Field(default=1_800_000, ge=1)
    group_initial_rebalance_delay_ms: int = Field(default=3_000, ge=0)
    group_max_size: int = Field(default=2**31 - 1, ge=1)
    # Transactions (Kafka's broker configs of the same names, dots as underscores).
    transaction_state_log_num_partitions: int = Field(default=50, ge=1)
    """Partitions of ``__transaction_state`` when it is created; only read then (changing
    it would move transactional ids to other coordinators)."""
    transaction_state_log_replication_factor: int = Field(default=3, ge=1)
    """Replication factor of ``__transaction_state``, capped at the usable brokers then."""
    transaction_max_timeout_ms: int = Field(default=900_000, ge=1)
    """The longest ``transaction_timeout_ms`` a producer may ask for."""
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(default=10_000, ge=1)
    """How often each coordinator aborts the transactions past their timeout."""
    transactional_id_expiration_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=1)
    """A transactional id with no transaction for this long is removed (a tombstone in
    ``__transaction_state``); its next InitProducerId gets a new producer id."""
    transaction_remove_expired_transaction_cleanup_interval_ms: int = Field(default=3_600_000, ge=1)
    """How often each coordinator looks for expired transactional ids."""
    transaction_partition_verification_enable: bool = True
    """KIP-890 part 1: a partition leader asks the coordinator before a producer's first
    transactional batch opens a transaction there. Off: any transactional batch is taken (as
    before KIP-890; tests that write transactional batches without a coordinator)."""
    # HTTP consumer instances (Kafka REST's ``consumer.instance.timeout.ms``).
    consumer_instance_timeout_ms: int = Field(default=300_000, ge=100)
    """A v2 consumer instance without a request for this long is closed (it leaves its
    group) and forgotten."""
    http_keepalive_timeout_ms: int = Field(default=75_000, ge=1_000)
    """An HTTP connection with no request in progress for this long is closed: idle
    keep-alive connections, and (aiohttp starts the clock when a connection opens and does
    not restart it for partial headers) clients that open a connection and trickle or never
    finish a request's headers. aiohttp's own default is 3,630 s; 75 s is nginx's
    ``keepalive_timeout``. Request bodies have their own bound (408 after 30 s)."""
    http_connections_max: int = Field(default=1024, ge=1)
    """Connections one listener holds at most; one accepted beyond it is closed at once
    (Kafka's ``max.connections``). Bounds what idle or slow clients can hold."""
    http_request_bytes_max: int = Field(default=64 << 20, ge=1 << 20)
    """The largest request body (413 above it): a batch of ``max.message.bytes`` in msgpack,
    or a large JSON batch, fits in the default. Kafka's ``socket.request.max.bytes``."""
    http_header_bytes_max: int = Field(default=8190, ge=1024, le=1 << 20)
    """The request line and each header field, in bytes (431/400 above it)."""
    http_headers_max: int = Field(default=128, ge=16, le=10_000)
    """Header fields one request may carry."""
    http_cors_allowed_origins: tuple[str, ...] = ()
    """Origins (``https://ui.example``, or ``*``) whose browser pages may call the public
    HTTP API (CORS: preflights answered, ``Access-Control-Allow-Origin`` on answers;
    ``api.http.cors``). Empty: CORS off. A comma-separated string is accepted (overrides)."""
    # Listeners and security (issue 18; docs/security.md). Kafka's names, dots as underscores.
    listeners: str = ""
    """``NAME://HOST:PORT,...``. Empty: one PLAINTEXT listener on ``listen`` serving every
    route (the laptop default). Otherwise each listener serves only the routes of its kind:
    those in ``controller_listener_names`` Raft and controller routes, the
    ``inter_broker_listener_name`` one broker-to-broker routes, the others client routes."""
    listener_security_protocol_map: str = ""
    """``NAME:PROTOCOL,...``; a listener named PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    needs no entry (Kafka's default map)."""
    inter_broker_listener_name: str | None = None
    """The listener brokers dial each other on (replica fetch, forwarding). Unset: the first
    listener that is not a controller listener serves broker routes beside client routes."""
    controller_listener_names: str = ""
    """Comma-separated; the first is the one brokers and controllers dial (the addresses in
    ``controller_quorum``)."""
    listener_settings: dict[str, ListenerSettings] = Field(default_factory=dict)
    """TLS and authentication per listener name (``[listener_settings.CLIENT]``)."""
    super_users: str = ""
    """``User:alice;User:CN=node-1``: principals every ACL check allows (Kafka's)."""
    authorizer_enable: bool = False
    """Check every request against the ACLs in the metadata log (Kafka's
    ``authorizer.class.name``). Off: any authenticated principal may do anything."""
    allow_everyone_if_no_acl_found: bool = False
    # Broker data path (Kafka's broker configs of the same names, dots as underscores).
    log_retention_check_interval_ms: int = Field(default=300_000, ge=1)
    """How often brokers roll segments by ``segment.ms`` and apply retention."""
    log_cleaner_backoff_ms: int = Field(default=15_000, ge=1)
    """How often compacted topics are cleaned (at most as often as retention is checked)."""
    replica_lag_time_max_ms: int = Field(default=30_000, ge=1)
    """A follower not caught up for this long leaves the ISR."""
    log_flush_interval_messages: int | None = Field(default=None, ge=1)
    log_flush_interval_ms: int | None = Field(default=None, ge=0)
    log_flush_interval_bytes: int | None = Field(default=None, ge=1)
    """The broker's flush policy: fsync a log when any bound is reached. None of them set
    (the default) means each topic's ``flush.messages``/``flush.ms``, and otherwise only when
    someone waits (an acks=1 produce waits for its fsync; acks=all relies on replication,
    as Kafka does)."""
    acks_require_fsync: bool = False
    """Acknowledge a write only once every in-sync replica has fsynced it: the leader's high
    watermark waits for its own fsync, and followers fsync before each fetch. A power cut of
    every replica at once then loses no acknowledged write (the fault-injection suite's
    lose-unsynced nemesis on several brokers). Off, as Kafka: durability by replication."""
    log_page_cache_keep_bytes: int = Field(default=64 << 20, ge=-1)
    """The newest bytes of each partition log kept in the page cache; older log is asked
    out of it once written back (``posix_fadvise(DONTNEED)``, in a worker thread), so the
    broker's page-cache footprint stays bounded and appends reuse pages it freed. On VMs
    that hand freed guest memory back to the host (this project's machines) growing into
    new pages is several times slower than reusing them (docs/storage.md, "Page cache").
    Reads further back than this go to the disk. -1 leaves the page cache to the kernel
    (Kafka's behaviour)."""
    console_reports_dir: Path | None = None
    """A directory whose fault-injection runs (``jepsen_tests`` run directories, each with a
    ``results.json``) the web console lists and shows (``api.http.console``). Unset: the
    console's reports page says it is off."""
    console_admin_enabled: bool = False
    """The web console shows admin actions (create and delete topics, alter a topic config,
    reset an empty group's offsets). The page does them through the public REST routes, so
    authentication and ACLs apply to the console's user as to curl. Off: the console is
    read-only and its page makes no write calls."""
    metrics_per_partition: bool = True
    """``/metrics`` shows series per partition (offsets, ISR, flags; consumer lag per
    partition). Off on clusters with many partitions, to bound what Prometheus stores: the
    per-topic, per-group and per-broker series stay (docs/operations.md, "Monitoring")."""

    @field_validator("roles", "http_cors_allowed_origins", mode="before")
    @classmethod
    def _split_roles(cls, v: Any) -> Any:
        if isinstance(v, str):
            return tuple(r.strip() for r in v.split(",") if r.strip())
        return v

    @field_validator("listen", "kafka_listen", "schema_registry_listen")
    @classmethod
    def _check_listen(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        m = _HOSTPORT.match(v)
        if not m or not 0 < int(m["port"]) < 65536:
            raise ValueError(f"{info.field_name} must be HOST:PORT, got {v!r}")
        return v

    @model_validator(mode="before")
    @classmethod
    def _no_bools_for_numbers(cls, data: Any) -> Any:
        # Lax mode would read ``node_id = true`` as node 1: a TOML bool is never a number.
        if isinstance(data, dict):
            for key, v in data.items():
                f = cls.model_fields.get(key) if isinstance(key, str) else None
                if f is not None and isinstance(v, bool) and f.annotation in _NUMBERS:
                    raise ValueError(f"{key} must be a number, got {str(v).lower()}")
        return data

    @model_validator(mode="after")
    def _check_group_session_timeouts(self) -> NodeConfig:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                f"group_min_session_timeout_ms ({self.group_min_session_timeout_ms}) is above "
                f"group_max_session_timeout_ms ({self.group_max_session_timeout_ms}): no "
                "session timeout could be accepted"
            )
        return self

    @model_validator(mode="after")
    def _check_roles(self) -> NodeConfig:
        if not self.roles:
            raise ValueError("roles must name at least one of broker, controller")
        voters = parse_quorum(self.controller_quorum)
        if not voters:
            raise ValueError("controller_quorum must name at least one voter (ID@HOST:PORT)")
        if "controller" in self.roles and self.node_id not in {v.node_id for v in voters}:
            raise ValueError(
                f"node {self.node_id} has the controller role but is not in controller_quorum"
            )
        return self

    @model_validator(mode="after")
    def _check_listeners(self) -> NodeConfig:
        try:
            specs = self.listener_specs()
        except ConfigError as e:
            raise ValueError(str(e)) from None
        kinds = {k for s in specs for k in s.kinds}
        if "broker" in self.roles and ListenerKind.BROKER not in kinds:
            raise ValueError("a broker needs a listener that is not a controller listener")
        if "controller" in self.roles and ListenerKind.CONTROLLER not in kinds:
            raise ValueError("a controller needs a listener named in controller_listener_names")
        for s in specs:
            st = s.settings
            if s.protocol.tls and (st.ssl_certfile is None or st.ssl_keyfile is None):
                raise ValueError(
                    f"listener {s.name} is {s.protocol}: listener_settings.{s.name} needs "
                    "ssl_certfile and ssl_keyfile"
                )
            if st.ssl_client_auth != "none" and st.ssl_cafile is None:
                raise ValueError(
                    f"listener {s.name} asks for client certificates: it needs ssl_cafile"
                )
        if self.schema_registry_listen is not None:
            if "broker" not in self.roles:
                raise ValueError("schema_registry_listen is for brokers (the registry is theirs)")
            only = frozenset({ListenerKind.SCHEMA_REGISTRY})
            reg = next((s for s in specs if s.kinds == only), None)
            if reg is None:
                raise ValueError(
                    "schema_registry_listen takes the security of a client listener: "
                    "this node has none"
                )
            for s in specs:
                if s is reg:
                    continue
                if s.name == reg.name:
                    raise ValueError(
                        f"listener {reg.name} is the name schema_registry_listen takes: "
                        "rename the listener"
                    )
                if (s.host, s.port) == (reg.host, reg.port):
                    raise ValueError(
                        f"schema_registry_listen {self.schema_registry_listen} is listener "
                        f"{s.name}'s address: give the registry a port of its own"
                    )
        try:
            kafka = self.kafka_listener_specs()
        except ConfigError as e:
            raise ValueError(str(e)) from None
        for k in kafka:
            if any(k.name == s.name or (k.host, k.port) == (s.host, s.port) for s in specs):
                raise ValueError(
                    f"Kafka listener {k.name} has the name or address of an HTTP listener"
                )
            st = k.settings
            if k.protocol.tls and (st.ssl_certfile is None or st.ssl_keyfile is None):
                raise ValueError(
                    f"Kafka listener {k.name} is {k.protocol}: listener_settings.{k.name} "
                    "needs ssl_certfile and ssl_keyfile"
                )
            if st.ssl_client_auth != "none" and st.ssl_cafile is None:
                raise ValueError(
                    f"Kafka listener {k.name} asks for client certificates: it needs ssl_cafile"
                )
        if kafka and "broker" not in self.roles:
            raise ValueError("Kafka listeners are for brokers")
        # A broker keeps the controller listener's settings to dial it (Kafka's brokers do).
        known = (
            {s.name for s in specs}
            | set(self.controller_names())
            | {k.name for k in kafka}
            | {KAFKA_LISTENER_NAME}
        )
        unknown = {n.upper() for n in self.listener_settings} - known
        if self.listeners and unknown:
            raise ValueError(f"listener_settings names no listener: {', '.join(sorted(unknown))}")
        return self

    def listener_specs(self) -> list[ListenerSpec]:
        """This node's listeners (see ``listeners``), the registry's own last."""
        specs = self._named_listener_specs()
        if self.schema_registry_listen is None or "broker" not in self.roles:
            return specs
        client = next((s for s in specs if ListenerKind.CLIENT in s.kinds), None)
        if client is None:
            return specs  # no broker listener: _check_listeners says so
        host, port = self.schema_registry_listen.rsplit(":", 1)
        return [
            *specs,
            ListenerSpec(
                name=SCHEMA_REGISTRY_LISTENER,
                host=host.strip("[]"),
                port=int(port),
                protocol=client.protocol,
                kinds=frozenset({ListenerKind.SCHEMA_REGISTRY}),
                settings=client.settings,
            ),
        ]

    def _named_listener_specs(self) -> list[ListenerSpec]:
        settings = {k.upper(): v for k, v in self.listener_settings.items()}
        if not self.listeners:
            host, port = self.listen.rsplit(":", 1)
            return [
                ListenerSpec(
                    name="PLAINTEXT",
                    host=host.strip("[]"),
                    port=int(port),
                    protocol=SecurityProtocol.PLAINTEXT,
                    kinds=frozenset(ListenerKind),
                    settings=settings.get("PLAINTEXT", ListenerSettings()),
                )
            ]
        protocols = self.protocol_map()
        controller_names = self.controller_names()
        inter = (self.inter_broker_listener_name or "").upper() or None
        parsed = parse_listeners(self.listeners)
        names = [n for n, _, _ in parsed]
        for n in [*controller_names, *([inter] if inter else [])]:
            if n not in names and not (n in controller_names and "controller" not in self.roles):
                raise ConfigError(f"listener {n} is named but not in listeners")
        if inter is None:
            inter = next((n for n in names if n not in controller_names), None)
        out = []
        for name, lhost, lport in parsed:
            if name not in protocols:
                raise ConfigError(
                    f"listener {name} has no security protocol: add {name}:PLAINTEXT (or SSL, "
                    "SASL_PLAINTEXT, SASL_SSL) to listener_security_protocol_map"
                )
            if name in controller_names:
                kinds = frozenset({ListenerKind.CONTROLLER})
            elif name == inter:
                same = self.inter_broker_listener_name is None
                kinds = frozenset({ListenerKind.BROKER, *([ListenerKind.CLIENT] if same else [])})
            else:
                kinds = frozenset({ListenerKind.CLIENT})
            out.append(
                ListenerSpec(
                    name=name,
                    host=lhost,
                    port=lport,
                    protocol=protocols[name],
                    kinds=kinds,
                    settings=settings.get(name, ListenerSettings()),
                )
            )
        return out

    def kafka_listener_specs(self) -> list[ListenerSpec]:
        """The Kafka protocol listeners: ``kafka_listen`` (named ``KAFKA``) first, then
        ``kafka_listeners``. ``kinds`` is empty: they serve no HTTP route."""
        entries: list[tuple[str, str, int]] = []
        if self.kafka_listen is not None:
            kh, _, kp = self.kafka_listen.rpartition(":")
            entries.append((KAFKA_LISTENER_NAME, kh.strip("[]"), int(kp)))
        entries += parse_listeners(self.kafka_listeners)
        names = [n for n, _, _ in entries]
        if len(set(names)) != len(names):
            raise ConfigError(
                f"Kafka listener names repeat: {', '.join(names)} (kafka_listen is "
                f"{KAFKA_LISTENER_NAME})"
            )
        protocols = self.protocol_map()
        settings = {k.upper(): v for k, v in self.listener_settings.items()}
        out = []
        for name, host, port in entries:
            proto = protocols.get(name)
            if proto is None:
                if name != KAFKA_LISTENER_NAME:
                    raise ConfigError(
                        f"Kafka listener {name} has no security protocol: add {name}:PLAINTEXT "
                        "(or SSL, SASL_PLAINTEXT, SASL_SSL) to listener_security_protocol_map"
                    )
                proto = SecurityProtocol.PLAINTEXT
            out.append(
                ListenerSpec(
                    name=name,
                    host=host,
                    port=port,
                    protocol=proto,
                    kinds=frozenset(),
                    settings=settings.get(name, ListenerSettings()),
                )
            )
        return out

    def protocol_map(self) -> dict[str, SecurityProtocol]:
        return {
            **{p.value: p for p in SecurityProtocol},
            **parse_protocol_map(self.listener_security_protocol_map),
        }

    def controller_names(self) -> list[str]:
        return [n.strip().upper() for n in self.controller_listener_names.split(",") if n.strip()]

    def listener_of(self, kind: ListenerKind) -> ListenerSpec | None:
        """The listener serving ``kind`` (the first, for client listeners)."""
        return next((s for s in self.listener_specs() if kind in s.kinds), None)

    def dial_settings(self, name: str) -> ListenerSettings:
        """What this node presents and trusts when it dials a listener called ``name``."""
        settings = {k.upper(): v for k, v in self.listener_settings.items()}
        return settings.get(name.upper(), ListenerSettings())

    @property
    def controller_scheme(self) -> Literal["http", "https"]:
        names = self.controller_names()
        if not self.listeners or not names:
            return "http"
        proto = self.protocol_map().get(names[0], SecurityProtocol.PLAINTEXT)
        return "https" if proto.tls else "http"

    def _primary(self) -> ListenerSpec:
        specs = self.listener_specs()
        for kind in (ListenerKind.CLIENT, ListenerKind.BROKER, ListenerKind.CONTROLLER):
            for s in specs:
                if kind in s.kinds:
                    return s
        return specs[0]

    @property
    def host(self) -> str:
        if self.listeners:
            return self._primary().host
        return self.listen.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        if self.listeners:
            return self._primary().port
        return int(self.listen.rsplit(":", 1)[1])

    @property
    def kafka_address(self) -> tuple[str, int] | None:
        """The first Kafka listener's address."""
        specs = self.kafka_listener_specs()
        return (specs[0].host, specs[0].port) if specs else None

    @property
    def url(self) -> str:
        """Where this node's primary (client, else broker, else controller) listener is."""
        if self.advertised_url:
            return self.advertised_url
        if self.listeners:
            p = self._primary()
            return f"{p.scheme}://{p.host}:{p.port}"
        return f"http://{self.listen}"

    @property
    def voters(self) -> list[QuorumVoter]:
        scheme = self.controller_scheme
        return [
            v.model_copy(update={"scheme": scheme}) for v in parse_quorum(self.controller_quorum)
        ]


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> NodeConfig:
    """Read ``path`` (TOML), apply non-None ``overrides``, validate; ``ConfigError`` on failure."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
        except OSError as e:  # a directory, no permission, ...
            raise ConfigError(f"config file {path} cannot be read: {e}") from None
    for k, v in (overrides or {}).items():
        if v is not None:
            data[k] = v
    try:
        return NodeConfig.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
            for err in e.errors()
        )
        raise ConfigError(f"invalid node config: {problems}") from None
