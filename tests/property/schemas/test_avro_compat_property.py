"""The Avro compatibility verdict agrees with fastavro's own schema resolution.

For random pairs of related schemas (one drawn, the other a few random edits of it, both
directions tried), ``read_incompatibilities(reader, writer)`` is empty exactly when fastavro
reads, with the reader schema, every datum of a *covering set* written with the writer schema.

The covering set reaches every place a read can fail: each union branch (written in fastavro's
tuple notation, so the writer cannot pick another branch for an ambiguous value), each enum
symbol, and every array and map non-empty, holding a covering set of its items. Resolution
failures depend only on the path a datum takes through the schema, never on a value, so a
reader that reads the whole covering set reads every datum, and one that fails on any datum
fails on a member of the set.
"""

from __future__ import annotations

import copy
import io
from typing import Any

import fastavro
from hypothesis import given, note, settings
from hypothesis import strategies as st

from broker.schemas.avro_compat import read_incompatibilities

PRIMS = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
FIELD_NAMES = ["a", "b", "c", "d", "e", "f"]
SYMBOLS = ["A", "B", "C", "D", "E"]


class Namer:
    """Fresh names for named types: never two definitions of one name in one schema."""

    def __init__(self) -> None:
        self.n = 0

    def fresh(self) -> str:
        self.n += 1
        return f"T{self.n}"


# ---------------------------------------------------------------- schemas


def _union_key(s: Any) -> str:
    if isinstance(s, str):
        return s
    return s["name"] if s["type"] in ("record", "enum", "fixed") else s["type"]


@st.composite
def avro_type(draw: st.DrawFn, namer: Namer, depth: int, in_union: bool = False) -> Any:
    kinds = ["prim"] * 4
    if depth > 0:
        kinds += ["record", "record", "enum", "fixed", "array", "map"]
        if not in_union:
            kinds += ["union", "union"]
    kind = draw(st.sampled_from(kinds))
    if kind == "prim":
        return draw(st.sampled_from(PRIMS))
    if kind == "enum":
        syms = draw(st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=4, unique=True))
        out: dict[str, Any] = {"type": "enum", "name": namer.fresh(), "symbols": syms}
        if draw(st.booleans()):
            out["default"] = draw(st.sampled_from(syms))
        return out
    if kind == "fixed":
        return {"type": "fixed", "name": namer.fresh(), "size": draw(st.integers(1, 3))}
    if kind == "array":
        return {"type": "array", "items": draw(avro_type(namer, depth - 1))}
    if kind == "map":
        return {"type": "map", "values": draw(avro_type(namer, depth - 1))}
    if kind == "union":
        branches: list[Any] = []
        for _ in range(draw(st.integers(1, 3))):
            b = draw(avro_type(namer, depth - 1, in_union=True))
            if _union_key(b) not in {_union_key(x) for x in branches}:
                branches.append(b)
        return branches
    names = draw(st.lists(st.sampled_from(FIELD_NAMES), min_size=1, max_size=4, unique=True))
    fields = []
    for n in names:
        f: dict[str, Any] = {"name": n, "type": draw(avro_type(namer, depth - 1))}
        if draw(st.integers(0, 2)) == 0:
            f["default"] = None  # filled in by repair()
        fields.append(f)
    return {"type": "record", "name": namer.fresh(), "fields": fields}


def default_for(s: Any) -> Any:
    """A valid default value (Avro's JSON encoding) for schema ``s``."""
    if isinstance(s, list):
        return default_for(s[0])
    if isinstance(s, str):
        return {
            "null": None,
            "boolean": False,
            "int": 0,
            "long": 0,
            "float": 0.0,
            "double": 0.0,
            "bytes": "",
            "string": "",
        }[s]
    t = s["type"]
    if t == "enum":
        return s["symbols"][0]
    if t == "fixed":
        return "\u0000" * s["size"]
    if t == "array":
        return []
    if t == "map":
        return {}
    return {f["name"]: default_for(f["type"]) for f in s["fields"]}


