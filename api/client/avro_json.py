"""Avro's JSON encoding, to and from the datums fastavro's binary writer and reader use.

The REST Proxy takes and gives Avro values in Avro's JSON encoding: a union's non-null value is
wrapped in an object naming its branch (``{"string": "x"}``, ``{"bench.Trade": {...}}``), bytes
and fixed are strings whose code points 0-255 are the bytes. fastavro's ``json_reader`` and
``json_writer`` implement it, but re-parse the schema on every call and walk each value through
a generic decoder: 60-75 µs a record here, which made an Avro REST request five times slower
than a JSON one. These two functions walk a parsed schema (``fastavro.parse_schema``'s output,
whose named types are in ``__named_schemas``) directly; the binary encoding is still fastavro's
(``schemaless_writer`` / ``schemaless_reader``), which validates every datum.
``tests/property/client/test_avro_json_property.py`` checks both against fastavro's own.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class AvroJsonError(ValueError):
    """A value that is not the Avro JSON encoding of a datum of the schema."""


def _named(schema: Any) -> Mapping[str, Any]:
    names: Mapping[str, Any] = (
        schema.get("__named_schemas", {}) if isinstance(schema, Mapping) else {}
    )
    return names


def _resolve(s: Any, names: Mapping[str, Any]) -> Any:
    if isinstance(s, str) and s not in _PRIMITIVES:
        try:
            return names[s]
        except KeyError:
            raise AvroJsonError(f"unknown type {s!r}") from None
    return s


def _type_name(s: Any) -> str:
    """The name a union branch is written under: a primitive's or a named type's full name,
    else the complex type (array, map)."""
    if isinstance(s, str):
        return s
    if isinstance(s, Mapping):
        if s.get("type") in ("record", "error", "enum", "fixed"):
            return str(s["name"])
        return str(s.get("type"))
    raise AvroJsonError(f"not a schema: {s!r}")


def from_avro_json(schema: Any, value: Any) -> Any:
    """The datum whose Avro JSON encoding is ``value`` (``AvroJsonError`` if it is not one)."""
    return _from(schema, value, _named(schema), "")


def _from(s: Any, v: Any, names: Mapping[str, Any], path: str) -> Any:
    if isinstance(s, list):  # a union
        if v is None:
            if "null" in s:
                return None
            raise AvroJsonError(f"{path or 'value'}: null is not one of the union's types")
        if not isinstance(v, dict) or len(v) != 1:
            raise AvroJsonError(
                f'{path or "value"}: a union\'s value is {{"<type>": value}} (or null)'
            )
        ((branch, inner),) = v.items()
        for member in s:
            if _type_name(member) == branch or (isinstance(member, str) and member == branch):
                return _from(member, inner, names, path)
        raise AvroJsonError(f"{path or 'value'}: {branch!r} is not one of the union's types")
    s = _resolve(s, names)
    if isinstance(s, str):
        if s in ("bytes",) and isinstance(v, str):
            return _latin1(v, path)
        return v  # the binary writer checks the primitive's type and range
    t = s.get("type")
    if t in ("record", "error"):
        if not isinstance(v, dict):
            raise AvroJsonError(f"{path or 'value'}: a record is a JSON object")
        out = {}
        for f in s["fields"]:
            name = f["name"]
            if name in v:
                out[name] = _from(f["type"], v[name], names, f"{path}.{name}" if path else name)
        return out
    if t == "array":
        if not isinstance(v, list):
            raise AvroJsonError(f"{path or 'value'}: an array is a JSON array")
        return [_from(s["items"], x, names, f"{path}[{i}]") for i, x in enumerate(v)]
    if t == "map":
        if not isinstance(v, dict):
            raise AvroJsonError(f"{path or 'value'}: a map is a JSON object")
        return {k: _from(s["values"], x, names, f"{path}[{k!r}]") for k, x in v.items()}
    if t == "fixed" and isinstance(v, str):
        return _latin1(v, path)
    if t in _PRIMITIVES:  # {"type": "string", "logicalType": ...}
        return _from(t, v, names, path)
    return v  # enum: a symbol, checked by the writer


def _latin1(v: str, path: str) -> bytes:
    try:
        return v.encode("latin-1")
    except UnicodeEncodeError:
        raise AvroJsonError(f"{path or 'value'}: bytes are a string of code points 0-255") from None


def to_avro_json(schema: Any, datum: Any) -> Any:
    """The Avro JSON encoding of ``datum`` (as fastavro's reader gives it)."""
    return _to(schema, datum, _named(schema))


def _to(s: Any, d: Any, names: Mapping[str, Any]) -> Any:
    if isinstance(s, list):
        if d is None:
            return None
        member = _branch(s, d, names)
        return {_type_name(member): _to(member, d, names)}
    s = _resolve(s, names)
    if isinstance(s, str):
        return d.decode("latin-1") if s == "bytes" and isinstance(d, bytes) else d
    if "logicalType" in s and d is not None:
        d = _unlogical(s, d)
    t = s.get("type")
    if t in ("record", "error"):
        return {f["name"]: _to(f["type"], d.get(f["name"]), names) for f in s["fields"]}
    if t == "array":
        return [_to(s["items"], x, names) for x in d]
    if t == "map":
        return {k: _to(s["values"], x, names) for k, x in d.items()}
    if t == "fixed":
        return d.decode("latin-1") if isinstance(d, bytes) else d
    if t in _PRIMITIVES:
        return _to(t, d, names)
    return d


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)


