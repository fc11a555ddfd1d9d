"""The console producer's input lines and the console consumer's output lines, as words.

Pure (no I/O), so every rule is a table-driven unit test: kcat's ``-f`` format string
(`compile_format`), the console consumer's default line with its optional timestamp,
headers, partition:offset and key (`default_line`, in kafka-console-consumer's order), the
start of a read (`parse_offset`: ``earliest``, ``latest``, ``-N`` from the end, ``N``), and the
producer's two structured inputs: a headers prefix per line (`split_headers`, the form of
kafka-console-producer's ``parse.headers=true``: ``h1:v1,h2:v2<TAB>rest``) and JSON lines
(`parse_jsonl`) carrying key, value, headers, timestamp and partition.

Bytes that are not UTF-8 travel as ``{"base64": "..."}`` in JSON (what ``consume --json``
prints, so its output is ``produce --jsonl`` input).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

Header = tuple[str, bytes | None]


class FormatError(ValueError):
    """Input the console tools cannot use; the message says which and how to fix it."""


class Rec(Protocol):
    """What a printed record has (``api.client.types.ConsumerRecord``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> tuple[Header, ...]: ...


# ------------------------------------------------------------------ consumer output


def _bytes(b: bytes | None) -> bytes:
    return b if b is not None else b""


def _headers_text(r: Rec) -> bytes:
    """kcat's %h: ``name=value`` pairs joined by ``,``."""
    return b",".join(h.encode() + b"=" + _bytes(v) for h, v in r.headers)


_TOKENS: dict[str, Callable[[Rec], bytes]] = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: str(r.partition).encode(),
    "o": lambda r: str(r.offset).encode(),
    "k": lambda r: _bytes(r.key),
    "s": lambda r: _bytes(r.value),
    "K": lambda r: str(-1 if r.key is None else len(r.key)).encode(),
    "S": lambda r: str(-1 if r.value is None else len(r.value)).encode(),
    "T": lambda r: str(r.timestamp).encode(),
    "h": _headers_text,
    "%": lambda r: b"%",
}
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", "0": b"\0"}


def compile_format(fmt: str) -> Callable[[Rec], bytes]:
    """kcat's ``-f``: ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k`` key, ``%s``
    value, ``%K``/``%S`` their lengths (-1 for null), ``%T`` timestamp (ms), ``%h`` headers
    (``n=v,n=v``), ``%%``; ``\\n \\t \\r \\\\ \\0`` escapes. No newline is added (as kcat)."""
    parts: list[bytes | Callable[[Rec], bytes]] = []
    lit = bytearray()
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch in "%\\" and i + 1 == len(fmt):
            raise FormatError(f"format {fmt!r} ends with a lone {ch!r}")
        if ch == "%":
            fn = _TOKENS.get(fmt[i + 1])
            if fn is None:
                raise FormatError(
                    f"format {fmt!r}: unknown %{fmt[i + 1]} (known: %t %p %o %k %s %K %S %T %h %%)"
                )
            if lit:
                parts.append(bytes(lit))
                lit.clear()
            parts.append(fn)
            i += 2
        elif ch == "\\":
            esc = _ESCAPES.get(fmt[i + 1])
            if esc is None:
                raise FormatError(f"format {fmt!r}: unknown escape \\{fmt[i + 1]}")
            lit += esc
            i += 2
        else:
            lit += ch.encode()
            i += 1
    if lit:
        parts.append(bytes(lit))

    def render(r: Rec) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(r) for p in parts)

    return render


def _text(b: bytes | None) -> str:
    return "null" if b is None else b.decode("utf-8", errors="backslashreplace")


def default_line(
    r: Rec,
    *,
    print_timestamp: bool = False,
    print_headers: bool = False,
    print_offset: bool = False,
    print_key: bool = False,
) -> bytes:
    """One record as kafka-console-consumer prints it (its DefaultMessageFormatter's order:
    ``CreateTime:<ms>``, headers or ``NO_HEADERS``, then ours ``P:O``, key, value, by tabs)."""
    cells: list[str] = []
    if print_timestamp:
        cells.append(f"CreateTime:{r.timestamp}")
    if print_headers:
        cells.append(
            ",".join(f"{h}:{_text(v)}" for h, v in r.headers) if r.headers else "NO_HEADERS"
        )
    if print_offset:
        cells.append(f"{r.partition}:{r.offset}")
    if print_key:
        cells.append(_text(r.key))
    cells.append(_text(r.value))
    return "\t".join(cells).encode() + b"\n"


