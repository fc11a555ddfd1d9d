"""JSON Schema compatibility: does a reader schema accept every document a writer schema accepts?

``accept_incompatibilities(reader, writer, ...)`` returns why some document valid under the
writer may be invalid under the reader; an empty list means the writer's documents are a
subset of the reader's. BACKWARD compatibility of a new JSON schema is this check with the new
schema as the reader and the old one as the writer (consumers on the new schema read what
producers on the old one wrote); FORWARD swaps them.

The rules are structural and *sound, not complete*: an empty answer is a guarantee (for the
keywords below), while a refusal may name a change that is in fact harmless. They follow the
content-model rules Confluent documents for JSON Schema (an open content model accepts any
extra property, so adding a constrained property to one is incompatible; a closed one
accepts none):

* ``true``/``{}`` as reader accepts everything; ``false`` as writer accepts nothing.
* ``type``: every writer type must be a reader type (``integer`` is a ``number``); a writer
  without ``type`` accepts every type, so the reader must too.
* ``enum``/``const`` in the reader: the writer must be limited to values among them.
* Bounds (``minimum``, ``maximum``, the exclusive ones, ``minLength``, ``maxLength``,
  ``minItems``, ``maxItems``, ``minProperties``, ``maxProperties``): the reader's range must
  contain the writer's; ``multipleOf``: the writer's must be a multiple of the reader's;
  ``pattern``, ``format``, ``uniqueItems``: the reader's must be absent or the writer's too.
* Objects: the reader may not require a property the writer does not; each property's
  schemas must be compatible, a property one side does not declare being governed by that
  side's ``patternProperties`` or ``additionalProperties`` (absent: anything).
* Arrays: ``items`` (a schema, or a tuple with ``additionalItems``, or ``prefixItems``)
  compared element by element.
* ``anyOf``/``oneOf`` in the writer: every branch must be accepted; in the reader: the writer
  must be accepted by one branch (for ``oneOf`` this assumes the branches are disjoint, as
  Confluent does). ``allOf`` in the reader: every branch; in the writer: one branch suffices.
* ``$ref`` is followed (local pointers and the schema's references, through ``referencing``);
  a pair of schemas already under comparison is assumed compatible, so recursion ends.
* Any other constraining keyword (``not``, ``if``, ``dependentSchemas``, ...) must be equal on
  both sides, else the change is refused. Annotations (``title``, ``description``,
  ``default``, ``examples``, ``$comment``, ...) are ignored.

Pure: no I/O (``referencing`` resolves only what it was given), no clock, no global random.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

if TYPE_CHECKING:
    from referencing._core import Resolver

ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "id",
        "$comment",
        "$anchor",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "$vocabulary",
        "$dynamicAnchor",
    }
)
HANDLED = frozenset(
    {
        "type",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "items",
        "additionalItems",
        "prefixItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "minProperties",
        "maxProperties",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
    }
)
ALL_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})


@dataclass(frozen=True)
class Incompatibility:
    kind: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.path or '#'}: {self.message}"


class _Side:
    """One schema being walked: its node and the resolver for the ``$ref`` inside it."""

    __slots__ = ("node", "resolver")

    def __init__(self, node: Any, resolver: Resolver[Any]) -> None:
        self.node = node
        self.resolver = resolver


def _types(s: Mapping[str, Any]) -> frozenset[str] | None:
    t = s.get("type")
    if t is None:
        return None
    return frozenset([t] if isinstance(t, str) else t)


def _trivial(s: Any) -> bool:
    """Accepts every document."""
    if s is True:
        return True
    return isinstance(s, Mapping) and all(k in ANNOTATIONS for k in s)


class _Checker:
    def __init__(self) -> None:
        self.found: list[Incompatibility] = []
        self.assumed: set[tuple[int, int]] = set()

    def fail(self, kind: str, path: str, message: str) -> None:
        self.found.append(Incompatibility(kind, path, message))

    def deref(self, side: _Side, path: str) -> _Side | None:
        node, resolver = side.node, side.resolver
        for _ in range(64):  # a chain of $refs that never reaches a schema is refused
            if not (isinstance(node, Mapping) and "$ref" in node):
                return _Side(node, resolver)
            try:
                resolved = resolver.lookup(node["$ref"])
            except Unresolvable as e:
                self.fail("UNRESOLVED_REFERENCE", path, f"cannot resolve $ref: {e}")
                return None
            rest = {k: v for k, v in node.items() if k != "$ref"}
            if any(k not in ANNOTATIONS for k in rest):
                # $ref beside other keywords (2019-09 on): both apply.
                return _Side({"allOf": [resolved.contents, rest]}, resolved.resolver)
            node, resolver = resolved.contents, resolved.resolver
        self.fail("UNRESOLVED_REFERENCE", path, "$ref chain too long")
        return None

    # ------------------------------------------------------------ the relation

    def check(self, reader: _Side, writer: _Side, path: str) -> None:
        """Every document the writer accepts, the reader accepts."""
        r_side = self.deref(reader, path)
        w_side = self.deref(writer, path)
        if r_side is None or w_side is None:
            return
        r, w = r_side.node, w_side.node
        if _trivial(r) or w is False:
            return
        if r is False:
            self.fail("SCHEMA_NARROWED", path, "the reader accepts nothing")
            return
        if w is True:
            w = {}
            w_side = _Side(w, w_side.resolver)
        if not isinstance(r, Mapping) or not isinstance(w, Mapping):
            self.fail("INVALID_SCHEMA", path, "a schema must be an object or a boolean")
            return
        if r == w and r_side.resolver is w_side.resolver:
            return
        pair = (id(r), id(w))
        if pair in self.assumed:
            return
        self.assumed.add(pair)

        # Combinators first: a union in the writer splits it, one in the reader picks a branch.
        for key in ("anyOf", "oneOf"):
            if key in w:
                rest = {k: v for k, v in w.items() if k != key}
                for i, branch in enumerate(w[key]):
                    # Each branch with the writer's other keywords (they apply to it too).
                    b = {"allOf": [branch, rest]} if rest else branch
                    self.check(r_side, _Side(b, w_side.resolver), f"{path}/{key}/{i}")
                return
        if "allOf" in w:
            rest = {k: v for k, v in w.items() if k != "allOf"}
            candidates = [*w["allOf"], *([rest] if rest else [])]
            if not any(self._holds(r_side, _Side(c, w_side.resolver), path) for c in candidates):
                # Merged, the branches may still fit; compared one by one they do not.
                self.fail(
                    "ALL_OF_NOT_CONTAINED",
                    path,
                    "no part of the writer's allOf is accepted by the reader on its own",
                )
            return
        for key in ("anyOf", "oneOf"):
            if key in r:
                rest = {k: v for k, v in r.items() if k != key}
                if not any(self._holds(_Side(b, r_side.resolver), w_side, path) for b in r[key]):
                    self.fail(
                        "COMBINED_TYPE_NARROWED",
                        f"{path}/{key}",
                        f"no branch of the reader's {key} accepts the writer's schema",
                    )
                if rest:
                    self.check(_Side(rest, r_side.resolver), w_side, path)
                return
        if "allOf" in r:
            for i, b in enumerate(r["allOf"]):
                self.check(_Side(b, r_side.resolver), w_side, f"{path}/allOf/{i}")
            rest = {k: v for k, v in r.items() if k != "allOf"}
            if rest:
                self.check(_Side(rest, r_side.resolver), w_side, path)
            return

        for k, v in r.items():
            if k not in HANDLED and k not in ANNOTATIONS and w.get(k) != v:
                self.fail(
                    "KEYWORD_CHANGED",
                    f"{path}/{k}",
                    f"the reader's {k!r} is not the writer's (not compared)",
                )

        self._check_types(r, w, path)
        self._check_values(r, w, path)
        self._check_numbers(r, w, path)
        self._check_strings(r, w, path)
        self._check_arrays(r_side, w_side, path)
        self._check_objects(r_side, w_side, path)

    def _holds(self, reader: _Side, writer: _Side, path: str) -> bool:
        """``check`` as a yes/no, leaving no findings behind."""
        saved, saved_assumed = self.found, set(self.assumed)
        self.found = []
        self.check(reader, writer, path)
        ok = not self.found
        self.found, self.assumed = saved, saved_assumed
        return ok

    # ------------------------------------------------------------ keyword families

    def _check_types(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> None:
        tr, tw = _types(r), _types(w)
        if tr is None:
            return
        if tw is None:
            tw = ALL_TYPES if "enum" not in w and "const" not in w else _value_types(w)
        lost = sorted(t for t in tw if t not in tr and not (t == "integer" and "number" in tr))
        if lost:
            self.fail(
                "TYPE_NARROWED",
                f"{path}/type",
                f"the reader does not accept type(s) {lost} the writer does",
            )

    def _check_values(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> None:
        allowed: list[Any] | None = None
        if "enum" in r:
            allowed = list(r["enum"])
        if "const" in r:
            allowed = (
                [r["const"]] if allowed is None else [v for v in allowed if _json_eq(v, r["const"])]
            )
        if allowed is None:
            return
        values = _writer_values(w)
        if values is None:
            self.fail(
                "ENUM_NARROWED",
                f"{path}/enum",
                "the reader accepts only listed values; the writer is not so limited",
            )
            return
        missing = [v for v in values if not any(_json_eq(v, a) for a in allowed)]
        if missing:
            self.fail(
                "ENUM_NARROWED",
                f"{path}/enum",
                f"the reader does not accept the writer's values {missing}",
            )

    def _check_numbers(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> None:
        if not _may_be(w, "number", "integer"):
            return
        r_lo, r_lo_x = _lower(r)
        w_lo, w_lo_x = _lower(w)
        if r_lo is not None and (
            w_lo is None or w_lo < r_lo or (w_lo == r_lo and r_lo_x and not w_lo_x)
        ):
            self.fail(
                "MINIMUM_INCREASED",
                f"{path}/minimum",
                f"the reader's lower bound {r_lo} excludes values the writer accepts",
            )
        r_hi, r_hi_x = _upper(r)
        w_hi, w_hi_x = _upper(w)
        if r_hi is not None and (
            w_hi is None or w_hi > r_hi or (w_hi == r_hi and r_hi_x and not w_hi_x)
        ):
            self.fail(
                "MAXIMUM_DECREASED",
                f"{path}/maximum",
                f"the reader's upper bound {r_hi} excludes values the writer accepts",
            )
        if "multipleOf" in r:
            wm, rm = w.get("multipleOf"), r["multipleOf"]
            if wm is None or not _is_multiple(wm, rm):
                self.fail(
                    "MULTIPLE_OF_CHANGED",
                    f"{path}/multipleOf",
                    f"the writer's numbers need not be multiples of {rm}",
                )

    def _check_strings(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> None:
        if not _may_be(w, "string"):
            return
        self._range(r, w, "minLength", "maxLength", path)
        for key in ("pattern", "format"):
            if key in r and w.get(key) != r[key]:
                self.fail(
                    f"{key.upper()}_CHANGED",
                    f"{path}/{key}",
                    f"the reader's {key} {r[key]!r} is not the writer's",
                )

    def _check_arrays(self, rs: _Side, ws: _Side, path: str) -> None:
        r, w = rs.node, ws.node
        if not _may_be(w, "array"):
            return
        self._range(r, w, "minItems", "maxItems", path)
        if r.get("uniqueItems") and not w.get("uniqueItems"):
            self.fail(
                "UNIQUE_ITEMS_ADDED",
                f"{path}/uniqueItems",
                "the reader wants unique items; the writer allows repeats",
            )
        r_prefix, r_rest = _array_shape(r)
        w_prefix, w_rest = _array_shape(w)
        n = max(len(r_prefix), len(w_prefix))
        for i in range(n + 1):
            # Position i < n compares the tuple entries (or the tail schema past a tuple's
            # end); i == n compares the tails, which govern every later position.
            rp = r_prefix[i] if i < len(r_prefix) else r_rest
            wp = w_prefix[i] if i < len(w_prefix) else w_rest
            if wp is False:
                continue
            where = f"{path}/items/{i}" if i < n else f"{path}/items"
            self.check(_Side(rp, rs.resolver), _Side(wp, ws.resolver), where)

    def _check_objects(self, rs: _Side, ws: _Side, path: str) -> None:
        r, w = rs.node, ws.node
        if not _may_be(w, "object"):
            return
        self._range(r, w, "minProperties", "maxProperties", path)
        added = sorted(set(r.get("required") or ()) - set(w.get("required") or ()))
        if added:
            self.fail(
                "REQUIRED_PROPERTY_ADDED",
                f"{path}/required",
                f"the reader requires {added}, which the writer does not",
            )
        r_props: Mapping[str, Any] = r.get("properties") or {}
        w_props: Mapping[str, Any] = w.get("properties") or {}
        for name in sorted(set(r_props) | set(w_props)):
            wp = w_props[name] if name in w_props else _other_property(w, name)
            if wp is False:
                continue  # the writer never writes it
            rp = r_props[name] if name in r_props else _other_property(r, name)
            if name not in w_props and _trivial(wp) and not _trivial(rp):
                self.fail(
                    "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
                    f"{path}/properties/{name}",
                    f"the writer accepts any value for property {name!r} (open "
                    f"content model); the reader constrains it",
                )
                continue
            if name not in r_props and rp is False:
                self.fail(
                    "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                    f"{path}/properties/{name}",
                    f"the writer may write property {name!r}; the reader's closed "
                    f"content model refuses it",
                )
                continue
            self.check(_Side(rp, rs.resolver), _Side(wp, ws.resolver), f"{path}/properties/{name}")
        # Names neither declares: governed by the pattern and additional properties.
        r_pat: Mapping[str, Any] = r.get("patternProperties") or {}
        w_pat: Mapping[str, Any] = w.get("patternProperties") or {}
        if set(r_pat) == set(w_pat):
            for pat in w_pat:
                self.check(
                    _Side(r_pat[pat], rs.resolver),
                    _Side(w_pat[pat], ws.resolver),
                    f"{path}/patternProperties/{pat}",
                )
        elif not r_pat:
            for pat in w_pat:  # names the writer's pattern takes fall to the reader's rest
                self.check(
                    _Side(r.get("additionalProperties", True), rs.resolver),
                    _Side(w_pat[pat], ws.resolver),
                    f"{path}/patternProperties/{pat}",
                )
        else:
            self.fail(
                "KEYWORD_CHANGED",
                f"{path}/patternProperties",
                "the reader's patternProperties are not the writer's (not compared)",
            )
        self.check(
            _Side(r.get("additionalProperties", True), rs.resolver),
            _Side(w.get("additionalProperties", True), ws.resolver),
            f"{path}/additionalProperties",
        )
        for key in ("propertyNames", "dependencies", "dependentRequired"):
            if key in r and w.get(key) != r[key]:
                self.fail(
                    "KEYWORD_CHANGED",
                    f"{path}/{key}",
                    f"the reader's {key!r} is not the writer's (not compared)",
                )

    def _range(
        self, r: Mapping[str, Any], w: Mapping[str, Any], lo: str, hi: str, path: str
    ) -> None:
        if lo in r and w.get(lo, 0) < r[lo]:
            self.fail(
                f"{lo.upper()}_INCREASED",
                f"{path}/{lo}",
                f"the reader's {lo} {r[lo]} is above the writer's {w.get(lo, 0)}",
            )
        if hi in r and (hi not in w or w[hi] > r[hi]):
            self.fail(
                f"{hi.upper()}_DECREASED",
                f"{path}/{hi}",
                f"the reader's {hi} {r[hi]} is below the writer's {w.get(hi, 'none')}",
            )


# ---------------------------------------------------------------- helpers


def _json_eq(a: Any, b: Any) -> bool:
    """JSON equality: ``1 == 1.0`` but ``True != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_eq(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_eq(a[k], b[k]) for k in a)
    return (
        bool(type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float))))
        and a == b
    )


