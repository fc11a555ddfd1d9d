"""Avro schema resolution as a verdict: can a reader schema read every datum a writer wrote?

``read_incompatibilities(reader, writer, reader_names, writer_names)`` returns the reasons the
reader cannot read some datum of the writer; an empty list means it reads every one. The
schemas are as fastavro's ``parse_schema`` leaves them: names fully qualified, each named type
defined once and then referred to by its full name (``reader_names`` and ``writer_names`` map
full names to definitions, as ``parse_schema(..., named_schemas=...)`` fills them).

The rules are the Avro specification's "Schema Resolution", applied the way the library that
reads the data (fastavro, ``_read_py.read_data``/``match_schemas``) applies them, so that the
verdict is exactly "some datum fails to read" (a property test checks that against fastavro):

* Primitives resolve when equal or by promotion: int to long, float or double; long to float
  or double; float to double; string to bytes and bytes to string.
* Arrays by their items, maps by their values (a non-empty array or map is a datum).
* Named types (record, enum, fixed) need the same kind and the same unqualified name, or the
  writer's name among the reader's aliases. Fixed sizes must be equal.
* Enums: every writer symbol must be a reader symbol, unless the reader has a default.
* Records: each writer field is read by the reader field of the same name, or else by the
  reader field that lists it as an alias, and their types must resolve; writer fields with no
  reader field are skipped; a reader field no writer field fills must have a default.
* A writer union: every branch must resolve (a datum of each branch exists).
* A reader union: the writer's schema (each branch of a writer union) is read with the *first*
  reader branch that matches it shallowly (same kind and name, primitives by promotion, arrays
  and maps by a shallow match of their items or values), and must then resolve with that
  branch. Java's ``SchemaCompatibility`` accepts any branch that resolves; the two differ only
  for a reader union with two branches of one shape, such as two records of the same
  unqualified name in different namespaces, where the first one is what a reader really uses.
* Recursive types: a pair (writer record, reader record) already under examination is assumed
  to resolve (coinduction), as Java's checker does; otherwise the check would not end.

Where fastavro is laxer than the specification (it matches a writer enum with a reader record
of the same name, and then fails in some other way), the verdict follows the specification:
incompatible.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
PROMOTIONS: Mapping[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}

Names = Mapping[str, Any]


@dataclass(frozen=True)
class Incompatibility:
    """One reason a reader cannot read some writer datum. ``kind`` is the name Avro's Java
    ``SchemaCompatibility`` gives it; ``path`` points into the reader schema (JSON-pointer
    style, as Confluent's messages do)."""

    kind: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.path or '/'}: {self.message}"


class UnknownNameError(ValueError):
    """A schema refers to a named type its name table does not define."""


def _kind(s: Any) -> str:
    """``union``, a primitive's name, or a complex type's (``error`` counts as ``record``)."""
    if isinstance(s, list):
        return "union"
    if isinstance(s, str):
        return s
    t = s["type"]
    if isinstance(t, (dict, list)):  # {"type": {...}}: a wrapped schema
        return _kind(t)
    return "record" if t == "error" else str(t)


def _deref(s: Any, names: Names) -> Any:
    """The definition behind a name; a primitive in a dict (``{"type": "int", ...}``) as its
    bare name; a wrapped ``{"type": <schema>}`` as the schema."""
    if isinstance(s, str):
        if s in PRIMITIVES:
            return s
        try:
            return names[s]
        except KeyError:
            raise UnknownNameError(f"unknown type name {s!r}") from None
    if isinstance(s, dict):
        t = s.get("type")
        if isinstance(t, str) and t in PRIMITIVES:
            return t
        if isinstance(t, (dict, list)) or (
            isinstance(t, str) and t not in NAMED and t not in ("array", "map")
        ):
            return _deref(t, names)
    return s


