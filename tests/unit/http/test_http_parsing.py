"""Pure parts of the HTTP API: record parsing, the JSON stream splitter, error mapping,
the cluster id, and the OpenAPI document against the routes a broker app really has."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.http.context import cluster_id_for
from api.http.errors import HttpError, kafka_error
from api.http.records import (
    TIMESTAMP_MS_MAX,
    JsonStream,
    encode_data,
    parse_msgpack_record,
    parse_timestamp,
    parse_v2_record,
    parse_v3_record,
    render_records,
    split_body,
)
from storage.batch import encode_batch


def test_encode_data_types() -> None:
    assert encode_data({"type": "JSON", "data": {"a": [1]}}, "value") == (b'{"a":[1]}', "JSON")
    assert encode_data({"data": 5}, "value") == (b"5", "JSON")  # no type: JSON
    assert encode_data({"type": "string", "data": "hé"}, "key") == ("hé".encode(), "STRING")
    assert encode_data({"type": "BINARY", "data": base64.b64encode(b"\0\1").decode()}, "value") == (
        b"\0\1",
        "BINARY",
    )
    assert encode_data({"type": "BINARY"}, "value") == (None, "BINARY")  # tombstone
    assert encode_data(None, "key") == (None, None)


@pytest.mark.parametrize(
    ("field", "code"),
    [
        ({"type": "BINARY", "data": "***"}, 400),
        ({"type": "BINARY", "data": 12}, 400),
        ({"type": "STRING", "data": 12}, 42206),
        ({"type": "AVRO", "data": 1}, 42202),
        ({"type": "PROTOBUF"}, 42202),
        ({"type": "XML", "data": 1}, 42206),
        ({"type": 3, "data": 1}, 42206),
        ("just a string", 42206),
    ],
)
def test_encode_data_errors(field: object, code: int) -> None:
    with pytest.raises(HttpError) as e:
        encode_data(field, "value")
    assert e.value.error_code == code


def test_schema_types_on_the_key_say_key_schema() -> None:
    with pytest.raises(HttpError) as e:
        encode_data({"type": "AVRO", "data": 1}, "key")
    assert e.value.error_code == 42201


def test_parse_v3_record_fields_and_defaults() -> None:
    r = parse_v3_record(
        {
            "partition_id": 2,
            "key": {"type": "STRING", "data": "k"},
            "headers": [
                {"name": "h", "value": base64.b64encode(b"v").decode()},
                {"name": "n", "value": None},
            ],
            "timestamp": "2021-02-05T19:14:42Z",
        },
        7,
    )
    assert (r.partition, r.key, r.value) == (2, b"k", None)
    assert r.headers == (("h", b"v"), ("n", None))
    assert r.timestamp_ms == 1612552482000
    assert parse_v3_record({}, 7).timestamp_ms == 7


@pytest.mark.parametrize("ts", [-1, TIMESTAMP_MS_MAX + 1, "2021-02-05T19:14:42", "soon", 1.5, True])
def test_bad_timestamps_are_refused(ts: object) -> None:
    with pytest.raises(HttpError) as e:
        parse_timestamp(ts)
    assert e.value.status == 422


@pytest.mark.parametrize(
    "rec",
    [
        {"partition_id": -1},
        {"partition_id": "0"},
        {"partition_id": True},
        {"headers": {"a": 1}},
        {"headers": [{"value": "AA=="}]},
        [1, 2],
    ],
)
def test_parse_v3_record_errors(rec: object) -> None:
    with pytest.raises(HttpError):
        parse_v3_record(rec, 0)


def test_parse_msgpack_record_fields() -> None:
    r = parse_msgpack_record([b"k", None, 5, [["h", b"v"], ["n", None]]], 0, 2)
    assert (r.key, r.value, r.timestamp_ms, r.headers, r.partition) == (
        b"k",
        None,
        5,
        (("h", b"v"), ("n", None)),
        2,
    )


@pytest.mark.parametrize(
    "rec",
    [
        [b"k", b"v", None, [["h", 10**9]]],  # bytes(10**9): a gigabyte of zeros
        [b"k", b"v", None, [["h", 2**63]]],  # bytes(2**63): OverflowError, once a 500
        [b"k", b"v", None, [[7, b"v"]]],  # str(7) once made a header name of anything
        [b"k", b"v", None, [["h", "text"]]],
        [b"k", b"v", None, [["h"]]],
        [b"k", b"v", None, 5],
        ["k", b"v", None, []],
        [b"k", b"v"],
    ],
)
def test_parse_msgpack_record_errors(rec: object) -> None:
    with pytest.raises(HttpError) as e:
        parse_msgpack_record(rec, 0, None)
    assert e.value.status == 422


def test_parse_v2_record_formats() -> None:
    r = parse_v2_record({"key": "a", "value": {"x": 1}}, "json", 0, None)
    assert (r.key, r.value, r.partition) == (b'"a"', b'{"x":1}', None)
    r = parse_v2_record(
        {"value": base64.b64encode(b"b").decode(), "partition": 1}, "binary", 0, None
    )
    assert (r.value, r.partition) == (b"b", 1)
    with pytest.raises(HttpError):
        parse_v2_record({"value": "*"}, "binary", 0, None)


def test_json_stream_joins_split_records_and_isolates_a_bad_line() -> None:
    s = JsonStream(max_bytes=1000)
    data = b'{"a": 1}\n{"b": "\xc3\xa9"}\n{oops\n{"c": 3}\n[{"d": 4}, {"e": 5}]'
    out = []
    for i in range(0, len(data), 3):  # cut through records and a UTF-8 sequence
        out += s.feed(data[i : i + 3])
    out += s.feed(b"", final=True)
    errors = [o for o in out if isinstance(o, HttpError)]
    good = [o for o in out if not isinstance(o, HttpError)]
    assert good == [{"a": 1}, {"b": "é"}, {"c": 3}, {"d": 4}, {"e": 5}]
    assert len(errors) == 1 and errors[0].status == 400


def test_json_stream_waits_for_an_incomplete_record_then_bounds_it() -> None:
    s = JsonStream(max_bytes=10)
    assert s.feed(b'{"a": ') == []
    out = s.feed(b'"' + b"x" * 20)
    assert len(out) == 1 and isinstance(out[0], HttpError) and out[0].status == 413


def test_json_stream_concatenated_without_newlines() -> None:
    s = JsonStream(max_bytes=100)
    assert s.feed(b'{"a":1}{"a":2} {"a":3}', final=True) == [{"a": 1}, {"a": 2}, {"a": 3}]


@given(
    st.lists(
        st.dictionaries(
            st.text(max_size=5), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5), max_size=3
        ),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 17),
)
def test_json_stream_any_chunking_gives_the_same_values(
    values: list[dict[str, object]], cut: int
) -> None:
    data = b"\n".join(orjson.dumps(v) for v in values)
    s = JsonStream(max_bytes=1 << 20)
    out = []
    for i in range(0, len(data), cut):
        out += s.feed(data[i : i + cut])
    out += s.feed(b"", final=True)
    assert out == values
    assert split_body(data) == values


def test_kafka_errors_map_to_statuses() -> None:
    assert (
        kafka_error("NOT_ENOUGH_REPLICAS", "x").status,
        kafka_error("NOT_ENOUGH_REPLICAS", "x").error_code,
    ) == (503, 50003)
    assert kafka_error("REQUEST_TIMED_OUT", "").error_code == 40801
    assert kafka_error("OFFSET_OUT_OF_RANGE", "m").message == "OFFSET_OUT_OF_RANGE: m"
    assert kafka_error("SOMETHING_NEW", "m").status == 500


def test_cluster_id_is_deterministic_and_kafka_shaped() -> None:
    a = cluster_id_for(None, [(2, "h:2"), (1, "h:1")])
    assert a == cluster_id_for(None, [(1, "h:1"), (2, "h:2")]) and len(a) == 22
    assert a != cluster_id_for(None, [(1, "h:1")])
    assert cluster_id_for("mine", [(1, "h:1")]) == "mine"


def test_render_records_skips_below_offset_and_formats() -> None:
    b = bytearray(encode_batch([(None, b'"a"', 5, ()), (b"k", b"\xff", 6, (("h", b"1"),))]))
    b[0:8] = (10).to_bytes(8, "big")  # base offset 10
    recs, nxt = render_records(bytes(b), from_offset=11, fmt="binary")
    assert nxt == 12 and len(recs) == 1
    assert recs[0]["offset"] == 11 and recs[0]["value"] == base64.b64encode(b"\xff").decode()
    assert recs[0]["headers"] == [{"name": "h", "value": base64.b64encode(b"1").decode()}]
    with pytest.raises(HttpError) as e:
        render_records(bytes(b), from_offset=10, fmt="json")
    assert e.value.error_code == 42203


def test_openapi_document_matches_the_broker_routes(tmp_path: Path) -> None:
    from api.http.openapi import openapi_document
    from api.node.broker_app import build_broker
    from api.node.config import NodeConfig

    app, _srv = build_broker(
        NodeConfig(node_id=101, controller_quorum="1@127.0.0.1:1", data_dir=tmp_path),
        autostart=False,
    )
    routed = set()
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if (
            route.method == "HEAD"
            or path.startswith("/internal")
            or path in ("/v3/broker/metadata",)
            # The web console: a page and the reads it makes for itself, documented with it
            # (docs/operations.md, "The console"), not part of the REST API.
            or path.startswith("/console")
            # The client library's msgpack protocol (the public copies of the node routes the
            # Python client and Spark use), documented in docs/client.md and docs/security.md.
            or path.startswith("/binary/")
        ):
            continue
        routed.add((route.method.lower(), path))
    doc = openapi_document()
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert routed == documented


def test_a_body_nested_too_deeply_is_bad_input_not_a_server_error() -> None:
    # orjson refuses past 1,024 levels; the fallback parser then hit Python's recursion
    # limit, and the RecursionError became a 500.
    deep = b'[{"value": {"data": ' + b"[" * 5000 + b"]" * 5000 + b"}}]"
    (err,) = split_body(deep)
    assert isinstance(err, HttpError) and err.status == 400 and "too deeply" in err.message
    ok = b'{"value": {"data": 1}}'
    got = JsonStream(1 << 20).feed(deep + b"\n" + ok, final=True)
    assert isinstance(got[0], HttpError) and got[1:] == [{"value": {"data": 1}}]
