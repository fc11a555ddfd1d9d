"""The options of the ``longboat`` data source, parsed and checked, named as Spark's Kafka source.

Kafka's option names carry over so that a job written for ``format("kafka")`` ports by
changing the format name (Spark's structured-streaming-kafka-integration guide):
``kafka.bootstrap.servers`` is accepted beside
our ``bootstrap``, and host:port entries become ``http://host:port``. Names are
case-insensitive, as Spark's are. Offsets JSON is Kafka's: ``{"topic": {"0": 23, "1": -1}}``
with -2 for earliest and -1 for latest; partition keys are strings because JSON keys are
(and offsets come back from Spark's checkpoints that way).

Security (issue 18, docs/security.md): ``kafka.security.protocol`` (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL) picks ``https://`` for bare ``host:port`` entries; trust and client
certificates are PEM files named as Kafka's PEM stores (``kafka.ssl.truststore.location``,
``kafka.ssl.keystore.location``) or as librdkafka's (``kafka.ssl.ca.location``,
``kafka.ssl.certificate.location`` + ``kafka.ssl.key.location``); HTTP credentials come from
``longboat.auth.username``/``password`` or ``longboat.auth.token``, or from Kafka's
``kafka.sasl.jaas.config`` with a SCRAM or PLAIN mechanism (sent as HTTP Basic, which brokers
check against their SCRAM credentials).

Every mistake is a ``LongboatOptionError`` that names the option and what would be valid.

Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

EARLIEST = -2
LATEST = -1

Offsets = dict[str, dict[int, int]]
"""topic -> partition -> offset (or -2 earliest / -1 latest, or a timestamp in ms)."""


class LongboatOptionError(ValueError):
    """A bad option of the ``longboat`` data source."""


@dataclass(frozen=True)
class SecurityOptions:
    """How the driver and the executors reach a secure cluster; None fields are not set.

    Files are paths that must exist on the driver and on every executor (as Spark's Kafka
    source needs its truststore there). Secrets stay out of ``repr``, so a logged or
    printed options object does not show them.
    """

    tls: bool = False
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    @property
    def any(self) -> bool:
        return self.tls or self.username is not None or self.token is not None


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the cluster.

    ``kind`` is ``earliest``, ``latest``, ``offsets`` (per partition, may hold -2/-1),
    ``timestamp`` (one ms timestamp for every partition) or ``timestamps`` (per partition).
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: Offsets = field(default_factory=dict)
    timestamp_ms: int = 0


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: tuple[str, ...]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    starting_by_timestamp_strategy: Literal["error", "latest"] = "error"
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    fetch_max_bytes: int = 8 << 20
    poll_timeout_ms: int = 120_000
    fetch_format: Literal["arrow", "batches"] = "arrow"
    """``arrow``: brokers build the Arrow rows (v3 read route); ``batches``: workers do."""
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    """``kafka.isolation.level``, as Spark's Kafka source passes it to its consumers:
    read_committed reads up to the last stable offset, without aborted transactions."""
    security: SecurityOptions = SecurityOptions()

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is read (internal ``__`` topics only when named explicitly)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.assign is not None:
            return topic in self.assign
        assert self.subscribe_pattern is not None
        return (
            not topic.startswith("__") and re.fullmatch(self.subscribe_pattern, topic) is not None
        )


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: tuple[str, ...]
    topic: str | None = None
    include_headers: bool = True
    acks: int = -1
    linger_ms: int = 5
    compression: str = "none"
    request_timeout_ms: int = 30_000
    """Per request, and how long a record may wait for metadata (a topic that is missing)."""
    security: SecurityOptions = SecurityOptions()
    exactly_once: bool = False
    """``exactlyOnce``: each task of a micro-batch writes in one transaction and records the
    batch id with it, so a batch Spark runs again is not written twice (spark/exactly_once.py)."""
    transactional_id_prefix: str = "longboat-spark-"
    """Transactional ids (and bookkeeping groups) are ``<prefix><query id>-<partition>``."""
    transaction_timeout_ms: int = 60_000


_SOURCE_OPTIONS = {
    "bootstrap",
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "minpartitions",
    "maxrecordsperpartition",
    "maxoffsetspertrigger",
    "failondataloss",
    "includeheaders",
    "fetchmaxbytes",
    "kafkaconsumer.polltimeoutms",
    "fetchformat",
    "kafka.isolation.level",
}
_SINK_OPTIONS = {
    "bootstrap",
    "kafka.bootstrap.servers",
    "topic",
    "includeheaders",
    "acks",
    "linger.ms",
    "compression",
    "kafka.acks",
    "kafka.linger.ms",
    "kafka.compression.type",
    "request.timeout.ms",
    "kafka.request.timeout.ms",
    "exactlyonce",
    "transactionalidprefix",
    "transaction.timeout.ms",
    "kafka.transaction.timeout.ms",
}
# Schema-registry formats of keys and values (parsed by spark/avro.py).
FORMAT_SOURCE_OPTIONS = {
    "valueformat",
    "keyformat",
    "schema.registry.url",
    "valuesubject",
    "keysubject",
    "valueschemaversion",
    "keyschemaversion",
    "valueschemaid",
    "keyschemaid",
    "mode",
}
FORMAT_SINK_OPTIONS = {
    "valueformat",
    "keyformat",
    "schema.registry.url",
    "valuesubject",
    "keysubject",
    "valueschema",
    "keyschema",
    "valueschema.autoregister",
    "keyschema.autoregister",
}
# TLS and credentials (issue 18), for reads and writes alike.
SECURITY_OPTIONS = {
    "kafka.security.protocol",
    "kafka.ssl.truststore.location",
    "kafka.ssl.truststore.type",
    "kafka.ssl.ca.location",
    "kafka.ssl.keystore.location",
    "kafka.ssl.keystore.type",
    "kafka.ssl.certificate.location",
    "kafka.ssl.key.location",
    "kafka.sasl.mechanism",
    "kafka.sasl.jaas.config",
    "longboat.auth.username",
    "longboat.auth.password",
    "longboat.auth.token",
}
_SOURCE_OPTIONS |= FORMAT_SOURCE_OPTIONS | SECURITY_OPTIONS
_SINK_OPTIONS |= FORMAT_SINK_OPTIONS | SECURITY_OPTIONS
# Set by Spark itself on some paths, or harmless Kafka client settings we have no use for.
_IGNORED = {
    "path",
    "checkpointlocation",
    "queryname",
    "kafka.group.id",
    "groupidprefix",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "kafka.client.id",
}
_UNSUPPORTED = {
    "minoffsetspertrigger": "Longboat streams do not wait for a minimum of offsets",
    "maxtriggerdelay": "Longboat streams do not wait for a minimum of offsets",
    # Silently ignoring these would leave a job believing its key is protected.
    "kafka.ssl.key.password": "encrypted private keys are not supported; give an unencrypted "
    "PEM key in kafka.ssl.key.location, readable only by the job's user",
    "kafka.ssl.keystore.password": "keystores are PEM files here (kafka.ssl.keystore.location "
    "holding the certificate chain and an unencrypted key), not password-protected JKS/PKCS12",
    "kafka.ssl.truststore.password": "truststores are PEM files of CA certificates here "
    "(kafka.ssl.truststore.type=PEM), not password-protected JKS/PKCS12",
}


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): str(v) for k, v in options.items() if v is not None}


def _check_names(opts: Mapping[str, str], allowed: set[str], what: str) -> None:
    for name in opts:
        if name in allowed or name in _IGNORED:
            continue
        if name in _UNSUPPORTED:
            raise LongboatOptionError(f"option '{name}' is not supported: {_UNSUPPORTED[name]}")
        if name.startswith("kafka."):
            continue  # Kafka client settings: there is no Kafka client to pass them to
        valid = ", ".join(sorted(allowed - {"kafka.bootstrap.servers"}))
        raise LongboatOptionError(f"unknown {what} option '{name}'; valid options: {valid}")


_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _protocol(opts: Mapping[str, str]) -> str | None:
    raw = opts.get("kafka.security.protocol")
    if raw is None:
        return None
    proto = raw.strip().upper()
    if proto not in _PROTOCOLS:
        raise LongboatOptionError(
            f"option 'kafka.security.protocol' must be one of {', '.join(_PROTOCOLS)}, got {raw!r}"
        )
    return proto


def parse_bootstrap(opts: Mapping[str, str]) -> tuple[str, ...]:
    """Broker URLs. A bare ``host:port`` is ``https://`` under ``kafka.security.protocol``
    SSL or SASL_SSL, ``http://`` otherwise; an explicit scheme must agree with the protocol."""
    raw = opts.get("bootstrap") or opts.get("kafka.bootstrap.servers")
    if not raw or not raw.strip():
        raise LongboatOptionError(
            "option 'bootstrap' is required: broker URLs, comma separated, "
            "e.g. http://127.0.0.1:8082 (kafka.bootstrap.servers is accepted too)"
        )
    proto = _protocol(opts)
    tls = None if proto is None else proto.endswith("SSL")
    urls = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        if "://" not in part:
            part = ("https://" if tls else "http://") + part
        if not re.fullmatch(r"https?://[^/\s:]+(:\d+)?/?", part):
            raise LongboatOptionError(
                f"option 'bootstrap': {part!r} is not a broker URL like http://127.0.0.1:8082"
            )
        if tls is not None and part.startswith("https://") != tls:
            raise LongboatOptionError(
                f"option 'bootstrap': {part!r} does not match kafka.security.protocol={proto} "
                f"({'https' if tls else 'http'} URLs, or bare host:port)"
            )
        urls.append(part.rstrip("/"))
    return tuple(urls)


_JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _jaas_credentials(opts: Mapping[str, str]) -> tuple[str, str] | None:
    """username and password from ``kafka.sasl.jaas.config``, as Spark's Kafka jobs set them:
    ``org.apache.kafka.common.security.scram.ScramLoginModule required username="u"
    password="p";``. Never quotes the option's text in an error (it holds the password)."""
    jaas = opts.get("kafka.sasl.jaas.config")
    mechanism = opts.get("kafka.sasl.mechanism", "GSSAPI" if jaas else "").strip().upper()
    if not jaas:
        if mechanism:
            raise LongboatOptionError(
                "option 'kafka.sasl.mechanism' needs 'kafka.sasl.jaas.config' with a username "
                "and password (or use longboat.auth.username/password)"
            )
        return None
    if mechanism == "OAUTHBEARER":
        raise LongboatOptionError(
            "kafka.sasl.mechanism=OAUTHBEARER: give the token in option 'longboat.auth.token' "
            "(there is no Kafka login module here to fetch one)"
        )
    if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise LongboatOptionError(
            "option 'kafka.sasl.mechanism' must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 "
            f"with a kafka.sasl.jaas.config (Kafka's default is GSSAPI), got {mechanism!r}"
        )
    found = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_FIELD.findall(jaas)}
    if "username" not in found or "password" not in found:
        raise LongboatOptionError(
            'option \'kafka.sasl.jaas.config\' must hold username="..." and password="..." '
            "(its text is not shown here because it holds a secret)"
        )
    return found["username"], found["password"]


