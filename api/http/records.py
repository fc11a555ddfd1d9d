"""Records over HTTP, pure: parse produce bodies into records, render delivery reports and reads.

Owns the formats, not the order of a produce (that is ``api.http.produce``, which calls
this module): what a v3 record ``{"partition_id", "key",
"value", "headers", "timestamp"}``, a v2 record and a msgpack record hold
(``parse_v3_record``, ``parse_v2_record``, ``parse_msgpack_record``); how a whole body or a
chunked stream splits into records (``split_body``, ``JsonStream``); how each record is
parsed on its own, so that a bad one fails alone (``parse_all``: a ``ParsedRecord`` or an
``HttpError`` per record, in request order); the delivery reports (``report_json``, and
``report_lines`` as NDJSON from cached fragments; ``api.http.fast_produce`` writes the same
bytes); and reads (JSON records of fetched batches; the msgpack and Arrow forms hand the
batches on whole).

Pure: no I/O, no clock (a record without a timestamp takes the ``default_ts`` it is given),
no ``HttpContext``.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from api.http.errors import HttpError, bad_request, unprocessable
from storage.batch import HEADER_SIZE, decode_records, iter_batches

BATCH_OVERHEAD_BYTES = HEADER_SIZE + 16
RECORD_OVERHEAD_BYTES = 24
"""Upper bounds of what msgpack adds around a batch body and a record's fields."""

DATA_TYPES = ("JSON", "STRING", "BINARY")
SCHEMA_TYPES = ("AVRO", "JSONSCHEMA", "PROTOBUF")


@dataclass(slots=True)
class ParsedRecord:
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int
    key_type: str | None
    value_type: str | None
    size: int
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Encoded:
    """A key or value already in its stored form (a schema type's wire format, made by
    ``api.http.embedded`` before parsing): JSON parsing never makes one, so a client cannot."""

    data: bytes
    kind: str


@dataclass(frozen=True, slots=True)
class Refused:
    """A record refused before parsing (its schema could not be resolved): its error."""

    error: HttpError


@dataclass(slots=True)
class Delivered:
    partition: int
    offset: int
    timestamp_ms: int


Outcome = Delivered | HttpError


def iso_ms(ms: int) -> str | int:
    """A report's timestamp: ISO-8601 in UTC to the millisecond."""
    try:
        return (
            datetime.fromtimestamp(ms / 1000, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )
    except (ValueError, OverflowError, OSError):
        return ms  # a batch written by another client: report what it holds


# --------------------------------------------------------------------------- parsing


def b64decode(data: Any, where: str) -> bytes:
    if not isinstance(data, str):
        raise bad_request(f"Bad Request: {where}={data!r} is not a base64 string.")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"Bad Request: {where}={data[:64]!r} is not a base64 string.") from None


def encode_data(field: Any, where: str) -> tuple[bytes | None, str | None]:
    """A v3 ``{"type", "data"}`` as bytes. No ``type`` means JSON (curl-friendly); a
    missing or null ``data`` is a null key or value (a tombstone)."""
    if field is None:
        return None, None
    if type(field) is Encoded:
        return field.data, field.kind
    if type(field) is dict:
        # The common shapes first: this runs once per record.
        kind = field.get("type", "JSON")
        data = field.get("data")
        if kind == "STRING" and type(data) is str:
            return data.encode(), "STRING"
        if kind == "JSON" and data is not None:
            return orjson.dumps(data), "JSON"
    if not isinstance(field, dict):
        raise unprocessable(
            f'\'{where}\' must be an object {{"type", "data"}}, got {type(field).__name__}.', 42206
        )
    kind = field.get("type", "JSON")
    if not isinstance(kind, str):
        raise unprocessable(f"'{where}.type' must be a string.", 42206)
    kind = kind.upper()
    if kind in SCHEMA_TYPES:
        # The JSON produce routes encode these before parsing (api.http.embedded); a
        # route that does not (msgpack records) takes bytes.
        raise unprocessable(
            f"'{where}.type' {kind} is taken by the JSON produce routes only; here use "
            "JSON, STRING or BINARY.",
            42201 if where == "key" else 42202,
        )
    if kind not in DATA_TYPES:
        raise unprocessable(
            f"'{where}.type' must be one of {', '.join(DATA_TYPES)}, got {kind!r}.", 42206
        )
    data = field.get("data")
    if data is None:
        return None, kind
    if kind == "JSON":
        return orjson.dumps(data), kind
    if kind == "STRING":
        if not isinstance(data, str):
            raise unprocessable(f"'{where}.data' must be a string for type STRING.", 42206)
        return data.encode(), kind
    return b64decode(data, f"{where}.data"), kind