def repair(s: Any) -> Any:
    """Make an edited schema valid again: unions flat and without two branches of one kind,
    every default valid for its (possibly changed) type, enum defaults among the symbols."""
    if isinstance(s, list):
        flat: list[Any] = []
        for b in s:
            b = repair(b)
            for x in b if isinstance(b, list) else [b]:
                if _union_key(x) not in {_union_key(y) for y in flat}:
                    flat.append(x)
        return flat
    if isinstance(s, str):
        return s
    t = s["type"]
    if t == "array":
        items = repair(s["items"])
        return {**s, "items": items}
    if t == "map":
        return {**s, "values": repair(s["values"])}
    if t == "enum":
        out = dict(s)
        if "default" in out and out["default"] not in out["symbols"]:
            del out["default"]
        return out
    if t == "record":
        fields = []
        for f in s["fields"]:
            f = {**f, "type": repair(f["type"])}
            if "default" in f:
                f["default"] = default_for(f["type"])
            fields.append(f)
        return {**s, "fields": fields}
    return s


@st.composite
def edited(draw: st.DrawFn, s: Any, namer: Namer) -> Any:
    """``s`` with a few random local edits: each node is edited with some chance."""
    if draw(st.integers(0, 4)) == 0:
        return _edit_here(draw, s, namer)
    if isinstance(s, list):
        return [draw(edited(b, namer)) for b in s]
    if isinstance(s, str):
        return s
    t = s["type"]
    if t == "array":
        return {**s, "items": draw(edited(s["items"], namer))}
    if t == "map":
        return {**s, "values": draw(edited(s["values"], namer))}
    if t == "record":
        return {**s, "fields": [{**f, "type": draw(edited(f["type"], namer))} for f in s["fields"]]}
    return s


def _edit_here(draw: st.DrawFn, s: Any, namer: Namer) -> Any:
    new_type = avro_type(namer, 1)
    if isinstance(s, list):
        op = draw(st.sampled_from(["add", "remove", "reorder", "unwrap"]))
        if op == "add":
            return [*s, draw(avro_type(namer, 1, in_union=True))]
        if op == "remove" and len(s) > 1:
            i = draw(st.integers(0, len(s) - 1))
            return s[:i] + s[i + 1 :]
        if op == "reorder":
            return draw(st.permutations(s))
        return draw(st.sampled_from(s))
    if isinstance(s, str):
        op = draw(st.sampled_from(["replace", "nullable", "widen"]))
        if op == "replace":
            return draw(st.sampled_from(PRIMS))
        if op == "nullable":
            return ["null", s]
        return [s, draw(new_type)]
    t = s["type"]
    if t == "enum":
        op = draw(st.sampled_from(["add", "remove", "default", "nodefault", "rename"]))
        syms = list(s["symbols"])
        if op == "add":
            extra = [x for x in SYMBOLS if x not in syms]
            if extra:
                syms.insert(draw(st.integers(0, len(syms))), draw(st.sampled_from(extra)))
            return {**s, "symbols": syms}
        if op == "remove" and len(syms) > 1:
            syms.remove(draw(st.sampled_from(syms)))
            return {**s, "symbols": syms}
        if op == "default":
            return {**s, "default": draw(st.sampled_from(syms))}
        if op == "nodefault":
            return {k: v for k, v in s.items() if k != "default"}
        return {**s, "name": namer.fresh()}
    if t == "fixed":
        if draw(st.booleans()):
            return {**s, "size": s["size"] + 1}
        return {**s, "name": namer.fresh()}
    if t == "record":
        op = draw(
            st.sampled_from(
                ["add", "add", "remove", "default", "nodefault", "alias", "rename", "retype"]
            )
        )
        fields = [dict(f) for f in s["fields"]]
        used = {f["name"] for f in fields}
        free = [n for n in FIELD_NAMES if n not in used]
        if op == "add" and free:
            f = {"name": draw(st.sampled_from(free)), "type": draw(new_type)}
            if draw(st.booleans()):
                f["default"] = None
            fields.insert(draw(st.integers(0, len(fields))), f)
        elif op == "remove" and len(fields) > 1:
            fields.pop(draw(st.integers(0, len(fields) - 1)))
        elif op == "default":
            draw(st.sampled_from(fields))["default"] = None
        elif op == "nodefault":
            draw(st.sampled_from(fields)).pop("default", None)
        elif op == "alias" and free:
            # A field renamed, its old name kept as an alias (Avro's way to rename).
            f = draw(st.sampled_from(fields))
            f["aliases"] = [f["name"]]
            f["name"] = draw(st.sampled_from(free))
        elif op == "rename":
            # Renamed, and half the time the old name kept as an alias (so still readable).
            out = {**s, "name": namer.fresh(), "fields": fields}
            if draw(st.booleans()):
                out["aliases"] = [s["name"]]
            return out
        elif op == "retype":
            f = draw(st.sampled_from(fields))
            f["type"] = draw(new_type)
        return {**s, "fields": fields}
    # array or map: turn it into the other kind around the same element type
    inner = s.get("items", s.get("values"))
    return {"type": "map", "values": inner} if t == "array" else {"type": "array", "items": inner}


