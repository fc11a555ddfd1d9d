"""api.kafka.protocol: framing, header versions, the advertised table, KIP-511's answer.

The request bytes here are written by kafka-python's own protocol classes (built from
Kafka's message definitions), so the framing is checked against a client's encoder, not
only against our own reader.
"""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from api.kafka.handlers import kafka_records
from api.kafka.protocol import (
    SUPPORTED,
    MalformedRequestError,
    api_versions_body,
    decode_request,
    encode_response,
    parse_header,
    unsupported_api_versions_frame,
)
from storage.batch import MAGIC_KAFKA, decode_records, encode_batch, iter_batches

kp = pytest.importorskip("kafka.protocol.metadata")


def test_a_flexible_request_from_kafka_python_parses_header_and_body() -> None:
    from kafka.protocol.metadata import MetadataRequest

    req = MetadataRequest[12](
        topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name="orders")],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    req.with_header(correlation_id=42, client_id="kp")
    frame = bytes(req.encode(version=12, header=True))
    h = parse_header(frame)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 12, 42, "kp")
    body = decode_request(h, frame)
    assert [t.name for t in body.topics] == ["orders"]
    assert body.allow_auto_topic_creation is False


def test_a_legacy_request_parses_with_header_v1() -> None:
    frame = struct.pack(">hhih", 3, 1, 7, 2) + b"id" + struct.pack(">i", -1)  # all topics
    h = parse_header(frame)
    assert (h.api_version, h.client_id, h.body_offset) == (1, "id", 12)
    assert decode_request(h, frame).topics is None


def test_truncated_frames_are_malformed() -> None:
    with pytest.raises(MalformedRequestError):
        parse_header(b"\0\x03\0")
    with pytest.raises(MalformedRequestError):
        parse_header(struct.pack(">hhih", 3, 1, 7, 50) + b"short")
    frame = struct.pack(">hhih", 3, 12, 7, -1) + b"\0" + b"\x05"  # body cut short
    with pytest.raises(MalformedRequestError):
        decode_request(parse_header(frame), frame)


def test_api_versions_answers_use_response_header_v0_even_when_flexible() -> None:
    from kafka.protocol.metadata import ApiVersionsResponse

    out = encode_response(18, 3, 9, api_versions_body(3))
    size, corr = struct.unpack_from(">ii", out)
    assert (size, corr) == (len(out) - 4, 9)
    resp = ApiVersionsResponse.decode(out[8:], version=3)  # no tagged header byte before it
    assert resp.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == SUPPORTED


def test_an_api_versions_from_the_future_gets_error_35_in_v0() -> None:
    from kafka.protocol.metadata import ApiVersionsResponse

    out = unsupported_api_versions_frame(5)
    resp = ApiVersionsResponse.decode(out[8:], version=0)
    assert resp.error_code == 35
    assert any(k.api_key == 18 and k.max_version == 3 for k in resp.api_keys)


def test_flexible_responses_carry_the_header_tag_byte() -> None:
    from api.kafka.handlers import ZERO_MS
    from api.kafka.protocol import build, response_module

    mod = response_module(12, 4)  # Heartbeat v4: flexible
    out = encode_response(
        12,
        4,
        1,
        build(
            mod,
            "HeartbeatResponse",
            throttle_time=ZERO_MS,
            error_code=ErrorCode.none,
            not_a_field_in_v4=1,
        ),
    )
    assert out[8] == 0  # response header v1's empty tagged fields
    legacy = encode_response(
        12,
        0,
        1,
        build(
            response_module(12, 0),
            "HeartbeatResponse",
            throttle_time=ZERO_MS,
            error_code=ErrorCode.none,
        ),
    )
    assert legacy == struct.pack(">iih", 6, 1, 0)


def test_produce_is_advertised_from_0_and_record_batch_v2_apis_from_their_minimum() -> None:
    # librdkafka turns compression off if Produce's minimum is above 0 (KAFKA-18659).
    assert SUPPORTED[0][0] == 0
    assert SUPPORTED[1][0] == 4  # Fetch v4+: record batch v2 and isolation levels
    assert SUPPORTED[18] == (0, 3)


def test_fetch_serves_msgpack_batches_as_magic_2_and_kafka_batches_as_stored() -> None:
    ours = encode_batch([(b"k", b"v", 5, [("h", b"x")])], base_offset=7, leader_epoch=2)
    theirs = encode_batch([(None, b"w", 6, [])], base_offset=8, magic=MAGIC_KAFKA)
    out = kafka_records(ours + theirs)
    assert [h.magic for _, h in iter_batches(out)] == [MAGIC_KAFKA, MAGIC_KAFKA]
    assert out.endswith(theirs)
    assert decode_records(out[: len(out) - len(theirs)]) == decode_records(ours)
    assert kafka_records(theirs) == theirs
