"""The fast path of JSON produce, pure: a body of plain records decoded by msgspec into
structs, and planned, batched and reported without a Python object or call per record.

Who calls it: ``api.http.produce`` asks ``plan`` for a plan of the body; if it gets one, it
sends each planned batch (``Plan.encode`` builds it on its lane) and has its report lines
written here (``batch_lines``, ``failed_lines``, ``in_request_order``). Nothing here does
I/O, reads the clock or knows the ``HttpContext``: the partition count, the size limit, the
timestamp and the sticky partition come in as arguments.

Why: on a 1,000-record body the general path (``api.http.produce.produce_records`` over
``api.http.records``) spends about 2.6 us of CPU per record on the leader (orjson's dicts,
our checks, a ``ParsedRecord`` and a ``Delivered`` per record, ``encode_batch``'s tuples, a
report each), against a budget of about 0.3 us beyond the binary batch form
(docs/benchmarks.md, History). Here msgspec decodes the body into ``gc=False`` structs in
C, keeping each key's and value's ``data`` as ``msgspec.Raw`` (its JSON text, not parsed);
the stored bytes of a whole column of data are made by a few C-level calls (one split, one
orjson call, ``map``); batches are joined by ``storage.batch.encode_values``; reports are
one ``%``-format per record over cached fragments.

A record is *plain* when it has no fields but ``partition_id``, ``key`` and ``value``
(``headers`` and ``timestamp`` absent or null), its ``value`` and any ``key`` are
``{"type", "data"}`` with ``type`` exactly STRING, BINARY or JSON (absent means JSON) and
``data`` non-null and of that type, its ``partition_id`` (if any) names a partition of the
topic, and it fits ``max.message.bytes``. ``plan`` declines (returns None) a body that is
not a JSON array of plain records (or one plain record), or that msgspec does not decode,
before anything has happened (no sticky partition taken); the caller then runs the general
path on the same bytes, which answers every record, good or bad, as it always has. Whatever
``plan`` takes must be stored and reported exactly as the general path would:
tests/unit/http/test_fast_produce.py checks it on generated bodies.

What keeps the two in step, beyond the plain-record rules:

* the general path parses with orjson. msgspec checks JSON syntax but not the UTF-8 of the
  strings it skips over, so every ``data`` text goes through orjson (or a UTF-8 decode) here
  too, and a body orjson would refuse is declined; msgspec, like orjson, keeps the last of
  duplicate fields;
* orjson's depth limits (``_loads``);
* unknown fields make a record non-plain (``forbid_unknown_fields``), so no part of the body
  is skipped unchecked.
"""

from __future__ import annotations

import base64
import binascii
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import accumulate, chain, repeat
from operator import add, attrgetter
from typing import Any, Literal

import msgspec
import orjson

from api.client.partitioner import partition_for_key
from api.http.errors import HttpError
from api.http.records import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES, iso_ms
from storage.batch import encode_values

Kind = Literal["STRING", "BINARY", "JSON"]


