"""Kafka's wire framing and the versions Longboat speaks: pure, no I/O.

A request is ``int32 size`` then a header and a body; a response is ``int32 size``, a header
(``correlation_id``, plus an empty tagged-field section in header v1) and a body. Header
versions follow the body's: a flexible body (compact strings, tagged fields) has request
header v2 and response header v1, except that **ApiVersions always answers with response
header v0** (KIP-511: a client that does not yet know our versions must be able to read it).

Bodies are kio's generated dataclasses (``kio.schema.<api>.v<N>``, from Kafka's own message
definitions); ``build`` makes the one for a version from a superset of fields, so a handler
is written once for its whole version range.

``SUPPORTED`` is what ApiVersions advertises, and only what the handlers implement (a client
picks its features from it). Produce is advertised from version 0 though versions 0-2 are
refused: librdkafka turns compression off when the broker's Produce minimum is above 0
(KAFKA-18659, librdkafka#4956), which is why Kafka 4 advertises 0 too.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from functools import cache
from types import ModuleType
from typing import Any, NamedTuple

from kio.index import load_payload_module, load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

API_VERSIONS = 18
PRODUCE = 0
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

SUPPORTED: dict[int, tuple[int, int]] = {
    0: (0, 9),  # Produce (3-9 served; 0-2 refused, see the module docstring)
    1: (4, 12),  # Fetch: record batch v2 needs >= 4; 13+ names topics by id
    2: (1, 7),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 7),  # OffsetFetch (8+ batches groups)
    10: (0, 4),  # FindCoordinator
    11: (0, 7),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 4),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    18: (0, 3),  # ApiVersions
    19: (2, 5),  # CreateTopics
    20: (1, 4),  # DeleteTopics
    22: (0, 4),  # InitProducerId
    24: (0, 3),  # AddPartitionsToTxn (4+ batches transactions, for brokers)
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 4),  # EndTxn (5 is KIP-890 part 2's: the epoch bumped on every end)
    28: (0, 3),  # TxnOffsetCommit
    # the admin APIs (api.kafka.admin)
    15: (0, 6),  # DescribeGroups (6: an unknown group is GROUP_ID_NOT_FOUND, KIP-1043)
    16: (0, 5),  # ListGroups
    23: (2, 4),  # OffsetForLeaderEpoch (KIP-320; 2+ carries the current leader epoch)
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    35: (1, 4),  # DescribeLogDirs
    21: (0, 2),  # DeleteRecords (to each partition's leader)
    43: (0, 2),  # ElectLeaders (0: preferred only; 1+ election type)
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    44: (0, 1),  # IncrementalAlterConfigs
    47: (0, 0),  # OffsetDelete
    60: (0, 2),  # DescribeCluster
    # SASL (api.kafka.server): answered ILLEGAL_SASL_STATE on a listener without SASL.
    17: (0, 1),  # SaslHandshake (0: raw tokens follow; 1: SaslAuthenticate frames them)
    36: (0, 2),  # SaslAuthenticate (1+: session lifetime, KIP-368; always 0 here)
    # ACL and SCRAM administration (api.kafka.security_admin).
    29: (1, 3),  # DescribeAcls (v0 has no pattern types; Kafka 4 starts at 1)
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    50: (0, 0),  # DescribeUserScramCredentials (KIP-554)
    51: (0, 0),  # AlterUserScramCredentials
}
PRODUCE_SERVED_MIN = 3

_HEADER_V1 = struct.Struct(">hhih")
_SIZE = struct.Struct(">i")
_I32 = struct.Struct(">i")


class MalformedRequestError(Exception):
    """A frame that does not parse: Kafka closes the connection for these."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise MalformedRequestError("varint runs past the frame")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise MalformedRequestError("varint longer than 5 bytes")


@cache
def is_flexible(api_key: int, version: int) -> bool:
    """Whether this request version uses the flexible encoding (request header v2)."""
    return bool(load_request_schema(api_key, version).__flexible__)


def parse_header(frame: bytes) -> RequestHeader:
    """The header of one request frame (without its size prefix). A version outside
    ``SUPPORTED`` still parses (header v1 is a prefix of v2), so it can be refused politely."""
    if len(frame) < _HEADER_V1.size:
        raise MalformedRequestError(f"a {len(frame)}-byte frame has no request header")
    api_key, version, correlation_id, n = _HEADER_V1.unpack_from(frame, 0)
    pos = _HEADER_V1.size
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise MalformedRequestError("client_id runs past the frame")
        client_id = frame[pos : pos + n].decode("utf-8", "replace")
        pos += n
    if supports(api_key, version) and is_flexible(api_key, version):
        count, pos = _read_uvarint(frame, pos)  # header tagged fields: none are known
        for _ in range(count):
            _tag, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise MalformedRequestError("header tagged fields run past the frame")
    return RequestHeader(api_key, version, correlation_id, client_id, pos)


def supports(api_key: int, version: int) -> bool:
    r = SUPPORTED.get(api_key)
    return r is not None and r[0] <= version <= r[1]


def decode_request(header: RequestHeader, frame: bytes) -> Any:
    """The request body as kio's dataclass for its version."""
    cls = load_request_schema(header.api_key, header.api_version)
    try:
        body, _size = entity_reader(cls)(frame, header.body_offset)
    except Exception as e:  # kio raises its own and the native reader's errors
        raise MalformedRequestError(
            f"api {header.api_key} v{header.api_version} body does not parse: {e}"
        ) from e
    return body


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    return load_payload_module(api_key, version, EntityType.response)


def build(module: ModuleType, name: str, /, **fields: Any) -> Any:
    """``module.name(**fields)``, keeping only the fields this version has: a handler passes
    the superset (newer versions' fields included) and each version takes its own."""
    cls = getattr(module, name)
    known = _field_names(cls)
    return cls(**{k: v for k, v in fields.items() if k in known})


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """One response frame, size prefix included."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    buf.write(_I32.pack(correlation_id))
    if api_key != API_VERSIONS and is_flexible(api_key, version):
        buf.write(b"\0")  # response header v1: no tagged fields
    entity_writer(type(body))(buf, body)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def api_versions_body(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    """The ApiVersions response for ``version``: the whole table, also with an error, as
    KIP-511 asks (the client then retries with a version from it)."""
    mod = response_module(API_VERSIONS, version)
    keys = tuple(
        build(mod, "ApiVersion", api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(SUPPORTED.items())
    )
    return build(
        mod,
        "ApiVersionsResponse",
        error_code=error,
        api_keys=keys,
        throttle_time=datetime.timedelta(0),
    )


def unsupported_api_versions_frame(correlation_id: int) -> bytes:
    """An ApiVersions request of a version above ours: answer in v0 with error 35
    (UNSUPPORTED_VERSION) and our ranges (KIP-511)."""
    return encode_response(
        API_VERSIONS, 0, correlation_id, api_versions_body(0, ErrorCode.unsupported_version)
    )


def error_code(name: str) -> ErrorCode:
    """Kafka's error for one of Longboat's error names (``NOT_LEADER_OR_FOLLOWER``...)."""
    try:
        return ErrorCode[name.lower()]
    except KeyError:
        return ErrorCode.unknown_server_error