def json_field(b: bytes | None) -> Any:
    """UTF-8 as a string, other bytes as ``{"base64": ...}``, None as null."""
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode()}


# ------------------------------------------------------------------ where a read starts


def parse_offset(text: str) -> tuple[str, int]:
    """``earliest``/``beginning``, ``latest``/``end``, ``-N`` (N before the end, kcat's
    ``-o -N``) or ``N``: ``("earliest"|"latest"|"from_end"|"absolute", n)``."""
    t = text.strip().lower()
    if t in ("earliest", "beginning"):
        return "earliest", 0
    if t in ("latest", "end"):
        return "latest", 0
    try:
        n = int(t)
    except ValueError:
        raise FormatError(
            f"--offset {text!r}: expected earliest, latest, -N (N before the end) or N"
        ) from None
    return ("from_end", -n) if n < 0 else ("absolute", n)


def start_offset(how: str, n: int, first: int, end: int) -> int:
    """Where a partition's read starts, within ``[first, end]``."""
    want = {"earliest": first, "latest": end, "from_end": end - n, "absolute": n}[how]
    return min(max(want, first), end)


# ------------------------------------------------------------------ producer input


def parse_header(text: str, sep: str = "=") -> Header:
    name, s, value = text.partition(sep)
    if not s or not name:
        raise FormatError(f"header {text!r}: expected NAME{sep}VALUE")
    return name, value.encode()


def split_headers(line: bytes, n: int) -> tuple[list[Header], bytes]:
    """kafka-console-producer's ``parse.headers=true`` line: ``h1:v1,h2:v2<TAB>rest``
    (an empty part before the tab: no headers)."""
    head, tab, rest = line.partition(b"\t")
    if not tab:
        raise FormatError(f"line {n} has no tab after its headers (expected h:v,h:v<TAB>...)")
    headers: list[Header] = []
    for item in head.decode("utf-8", errors="replace").split(","):
        if not item:
            continue
        try:
            headers.append(parse_header(item, ":"))
        except FormatError as e:
            raise FormatError(f"line {n}: {e}") from None
    return headers, rest


@dataclass(frozen=True)
class LineRecord:
    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None
    partition: int | None = None


def _field_bytes(v: Any, what: str, n: int) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, dict) and set(v) == {"base64"} and isinstance(v["base64"], str):
        try:
            return base64.b64decode(v["base64"], validate=True)
        except binascii.Error:
            raise FormatError(f"line {n}: {what}.base64 is not base64") from None
    return orjson.dumps(v)  # any other JSON value: sent as its JSON text


def _int_field(obj: dict[str, Any], name: str, n: int) -> int | None:
    v = obj.get(name)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise FormatError(f"line {n}: {name} must be an integer >= 0, got {v!r}")
    return v


def parse_jsonl(line: bytes, n: int) -> LineRecord:
    """``{"key": ..., "value": ..., "headers": {"n": "v"} | [["n", "v"], ...],
    "timestamp": ms, "partition": p}``; every field optional. Strings are sent as UTF-8,
    ``{"base64": ...}`` as its bytes, null as null, other JSON as its JSON text. ``topic``,
    ``offset`` and ``timestamp_type`` (as ``consume --json`` prints them) are ignored."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise FormatError(f"line {n} is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise FormatError(f"line {n}: expected a JSON object, got {type(obj).__name__}")
    raw = obj.get("headers") or []
    pairs: list[Any] = list(raw.items()) if isinstance(raw, dict) else raw
    if not isinstance(pairs, list):
        raise FormatError(f"line {n}: headers must be an object or a list of [name, value]")
    headers: list[Header] = []
    for p in pairs:
        if not (isinstance(p, list | tuple) and len(p) == 2 and isinstance(p[0], str)):
            raise FormatError(f"line {n}: a header must be [name, value], got {p!r}")
        headers.append((p[0], _field_bytes(p[1], f"headers.{p[0]}", n)))
    return LineRecord(
        value=_field_bytes(obj.get("value"), "value", n),
        key=_field_bytes(obj.get("key"), "key", n),
        headers=tuple(headers),
        timestamp_ms=_int_field(obj, "timestamp", n),
        partition=_int_field(obj, "partition", n),
    )