class Data(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A key or value ``{"type", "data"}``; ``data`` stays JSON text. ``gc=False``: no cycles
    are possible, and the collector need not track a thousand structs per request. ``type``
    is a ``Literal``: msgspec checks it and hands back one shared string per kind instead of
    making a string per record (a fifth of the decoding time), and any other type (AVRO,
    a lower-case "string") fails the decode, which declines the body."""

    type: Kind = "JSON"
    data: msgspec.Raw = msgspec.Raw(b"null")


class Record(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    partition_id: int | None = None
    key: Data | None = None
    value: Data | None = None
    headers: None = None  # present and non-null: not plain (a ValidationError, declined)
    timestamp: None = None


_DECODER = msgspec.json.Decoder(list[Record] | Record)
_PID = attrgetter("partition_id")
_KEY = attrgetter("key")
_VALUE_TYPE = attrgetter("value.type")
_VALUE_DATA = attrgetter("value.data")
_TYPE = attrgetter("type")
_DATA = attrgetter("data")


@dataclass(slots=True)
class Plan:
    """A plain body, ready to produce: what each record stores and where, in request order."""

    values: list[bytes]
    keys: list[bytes | None] | None
    """None when no record has a key."""
    tails: list[bytes]
    """Per record, its report after ``"key":`` (key and value type and size) and the newline."""
    tail: bytes | None
    """The tail of every record when they are all alike (the same kinds and sizes), else
    None."""
    batches: list[list[tuple[int, Sequence[int]]]]
    """Per partition (in order of first appearance), its batches as (partition, record
    indices), each within ``max.message.bytes``, in request order: as ``produce_records``
    cuts them."""
    timestamp_ms: int

    @property
    def count(self) -> int:
        return len(self.values)

    def encode(
        self, idxs: Sequence[int], producer_id: int, producer_epoch: int, base_sequence: int
    ) -> bytes:
        """The batch of the records ``idxs`` (one of ``batches``), stamped for its lane."""
        whole = len(idxs) == self.count
        values = self.values if whole else list(map(self.values.__getitem__, idxs))
        keys = (
            None
            if self.keys is None
            else self.keys
            if whole
            else list(map(self.keys.__getitem__, idxs))
        )
        return encode_values(
            values,
            timestamp=self.timestamp_ms,
            keys=keys,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )


# --------------------------------------------------------------------------- planning


def plan(
    raw: bytes, *, partitions: int, limit: int, timestamp_ms: int, next_sticky: Callable[[], int]
) -> Plan | None:
    """The plan for a body of plain records, or None (module docstring). Pure but for
    ``next_sticky``, called at most once and only when the plan is taken."""
    try:
        decoded = _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    recs = [decoded] if isinstance(decoded, Record) else decoded
    n = len(recs)
    if n == 0:
        return None
    # One C-level pass per column (a pass costs some 0.03 us a record: they add up).
    try:
        kinds: list[str] = list(map(_VALUE_TYPE, recs))
    except AttributeError:  # a record without a value
        return None
    values = column_bytes(kinds, list(map(_VALUE_DATA, recs)))
    if values is None:
        return None
    sizes = list(map(len, values))
    keys: list[bytes | None] | None = None
    if not any(map(_KEY, recs)):
        if kinds.count(kinds[0]) == n:  # the common case: tails by value size alone
            memo = _Memo(partial(_tail, None, 0, kinds[0]))
            tails = list(map(memo.__getitem__, sizes))
        else:
            memo = _Memo(lambda k: _tail(None, 0, *k))
            tails = list(map(memo.__getitem__, zip(kinds, sizes, strict=True)))
    else:
        key_fields = list(map(_KEY, recs))
        present = [k for k in key_fields if k is not None]
        key_kinds: list[str] = list(map(_TYPE, present))
        present_bytes = column_bytes(key_kinds, list(map(_DATA, present)))
        if present_bytes is None:
            return None
        it, kit = iter(present_bytes), iter(key_kinds)
        keys = [None if k is None else next(it) for k in key_fields]
        all_key_kinds = [None if k is None else next(kit) for k in key_fields]
        key_sizes = [0 if k is None else len(k) for k in keys]
        memo = _Memo(lambda k: _tail(*k))
        tails = list(
            map(memo.__getitem__, zip(all_key_kinds, key_sizes, kinds, sizes, strict=True))
        )
        sizes = list(map(add, sizes, key_sizes))
    # produce_records: a record larger than max.message.bytes fails alone (413).
    if max(sizes) + RECORD_OVERHEAD_BYTES + BATCH_OVERHEAD_BYTES > limit:
        return None
    given = set(map(_PID, recs))
    unset = None in given
    given.discard(None)
    if given and (min(given) < 0 or max(given) >= partitions):
        return None  # the general path's per-record errors
    # Taken: from here on nothing declines.
    if not unset and len(given) == 1:
        parts: int | list[int] = given.pop()
    elif not given and keys is None:
        parts = next_sticky()
    else:
        parts = _assign(list(map(_PID, recs)), keys, partitions, next_sticky)
    tail = tails[0] if len(memo) == 1 else None
    return Plan(values, keys, tails, tail, _batches(parts, sizes, limit), timestamp_ms)


def column_bytes(kinds: list[str], raws: list[msgspec.Raw]) -> list[bytes] | None:
    """The stored bytes of a column of keys or values as ``encode_data`` makes them from
    ``(type, data)``, or None where it would fail (or null data). A column of one type
    takes C-level calls only; a mixed one a Python loop."""
    if kinds.count(kinds[0]) == len(kinds):
        if kinds[0] == "STRING":
            return _strings(raws)
        if kinds[0] == "JSON":
            return _json(raws)
    return _mixed(kinds, raws)


def _strings(raws: list[msgspec.Raw]) -> list[bytes] | None:
    # A JSON string with no escape (no backslash) stores the UTF-8 between its quotes, and
    # holds no quote. NUL never occurs in JSON text (msgspec checked the syntax), so the n-1
    # NULs of the join are the joins; if the whole starts and ends with a quote and splits
    # at quote-NUL-quote into n pieces, every join sits between two quotes: every text
    # starts and ends with one (so is a string) and the pieces are their insides.
    joined = b"\0".join(raws)
    if b"\\" not in joined and joined[:1] == b'"' and joined[-1:] == b'"':
        pieces = joined[1:-1].split(b'"\0"')
        if len(pieces) == len(raws):
            try:
                joined.decode()  # orjson refuses bad UTF-8 (encoded surrogates too): so must we
            except UnicodeDecodeError:
                return None
            return pieces
    objs = _loads(raws)
    if objs is None or set(map(type, objs)) != {str}:
        return None
    return list(map(str.encode, objs))


def _json(raws: list[msgspec.Raw]) -> list[bytes] | None:
    # encode_data stores orjson.dumps(data): compact, orjson's number and escape forms.
    # Clients mostly send exactly that, and then the text as sent is the stored bytes: one
    # dumps of the whole column against the joined texts proves it for every record (the
    # elements of a JSON array have one split). Otherwise re-encode each.
    objs = _loads(raws)
    if objs is None or None in objs:
        return None
    try:
        if orjson.dumps(objs) == b"[" + b",".join(raws) + b"]":
            return list(map(bytes, raws))
        return list(map(orjson.dumps, objs))
    except orjson.JSONEncodeError:  # an integer beyond 64 bits; too deep
        return None


_b64decode = partial(base64.b64decode, validate=True)


def _mixed(kinds: list[str], raws: list[msgspec.Raw]) -> list[bytes] | None:
    objs = _loads(raws)
    if objs is None:
        return None
    out = []
    try:
        for kind, obj in zip(kinds, objs, strict=True):
            if obj is None:
                return None
            if kind == "JSON":
                out.append(orjson.dumps(obj))
            elif type(obj) is not str:
                return None
            elif kind == "STRING":
                out.append(obj.encode())
            else:
                out.append(_b64decode(obj))
    except (orjson.JSONEncodeError, binascii.Error, ValueError):
        return None
    return out


def _loads(raws: list[msgspec.Raw]) -> list[Any] | None:
    """The data as orjson parses them (in the body they sit two levels deeper, but data deep
    enough for that to matter are declined anyway: msgspec stops short of orjson's depth
    limit, and orjson.dumps, which JSON data need, far short of it)."""
    try:
        objs: list[Any] = orjson.loads(b"[" + b",".join(raws) + b"]")
    except orjson.JSONDecodeError:
        return None
    return objs


def _tail(key_kind: str | None, key_size: int, value_kind: str, value_size: int) -> bytes:
    """A report after ``"key":``, byte for byte as ``orjson.dumps(report_json(...))`` ends."""
    key = b"null" if key_kind is None else orjson.dumps({"type": key_kind, "size": key_size})
    return key + b',"value":' + orjson.dumps({"type": value_kind, "size": value_size}) + b"}\n"


class _Memo(dict[Any, bytes]):
    """``fn(k)`` made on first use of each ``k``, so that ``map(memo.__getitem__, ...)``
    costs one C-level lookup per record."""

    def __init__(self, fn: Callable[[Any], bytes]) -> None:
        super().__init__()
        self.fn = fn

    def __missing__(self, k: Any) -> bytes:
        v = self[k] = self.fn(k)
        return v


def _assign(
    pids: list[int | None],
    keys: list[bytes | None] | None,
    count: int,
    next_sticky: Callable[[], int],
) -> list[int]:
    """Partitions as ``produce_records`` picks them: as given, by key, else one sticky one."""
    sticky: int | None = None
    out = []
    for p, k in zip(pids, keys or repeat(None), strict=False):
        if p is None:
            if k is not None:
                p = partition_for_key(k, count)
            else:
                if sticky is None:
                    sticky = next_sticky()
                p = sticky
        out.append(p)
    return out


def _batches(
    parts: int | list[int], sizes: list[int], limit: int
) -> list[list[tuple[int, Sequence[int]]]]:
    """Each partition's records in request order (``parts``: each record's partition, or
    the one of all), cut greedily into batches of at most ``limit`` bytes as
    ``produce_records`` cuts them (``sizes``: key and value bytes; each record fits alone)."""
    n = len(sizes)
    if isinstance(parts, int):
        groups: list[tuple[int, Sequence[int]]] = [(parts, range(n))]
    else:
        # A stable sort by partition keeps request order within each partition.
        order = sorted(range(n), key=parts.__getitem__)
        ordered = sorted(parts)
        groups = []
        for p in dict.fromkeys(parts):  # first appearance, as produce_records gathers
            groups.append((p, order[bisect_left(ordered, p) : bisect_right(ordered, p)]))
    room = limit - BATCH_OVERHEAD_BYTES
    out = []
    for p, idxs in groups:
        if (
            sum(sizes) if len(idxs) == n else sum(map(sizes.__getitem__, idxs))
        ) + RECORD_OVERHEAD_BYTES * len(idxs) <= room:
            out.append([(p, idxs)])
            continue
        ends = list(
            accumulate(
                map(add, map(sizes.__getitem__, idxs), repeat(RECORD_OVERHEAD_BYTES)), initial=0
            )
        )
        cuts, start = [], 0
        while start < len(idxs):
            end = max(bisect_right(ends, ends[start] + room) - 1, start + 1)
            cuts.append((p, idxs[start:end]))
            start = end
        out.append(cuts)
    return out


# --------------------------------------------------------------------------- reports


def batch_lines(
    p: Plan,
    idxs: Sequence[int],
    prefix: bytes,
    partition: int,
    base_offset: int,
    append_time_ms: int,
    *,
    joined: bool,
) -> list[bytes]:
    """The report lines of a delivered batch of ``p`` (its records ``idxs``), in its order,
    byte for byte as ``records.report_lines`` writes them. ``prefix``:
    ``records.report_prefix``; ``base_offset``: -1 when not known (acks=0);
    ``append_time_ms``: -1 when the records keep their timestamp; ``joined``: the lines may
    come as fewer, longer pieces (the caller only joins them)."""
    ts = append_time_ms if append_time_ms >= 0 else p.timestamp_ms
    head = prefix + b'%d,"offset":' % partition
    middle = b',"timestamp":' + orjson.dumps(iso_ms(ts)) + b',"key":'
    if joined and base_offset >= 0 and p.tail is not None:
        return [lines_with_offsets(head, middle + p.tail, base_offset, len(idxs))]
    offsets = offset_texts(base_offset, len(idxs)) if base_offset >= 0 else repeat(b"-1")
    tails = p.tails if len(idxs) == p.count else map(p.tails.__getitem__, idxs)
    # The fixed parts as arguments, not in the format: % copies its format byte by byte.
    return list(
        map(b"%s%s%s%s".__mod__, zip(repeat(head), offsets, repeat(middle), tails, strict=False))
    )


def failed_lines(err: HttpError, n: int) -> list[bytes]:
    """The report lines of a refused batch of ``n`` records: each fails with its error."""
    return [orjson.dumps({"error_code": err.error_code, "message": err.message}) + b"\n"] * n


def in_request_order(p: Plan, per_partition: Sequence[list[bytes]]) -> bytes:
    """The body of the report lines of every batch, given per partition in ``p.batches``
    order (one line per piece, not joined), in request order."""
    lines = list(chain.from_iterable(per_partition))
    order = list(chain.from_iterable(idxs for bs in p.batches for _, idxs in bs))
    return b"".join(map(lines.__getitem__, sorted(range(len(order)), key=order.__getitem__)))


_DECIMAL = [b"%d" % i for i in range(1000)]
_DIGITS3 = [b"%03d" % i for i in range(1000)]


def _offset_runs(base: int, n: int) -> list[tuple[bytes, list[bytes]]]:
    """Offsets ``base`` .. ``base + n - 1`` in decimal as runs of (prefix, endings): the
    offsets sharing all but their last three digits share a prefix, and their endings are
    slices of a table. Writing an int in decimal costs more than everything else in a
    report line (~0.15 us); this costs a slice per thousand."""
    runs = []
    x, end = base, base + n
    while x < end:
        if x < 1000:
            k = min(end, 1000)
            runs.append((b"", _DECIMAL[x:k]))
        else:
            hi, lo = divmod(x, 1000)
            k = min(end, x - lo + 1000)
            runs.append((b"%d" % hi, _DIGITS3[lo : lo + k - x]))
        x = k
    return runs


def offset_texts(base: int, n: int) -> list[bytes]:
    """``[b"%d" % o for o in range(base, base + n)]``, made by ``_offset_runs``."""
    out: list[bytes] = []
    for prefix, endings in _offset_runs(base, n):
        out += map(prefix.__add__, endings) if prefix else endings
    return out


def lines_with_offsets(head: bytes, rest: bytes, base: int, n: int) -> bytes:
    """``b"".join(head + b"%d" % o + rest for o in range(base, base + n))``, one join per
    thousand offsets (``_offset_runs``): the report lines of records whose lines differ only
    in their offset."""
    out = []
    for prefix, endings in _offset_runs(base, n):
        glue = head + prefix
        out.append(glue + (rest + glue).join(endings) + rest)
    return b"".join(out)