def _unqualified(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names_match(reader: Mapping[str, Any], writer: Mapping[str, Any]) -> bool:
    w_full = str(writer["name"])
    aliases = reader.get("aliases") or ()
    return (
        _unqualified(w_full) == _unqualified(str(reader["name"]))
        or w_full in aliases
        or _unqualified(w_full) in aliases
    )


class _Checker:
    def __init__(self, reader_names: Names, writer_names: Names) -> None:
        self.rn = reader_names
        self.wn = writer_names
        self.assumed: set[tuple[str, str]] = set()
        self.found: list[Incompatibility] = []

    def fail(self, kind: str, path: str, message: str) -> None:
        self.found.append(Incompatibility(kind, path, message))

    # ------------------------------------------------------------ shallow matching

    def matches(self, reader: Any, writer: Any) -> bool:
        """fastavro's ``match_types``: does this reader branch take this writer schema?"""
        r = _deref(reader, self.rn)
        w = _deref(writer, self.wn)
        kr, kw = _kind(r), _kind(w)
        if kr == "union" or kw == "union":
            return True
        if kr in PRIMITIVES or kw in PRIMITIVES:
            return kr == kw or kr in PROMOTIONS.get(kw, ())
        if kr != kw:
            return False
        if kr == "array":
            return self.matches(r["items"], w["items"])
        if kr == "map":
            return self.matches(r["values"], w["values"])
        if kr == "fixed" and r.get("size") != w.get("size"):
            return False
        return _names_match(r, w)

    # ------------------------------------------------------------ resolution

    def check(self, reader: Any, writer: Any, path: str) -> None:
        r = _deref(reader, self.rn)
        w = _deref(writer, self.wn)
        kr, kw = _kind(r), _kind(w)
        if kw == "union":
            for branch in w:
                self.check(r, branch, path)
            return
        if kr == "union":
            for i, branch in enumerate(r):
                if self.matches(branch, w):
                    self.check(branch, w, f"{path}/{i}")
                    return
            self.fail(
                "MISSING_UNION_BRANCH",
                path,
                f"reader union lacks a branch for writer type {_describe(w)}",
            )
            return
        if kr in PRIMITIVES or kw in PRIMITIVES:
            if not (kr == kw or kr in PROMOTIONS.get(kw, ())):
                self.fail(
                    "TYPE_MISMATCH",
                    path,
                    f"reader type {_describe(r)} cannot read writer type {_describe(w)}",
                )
            return
        if kr != kw:
            self.fail(
                "TYPE_MISMATCH",
                path,
                f"reader type {_describe(r)} cannot read writer type {_describe(w)}",
            )
            return
        if kr == "array":
            self.check(r["items"], w["items"], f"{path}/items")
        elif kr == "map":
            self.check(r["values"], w["values"], f"{path}/values")
        elif not _names_match(r, w):
            self.fail(
                "NAME_MISMATCH",
                f"{path}/name",
                f"reader name {r['name']!r} does not match writer name {w['name']!r}",
            )
        elif kr == "fixed":
            if r.get("size") != w.get("size"):
                self.fail(
                    "FIXED_SIZE_MISMATCH",
                    f"{path}/size",
                    f"reader size {r.get('size')} differs from writer size {w.get('size')}",
                )
        elif kr == "enum":
            self._check_enum(r, w, path)
        else:
            self._check_record(r, w, path)

    def _check_enum(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> None:
        symbols = set(r.get("symbols") or ())
        missing = [s for s in w.get("symbols") or () if s not in symbols]
        # fastavro's ``read_enum`` substitutes the default only when it is truthy; a symbol
        # is a non-empty string, so "has a default" is the same test.
        if missing and not r.get("default"):
            self.fail(
                "MISSING_ENUM_SYMBOLS",
                f"{path}/symbols",
                f"reader enum {r['name']!r} lacks writer symbols {missing}",
            )

    def _check_record(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> None:
        pair = (str(w["name"]), str(r["name"]))
        if pair in self.assumed:
            return
        self.assumed.add(pair)
        by_name: dict[str, tuple[int, Mapping[str, Any]]] = {}
        by_alias: dict[str, tuple[int, Mapping[str, Any]]] = {}
        for i, f in enumerate(r.get("fields") or ()):
            by_name[f["name"]] = (i, f)
            for a in f.get("aliases") or ():
                by_alias[a] = (i, f)
        unfilled = dict(by_name)
        for wf in w.get("fields") or ():
            hit = by_name.get(wf["name"]) or by_alias.get(wf["name"])
            if hit is None:
                continue  # the writer's value is skipped
            i, rf = hit
            if rf["name"] not in unfilled:
                self.fail(
                    "READER_FIELD_FILLED_TWICE",
                    f"{path}/fields/{i}",
                    f"reader field {rf['name']!r} matches two writer fields",
                )
                continue
            del unfilled[rf["name"]]
            self.check(rf["type"], wf["type"], f"{path}/fields/{i}/type")
        for i, rf in unfilled.values():
            if "default" not in rf:
                self.fail(
                    "READER_FIELD_MISSING_DEFAULT_VALUE",
                    f"{path}/fields/{i}",
                    f"reader field {rf['name']!r} has no default value and is missing "
                    f"in the writer's record {w['name']!r}",
                )


def _describe(s: Any) -> str:
    k = _kind(s)
    if k in NAMED or k == "record":
        return f"{k} {s['name']!r}"
    return k


def read_incompatibilities(
    reader: Any, writer: Any, reader_names: Names | None = None, writer_names: Names | None = None
) -> list[Incompatibility]:
    """Why ``reader`` cannot read some datum written with ``writer`` (empty: it reads all)."""
    c = _Checker(reader_names or {}, writer_names or {})
    c.check(reader, writer, "")
    return c.found


def can_read(
    reader: Any, writer: Any, reader_names: Names | None = None, writer_names: Names | None = None
) -> bool:
    return not read_incompatibilities(reader, writer, reader_names, writer_names)