def _writer_values(w: Mapping[str, Any]) -> list[Any] | None:
    if "const" in w:
        return [w["const"]]
    if "enum" in w:
        return list(w["enum"])
    if _types(w) == frozenset({"null"}):
        return [None]
    return None


def _value_types(w: Mapping[str, Any]) -> frozenset[str]:
    out = set()
    for v in _writer_values(w) or ():
        out.add(_type_of(v))
    return frozenset(out)


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _may_be(w: Mapping[str, Any], *types: str) -> bool:
    """Can a document the writer accepts be of one of ``types``?"""
    tw = _types(w)
    if tw is not None and not any(t in tw for t in types):
        return not ("number" in types and "integer" in tw)
    values = _writer_values(w)
    if values is not None and "type" not in w:
        return any(
            _type_of(v) in types or (_type_of(v) == "integer" and "number" in types) for v in values
        )
    return True


def _lower(s: Mapping[str, Any]) -> tuple[float | None, bool]:
    """The lower bound and whether it is exclusive (draft 4's boolean form too)."""
    lo = s.get("minimum")
    x = s.get("exclusiveMinimum")
    if isinstance(x, bool):
        return lo, x
    if x is not None and (lo is None or x >= lo):
        return x, True
    return lo, False


def _upper(s: Mapping[str, Any]) -> tuple[float | None, bool]:
    hi = s.get("maximum")
    x = s.get("exclusiveMaximum")
    if isinstance(x, bool):
        return hi, x
    if x is not None and (hi is None or x <= hi):
        return x, True
    return hi, False


