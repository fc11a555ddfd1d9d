"""The JSON produce fast path (api.http.fast_produce) against the general path: on any body it
either declines or stores the same batches in the same partitions and answers the same bytes.

Both paths run as functions (``api.http.v3.produce_body``, with and without the fast path)
over an ``HttpContext`` whose router records the batches it is given, so no cluster is needed.
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.http import fast_produce
from api.http.context import HttpContext
from api.http.errors import HttpError
from api.http.metrics import BrokerMetrics
from api.http.v3 import produce_body
from broker.replica_manager import ReplicaError
from storage.batch import decode_records

TOPIC = "orders"
NOW_MS = 1_767_225_600_123
CLUSTER_ID = "c%d-luster"  # a '%' in a cached fragment must not be taken as a format


@dataclass
class RecordingRouter:
    """The leaders' side: appends each batch to its partition's log, refuses ``failing``."""

    failing: frozenset[int] = frozenset()
    append_time_ms: int = -1
    first_offset: int = 0
    logs: dict[int, list[bytes]] = field(default_factory=dict)
    next_offset: dict[int, int] = field(default_factory=dict)

    async def produce(
        self, topic: str, p: int, acks: int, timeout_ms: int, batch: bytes
    ) -> dict[str, Any]:
        await asyncio.sleep(0)  # let the partitions interleave, as real produces do
        if p in self.failing:
            raise ReplicaError("NOT_ENOUGH_REPLICAS", f"partition {p}: 1 in sync, 2 needed")
        base = self.next_offset.get(p, self.first_offset)
        n = len(decode_records(batch))
        self.next_offset[p] = base + n
        self.logs.setdefault(p, []).append(batch)
        return {
            "base_offset": base,
            "last_offset": base + n - 1,
            "log_append_time": self.append_time_ms,
        }


@dataclass(frozen=True)
class Setup:
    partitions: int = 3
    max_message_bytes: int | None = None
    failing: frozenset[int] = frozenset()
    append_time_ms: int = -1
    acks: int = -1
    sticky_before: int = -1
    first_offset: int = 0
    """Where the partitions' logs end before the produce: report lines write offsets in
    runs of a thousand (``lines_with_offsets``), so the bodies cross such boundaries."""


def context(s: Setup) -> HttpContext:
    configs = {} if s.max_message_bytes is None else {"max.message.bytes": str(s.max_message_bytes)}
    image = SimpleNamespace(
        topics={TOPIC: SimpleNamespace(partitions=dict.fromkeys(range(s.partitions)))},
        configs=SimpleNamespace(topic_config=lambda topic, key: configs.get(key)),
    )
    ctx = HttpContext(
        broker_id=1,
        cluster_id=CLUSTER_ID,
        image_fn=lambda: image,
        router=RecordingRouter(
            s.failing,
            s.append_time_ms,  # type: ignore[arg-type]
            s.first_offset,
        ),
        controllers=None,
        metrics=BrokerMetrics(),
    )  # type: ignore[arg-type]
    if s.sticky_before >= 0:
        ctx._rr[TOPIC] = s.sticky_before
    return ctx


def run(s: Setup, raw: bytes, *, fast: bool) -> dict[str, Any]:
    """Everything observable of one produce: the answer, the logs, the sticky rotation, the
    metrics."""
    ctx = context(s)
    with mock.patch("api.http.produce.now_ms", lambda: NOW_MS):
        try:
            resp = asyncio.run(
                produce_body(ctx, TOPIC, raw, acks=s.acks, timeout_ms=1000, fast=fast)
            )
            answer: tuple[Any, ...] = (resp.status, resp.content_type, resp.body)
        except HttpError as e:
            answer = ("raised", e.status, e.error_code, e.message)
    m = ctx.metrics
    return {
        "answer": answer,
        "logs": ctx.router.logs,  # type: ignore[attr-defined]
        "sticky": dict(ctx._rr),
        "metrics": (
            m.produce_records._value.get(),
            m.bytes_in._value.get(),
            m.produce_record_errors._value.get(),
        ),
    }


def taken(s: Setup, raw: bytes) -> bool:
    return (
        fast_produce.plan(
            raw,
            partitions=s.partitions,
            limit=s.max_message_bytes or 1048588,
            timestamp_ms=NOW_MS,
            next_sticky=lambda: 0,
        )
        is not None
    )


def same_as_general_path(s: Setup, raw: bytes) -> bool:
    """Asserts the two paths agree; says whether the fast path took the body."""
    general = run(s, raw, fast=False)
    fast = run(s, raw, fast=True)
    assert fast == general
    return taken(s, raw)


# --------------------------------------------------------------------------- generated bodies

MARK = "\x7f"
"""DEL: legal unescaped in JSON text; replaced in the body by bytes a serialiser would not
write (bad UTF-8, an encoded surrogate, an escaped lone surrogate, a NUL)."""

texts = st.text(st.characters(exclude_categories=("Cs",), exclude_characters=MARK), max_size=40)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)

plain_strings = texts | st.from_regex(r"[a-z0-9 ]{0,60}", fullmatch=True)


@st.composite
def data_field(draw: st.DrawFn, *, plain: bool) -> Any:
    kind = draw(st.sampled_from(["STRING", "BINARY", "JSON", None]))
    if kind == "STRING":
        data: Any = draw(plain_strings)
    elif kind == "BINARY":
        data = base64.b64encode(draw(st.binary(max_size=40))).decode()
    else:
        data = draw(json_values.filter(lambda v: v is not None) if plain else json_values)
    f: dict[str, Any] = {"data": data}
    if kind is not None:
        f["type"] = kind
    if not plain:
        f = draw(
            st.sampled_from(
                [
                    f,
                    f,
                    f,
                    {"type": kind or "JSON"},
                    {"type": "string", "data": "x"},
                    {"type": "AVRO", "data": 1},
                    {"type": None, "data": 1},
                    {"type": "STRING", "data": 7},
                    {"type": "BINARY", "data": "not base64!"},
                    {"type": "JSON", "data": 2**64},
                    {"data": 1, "extra": 2},
                    "text",
                    {"type": "STRING", "data": f"a{MARK}b"},
                ]
            )
        )
    return f


@st.composite
def json_record(draw: st.DrawFn, *, plain: bool) -> Any:
    r: dict[str, Any] = {}
    if draw(st.booleans()):
        r["partition_id"] = draw(
            st.integers(0, 2)
            if plain
            else st.sampled_from([0, 1, 2, 3, -1, 2**70, True, 1.0, "1", None])
        )
    if draw(st.booleans()):
        r["key"] = draw(data_field(plain=plain) if plain else st.none() | data_field(plain=False))
    if plain or draw(st.integers(0, 9)) > 0:
        r["value"] = draw(data_field(plain=plain))
    if not plain:
        extra = draw(
            st.sampled_from(
                [
                    None,
                    "headers",
                    "null headers",
                    "timestamp",
                    "null timestamp",
                    "unknown",
                    "not an object",
                ]
            )
        )
        if extra == "headers":
            r["headers"] = [{"name": "h", "value": "aGk="}]
        elif extra == "null headers":
            r["headers"] = None
        elif extra == "timestamp":
            r["timestamp"] = "2026-01-01T00:00:00Z"
        elif extra == "null timestamp":
            r["timestamp"] = None
        elif extra == "unknown":
            r["color"] = "blue"
        elif extra == "not an object":
            return [r]
    return r


def serialise(obj: Any, style: str) -> bytes:
    if style == "orjson":  # compact, UTF-8, orjson's number forms: the texts kept as sent
        try:
            return orjson.dumps(obj)
        except TypeError:  # an integer beyond 64 bits
            style = "compact"
    if style == "compact":
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    if style == "ascii":  # \u escapes, surrogate pairs for astral characters
        return json.dumps(obj, separators=(",", ":")).encode()
    if style == "spaced":
        return json.dumps(obj, ensure_ascii=False).encode()
    if style == "indented":
        return json.dumps(obj, indent="\t", ensure_ascii=False).encode().replace(b"\n", b"\r\n")
    assert style == "ndjson"
    items = obj if isinstance(obj, list) else [obj]
    return b"\n".join(json.dumps(o, ensure_ascii=False).encode() for o in items) + b"\n"


@st.composite
def body(draw: st.DrawFn) -> tuple[bytes, bool]:
    """(body, whether every record in it is plain)."""
    plain = draw(st.booleans())
    if plain:
        recs = draw(st.lists(json_record(plain=True), min_size=1, max_size=12))
    else:
        recs = draw(st.lists(json_record(plain=False), min_size=0, max_size=12))
    single = len(recs) == 1 and draw(st.booleans())
    style = draw(
        st.sampled_from(
            ["orjson", "compact", "ascii", "spaced", "indented"] + ([] if plain else ["ndjson"])
        )
    )
    raw = serialise(recs[0] if single else recs, style)
    if MARK.encode() in raw:
        raw = raw.replace(
            MARK.encode(),
            draw(st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\\ud800", b"\x00", MARK.encode()])),
        )
    return raw, plain and style != "ndjson"


setups = st.builds(
    Setup,
    partitions=st.integers(1, 4),
    max_message_bytes=st.none() | st.integers(85, 400),
    failing=st.frozensets(st.integers(0, 3), max_size=1),
    append_time_ms=st.sampled_from([-1, 1_700_000_000_000]),
    acks=st.sampled_from([-1, 1, 0]),
    sticky_before=st.integers(-1, 5),
    first_offset=st.sampled_from([0, 995, 999_996, 123_456_789_998]),
)


@given(st.integers(0, 10**13), st.integers(0, 2500))
def test_offsets_are_written_in_runs_as_decimal_as_percent_d(base: int, n: int) -> None:
    expected = [b"%d" % o for o in range(base, base + n)]
    assert fast_produce.offset_texts(base, n) == expected
    head, rest = b'{"offset":', b',"x":1}\n'
    assert fast_produce.lines_with_offsets(head, rest, base, n) == b"".join(
        head + o + rest for o in expected
    )


@settings(max_examples=400)
@given(setups, body())
def test_fast_path_declines_or_matches_the_general_path(s: Setup, b: tuple[bytes, bool]) -> None:
    raw, _ = b
    same_as_general_path(s, raw)


@settings(max_examples=200)
@given(body().filter(lambda b: b[1]), st.integers(3, 4))  # plain ids are 0-2
def test_fast_path_takes_bodies_of_plain_records(b: tuple[bytes, bool], partitions: int) -> None:
    raw, _ = b
    assert same_as_general_path(Setup(partitions=partitions), raw), raw


# --------------------------------------------------------------------------- chosen cases


def records(n: int, **fields: Any) -> list[dict[str, Any]]:
    return [
        {"value": {"type": "STRING", "data": f"{i:08d}" + "x" * 62}, **fields} for i in range(n)
    ]


@pytest.mark.parametrize(
    "raw",
    [
        orjson.dumps(records(1000, partition_id=1)),  # the benchmark's body
        orjson.dumps(records(300)),  # keyless: one sticky partition
        orjson.dumps(
            [
                {"key": {"type": "STRING", "data": f"k{i}"}, "value": {"data": {"i": i}}}
                for i in range(300)
            ]
        ),
        orjson.dumps([{"value": {"type": "BINARY", "data": "aGVsbG8="}}] * 3),
        orjson.dumps({"value": {"data": [1, 2.5, "é"]}}),  # one object: one report, not NDJSON
        orjson.dumps([{"value": {"data": [1, 2.5, "é"]}}]),
        b'[{"value": {"data": {"b": 1.0E3, "a": "\\u00e9\\/"}}}]',  # re-encoded as orjson would
        b'[{"value": {"data": {"a": 1, "a": 2}}}]',  # duplicate names: the last, as orjson
        b'[{"value": {"data": 1}, "value": {"data": 2}}]',
        b'[{"value": {"data": 18446744073709551616}}]',  # beyond 64 bits: orjson reads a float
        b'[{"value": {"type": "STRING", "data": "\\ud83d\\ude00 \\"q\\" \\\\"}}]',
        b'[{"value": {"type": "STRING", "data": ""}}, {"value": {"type": "STRING", "data": ""}}]',
    ],
)
def test_fast_path_takes_and_matches(raw: bytes) -> None:
    assert same_as_general_path(Setup(), raw)


def test_batches_are_cut_at_max_message_bytes_as_the_general_path_cuts_them() -> None:
    raw = orjson.dumps(records(50, partition_id=0) + records(50, partition_id=2))
    s = Setup(max_message_bytes=1000)
    assert same_as_general_path(s, raw)
    assert len(run(s, raw, fast=True)["logs"][0]) > 1


def test_a_refused_batch_fails_its_records_and_a_single_record_raises() -> None:
    s = Setup(failing=frozenset({1}))
    assert same_as_general_path(
        s, orjson.dumps(records(10, partition_id=1) + records(10, partition_id=0))
    )
    assert same_as_general_path(s, orjson.dumps(records(1, partition_id=1)))
    assert run(s, orjson.dumps(records(1, partition_id=1)), fast=True)["answer"][0] == "raised"


@pytest.mark.parametrize("depth", range(1017, 1024))
def test_deep_data_near_orjson_depth_limit(depth: int) -> None:
    raw = b'[{"value": {"data": ' + b"[" * depth + b"]" * depth + b"}}]"
    same_as_general_path(Setup(), raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'[{"value": {"type": "STRING", "data": "a\xffb"}}]',  # bad UTF-8: orjson refuses
        b'[{"value": {"type": "STRING", "data": "\xed\xa0\x80"}}]',  # an encoded surrogate
        b'[{"value": {"type": "STRING", "data": "\\ud800"}}]',  # a lone surrogate
        b'[{"value": {"type": "STRING", "data": 5}}]',
        b'[{"value": {"type": "STRING", "data": "a"}}, {"value": {"type": "STRING", "data": 5}},'
        b' {"value": {"type": "STRING", "data": ["x"]}}, {"value": {"type": "STRING", "data": "b"}}]',
        b'[{"value": {"type": "STRING"}}]',  # a tombstone
        b'[{"value": {"data": "x"}, "timestamp": 5}]',
        b'[{"partition_id": 3, "value": {"data": "x"}}]',
        b'[{"value": {"data": "x"}}]\n[{"value": {"data": "y"}}]',
        b"[]",
    ],
)
def test_fast_path_declines(raw: bytes) -> None:
    assert not same_as_general_path(Setup(), raw)
