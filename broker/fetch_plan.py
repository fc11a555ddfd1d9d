"""The follower fetcher's pure core: which partitions one multi-partition fetch asks for, and
what to do with each partition's answer.

A follower runs one fetcher per source broker (Kafka's ``num.replica.fetchers``, default 1);
it follows every partition that broker leads for it with one long-polling
``/internal/broker/v1/replica_fetch`` request at a time (Kafka's ``ReplicaFetcherThread``, one
FetchRequest per leader covering all its partitions). This module decides, for one round:

* ``plan_fetch``: the partitions to ask about. A partition is left out while it is *busy*
  (truncating: OffsetsForLeaderEpoch in flight, or restarting its log at the leader's start),
  while it backs off after an error (its own ``ready_at_s``: one partition's error never
  stalls the others), and, for an *adding* replica of a reassignment, while the replication
  throttle's bucket is overdrawn (Kafka's follower quota leaves throttled partitions out of
  a fetch the same way). The order rotates from round to round so that, under the response's
  byte cap, no partition always comes last (KIP-74). The long poll is shortened so that a
  partition coming out of back-off or throttle is asked for on time.
* ``answer_outcomes``: each partition entry of an answer as one ``Outcome`` (append data and
  move the HW, diverging epoch, offset out of range, or retry after a back-off), checked for
  types first: an answer comes from another process, and a malformed entry is a retry of
  that partition, never an exception in the fetcher.

The leader leaves a partition out of its answer when it has nothing to say about it (no
data, no HW past the one the follower sent, no newer log start, no error): that keeps the
answer small when most partitions are idle. An omitted partition is simply asked again.

Records apart (``RECORDS_APART``, asked for with ``records_apart`` in the request): the
answer's records travel after its msgpack map instead of inside it, so that neither side
copies them through msgpack (packing fetched megabytes into a map and unpacking them out of
it again cost more CPU than reading them: docs/kafka-protocol.md, "Benchmark"). The body is

====================  ==================================================================
``int32`` size        of the map that follows (big-endian)
map                   the msgpack answer, each entry's ``records`` an int: its byte count
records               each entry's records, in entry order, back to back
====================  ==================================================================

``encode_records_apart`` builds it as parts to write without joining them;
``decode_records_apart`` gives the answer back with each ``records`` a view into the body
(no copy), or ``MalformedAnswerError`` if the sizes do not add up. A leader that does not
know the flag answers a plain msgpack map, which the follower tells by its content type.

Pure: no I/O, no clock, no global random (time comes in as ``now_s``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

PartitionKey = tuple[str, int]
"""(topic, partition)."""
RECORDS_APART = "application/x-longboat-records-apart"
"""The content type of a ``replica_fetch`` answer with its records apart (module docstring)."""
_MAP_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class PartitionFetch:
    """One partition of a follower's multi-partition fetch (the fields of the single route's
    ``fetch`` body that are per partition)."""

    topic: str
    partition: int
    fetch_offset: int
    leader_epoch: int
    last_fetched_epoch: int
    high_watermark: int
    log_start_offset: int
    max_bytes: int

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.partition)

    def to_wire(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "fetch_offset": self.fetch_offset,
            "leader_epoch": self.leader_epoch,
            "last_fetched_epoch": self.last_fetched_epoch,
            "high_watermark": self.high_watermark,
            "log_start_offset": self.log_start_offset,
            "max_bytes": self.max_bytes,
        }


@dataclass(frozen=True)
class Slot:
    """What the planner reads of one followed partition."""

    key: PartitionKey
    busy: bool = False
    """Truncating or restarting its log: not fetched until that is done."""
    ready_at_s: float = 0.0
    """Backing off after an error until then."""
    throttled: bool = False
    """An adding replica of a reassignment: fetched within the replication throttle."""


@dataclass(frozen=True)
class FetchPlan:
    keys: tuple[PartitionKey, ...]
    """The partitions to ask for, in this order; empty: send nothing this round."""
    max_wait_ms: int
    """How long the leader may hold the request."""
    sleep_s: float | None
    """With no keys: how long until a partition may be asked for (None: not before a
    partition is added or finishes truncating)."""


def plan_fetch(
    slots: Sequence[Slot],
    *,
    now_s: float,
    rotation: int,
    throttle_delay_s: float,
    max_wait_ms: int,
) -> FetchPlan:
    """The partitions one fetch round asks for (rules in the module docstring).

    ``throttle_delay_s`` is the replication throttle bucket's wait (0: throttled partitions
    may be fetched now); ``rotation`` any counter the caller advances each round."""
    asked: list[PartitionKey] = []
    wait_s: float | None = None
    """The soonest a left-out partition may be asked for, from now."""
    for s in slots:
        if s.busy:
            continue
        w = max(s.ready_at_s - now_s, throttle_delay_s if s.throttled else 0.0)
        if w > 0:
            wait_s = w if wait_s is None else min(wait_s, w)
            continue
        asked.append(s.key)
    if asked:
        k = rotation % len(asked)
        asked = asked[k:] + asked[:k]
    if not asked:
        return FetchPlan((), 0, wait_s)
    wait_ms = max_wait_ms if wait_s is None else min(max_wait_ms, math.ceil(wait_s * 1000))
    return FetchPlan(tuple(asked), wait_ms, None)


# ---------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Append:
    """Append ``records`` (possibly none) and move the HW; follow the leader's log start."""

    records: bytes | memoryview
    high_watermark: int
    log_start_offset: int | None


