"""Controller commands and responses as msgpack, for the internal controller route.

A small tagged codec over the frozen dataclasses of ``metalog.commands`` and
``metalog.responses`` (and the registrations, records and ``metalog.security`` values they
carry): a dataclass or NamedTuple becomes ``{"@": "ClassName", field: value, ...}``, an
enum ``{"@e": "EnumName", "v": value}``, a ``MetadataError`` ``{"@err": "ClassName",
"message": ...}``; sequences travel as lists and come back as
tuples (the dataclasses are frozen and hashed). Only classes registered here decode, so a
peer can never make us build an arbitrary object (never pickle network input).

Every decoded dataclass and NamedTuple is checked against its field annotations before it is
built (``_check``: ints are ints and not bools, ``tuple[X, ...]`` holds only X, ``X | None``,
mappings, enums, nested classes; ``NewType`` ids by their base type), and ``loads_command``
takes only a ``metalog.commands.Command``: a body with a field of the wrong type is a
``WireError`` (the route's 400) before the controller sees it. A command the controller
trusted to be well typed could otherwise fail inside ``handle`` (a 500) or turn into a record
every voter then fails to replay (issue 17).

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

import msgpack

from metalog import commands as _cmd
from metalog import errors as _err
from metalog import image as _img
from metalog import records as _rec
from metalog import responses as _rsp
from metalog import security as _sec


class WireError(ValueError):
    """A body that does not decode to a known command or response."""


def _registry() -> tuple[dict[str, type], dict[str, type[enum.Enum]], dict[str, type]]:
    classes: dict[str, type] = {}
    enums: dict[str, type[enum.Enum]] = {}
    errors: dict[str, type] = {}
    for mod in (_cmd, _rsp, _err, _img, _rec, _sec):
        for name, obj in vars(mod).items():
            if not isinstance(obj, type) or obj.__module__ != mod.__name__:
                continue
            if issubclass(obj, enum.Enum):
                enums[name] = obj
            elif issubclass(obj, _err.MetadataError):
                errors[name] = obj
            elif dataclasses.is_dataclass(obj) or (
                issubclass(obj, tuple) and hasattr(obj, "_fields")
            ):
                classes[name] = obj
    return classes, enums, errors


_CLASSES, _ENUMS, _ERRORS = _registry()


def to_wire(obj: Any) -> Any:
    if isinstance(obj, enum.Enum):  # before str: a StrEnum member is a str too
        return {"@e": type(obj).__name__, "v": obj.value}
    if obj is None or isinstance(obj, (bool, str, bytes)):
        return obj
    if isinstance(obj, int | float):
        return obj
    if isinstance(obj, _err.MetadataError):
        return {"@err": type(obj).__name__, "message": str(obj)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {"@": type(obj).__name__}
        for f in dataclasses.fields(obj):
            out[f.name] = to_wire(getattr(obj, f.name))
        return out
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        out = {"@": type(obj).__name__}
        for name in obj._fields:
            out[name] = to_wire(getattr(obj, name))
        return out
    if isinstance(obj, list | tuple):
        return [to_wire(v) for v in obj]
    if isinstance(obj, Mapping):
        # Keys stay as they are (msgpack keeps int keys); values are encoded.
        return {"@m": [[to_wire(k), to_wire(v)] for k, v in obj.items()]}
    raise WireError(f"cannot encode {type(obj).__name__}")


def from_wire(obj: Any) -> Any:
    if isinstance(obj, list):
        return tuple(from_wire(v) for v in obj)
    if not isinstance(obj, dict):
        return obj
    if "@m" in obj:
        return {_hashable(from_wire(k)): from_wire(v) for k, v in obj["@m"]}
    if "@e" in obj:
        cls_e = _ENUMS.get(obj["@e"])
        if cls_e is None:
            raise WireError(f"unknown enum {obj['@e']!r}")
        return cls_e(obj["v"])
    if "@err" in obj:
        cls_err = _ERRORS.get(obj["@err"], _err.MetadataError)
        return cls_err(obj.get("message", ""))
    name = obj.get("@")
    cls = _CLASSES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise WireError(f"unknown type {name!r}")
    kwargs = {k: from_wire(v) for k, v in obj.items() if k != "@"}
    hints = _hints(cls)
    for k, v in kwargs.items():
        hint = hints.get(k)
        if hint is not None and not _check(v, hint):
            raise WireError(
                f"{name}.{k}: expected {_describe(hint)}, got {type(v).__name__} {v!r:.80}"
            )
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise WireError(f"bad fields for {name}: {e}") from None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check(v: Any, hint: Any) -> bool:
    """Whether ``v`` (as ``from_wire`` built it) is a value of the annotation ``hint``."""
    if hint is Any:
        return True
    supertype = getattr(hint, "__supertype__", None)
    if supertype is not None:  # a NewType id: BrokerId, TopicId, ...
        return _check(v, supertype)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_check(v, a) for a in args)
    if hint is type(None):
        return v is None
    if hint is int:  # an IntEnum member is an int; a bool is not
        return isinstance(v, int) and type(v) is not bool
    if hint is float:
        return type(v) in (int, float)
    if origin is tuple:
        if type(v) is not tuple:
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_check(x, args[0]) for x in v)
        return len(args) == len(v) and all(_check(x, a) for x, a in zip(v, args, strict=True))
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        if not isinstance(v, dict):
            return False
        if not args:
            return True
        return all(_check(k, args[0]) and _check(x, args[1]) for k, x in v.items())
    if origin is typing.Literal:
        return v in args
    if isinstance(hint, type):
        return isinstance(v, hint) and not (hint is not bool and type(v) is bool)
    return True  # an annotation this codec does not know how to check: the class checks it


def _describe(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def dumps(obj: Any) -> bytes:
    packed: bytes = msgpack.packb(to_wire(obj), use_bin_type=True)
    return packed


def loads_command(data: bytes) -> _cmd.Command:
    """A controller command from a request body; ``WireError`` for anything else."""
    command = loads(data)
    if not isinstance(command, _cmd.Command):
        raise WireError(f"not a controller command: {type(command).__name__}")
    return command


def loads(data: bytes) -> Any:
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:
        raise WireError(f"body is not msgpack: {e}") from None
    try:
        return from_wire(raw)
    except WireError:
        raise
    except (TypeError, ValueError, KeyError, RecursionError) as e:
        # A malformed tag (an "@m" that is not pairs, an enum value out of range, an
        # unhashable key, nesting past the stack): the body is bad, not the server.
        raise WireError(f"malformed body: {type(e).__name__}: {e}") from None