TIMESTAMP_MS_MAX = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: beyond it a timestamp has no ISO-8601 form to report."""


def parse_timestamp(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool):
        raise unprocessable("'timestamp' must be an ISO-8601 string or ms since the epoch.")
    if isinstance(v, int):
        ts = v
    elif isinstance(v, str):
        try:
            dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise unprocessable(f"'timestamp' {v!r} is not an ISO-8601 date-time.") from None
        if dt.tzinfo is None:
            raise unprocessable(f"'timestamp' {v!r} has no time zone (add Z).")
        ts = int(dt.timestamp() * 1000)
    else:
        raise unprocessable("'timestamp' must be an ISO-8601 string or ms since the epoch.")
    # Kafka reserves negative timestamps (-1 is "none"); a record must have a real one.
    if not 0 <= ts <= TIMESTAMP_MS_MAX:
        raise unprocessable(f"'timestamp' must be between 1970 and 9999, got {v!r}.")
    return ts


def parse_headers(hs: Any) -> tuple[tuple[str, bytes | None], ...]:
    if hs is None:
        return ()
    if not isinstance(hs, list):
        raise unprocessable('\'headers\' must be a list of {"name", "value"}.')
    out = []
    for i, h in enumerate(hs):
        if not isinstance(h, dict) or not isinstance(h.get("name"), str):
            raise unprocessable(
                f'\'headers[{i}]\' must be {{"name": string, "value": base64 or null}}.'
            )
        v = h.get("value")
        out.append((h["name"], None if v is None else b64decode(v, f"headers[{i}].value")))
    return tuple(out)


def parse_partition(v: Any, where: str = "partition_id") -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise unprocessable(f"'{where}' must be a non-negative integer, got {v!r}.")
    return v


def parse_v3_record(obj: Any, default_ts: int) -> ParsedRecord:
    # Once per record: the absent fields cost one dict lookup each and no call.
    if type(obj) is not dict:
        if type(obj) is Refused:
            raise obj.error
        raise unprocessable(f"A record must be a JSON object, got {type(obj).__name__}.")
    get = obj.get
    pid = get("partition_id")
    if pid is not None and (type(pid) is not int or pid < 0):
        parse_partition(pid)  # raises with the message
    kf = get("key")
    key, kt = (None, None) if kf is None else encode_data(kf, "key")
    value, vt = encode_data(get("value"), "value")
    hs = get("headers")
    t = get("timestamp")
    if hs is None and t is None:
        size = RECORD_OVERHEAD_BYTES + (len(key) if key else 0) + (len(value) if value else 0)
        return ParsedRecord(pid, key, value, (), default_ts, kt, vt, size)
    ts = parse_timestamp(t)
    return _record(pid, key, value, parse_headers(hs), default_ts if ts is None else ts, kt, vt)


def _record(
    partition: int | None,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...],
    ts: int,
    kt: str | None,
    vt: str | None,
) -> ParsedRecord:
    size = RECORD_OVERHEAD_BYTES + (len(key) if key else 0) + (len(value) if value else 0)
    for n, hv in headers:
        size += len(n) + (len(hv) if hv else 0) + 8
    return ParsedRecord(partition, key, value, headers, ts, kt, vt, size)


def parse_v2_record(obj: Any, fmt: str, default_ts: int, partition: int | None) -> ParsedRecord:
    """A v2 record ``{"key", "value", "partition"}``: JSON values as JSON text, binary
    ones base64 (``application/vnd.kafka.<fmt>.v2+json``)."""
    if not isinstance(obj, dict):
        raise unprocessable(f"A record must be a JSON object, got {type(obj).__name__}.")
    p = parse_partition(obj.get("partition"), "partition") if partition is None else partition

    def conv(v: Any, where: str) -> bytes | None:
        if v is None:
            return None
        if fmt == "binary":
            return b64decode(v, where)
        return orjson.dumps(v)

    key = conv(obj.get("key"), "key")
    value = conv(obj.get("value"), "value")
    t = "BINARY" if fmt == "binary" else "JSON"
    return _record(
        p,
        key,
        value,
        (),
        default_ts,
        t if key is not None else None,
        t if value is not None else None,
    )


def parse_msgpack_record(obj: Any, default_ts: int, partition: int | None) -> ParsedRecord:
    """A msgpack record ``[key, value, timestamp_ms, [[name, value], ...]]``: bytes or nil
    key and value (both reported as BINARY)."""
    try:
        k, v, t, hs = obj
        if not (k is None or isinstance(k, bytes)) or not (v is None or isinstance(v, bytes)):
            raise TypeError("key and value must be bytes or nil")
        headers = tuple((n, hv) for n, hv in hs or ())
        if not all(type(n) is str and (hv is None or type(hv) is bytes) for n, hv in headers):
            # bytes(hv) would have made 10**9 zero bytes of an int (or OverflowError, a 500).
            raise TypeError("headers must be [[name (str), value (bytes or nil)], ...]")
        ts = parse_timestamp(t)
    except HttpError:
        raise
    except (TypeError, ValueError) as e:
        raise unprocessable(f"Bad record: {e}") from None
    return _record(partition, k, v, headers, default_ts if ts is None else ts, "BINARY", "BINARY")


RecordParser = Callable[[Any, int], ParsedRecord]
"""Parses one record of a body, given the request's timestamp for records without one."""


