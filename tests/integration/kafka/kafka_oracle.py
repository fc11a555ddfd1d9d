"""The plumbing of the differential checks (``test_kafka_oracle*.py``): one peer (Longboat or
Apache Kafka) as the scenarios see it, raw requests built from kio's request classes, and
answers turned into plain values that two clusters can be compared on.

Raw requests, not only a client's API, because clients retry, hide or translate error codes:
what is compared is what the broker answered. Records are built and read with kafka-python's
record-batch code (not Longboat's), so neither side is checked with Longboat's own encoder.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import io
import socket
import struct
import types
import typing
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

# What must differ between two clusters and is never compared: who answered and when, and
# the broker's free-text messages (only the error code is the contract).
NOT_COMPARED = frozenset(
    {
        "throttle_time",
        "error_message",
        "cluster_id",
        "controller_id",
        "node_id",
        "host",
        "port",
        "topic_id",
        "member_id",
        "leader_id",
        "replica_nodes",
        "isr_nodes",
        "offline_replicas",
        "client_host",
        "coordinator_key",
    }
)


class Peer:
    """One cluster (Longboat or Kafka) reached on its Kafka listener: ``port`` answers the
    requests; ``nodes`` (broker id -> port) reach each broker of a bigger cluster."""

    def __init__(self, name: str, port: int, nodes: Mapping[int, int] | None = None) -> None:
        self.name = name
        self.port = port
        self.nodes = dict(nodes or {})

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in (self.nodes.values() or [self.port]))

    def at(self, node_id: int) -> Peer:
        """The same cluster, asked at broker ``node_id``."""
        return Peer(self.name, self.nodes[node_id], self.nodes)

    def call(self, body: Any) -> Any:
        """One request on a fresh connection; the answer as a kio entity."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=20) as sock:
            return _call(sock, body)

    def ask(self, body: Any, drop: Iterable[str] = ()) -> Any:
        """``call``, answered as plain values without the fields that must differ."""
        return plain(self.call(body), NOT_COMPARED | frozenset(drop))

    def connect(self) -> socket.socket:
        """A connection for several requests (``send_only``, ``_call``), which a broker may
        close."""
        return socket.create_connection(("127.0.0.1", self.port), timeout=20)


def send_only(sock: socket.socket, body: Any) -> None:
    """A request that gets no answer (Produce with acks=0)."""
    _send(sock, body)


def answered(sock: socket.socket, body: Any) -> bool:
    """Whether the connection still answers a request (False: the broker closed it)."""
    try:
        _call(sock, body)
        return True
    except (ConnectionError, OSError):
        return False


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return buf


def _send(sock: socket.socket, body: Any) -> None:
    # Request header v1 (v2 with its tagged-field byte for a flexible version).
    head = struct.pack(">hhih", int(body.__api_key__), int(body.__version__), 7, 6) + b"oracle"
    if body.__flexible__:
        head += b"\0"
    buf = io.BytesIO()
    entity_writer(type(body))(buf, body)
    frame = head + buf.getvalue()
    sock.sendall(struct.pack(">i", len(frame)) + frame)


def _call(sock: socket.socket, body: Any) -> Any:
    api_key, version = int(body.__api_key__), int(body.__version__)
    flexible = bool(body.__flexible__)
    _send(sock, body)
    resp = _exactly(sock, struct.unpack(">i", _exactly(sock, 4))[0])
    if struct.unpack(">i", resp[:4])[0] != 7:
        raise AssertionError("correlation id mismatch")
    # Response header v1 carries tagged fields, except ApiVersions' (always v0, KIP-511).
    off = 4 + (1 if flexible and api_key != 18 else 0)
    return entity_reader(load_response_schema(api_key, version))(resp, off)[0]