def parse_security(opts: Mapping[str, str]) -> SecurityOptions:
    """TLS files and HTTP credentials; checked against ``kafka.security.protocol``."""
    proto = _protocol(opts)
    for name in ("kafka.ssl.truststore.type", "kafka.ssl.keystore.type"):
        kind = opts.get(name)
        if kind is not None and kind.strip().upper() != "PEM":
            raise LongboatOptionError(
                f"option '{name}' must be PEM (Python's ssl reads PEM files), got {kind!r}; "
                "convert a JKS store with keytool -exportcert -rfc / openssl pkcs12"
            )
    cafile = opts.get("kafka.ssl.truststore.location") or opts.get("kafka.ssl.ca.location")
    keystore = opts.get("kafka.ssl.keystore.location")
    certfile = opts.get("kafka.ssl.certificate.location")
    keyfile = opts.get("kafka.ssl.key.location")
    if keystore and (certfile or keyfile):
        raise LongboatOptionError(
            "give either 'kafka.ssl.keystore.location' (one PEM file: certificate chain and "
            "key) or 'kafka.ssl.certificate.location' with 'kafka.ssl.key.location', not both"
        )
    if keystore:
        certfile = keyfile = keystore  # Python's ssl finds the key in the same PEM file
    if bool(certfile) != bool(keyfile):
        raise LongboatOptionError(
            "options 'kafka.ssl.certificate.location' and 'kafka.ssl.key.location' go together"
        )
    user = opts.get("longboat.auth.username")
    password = opts.get("longboat.auth.password")
    token = opts.get("longboat.auth.token")
    if (user is None) != (password is None):
        raise LongboatOptionError(
            "options 'longboat.auth.username' and 'longboat.auth.password' go together"
        )
    jaas = _jaas_credentials(opts)
    if jaas is not None:
        if user is not None or token is not None:
            raise LongboatOptionError(
                "give credentials once: kafka.sasl.jaas.config or longboat.auth.*, not both"
            )
        user, password = jaas
    if user is not None and token is not None:
        raise LongboatOptionError(
            "give 'longboat.auth.username'/'password' or 'longboat.auth.token', not both"
        )
    has_credentials = user is not None or token is not None
    tls_files = cafile or certfile
    if proto is not None:
        if proto.startswith("SASL") and not has_credentials:
            raise LongboatOptionError(
                f"kafka.security.protocol={proto} needs credentials: longboat.auth.username "
                "and longboat.auth.password, longboat.auth.token, or kafka.sasl.jaas.config"
            )
        if not proto.startswith("SASL") and has_credentials:
            raise LongboatOptionError(
                f"credentials are given but kafka.security.protocol={proto} sends none; use "
                f"{'SASL_SSL' if proto == 'SSL' else 'SASL_PLAINTEXT'}"
            )
        if tls_files and not proto.endswith("SSL"):
            raise LongboatOptionError(
                f"TLS files are given but kafka.security.protocol={proto} is not SSL or SASL_SSL"
            )
    tls = any(u.startswith("https://") for u in parse_bootstrap(opts))
    if tls_files and not tls:
        raise LongboatOptionError(
            "TLS files are given but the bootstrap URLs are http://; use https:// URLs or "
            "kafka.security.protocol=SSL (or SASL_SSL)"
        )
    return SecurityOptions(
        tls=tls,
        cafile=cafile,
        certfile=certfile,
        keyfile=keyfile,
        username=user,
        password=password,
        token=token,
    )