def _unlogical(s: Mapping[str, Any], d: Any) -> Any:
    """fastavro's reader turns logical types into Python objects; their JSON encoding is the
    underlying type's (as Avro's own JSON encoder writes them)."""
    lt = s["logicalType"]
    if isinstance(d, datetime):
        epoch = _EPOCH if d.tzinfo is not None else _EPOCH_NAIVE
        unit = timedelta(milliseconds=1) if lt.endswith("millis") else timedelta(microseconds=1)
        return (d - epoch) // unit
    if isinstance(d, date) and lt == "date":
        return (d - date(1970, 1, 1)).days
    if isinstance(d, time):
        us = ((d.hour * 60 + d.minute) * 60 + d.second) * 1_000_000 + d.microsecond
        return us // 1000 if lt == "time-millis" else us
    if isinstance(d, Decimal) and lt == "decimal":
        unscaled = int(d.scaleb(int(s.get("scale", 0))).to_integral_value())
        size = (
            int(s["size"]) if s.get("type") == "fixed" else max(1, (unscaled.bit_length() + 8) // 8)
        )
        return unscaled.to_bytes(size, "big", signed=True)
    if isinstance(d, UUID):
        return str(d)
    return d


def _branch(union: list[Any], d: Any, names: Mapping[str, Any]) -> Any:
    """The union member a (non-null) datum was read from: the first that fits its type."""
    for member in union:
        r = _resolve(member, names)
        kind = r if isinstance(r, str) else r.get("type")
        if kind in _PRIMITIVES and not isinstance(r, str):
            kind = r["type"]
        if _fits(kind, r, d):
            return member
    raise AvroJsonError(f"{d!r} fits none of the union's types")


def _fits(kind: str, r: Any, d: Any) -> bool:
    if kind == "boolean":
        return isinstance(d, bool)
    if kind in ("int", "long"):
        return isinstance(d, int) and not isinstance(d, bool)
    if kind in ("float", "double"):
        return isinstance(d, float) or (isinstance(d, int) and not isinstance(d, bool))
    if kind == "string":
        return isinstance(d, str)
    if kind == "enum":
        return isinstance(d, str) and d in r["symbols"]
    if kind == "bytes":
        return isinstance(d, bytes)
    if kind == "fixed":
        return isinstance(d, bytes) and len(d) == r["size"]
    if kind in ("record", "error"):
        return isinstance(d, dict) and set(d) <= {f["name"] for f in r["fields"]}
    if kind == "map":
        return isinstance(d, dict)
    if kind == "array":
        return isinstance(d, list)
    return False