@dataclass(frozen=True)
class Diverge:
    """The leader's log diverges from ours: ``FollowerState.on_epoch_end_offset``."""

    epoch: int
    end_offset: int


@dataclass(frozen=True)
class OutOfRange:
    """Our fetch offset is outside the leader's log: restart at its log start if we are
    below it (``truncate_fully``), else retry."""

    message: str


@dataclass(frozen=True)
class Retry:
    """Back off this partition and ask again (the metadata log moves the partition to
    another fetcher if its leader changed)."""

    code: str
    message: str


Outcome = Append | Diverge | OutOfRange | Retry


def _int(v: Any) -> int | None:
    return v if type(v) is int else None


def entry_outcome(e: Any) -> Outcome:
    """One partition entry of a fetch answer (the ``fetch`` route's answer or one item of
    ``replica_fetch``'s ``partitions``) as what to do; never raises."""
    if type(e) is not dict:
        return Retry("UNKNOWN_SERVER_ERROR", f"an answer entry that is not a map: {e!r:.80}")
    err = e.get("error")
    if err:
        code = str(err)
        message = str(e.get("message", ""))
        if code == "OFFSET_OUT_OF_RANGE":
            return OutOfRange(message)
        return Retry(code, message)
    div = e.get("diverging_epoch")
    if div is not None:
        if (
            type(div) is list
            and len(div) == 2
            and _int(div[0]) is not None
            and _int(div[1]) is not None
        ):
            return Diverge(div[0], div[1])
        return Retry("UNKNOWN_SERVER_ERROR", f"a malformed diverging_epoch: {div!r:.80}")
    records = e.get("records")
    hw = _int(e.get("high_watermark"))
    if not isinstance(records, bytes | memoryview) or hw is None or hw < -1:
        return Retry("UNKNOWN_SERVER_ERROR", f"a malformed fetch answer: {sorted(e)!r:.120}")
    start = _int(e.get("log_start_offset"))
    return Append(records, hw, start if start is not None and start >= 0 else None)


def answer_outcomes(ans: Any) -> dict[PartitionKey, Outcome]:
    """A ``replica_fetch`` answer, by partition. A partition the answer leaves out had
    nothing new. Entries that name no partition cannot be attributed and are dropped (their
    partitions are asked again next round)."""
    out: dict[PartitionKey, Outcome] = {}
    parts = ans.get("partitions") if type(ans) is dict else None
    if type(parts) is not list:
        return out
    for e in parts:
        if type(e) is not dict:
            continue
        topic, partition = e.get("topic"), e.get("partition")
        if type(topic) is not str or type(partition) is not int:
            continue
        out[(topic, partition)] = entry_outcome(e)
    return out


class MalformedAnswerError(ValueError):
    """A records-apart body whose parts do not add up."""


def encode_records_apart(answer: dict[str, Any]) -> list[bytes | memoryview]:
    """``answer`` (a ``replica_fetch`` answer map, its entries' ``records`` bytes) as the
    parts of a records-apart body: the size, the map, then each entry's records uncopied.
    ``answer`` itself is left as it was."""
    records: list[bytes | memoryview] = []
    entries = []
    for entry in answer.get("partitions", ()):
        data = entry.get("records")
        if isinstance(data, bytes | memoryview):
            records.append(data)
            entry = entry | {"records": len(data)}
        entries.append(entry)
    head = msgpack.packb(answer | {"partitions": entries}, use_bin_type=True)
    return [_MAP_SIZE.pack(len(head)), head, *(r for r in records if len(r))]


def decode_records_apart(body: bytes) -> dict[str, Any]:
    """The answer ``encode_records_apart`` made, each entry's ``records`` a view into
    ``body``; ``MalformedAnswerError`` unless the map and the record sizes account for
    every byte."""
    if len(body) < _MAP_SIZE.size:
        raise MalformedAnswerError(f"a records-apart body of {len(body)} bytes")
    (size,) = _MAP_SIZE.unpack_from(body)
    pos = _MAP_SIZE.size + size
    if size < 0 or pos > len(body):
        raise MalformedAnswerError(f"a map of {size} bytes in a body of {len(body)}")
    try:
        answer = msgpack.unpackb(memoryview(body)[_MAP_SIZE.size : pos], raw=False)
    except Exception as err:  # msgpack raises several types
        raise MalformedAnswerError(f"the map does not unpack: {err}") from None
    if type(answer) is not dict:
        raise MalformedAnswerError(f"the map is a {type(answer).__name__}")
    parts = answer.get("partitions")
    if type(parts) is not list:
        raise MalformedAnswerError("the map has no partitions list")
    view = memoryview(body)
    for e in parts:
        n = e.get("records") if type(e) is dict else None
        if n is None:
            continue
        if type(n) is not int or n < 0 or pos + n > len(body):
            raise MalformedAnswerError(f"records of {n!r:.20} bytes at {pos} of {len(body)}")
        e["records"] = view[pos : pos + n]
        pos += n
    if pos != len(body):
        raise MalformedAnswerError(f"{len(body) - pos} bytes after the last entry's records")
    out: dict[str, Any] = answer
    return out