def _is_multiple(writer_step: float, reader_step: float) -> bool:
    q = writer_step / reader_step
    return math.isclose(q, round(q), rel_tol=0, abs_tol=1e-9) and round(q) >= 1


def _array_shape(s: Mapping[str, Any]) -> tuple[list[Any], Any]:
    """(tuple entries, the schema of every later item)."""
    if "prefixItems" in s:
        return list(s["prefixItems"]), s.get("items", True)
    items = s.get("items", True)
    if isinstance(items, list):
        return list(items), s.get("additionalItems", True)
    return [], items


def _other_property(s: Mapping[str, Any], name: str) -> Any:
    """The schema ``s`` applies to property ``name`` it does not declare."""
    matched = [v for p, v in (s.get("patternProperties") or {}).items() if re.search(p, name)]
    if matched:
        return matched[0] if len(matched) == 1 else {"allOf": matched}
    return s.get("additionalProperties", True)


def root_resolver(schema: Any, registry: Registry[Any] | None = None) -> Resolver[Any]:
    """A resolver for the ``$ref`` inside ``schema``: local pointers against it, other URIs
    against ``registry`` (the schema's references)."""
    resource = Resource.from_contents(schema, default_specification=DRAFT202012)
    return (registry or Registry()).resolver_with_root(resource)


def accept_incompatibilities(
    reader: Any,
    writer: Any,
    *,
    reader_resolver: Resolver[Any] | None = None,
    writer_resolver: Resolver[Any] | None = None,
) -> list[Incompatibility]:
    """Why some document valid under ``writer`` may be invalid under ``reader`` (empty: none
    is). Each resolver must have been made for its schema (``root_resolver``)."""
    c = _Checker()
    c.check(
        _Side(reader, reader_resolver or root_resolver(reader)),
        _Side(writer, writer_resolver or root_resolver(writer)),
        "",
    )
    return c.found
