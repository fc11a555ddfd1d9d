"""A consumer group's offset reset planned as ``kafka-consumer-groups --reset-offsets`` plans
it, shared by ``longboat groups reset-offsets`` and the HTTP route of the same name.

Three steps: `parse_*` turn the user's words (scopes ``t`` / ``t:0,1``, ISO-8601 durations and
date-times, the tool's CSV) into values; `new_offsets` (pure) computes each partition's new
offset from the log's range, the group's committed offsets and, for the time-based specs,
the offsets found for a time; `plan_reset` gathers those inputs (``list_offsets`` at the
partition leaders, ``fetch_offsets`` at the coordinator) and `execute_reset` asks the
coordinator to write the plan.

Kafka's rules, kept: a target outside ``[earliest, latest]`` is clamped to it (the plan
says so); ``--to-current`` of a partition without a committed offset is its end; a time
with no record at or after it is the end; ``--shift-by`` needs a committed offset to shift
from. The group must be empty (no members): a live member would overwrite the reset with
its next commit, so the plan refuses an active group and the coordinator refuses it again
(NON_EMPTY_GROUP) if a member joined meanwhile.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from api.client.types import TopicPartition

Body = dict[str, Any]
CoordinatorCall = Callable[[str, Body], Awaitable[Body]]
"""``call(op, body)`` at the group's coordinator (``CoordinatorClient.call``)."""

SPECS = ("earliest", "latest", "current", "offset", "datetime", "shift-by", "by-duration", "file")
"""What a reset moves the offsets to, as kafka-consumer-groups' ``--to-*``/``--shift-by``/
``--by-duration``/``--from-file`` name them."""


