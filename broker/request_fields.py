"""Reading the bodies of the broker's internal msgpack routes: typed fields or a clear refusal.

Every route (``broker.data_routes``, ``broker.group_routes``, ``broker.producer_ids``) reads
its body with these functions before it acts, so a body of the wrong shape changes nothing
and is answered ``400 {"error": "INVALID_REQUEST", "message": ...}`` naming the field.

Rules (Kafka's field types, as its protocol defines them):

* the body is a msgpack map with string keys; a key the route does not read is ignored (a
  newer client may send more than an older broker knows);
* an integer is an ``int``, never a bool or a float, within the range the route gives
  (``INT32``/``INT64`` by default: what Kafka's protocol would carry);
* a string is a ``str`` of at most ``STRING_CHARS_MAX`` characters (Kafka's int16-length
  strings), a topic name a legal one (``TOPIC_NAME``);
* bytes are ``bytes``, a bool is a ``bool``, a list a ``list`` of at most ``LIST_ITEMS_MAX``;
* a field with a default may be missing (or nil); one without is required.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgpack

from common.text import show

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
STRING_CHARS_MAX = 32_767
LIST_ITEMS_MAX = 100_000
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
"""Kafka's legal topic names (``Topic.validate``); the controller creates no other."""


class InvalidRequestError(ValueError):
    """A body that is not what the route reads; ``str(e)`` says which field and why."""

    code: Final = "INVALID_REQUEST"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def _bad(key: str, want: str, v: object) -> InvalidRequestError:
    return InvalidRequestError(f"{key!r} must be {want}, got {show(v)}")


def body_or_raise(raw: bytes) -> dict[str, Any]:
    """The request body as a map with string keys."""
    try:
        body = msgpack.unpackb(raw, raw=False)
    except Exception as e:  # msgpack raises several types (ExtraData, FormatError, ...)
        raise InvalidRequestError(f"the body is not msgpack ({type(e).__name__}: {e})") from None
    if type(body) is not dict:
        raise InvalidRequestError(f"the body must be a msgpack map, got {type(body).__name__}")
    return body


_ABSENT: Any = object()


def _get(b: dict[str, Any], key: str, default: Any) -> Any:
    """The value, or ``_ABSENT`` for a missing (or nil) key that has a default."""
    v = b.get(key)
    if v is None:
        if default is REQUIRED:
            raise InvalidRequestError(f"{key!r} is required")
        return _ABSENT
    return v


def int_value(key: str, v: Any, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise _bad(key, f"an integer in [{lo}, {hi}]", v)
    return v


def int_field(
    b: dict[str, Any],
    key: str,
    lo: int = INT64_MIN,
    hi: int = INT64_MAX,
    *,
    default: int = REQUIRED,
) -> int:
    v = _get(b, key, default)
    return default if v is _ABSENT else int_value(key, v, lo, hi)


def choice_field(
    b: dict[str, Any], key: str, choices: tuple[int, ...], *, default: int = REQUIRED
) -> int:
    v = _get(b, key, default)
    if v is _ABSENT:
        return default
    if type(v) is not int or v not in choices:
        raise _bad(key, f"one of {', '.join(map(str, choices))}", v)
    return v


def str_value(key: str, v: Any, max_chars: int = STRING_CHARS_MAX) -> str:
    if type(v) is not str or len(v) > max_chars:
        raise _bad(key, f"a string of at most {max_chars} characters", v)
    return v


def str_field(
    b: dict[str, Any], key: str, max_chars: int = STRING_CHARS_MAX, *, default: str = REQUIRED
) -> str:
    v = _get(b, key, default)
    return default if v is _ABSENT else str_value(key, v, max_chars)


def topic_value(key: str, v: Any) -> str:
    if type(v) is not str or not TOPIC_NAME.fullmatch(v):
        raise _bad(key, "a topic name (1-249 of letters, digits, '.', '_', '-')", v)
    return v


def topic_field(b: dict[str, Any], key: str = "topic") -> str:
    return topic_value(key, _get(b, key, REQUIRED))


def partition_value(key: str, v: Any) -> int:
    return int_value(key, v, 0, INT32_MAX)


def partition_field(b: dict[str, Any], key: str = "partition") -> int:
    return partition_value(key, _get(b, key, REQUIRED))


def bool_field(b: dict[str, Any], key: str, *, default: bool = REQUIRED) -> bool:
    v = _get(b, key, default)
    if v is _ABSENT:
        return default
    if type(v) is not bool:
        raise _bad(key, "true or false", v)
    return v


def bytes_field(b: dict[str, Any], key: str, *, default: bytes = REQUIRED) -> bytes:
    v = _get(b, key, default)
    if v is _ABSENT:
        return default
    if type(v) is not bytes:
        raise _bad(key, "bytes", v)
    return v


def list_field(
    b: dict[str, Any], key: str, *, default: Any = REQUIRED, max_items: int = LIST_ITEMS_MAX
) -> Any:
    """The list (items unchecked: the route reads each), or ``default`` when missing."""
    v = _get(b, key, default)
    if v is _ABSENT:
        return default
    if type(v) is not list or len(v) > max_items:
        raise _bad(key, f"a list of at most {max_items} items", v)
    return v