def parse_all(
    objs: Sequence[Any | HttpError], default_ts: int, parse: RecordParser = parse_v3_record
) -> list[ParsedRecord | HttpError]:
    """Each value parsed on its own: a bad one (or one the body splitter already failed)
    becomes its ``HttpError`` and the others go on (module docstring, step 1)."""
    out: list[ParsedRecord | HttpError] = []
    for obj in objs:
        if isinstance(obj, HttpError):
            out.append(obj)
            continue
        try:
            out.append(parse(obj, default_ts))
        except HttpError as e:
            out.append(e)
        except (TypeError, ValueError) as e:  # orjson: an integer beyond 64 bits
            out.append(unprocessable(f"Record not serializable: {e}", 42203))
    return out


class JsonStream:
    """Splits a stream of concatenated JSON values (newline-delimited or not) into values.

    A top-level array counts as its elements. A value that does not parse fails alone: at
    the end of the stream the rest of its line is skipped; before the end, a line that does
    not parse followed by a line that starts a JSON object that does is taken as a bad
    record, and anything else waits for more bytes (up to ``max_bytes``).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")("strict")
        self._text = ""
        self._dec = json.JSONDecoder()

    @staticmethod
    def _skip_ws(text: str, pos: int) -> int:
        n = len(text)
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        return pos

    def _parses(self, text: str) -> bool:
        try:
            self._dec.raw_decode(text)
            return True
        except (json.JSONDecodeError, RecursionError):
            return False

    def feed(self, chunk: bytes, final: bool = False) -> list[Any]:
        try:
            self._text += self._utf8.decode(chunk, final)
        except UnicodeDecodeError as e:
            self._utf8.reset()
            self._text = ""
            return [bad_request(f"Malformed JSON: not UTF-8 ({e.reason}).")]
        text, out, pos = self._text, [], 0
        while True:
            pos = self._skip_ws(text, pos)
            if pos >= len(text):
                break
            try:
                obj, end = self._dec.raw_decode(text, pos)
            except RecursionError:
                # Nested deeper than Python's stack allows (orjson, tried first, stops at
                # 1,024 levels): bad input, not a server error.
                nl = text.find("\n", pos)
                out.append(bad_request("Malformed JSON: nested too deeply."))
                pos = len(text) if nl < 0 else nl + 1
                continue
            except json.JSONDecodeError as e:
                nl = text.find("\n", pos)
                if final:
                    out.append(bad_request(f"Malformed JSON: {e.msg} at character {e.pos}."))
                    pos = len(text) if nl < 0 else nl + 1
                    continue
                if nl >= 0 and not self._parses(text[pos:nl]):
                    nxt = self._skip_ws(text, nl + 1)
                    if nxt < len(text) and text[nxt] == "{" and self._parses(text[nxt:]):
                        out.append(bad_request(f"Malformed JSON: {e.msg}."))
                        pos = nl + 1
                        continue
                if len(text) - pos > self.max_bytes:
                    out.append(
                        HttpError(
                            413, f"A record is larger than {self.max_bytes} bytes of JSON.", 413
                        )
                    )
                    pos = len(text) if nl < 0 else nl + 1
                    continue
                break
            if isinstance(obj, list):
                out.extend(obj)
            else:
                out.append(obj)
            pos = end
        self._text = text[pos:]
        return out


def split_body(raw: bytes) -> list[Any]:
    """The records of a whole body: one object, an array, or concatenated values."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        return obj if isinstance(obj, list) else [obj]
    lines = raw.split(b"\n")
    try:
        return [orjson.loads(line) for line in lines if line.strip()]
    except orjson.JSONDecodeError:
        pass
    stream = JsonStream(max_bytes=len(raw) + 1)
    return stream.feed(raw, final=True)


# --------------------------------------------------------------------------- reports