class ResetError(Exception):
    """A reset that cannot be planned or applied; nothing was changed. ``kind``: ``usage``
    (the request itself), ``not_found`` (a topic), ``no_partition``, ``not_empty`` (the group has
    members), ``refused`` (the coordinator said no)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class OffsetSource(Protocol):
    """What the planner reads from the partition leaders (``AsyncConsumer`` is one)."""

    async def topics(self) -> list[str]: ...

    async def partitions_for(self, topic: str) -> list[int]: ...

    async def beginning_offsets(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]: ...

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...

    async def offsets_for_times(
        self, times: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]: ...


@dataclass(frozen=True)
class ResetSpec:
    """``how`` one of `SPECS`; ``arg``: the offset, the shift, the time in ms (``datetime``
    and ``by-duration`` are resolved to a time before planning), or, for ``file``, the
    offsets read from it."""

    how: str
    arg: int | dict[TopicPartition, int] | None = None


# ------------------------------------------------------------------ parsing the user's words


def parse_scope(spec: str) -> tuple[str, list[int] | None]:
    """``topic`` (every partition) or ``topic:0,1,2`` (as kafka-consumer-groups' --topic)."""
    # Kafka's topic names cannot hold ":" ([a-zA-Z0-9._-]), so the last one splits.
    topic, sep, parts = spec.rpartition(":")
    if not sep:
        topic = spec
    if not topic:
        raise ResetError("usage", f"topic scope {spec!r}: no topic name")
    if not sep:
        return topic, None
    try:
        ps = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise ResetError(
            "usage", f"topic scope {spec!r}: expected TOPIC or TOPIC:P,P,... (partition numbers)"
        ) from None
    if not ps or ps[0] < 0:
        raise ResetError("usage", f"topic scope {spec!r}: partitions must be numbers >= 0")
    return topic, ps


_DURATION = re.compile(
    r"^(?P<sign>[-+]?)P(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """ISO-8601 ``PnDTnHnMnS`` (Java's ``Duration.parse``, which kafka-consumer-groups'
    ``--by-duration`` takes): ``PT1H``, ``P1DT12H``, ``PT0.5S``."""
    m = _DURATION.match(text.strip())
    if (
        not m
        or all(m[k] is None for k in "dhms")
        or ("T" in text.upper() and all(m[k] is None for k in "hms"))
    ):
        raise ResetError(
            "usage", f"duration {text!r}: expected ISO-8601 PnDTnHnMnS, e.g. PT1H or P1DT30M"
        )
    total = (
        float(m["d"] or 0) * 86_400_000
        + float(m["h"] or 0) * 3_600_000
        + float(m["m"] or 0) * 60_000
        + float(m["s"] or 0) * 1000
    )
    if m["sign"] == "-":
        raise ResetError("usage", f"duration {text!r}: must not be negative")
    return int(total)


def parse_time_ms(text: str) -> int:
    """Milliseconds since the epoch, or ISO-8601 (without a zone: local time, as
    kafka-consumer-groups reads ``--to-datetime``)."""
    t = text.strip()
    if re.fullmatch(r"\d+", t):
        return int(t)
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00") if t.endswith("Z") else t)
    except ValueError:
        raise ResetError(
            "usage",
            f"time {text!r}: expected ISO-8601 (e.g. 2026-11-21T12:00:00Z) or epoch milliseconds",
        ) from None
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return int(dt.timestamp() * 1000)


def parse_offsets_csv(text: str, group: str) -> dict[TopicPartition, int]:
    """kafka-consumer-groups' ``--export`` format: ``topic,partition,offset`` lines, or
    ``group,topic,partition,offset`` (a multi-group export: only ``group``'s lines count)."""
    out: dict[TopicPartition, int] = {}
    for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
        cells = [c.strip() for c in row]
        if not cells or not any(cells):
            continue
        if len(cells) == 4:
            if cells[0] != group:
                continue
            cells = cells[1:]
        if len(cells) != 3:
            raise ResetError(
                "usage", f"line {n}: expected topic,partition,offset (got {','.join(row)!r})"
            )
        try:
            tp, off = TopicPartition(cells[0], int(cells[1])), int(cells[2])
        except ValueError:
            raise ResetError(
                "usage", f"line {n}: partition and offset must be numbers ({','.join(row)!r})"
            ) from None
        if not cells[0] or tp.partition < 0 or off < 0:
            raise ResetError("usage", f"line {n}: a topic, and numbers >= 0 ({','.join(row)!r})")
        out[tp] = off
    if not out:
        raise ResetError("usage", f"no offsets for group {group!r} in the file")
    return out


def offsets_csv(plan: Mapping[str, Any]) -> str:
    """A plan as ``topic,partition,offset`` lines, which ``--from-file`` reads back."""
    return "".join(f"{r['topic']},{r['partition']},{r['new_offset']}\n" for r in plan["plan"])


# ------------------------------------------------------------------ the pure plan


def new_offsets(
    spec: ResetSpec,
    tps: list[TopicPartition],
    *,
    first: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    current: Mapping[TopicPartition, int],
    found: Mapping[TopicPartition, int | None] | None = None,
) -> dict[TopicPartition, int]:
    """Each partition's new offset, clamped to ``[first, end]``. ``found``: for
    ``datetime``/``by-duration``, the first offset at or after the time (None: none)."""
    out: dict[TopicPartition, int] = {}
    for tp in tps:
        lo, hi = first[tp], end[tp]
        match spec.how:
            case "earliest":
                want = lo
            case "latest":
                want = hi
            case "current":
                want = current.get(tp, hi)
            case "offset":
                assert isinstance(spec.arg, int)
                want = spec.arg
            case "shift-by":
                assert isinstance(spec.arg, int)
                if tp not in current:
                    raise ResetError(
                        "usage",
                        f"cannot shift {tp.topic}-{tp.partition}: the group has no committed "
                        "offset there to shift from",
                    )
                want = current[tp] + spec.arg
            case "datetime" | "by-duration":
                off = (found or {}).get(tp)
                want = hi if off is None else off
            case "file":
                assert isinstance(spec.arg, dict)
                want = spec.arg[tp]
            case _:
                raise ResetError("usage", f"unknown reset {spec.how!r} (one of {SPECS})")
        out[tp] = min(max(want, lo), hi)
    return out


# ------------------------------------------------------------------ the I/O around it


def is_empty(desc: Mapping[str, Any]) -> bool:
    return str(desc.get("state")) in ("EMPTY", "DEAD") and not desc.get("members")


def refuse_active(desc: Mapping[str, Any], what: str) -> None:
    if not is_empty(desc):
        n = len(desc.get("members") or [])
        raise ResetError(
            "not_empty",
            f"cannot {what} group '{desc['group']}': it has {n} active member(s) (state "
            f"{desc.get('state')}); stop its consumers first (as kafka-consumer-groups "
            "requires: a live member would overwrite the change with its next commit)",
        )


async def _committed(call: CoordinatorCall, tps: list[TopicPartition] | None) -> dict[Any, int]:
    body: Body = {} if tps is None else {"partitions": [[tp.topic, tp.partition] for tp in tps]}
    ans = await call("fetch_offsets", body)
    return {
        TopicPartition(str(r[0]), int(r[1])): int(r[2])
        for r in ans.get("offsets") or []
        if r[2] is not None and int(r[2]) >= 0
    }


async def plan_reset(
    src: OffsetSource,
    call: CoordinatorCall,
    group: str,
    spec: ResetSpec,
    *,
    scopes: list[tuple[str, list[int] | None]] | None = None,
    all_topics: bool = False,
    now_ms: int = 0,
) -> dict[str, Any]:
    """The plan (``{"group", "state", "plan": [{topic, partition, current_offset,
    new_offset, earliest, latest, clamped}]}``) for ``scopes``, every topic the group has
    offsets for (``all_topics``), or the file's partitions (``spec.how == "file"``).
    ``now_ms``: the clock ``by-duration`` counts back from."""
    desc = await call("describe", {})
    refuse_active(desc, "reset the offsets of")
    tps: list[TopicPartition] = []
    if spec.how == "file":
        assert isinstance(spec.arg, dict)
        by_topic: dict[str, list[int]] = {}
        for tp in spec.arg:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        scopes = [(t, sorted(ps)) for t, ps in sorted(by_topic.items())]
    elif all_topics:
        # Kafka's tool takes the partitions the group has committed offsets for.
        have = await _committed(call, None)
        committed_by_topic: dict[str, list[int]] = {}
        for tp in have:
            committed_by_topic.setdefault(tp.topic, []).append(tp.partition)
        scopes = [(t, sorted(ps)) for t, ps in sorted(committed_by_topic.items())]
        if not scopes:
            raise ResetError(
                "usage", f"group '{group}' has no committed offsets: --all-topics names nothing"
            )
    if not scopes:
        raise ResetError("usage", "name the topics to reset (a topic scope, or all topics)")
    known = set(await src.topics())
    for topic, parts in scopes:
        if topic not in known:
            raise ResetError("not_found", f"topic '{topic}' does not exist")
        have_parts = await src.partitions_for(topic)
        missing = sorted(set(parts or []) - set(have_parts))
        if missing:
            raise ResetError(
                "no_partition",
                f"topic '{topic}' has no partition(s) {', '.join(map(str, missing))}",
            )
        tps += [TopicPartition(topic, p) for p in sorted(parts if parts else have_parts)]
    tps = sorted(set(tps))
    first = await src.beginning_offsets(tps)
    end = await src.end_offsets(tps)
    current = await _committed(call, tps)
    found = None
    if spec.how in ("datetime", "by-duration"):
        assert isinstance(spec.arg, int)
        at = spec.arg if spec.how == "datetime" else now_ms - spec.arg
        found = await src.offsets_for_times({tp: at for tp in tps})
    new = new_offsets(spec, tps, first=first, end=end, current=current, found=found)

    def exact(tp: TopicPartition) -> int | None:
        """The offset asked for, where the spec names one (to say it was clamped)."""
        if spec.how == "offset":
            return int(spec.arg)  # type: ignore[arg-type]
        if spec.how == "shift-by":
            return current[tp] + int(spec.arg)  # type: ignore[arg-type]
        if spec.how == "file":
            return spec.arg[tp]  # type: ignore[index]
        return None

    return {
        "group": group,
        "state": desc.get("state"),
        "plan": [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "current_offset": current.get(tp),
                "new_offset": new[tp],
                "earliest": first[tp],
                "latest": end[tp],
                "clamped": exact(tp) not in (None, new[tp]),
            }
            for tp in tps
        ],
    }


async def execute_reset(call: CoordinatorCall, plan: Mapping[str, Any]) -> None:
    ans = await call(
        "reset_offsets",
        {"offsets": [[r["topic"], r["partition"], r["new_offset"]] for r in plan["plan"]]},
    )
    err = str(ans.get("error") or "NONE")
    if err == "NON_EMPTY_GROUP":
        raise ResetError(
            "not_empty",
            f"cannot reset the offsets of group '{plan['group']}': a member joined it "
            "meanwhile (NON_EMPTY_GROUP); nothing was changed",
        )
    if err != "NONE":
        raise ResetError("refused", f"reset refused: {err}: {ans.get('message') or ''}")
