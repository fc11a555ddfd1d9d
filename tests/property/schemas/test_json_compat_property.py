"""The JSON Schema compatibility verdict is sound: when it says a reader accepts every document
of a writer, jsonschema agrees on random documents valid under the writer.

The rules are not complete (a refusal may be over-cautious), so only this direction is a
property; the unit tests pin the refusals (tests/unit/schemas/test_json_compat.py).
"""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from broker.schemas.json_compat import accept_incompatibilities

PROPS = ["a", "b", "c", "d"]
SCALARS = ["string", "integer", "number", "boolean", "null"]


@st.composite
def json_schema(draw: st.DrawFn, depth: int = 2) -> dict[str, Any]:
    kinds = ["scalar", "scalar", "enum", "multi"]
    if depth > 0:
        kinds += ["object", "object", "array", "anyOf"]
    kind = draw(st.sampled_from(kinds))
    if kind == "enum":
        return {
            "enum": draw(
                st.lists(
                    st.sampled_from([1, 2, 3, "x", "y", None]), min_size=1, max_size=3, unique=True
                )
            )
        }
    if kind == "multi":
        return {
            "type": draw(st.lists(st.sampled_from(SCALARS), min_size=1, max_size=3, unique=True))
        }
    if kind == "scalar":
        t = draw(st.sampled_from(SCALARS))
        out: dict[str, Any] = {"type": t}
        if t in ("integer", "number") and draw(st.booleans()):
            out["minimum"] = draw(st.integers(-2, 2))
        if t in ("integer", "number") and draw(st.booleans()):
            out["maximum"] = draw(st.integers(3, 6))
        if t == "string" and draw(st.booleans()):
            out["maxLength"] = draw(st.integers(1, 3))
        return out
    if kind == "array":
        out = {"type": "array", "items": draw(json_schema(depth - 1))}
        if draw(st.booleans()):
            out["maxItems"] = draw(st.integers(1, 3))
        return out
    if kind == "anyOf":
        return {"anyOf": [draw(json_schema(depth - 1)) for _ in range(2)]}
    names = draw(st.lists(st.sampled_from(PROPS), max_size=3, unique=True))
    out = {"type": "object", "properties": {n: draw(json_schema(depth - 1)) for n in names}}
    req = [n for n in names if draw(st.booleans())]
    if req:
        out["required"] = req
    ap = draw(st.sampled_from(["open", "closed", "typed"]))
    if ap == "closed":
        out["additionalProperties"] = False
    elif ap == "typed":
        out["additionalProperties"] = draw(json_schema(0))
    return out


@st.composite
def edited(draw: st.DrawFn, s: dict[str, Any], depth: int = 2) -> dict[str, Any]:
    if draw(st.integers(0, 3)) == 0:
        return draw(json_schema(depth))  # replaced outright
    out = dict(s)
    if "properties" in s:
        props = {
            k: (draw(edited(v, depth - 1)) if draw(st.booleans()) else v)
            for k, v in s["properties"].items()
        }
        op = draw(st.sampled_from(["none", "add", "remove", "require", "unrequire", "ap"]))
        free = [p for p in PROPS if p not in props]
        if op == "add" and free:
            props[draw(st.sampled_from(free))] = draw(json_schema(depth - 1))
        elif op == "remove" and props:
            del props[draw(st.sampled_from(sorted(props)))]
        elif op == "require" and props:
            out["required"] = sorted({*s.get("required", []), draw(st.sampled_from(sorted(props)))})
        elif op == "unrequire":
            out.pop("required", None)
        elif op == "ap":
            choice = draw(st.sampled_from(["open", "closed", "typed"]))
            out.pop("additionalProperties", None)
            if choice == "closed":
                out["additionalProperties"] = False
            elif choice == "typed":
                out["additionalProperties"] = draw(json_schema(0))
        out["properties"] = props
        if "required" in out:
            out["required"] = [r for r in out["required"] if r in props]
            if not out["required"]:
                del out["required"]
    t = out.get("type")
    for key, lo, hi, types in (
        ("minimum", -3, 3, ("integer", "number")),
        ("maximum", 2, 7, ("integer", "number")),
        ("maxLength", 1, 4, ("string",)),
        ("maxItems", 1, 4, ("array",)),
    ):
        if (key in out or t in types) and draw(st.booleans()):
            out[key] = draw(st.integers(lo, hi))  # a bound moved, added or tightened
    if "items" in out:
        out["items"] = draw(edited(out["items"], depth - 1))
    if "enum" in out and draw(st.booleans()):
        out["enum"] = draw(
            st.lists(
                st.sampled_from([1, 2, 3, "x", "y", None]), min_size=1, max_size=4, unique=True
            )
        )
    return out


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 8)
    | st.sampled_from([0.5, 2.5, -1.5])
    | st.text("xy", max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from([*PROPS, "z"]), inner, max_size=4)
    ),
    max_leaves=8,
)


@st.composite
def instance_of(draw: st.DrawFn, s: dict[str, Any]) -> Any:
    """Mostly documents shaped by ``s`` (so the writer accepts many); sometimes any JSON."""
    if draw(st.integers(0, 5)) == 0:
        return draw(JSON_VALUES)
    if "enum" in s:
        return draw(st.sampled_from(s["enum"]))
    if "anyOf" in s:
        return draw(instance_of(draw(st.sampled_from(s["anyOf"]))))
    t = s.get("type")
    if isinstance(t, list):
        t = draw(st.sampled_from(t))
    if t == "object":
        out = {}
        for k, v in s.get("properties", {}).items():
            if k in s.get("required", []) or draw(st.booleans()):
                out[k] = draw(instance_of(v))
        if draw(st.booleans()):
            out["z"] = draw(JSON_VALUES)
        return out
    if t == "array":
        return draw(st.lists(instance_of(s["items"]), max_size=3))
    if t in ("integer", "number"):
        return draw(
            st.integers(-4, 8) | (st.sampled_from([0.5, 4.5]) if t == "number" else st.nothing())
        )
    if t == "string":
        return draw(st.text("xy", max_size=4))
    if t == "boolean":
        return draw(st.booleans())
    return None


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    a = draw(json_schema())
    b = draw(edited(a))
    writer, reader = (a, b) if draw(st.booleans()) else (b, a)
    docs = draw(st.lists(instance_of(writer), min_size=1, max_size=12))
    return writer, reader, docs


@settings(max_examples=300)
@given(cases())
def test_compatible_means_every_writer_document_is_a_reader_document(
    case: tuple[dict[str, Any], dict[str, Any], list[Any]],
) -> None:
    writer, reader, docs = case
    found = accept_incompatibilities(reader, writer)
    assume(not found)
    w = jsonschema.Draft202012Validator(writer)
    r = jsonschema.Draft202012Validator(reader)
    for doc in docs:
        if w.is_valid(doc):
            note(f"writer={writer}\nreader={reader}\ndoc={doc!r}")
            assert r.is_valid(doc)


@settings(max_examples=200)
@given(json_schema())
def test_a_schema_accepts_its_own_documents(s: dict[str, Any]) -> None:
    assert accept_incompatibilities(s, s) == []