def build(cls: Any, **values: Any) -> Any:
    """A kio entity of ``cls`` from keyword values; nested entities may be given as dicts (or
    lists of dicts), omitted arrays are empty."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        hint: Any = hints[f.name]
        item: Any = _tuple_item(hint)
        if f.name not in values:
            if item is not None and f.default is dataclasses.MISSING:
                kwargs[f.name] = ()
            continue
        v = values[f.name]
        if item is not None and v is not None:
            kwargs[f.name] = tuple(
                build(item, **x) if isinstance(x, Mapping) and dataclasses.is_dataclass(item) else x
                for x in v
            )
        elif isinstance(v, Mapping) and dataclasses.is_dataclass(hint):
            kwargs[f.name] = build(hint, **v)
        else:
            kwargs[f.name] = v
    return cls(**kwargs)


def _tuple_item(hint: Any) -> Any:
    """The item type of ``tuple[X, ...]`` (or of ``tuple[X, ...] | None``), else None."""
    if isinstance(hint, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
    return None


def plain(x: Any, drop: frozenset[str] = NOT_COMPARED) -> Any:
    """A kio entity as dicts, lists, ints and strings; error codes as their names (a failed
    comparison then reads ``'topic_already_exists'`` rather than 36), fields in ``drop`` left
    out at every depth."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {
            f.name: plain(getattr(x, f.name), drop)
            for f in dataclasses.fields(x)
            if f.name not in drop
        }
    if isinstance(x, tuple | list):
        return [plain(v, drop) for v in x]
    if isinstance(x, enum.Enum):
        return x.name
    if isinstance(x, datetime.timedelta):
        return int(x / datetime.timedelta(milliseconds=1))
    if isinstance(x, datetime.datetime):
        return int(x.timestamp() * 1000)
    if isinstance(x, uuid.UUID):
        return str(x)
    if isinstance(x, bytes | bytearray | memoryview):
        return bytes(x)
    return x


def batch(
    values: list[bytes],
    first_timestamp_ms: int,
    *,
    keys: list[bytes] | None = None,
    producer: tuple[int, int, int] = (-1, -1, -1),
    codec: int = 0,
) -> Records:
    """One uncompressed record batch (magic 2) built by kafka-python, timestamps one ms apart
    from ``first_timestamp_ms`` (CreateTime: chosen by the client, so comparable);
    ``producer`` is (producer id, epoch, base sequence) for an idempotent producer's batch;
    ``codec`` Kafka's compression attribute (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    pid, epoch, seq = producer
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 20,
    )
    for i, v in enumerate(values):
        key = keys[i] if keys else None
        b.append(i, timestamp=first_timestamp_ms + i, key=key, value=v, headers=[])
    return Records(bytes(b.build()))


@dataclass(frozen=True)
class BatchShape:
    base_offset: int
    last_offset: int
    codec: int
    offsets: tuple[int, ...]
    timestamps: tuple[int, ...]
    values: tuple[bytes | None, ...]


def batches(records: bytes | None) -> list[BatchShape]:
    """The batches of a fetch answer, read by kafka-python."""
    from kafka.record.memory_records import MemoryRecords

    out = []
    mr = MemoryRecords(bytes(records or b""))
    while mr.has_next():
        b = mr.next_batch()
        if b is None:
            break
        rs = list(b)
        out.append(
            BatchShape(
                base_offset=b.base_offset,
                last_offset=b.last_offset,
                codec=b.compression_type,
                offsets=tuple(r.offset for r in rs),
                timestamps=tuple(r.timestamp for r in rs),
                values=tuple(r.value for r in rs),
            )
        )
    return out


def differences(longboat: Any, kafka: Any, path: str = "") -> list[str]:
    """Where two plain answers differ, one line a leaf: ``path: longboat=… kafka=…``."""
    if isinstance(longboat, dict) and isinstance(kafka, dict):
        out = []
        for k in sorted(set(longboat) | set(kafka), key=str):
            if k not in longboat or k not in kafka:
                out.append(
                    f"{path}.{k}: longboat={longboat.get(k, '<absent>')!r} "
                    f"kafka={kafka.get(k, '<absent>')!r}"
                )
            else:
                out += differences(longboat[k], kafka[k], f"{path}.{k}")
        return out
    if isinstance(longboat, list) and isinstance(kafka, list) and len(longboat) == len(kafka):
        return [
            d
            for i, (a, b) in enumerate(zip(longboat, kafka, strict=True))
            for d in differences(a, b, f"{path}[{i}]")
        ]
    if longboat != kafka:
        return [f"{path}: longboat={longboat!r} kafka={kafka!r}"]
    return []


def same(longboat: Any, kafka: Any) -> None:
    """Assert the two normalised answers are equal, naming every difference."""
    found = differences(longboat, kafka)
    assert not found, "\n".join(found)