def report_prefix(cluster_id: str, topic: str) -> bytes:
    """What every successful report line of a request starts with, up to its partition."""
    return (
        orjson.dumps({"error_code": 200, "cluster_id": cluster_id, "topic_name": topic})[:-1]
        + b',"partition_id":'
    )


def report_json(cluster_id: str, topic: str, r: ParsedRecord | None, o: Outcome) -> dict[str, Any]:
    """One record's delivery report: where it went, or its error."""
    if isinstance(o, HttpError):
        d: dict[str, Any] = {"error_code": o.error_code, "message": o.message}
    else:
        d = {
            "error_code": 200,
            "cluster_id": cluster_id,
            "topic_name": topic,
            "partition_id": o.partition,
            "offset": o.offset,
            "timestamp": iso_ms(o.timestamp_ms),
            "key": None
            if r is None or r.key_type is None
            else {"type": r.key_type, "size": len(r.key) if r.key is not None else 0},
            "value": None
            if r is None or r.value_type is None
            else {"type": r.value_type, "size": len(r.value) if r.value is not None else 0},
        }
    return d


def report_lines(
    cluster_id: str, topic: str, parsed: list[ParsedRecord | HttpError], outcomes: list[Outcome]
) -> bytes:
    """The reports as NDJSON, byte for byte ``orjson.dumps(report_json(...))`` per line, built
    from cached fragments: per record this is the hot path of a 1,000-record request."""
    prefix = (
        orjson.dumps({"error_code": 200, "cluster_id": cluster_id, "topic_name": topic})[:-1]
        + b',"partition_id":'
    )
    stamps: dict[int, bytes] = {}
    frags: dict[tuple[str | None, int], bytes] = {}

    def frag(kind: str | None, data: bytes | None) -> bytes:
        if kind is None:
            return b"null"
        k = (kind, 0 if data is None else len(data))
        f = frags.get(k)
        if f is None:
            f = frags[k] = orjson.dumps({"type": kind, "size": k[1]})
        return f

    out = []
    for r, o in zip(parsed, outcomes, strict=True):
        if type(o) is Delivered and type(r) is ParsedRecord:
            ts = stamps.get(o.timestamp_ms)
            if ts is None:
                ts = stamps[o.timestamp_ms] = orjson.dumps(iso_ms(o.timestamp_ms))
            out.append(
                b'%s%d,"offset":%d,"timestamp":%s,"key":%s,"value":%s}'
                % (
                    prefix,
                    o.partition,
                    o.offset,
                    ts,
                    frag(r.key_type, r.key),
                    frag(r.value_type, r.value),
                )
            )
        else:
            out.append(
                orjson.dumps(
                    report_json(cluster_id, topic, r if isinstance(r, ParsedRecord) else None, o)
                )
            )
    out.append(b"")
    return b"\n".join(out)


# --------------------------------------------------------------------------- reading


def render_value(v: bytes | None, fmt: str, offset: int) -> Any:
    if v is None:
        return None
    if fmt == "binary":
        return base64.b64encode(v).decode()
    if fmt == "string":
        return v.decode("utf-8", errors="replace")
    try:
        return orjson.loads(v)
    except orjson.JSONDecodeError:
        raise unprocessable(
            f"The record at offset {offset} is not JSON; read it with "
            "format=binary or format=string.",
            42203,
        ) from None


def render_records(
    data: bytes,
    *,
    from_offset: int,
    fmt: str,
    key_fmt: str | None = None,
    max_offset: int | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """JSON records of the fetched batches at offsets >= ``from_offset``; and the offset to
    read next (from the batch headers, so a compacted gap is not read again). Control
    batches (transaction markers) are never records, as in Kafka's consumers."""
    out: list[dict[str, Any]] = []
    next_offset = from_offset
    kf = key_fmt or fmt
    for pos, h in iter_batches(data):
        next_offset = max(next_offset, h.next_offset)
        if h.is_control:
            continue
        for r in decode_records(memoryview(data)[pos : pos + h.size]):
            if r.offset < from_offset or (max_offset is not None and r.offset >= max_offset):
                continue
            out.append(
                {
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": render_value(r.key, kf, r.offset),
                    "value": render_value(r.value, fmt, r.offset),
                    "headers": [
                        {"name": n, "value": None if hv is None else base64.b64encode(hv).decode()}
                        for n, hv in r.headers
                    ],
                }
            )
        next_offset = max(next_offset, h.next_offset)
    return out, next_offset


def next_offset_of(data: bytes, from_offset: int) -> int:
    n = from_offset
    for _pos, h in iter_batches(data, verify=False):
        n = max(n, h.next_offset)
    return n
