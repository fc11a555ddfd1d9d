"""What the coordinators' internal-topic records share: msgpack in and out, and field checks
that turn a value of the wrong type into ``CorruptRecordError`` (a record nobody acts on), as
``broker.groups.records`` (``__consumer_offsets``) and ``broker.txn.records``
(``__transaction_state``) decode them."""

from __future__ import annotations

from typing import Any

import msgpack

from storage.errors import CorruptRecordError


def str_field(x: Any) -> str:
    if not isinstance(x, str):
        raise CorruptRecordError(f"expected a string, got {type(x).__name__}")
    return x


def int_field(x: Any) -> int:
    if not isinstance(x, int) or isinstance(x, bool):
        raise CorruptRecordError(f"expected an integer, got {type(x).__name__}")
    return x


def pack(obj: object) -> bytes:
    return bytes(msgpack.packb(obj, use_bin_type=True))


def unpack(raw: bytes) -> Any:
    try:
        return msgpack.unpackb(raw, use_list=True, raw=False)
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise CorruptRecordError(f"not msgpack: {e}") from e