# ---------------------------------------------------------------- the oracle


def cover(s: Any) -> list[Any]:
    """Datums of ``s`` reaching every branch, symbol and element type (fastavro's write
    notation: a union value is ``(branch name, value)``)."""
    if isinstance(s, list):
        out = []
        for b in s:
            name = _union_key(b)
            out += [(name, d) for d in cover(b)]
        return out
    if isinstance(s, str):
        return [
            {
                "null": None,
                "boolean": True,
                "int": 1,
                "long": 2,
                "float": 1.5,
                "double": 2.5,
                "bytes": b"x",
                "string": "s",
            }[s]
        ]
    t = s["type"]
    if t == "enum":
        return list(s["symbols"])
    if t == "fixed":
        return [b"\x01" * s["size"]]
    if t == "array":
        return [cover(s["items"])]
    if t == "map":
        return [{f"k{i}": d for i, d in enumerate(cover(s["values"]))}]
    per_field = [(f["name"], cover(f["type"])) for f in s["fields"]]
    n = max(len(c) for _, c in per_field)
    return [{name: c[i % len(c)] for name, c in per_field} for i in range(n)]


def reads_every_datum(reader: Any, writer: Any) -> bool:
    w = fastavro.parse_schema(copy.deepcopy(writer))
    r = fastavro.parse_schema(copy.deepcopy(reader))
    for datum in cover(writer):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, w, datum)
        buf.seek(0)
        try:
            fastavro.schemaless_reader(buf, w, r)
        except Exception as e:
            note(f"fastavro fails on {datum!r}: {type(e).__name__}: {e}")
            return False
    return True


def verdict(reader: Any, writer: Any) -> list[str]:
    rn: dict[str, Any] = {}
    wn: dict[str, Any] = {}
    r = fastavro.parse_schema(copy.deepcopy(reader), named_schemas=rn)
    w = fastavro.parse_schema(copy.deepcopy(writer), named_schemas=wn)
    return [str(i) for i in read_incompatibilities(r, w, rn, wn)]


@st.composite
def schema_pairs(draw: st.DrawFn) -> tuple[Any, Any]:
    namer = Namer()
    a = repair(draw(avro_type(namer, 3)))
    b = repair(draw(edited(a, namer)))
    return a, b


@settings(max_examples=400)
@given(schema_pairs())
def test_verdict_matches_fastavro_resolution(pair: tuple[Any, Any]) -> None:
    a, b = pair
    for reader, writer in ((b, a), (a, b)):
        found = verdict(reader, writer)
        note(f"reader={reader}\nwriter={writer}\nincompatibilities={found}")
        assert (not found) == reads_every_datum(reader, writer)


@settings(max_examples=100)
@given(st.builds(lambda: None).flatmap(lambda _: avro_type(Namer(), 3)).map(repair))
def test_a_schema_reads_its_own_data(s: Any) -> None:
    assert verdict(s, s) == []