def _int(opts: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    raw = opts.get(name)
    if raw is None:
        return None
    try:
        v = int(raw)
    except ValueError:
        raise LongboatOptionError(f"option '{name}' must be an integer, got {raw!r}") from None
    if v < minimum:
        raise LongboatOptionError(f"option '{name}' must be at least {minimum}, got {v}")
    return v


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise LongboatOptionError(f"option '{name}' must be true or false, got {raw!r}")


def _json_object(name: str, raw: str) -> dict[str, object]:
    try:
        v = json.loads(raw)
    except json.JSONDecodeError as e:
        raise LongboatOptionError(f"option '{name}' is not valid JSON ({e}): {raw!r}") from None
    if not isinstance(v, dict):
        raise LongboatOptionError(f"option '{name}' must be a JSON object, got {raw!r}")
    return v


def parse_partition_map(name: str, raw: str, *, allow_special: bool) -> Offsets:
    """``{"t": {"0": 23}}`` -> ``{"t": {0: 23}}``; values must be -2, -1 or >= 0."""
    out: Offsets = {}
    for topic, parts in _json_object(name, raw).items():
        if not isinstance(parts, dict):
            raise LongboatOptionError(
                f"option '{name}': topic {topic!r} must map to an object of partition -> "
                f'value, like {{"{topic}": {{"0": 23}}}}'
            )
        tp: dict[int, int] = {}
        for p, v in parts.items():
            try:
                pn = int(p)
            except ValueError:
                raise LongboatOptionError(
                    f"option '{name}': partition {p!r} of topic {topic!r} is not an integer"
                ) from None
            if pn < 0 or isinstance(v, bool) or not isinstance(v, int):
                raise LongboatOptionError(
                    f"option '{name}': {topic}-{p} must be a non-negative partition with an "
                    f"integer value, got {v!r}"
                )
            if v < 0 and not (allow_special and v in (EARLIEST, LATEST)):
                allowed = (
                    "-2 (earliest), -1 (latest) or an offset >= 0"
                    if allow_special
                    else "a timestamp in ms >= 0"
                )
                raise LongboatOptionError(f"option '{name}': {topic}-{pn} is {v}; use {allowed}")
            tp[pn] = v
        out[topic] = tp
    return out


def _offset_spec(
    opts: Mapping[str, str],
    which: Literal["starting", "ending"],
    default: Literal["earliest", "latest"],
) -> OffsetSpec:
    ts = _int(opts, f"{which}timestamp", minimum=0)
    if ts is not None:
        return OffsetSpec("timestamp", timestamp_ms=ts)
    by_ts = opts.get(f"{which}offsetsbytimestamp")
    if by_ts is not None:
        return OffsetSpec(
            "timestamps",
            parse_partition_map(f"{which}OffsetsByTimestamp", by_ts, allow_special=False),
        )
    raw = opts.get(f"{which}offsets")
    if raw is None:
        return OffsetSpec(default)
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        return OffsetSpec(word)  # type: ignore[arg-type]
    if not raw.strip().startswith("{"):
        raise LongboatOptionError(
            f"option '{which}Offsets' must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {raw!r}'
        )
    return OffsetSpec("offsets", parse_partition_map(f"{which}Offsets", raw, allow_special=True))


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check every option of a read (``streaming`` for ``readStream``) and parse it."""
    opts = _lower(options)
    _check_names(opts, _SOURCE_OPTIONS, "source")
    bootstrap = parse_bootstrap(opts)
    chosen = [n for n in ("subscribe", "subscribepattern", "assign") if n in opts]
    if len(chosen) != 1:
        raise LongboatOptionError(
            "exactly one of 'subscribe', 'subscribePattern' or 'assign' is required"
            + (f"; got {', '.join(chosen)}" if chosen else "")
        )
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise LongboatOptionError("option 'subscribe' names no topic")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as e:
            raise LongboatOptionError(
                f"option 'subscribePattern' is not a valid regular expression: {e}"
            ) from None
    else:
        assign = {}
        for topic, parts in _json_object("assign", opts["assign"]).items():
            if (
                not isinstance(parts, list)
                or not parts
                or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts)
            ):
                raise LongboatOptionError(
                    f"option 'assign': topic {topic!r} must map to a list of partitions, "
                    f'like {{"{topic}": [0, 1]}}'
                )
            assign[topic] = tuple(sorted(set(parts)))
        if not assign:
            raise LongboatOptionError("option 'assign' names no topic")

    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest")
    if streaming:
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if name in opts:
                raise LongboatOptionError(
                    f"option '{name}' is for batch reads; a stream reads until it is stopped "
                    "(use trigger(availableNow=True) to read what is there and stop)"
                )
        ending = OffsetSpec("latest")
    else:
        ending = _offset_spec(opts, "ending", "latest")
        if starting.kind == "latest":
            raise LongboatOptionError(
                "option 'startingOffsets' cannot be 'latest' for a batch read (it would "
                "read nothing); use 'earliest' or per-partition JSON"
            )
        if ending.kind == "earliest":
            raise LongboatOptionError(
                "option 'endingOffsets' cannot be 'earliest' for a batch read"
            )
        if starting.kind == "offsets" and any(
            v == LATEST for ps in starting.offsets.values() for v in ps.values()
        ):
            raise LongboatOptionError(
                "option 'startingOffsets': -1 (latest) is not allowed for a batch read"
            )
        if ending.kind == "offsets" and any(
            v == EARLIEST for ps in ending.offsets.values() for v in ps.values()
        ):
            raise LongboatOptionError(
                "option 'endingOffsets': -2 (earliest) is not allowed for a batch read"
            )
    for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        if assign is not None and spec.kind in ("offsets", "timestamps"):
            extra = {
                f"{t}-{p}"
                for t, ps in spec.offsets.items()
                for p in ps
                if p not in assign.get(t, ())
            }
            if extra:
                raise LongboatOptionError(
                    f"option '{name}' names partitions not in 'assign': {sorted(extra)}"
                )
        if subscribe and spec.kind in ("offsets", "timestamps"):
            extra = set(spec.offsets) - set(subscribe)
            if extra:
                raise LongboatOptionError(
                    f"option '{name}' names topics not subscribed: {sorted(extra)}"
                )
    fetch_format = opts.get("fetchformat", "arrow").strip().lower()
    if fetch_format not in ("arrow", "batches"):
        raise LongboatOptionError(
            f"option 'fetchFormat' must be 'arrow' or 'batches', got {fetch_format!r}"
        )
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise LongboatOptionError(
            "option 'kafka.isolation.level' must be 'read_uncommitted' or 'read_committed', "
            f"got {isolation!r}"
        )
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise LongboatOptionError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {strategy!r}"
        )
    return SourceOptions(
        bootstrap=bootstrap,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_by_timestamp_strategy=strategy,  # type: ignore[arg-type]
        min_partitions=_int(opts, "minpartitions", minimum=1),
        max_records_per_partition=_int(opts, "maxrecordsperpartition", minimum=1),
        max_offsets_per_trigger=_int(opts, "maxoffsetspertrigger", minimum=1),
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        include_headers=_bool(opts, "includeheaders", False),
        fetch_max_bytes=_int(opts, "fetchmaxbytes", minimum=1024) or 8 << 20,
        poll_timeout_ms=_int(opts, "kafkaconsumer.polltimeoutms", minimum=1) or 120_000,
        fetch_format=fetch_format,  # type: ignore[arg-type]
        isolation_level=isolation,  # type: ignore[arg-type]
        security=parse_security(opts),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = _lower(options)
    _check_names(opts, _SINK_OPTIONS, "sink")
    acks_raw = opts.get("acks", opts.get("kafka.acks", "all")).strip().lower()
    acks = {"all": -1, "-1": -1, "1": 1, "0": 0}.get(acks_raw)
    if acks is None:
        raise LongboatOptionError(f"option 'acks' must be all, -1, 1 or 0, got {acks_raw!r}")
    linger = opts.get("linger.ms", opts.get("kafka.linger.ms", "5"))
    try:
        linger_ms = int(linger)
    except ValueError:
        raise LongboatOptionError(
            f"option 'linger.ms' must be an integer, got {linger!r}"
        ) from None
    compression = opts.get("compression", opts.get("kafka.compression.type", "none")).lower()
    if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise LongboatOptionError(
            "option 'compression' must be one of none, gzip, snappy, lz4, zstd, "
            f"got {compression!r}"
        )
    timeout = (
        _int(opts, "request.timeout.ms", minimum=1)
        or _int(opts, "kafka.request.timeout.ms", minimum=1)
        or 30_000
    )
    topic = opts.get("topic")
    exactly_once = _bool(opts, "exactlyonce", False)
    if exactly_once and acks != -1:
        raise LongboatOptionError(
            "option 'exactlyOnce' writes with a transactional producer, which needs acks=all"
        )
    prefix = opts.get("transactionalidprefix", "longboat-spark-")
    if not re.fullmatch(r"[A-Za-z0-9._-]{0,100}", prefix):
        raise LongboatOptionError(
            "option 'transactionalIdPrefix' may hold letters, digits, '.', '_' and '-' "
            f"(at most 100), got {prefix!r}"
        )
    txn_timeout = (
        _int(opts, "transaction.timeout.ms", minimum=1000)
        or _int(opts, "kafka.transaction.timeout.ms", minimum=1000)
        or 60_000
    )
    return SinkOptions(
        bootstrap=parse_bootstrap(opts),
        topic=topic.strip() if topic else None,
        include_headers=_bool(opts, "includeheaders", True),
        acks=acks,
        linger_ms=linger_ms,
        compression=compression,
        request_timeout_ms=timeout,
        security=parse_security(opts),
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
        transaction_timeout_ms=txn_timeout,
    )


# ---------------------------------------------------------------- offsets JSON


def offsets_to_json(offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """The form Spark checkpoints: string partition keys, sorted for stable diffs."""
    return {t: {str(p): int(o) for p, o in sorted(ps.items())} for t, ps in sorted(offsets.items())}


def offsets_from_json(data: Mapping[str, Mapping[str, int]] | str) -> Offsets:
    """Back from a checkpoint (a dict, or its JSON text): partition keys become ints."""
    if isinstance(data, str):
        data = json.loads(data)
    assert not isinstance(data, str)
    return {t: {int(p): int(o) for p, o in ps.items()} for t, ps in data.items()}
