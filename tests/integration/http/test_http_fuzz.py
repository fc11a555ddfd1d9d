"""Property-based fuzz of produce and read against a real cluster: no request, however
malformed, gets a 5xx answer, and every record acknowledged (a report with error_code 200) is
read back at its partition and offset with the bytes that were sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from http_cluster_support import HttpCluster, http_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow

TOPIC = "fuzz"
PARTITIONS = 3

ACKED: dict[tuple[int, int], tuple[bytes | None, bytes | None]] = {}


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpCluster]:
    root: Path = tmp_path_factory.mktemp("http-fuzz")
    with http_cluster(root) as cl:
        cl.create_topic(TOPIC, partitions=PARTITIONS, rf=3, configs={"max.message.bytes": "2000"})
        yield cl


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)

junk = st.one_of(
    json_values,
    st.text(max_size=30),
    st.integers(),
    st.binary(max_size=10).map(lambda b: base64.b64encode(b).decode()),
)

data_fields = st.one_of(
    st.none(),
    st.fixed_dictionaries({"type": st.just("JSON"), "data": json_values}),
    st.fixed_dictionaries({"type": st.just("STRING"), "data": st.text(max_size=3000)}),
    st.fixed_dictionaries(
        {
            "type": st.just("BINARY"),
            "data": st.binary(max_size=50).map(lambda b: base64.b64encode(b).decode()),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["BINARY", "STRING", "AVRO", "json", "xyz", 7]), "data": junk}
    ),
    junk,
)

records = st.fixed_dictionaries(
    {},
    optional={
        "partition_id": st.one_of(st.integers(-2, PARTITIONS + 1), junk),
        "key": data_fields,
        "value": data_fields,
        "headers": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.text(max_size=5)}, optional={"value": st.one_of(st.none(), junk)}
                ),
                max_size=3,
            ),
            junk,
        ),
        "timestamp": st.one_of(
            st.integers(0, 2**41),
            st.sampled_from(["2024-01-02T03:04:05Z", "yesterday", "2024-01-02T03:04:05"]),
            junk,
        ),
    },
)


def expected_bytes(field: Any) -> bytes | None:
    if field is None or field.get("data") is None:
        return None
    kind = str(field.get("type", "JSON")).upper()  # the server takes the type in any case
    if kind == "JSON":
        # The server parses with orjson, which reads an integer beyond 64 bits as a float.
        return orjson.dumps(orjson.loads(json.dumps(field["data"])))
    if kind == "STRING":
        return str(field["data"]).encode()
    return base64.b64decode(field["data"])


def server_error(code: int) -> bool:
    """A 5xx status, or a REST Proxy code that starts with one (50002, ...)."""
    return 500 <= code < 600 or code >= 50000


def note_reports(sent: list[Any], reports: list[dict[str, Any]]) -> None:
    assert len(reports) == len(sent)
    for rec, rep in zip(sent, reports, strict=True):
        assert not server_error(rep["error_code"]), rep
        if rep["error_code"] == 200:
            key = (rep["partition_id"], rep["offset"])
            assert key not in ACKED, f"offset {key} acknowledged twice"
            ACKED[key] = (expected_bytes(rec.get("key")), expected_bytes(rec.get("value")))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    batch=st.lists(records, min_size=1, max_size=6),
    shape=st.sampled_from(["single", "array", "ndjson", "batch", "chunked"]),
    broker=st.integers(0, 2),
)
def test_fuzz_produce_never_500_and_reports_match(
    c: HttpCluster, batch: list[Any], shape: str, broker: int
) -> None:
    url = f"{c.v3(broker)}/topics/{TOPIC}/records"
    try:
        lines = [json.dumps(r).encode() for r in batch]
    except ValueError:
        return
    if shape == "single":
        status, _, body = c.call(
            "POST", url, raw=lines[0], headers={"Content-Type": "application/json"}
        )
        assert status < 500, body
        if status == 200:
            note_reports(batch[:1], [body])
        return
    if shape == "batch":
        entries = [{**r, "id": str(i)} for i, r in enumerate(batch)]
        status, _, body = c.call("POST", url + ":batch", {"entries": entries})
        assert status < 500, body
        if status == 207:
            reps = sorted(body["successes"] + body["failures"], key=lambda r: int(r["id"]))
            note_reports(batch, reps)
        return
    if shape == "array":
        status, _, body = c.call(
            "POST",
            url,
            raw=b"[" + b",".join(lines) + b"]",
            headers={"Content-Type": "application/json"},
        )
    elif shape == "ndjson":
        status, _, body = c.call(
            "POST", url, raw=b"\n".join(lines), headers={"Content-Type": "application/json"}
        )
    else:
        blob = b"\n".join(lines) + b"\n"
        status, _, body = c.call(
            "POST", url, chunks=[blob[i : i + 23] for i in range(0, len(blob), 23)]
        )
    assert status < 500, body
    if status == 200:
        note_reports(batch, body if isinstance(body, list) else [body])


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)),
    ctype=st.sampled_from(
        [
            "application/json",
            "application/msgpack",
            "application/vnd.kafka.json.v2+json",
            "application/vnd.kafka.binary.v2+json",
            "text/plain",
            "",
        ]
    ),
    path=st.sampled_from(["v3", "v3batch", "v2"]),
)
def test_fuzz_garbage_bodies_never_500(c: HttpCluster, raw: bytes, ctype: str, path: str) -> None:
    url = {
        "v3": f"{c.v3()}/topics/{TOPIC}/records",
        "v3batch": f"{c.v3()}/topics/{TOPIC}/records:batch",
        "v2": f"{c.urls[1]}/topics/{TOPIC}",
    }[path]
    status, _, body = c.call("POST", url, raw=raw, headers={"Content-Type": ctype} if ctype else {})
    # What garbage that happens to parse appends is not tracked: the read-back check is
    # that every tracked acknowledgement is there, not that nothing else is.
    assert status < 500, body


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    offset=st.one_of(st.integers(-5, 10_000), st.sampled_from(["earliest", "latest", "x"])),
    p=st.integers(-1, PARTITIONS + 1),
    max_bytes=st.integers(-1, 1 << 21),
    fmt=st.sampled_from(["binary", "json", "string", "bogus"]),
)
def test_fuzz_read_never_500(c: HttpCluster, offset: Any, p: int, max_bytes: int, fmt: str) -> None:
    status, _, body = c.call(
        "GET",
        f"{c.v3()}/topics/{TOPIC}/partitions/{p}/records?"
        f"offset={offset}&max_bytes={max_bytes}&timeout_ms=0"
        f"&format={fmt}",
    )
    assert status < 500, body


def test_every_acknowledged_record_reads_back(c: HttpCluster) -> None:
    assert ACKED, "the fuzz acknowledged nothing: the strategies are too strict"
    got: dict[tuple[int, int], tuple[bytes | None, bytes | None]] = {}
    for p in range(PARTITIONS):
        for r in c.read_all(TOPIC, p, i=p % 3):
            got[(p, r["offset"])] = (
                None if r["key"] is None else base64.b64decode(r["key"]),
                None if r["value"] is None else base64.b64decode(r["value"]),
            )
    missing = {k: v for k, v in ACKED.items() if got.get(k) != v}
    assert not missing, {k: (v, got.get(k)) for k, v in list(missing.items())[:5]}
