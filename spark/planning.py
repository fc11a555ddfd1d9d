"""Offset arithmetic of the data source: resolving start/end specs, splitting ranges, rate limits.

Everything here is computed from numbers the caller fetched from the cluster (earliest and
latest offsets, offsets for timestamps), so it is tested without a cluster or a Spark session.
Offsets are end-exclusive, as in Spark's Kafka source and its checkpoints.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from spark.options import EARLIEST, LATEST, LongboatOptionError, Offsets, OffsetSpec

TopicPartitions = dict[str, list[int]]


class DataLossError(RuntimeError):
    """Records a query needs were deleted (retention, DeleteRecords) or a partition vanished."""


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int
    """Exclusive."""

    @property
    def size(self) -> int:
        return self.end - self.start


def timestamps_needed(spec: OffsetSpec, tps: TopicPartitions) -> dict[tuple[str, int], int]:
    """The (topic, partition) -> timestamp lookups a timestamp spec needs from the cluster."""
    if spec.kind == "timestamp":
        return {(t, p): spec.timestamp_ms for t, ps in tps.items() for p in ps}
    if spec.kind == "timestamps":
        _check_all_named(spec, tps, "OffsetsByTimestamp")
        return {(t, p): ts for t, ps in spec.offsets.items() for p, ts in ps.items()}
    return {}


def _check_all_named(spec: OffsetSpec, tps: TopicPartitions, what: str) -> None:
    # Kafka's rule: specific offsets name every partition read, so none is silently defaulted.
    named = {(t, p) for t, ps in spec.offsets.items() for p in ps}
    read = {(t, p) for t, ps in tps.items() for p in ps}
    missing = sorted(f"{t}-{p}" for t, p in read - named)
    unknown = sorted(f"{t}-{p}" for t, p in named - read)
    if unknown:
        raise LongboatOptionError(
            f"'{what}' names partitions that do not exist or are not read: {unknown}"
        )
    if missing:
        raise LongboatOptionError(
            f"'{what}' must name every partition read; missing {missing} "
            "(use -2 for earliest, -1 for latest)"
        )


def resolve(
    spec: OffsetSpec,
    tps: TopicPartitions,
    earliest: Offsets,
    latest: Offsets,
    by_time: Mapping[tuple[str, int], int | None],
    *,
    which: str,
    no_match_is_error: bool,
) -> Offsets:
    """Concrete offsets for every partition in ``tps``.

    ``by_time`` holds the answers for ``timestamps_needed`` (None: no record at or after the
    time). A time with no match is the latest offset, or an error when ``no_match_is_error``
    (Kafka's ``startingOffsetsByTimestampStrategy=error``).
    """
    out: Offsets = {}
    if spec.kind == "offsets":
        _check_all_named(spec, tps, f"{which}Offsets")
    for t, ps in tps.items():
        row = out.setdefault(t, {})
        for p in ps:
            if spec.kind == "earliest":
                row[p] = earliest[t][p]
            elif spec.kind == "latest":
                row[p] = latest[t][p]
            elif spec.kind == "offsets":
                v = spec.offsets[t][p]
                row[p] = earliest[t][p] if v == EARLIEST else latest[t][p] if v == LATEST else v
            else:
                found = by_time.get((t, p))
                if found is None:
                    if no_match_is_error:
                        raise LongboatOptionError(
                            f"no record in {t}-{p} at or after the {which} timestamp; set "
                            f"startingOffsetsByTimestampStrategy=latest to start at the end"
                        )
                    found = latest[t][p]
                row[p] = found
    return out


def batch_ranges(
    start: Offsets,
    end: Offsets,
    earliest: Offsets,
    latest: Offsets,
    *,
    fail_on_data_loss: bool,
    warn: Callable[[str], None],
) -> list[OffsetRange]:
    """The ranges of a batch read: ends capped at the high watermark, lost starts handled."""
    out = []
    for t, ps in sorted(start.items()):
        for p, s in sorted(ps.items()):
            e = end[t][p]
            hw = latest[t][p]
            if e > hw:
                warn(
                    f"{t}-{p}: endingOffsets {e} is past the high watermark {hw}; "
                    f"reading up to {hw}"
                )
                e = hw
            s = check_start(t, p, s, earliest[t][p], fail_on_data_loss=fail_on_data_loss, warn=warn)
            if s > e:
                raise LongboatOptionError(
                    f"{t}-{p}: the starting offset {s} is after the ending offset {e}"
                )
            if s < e:
                out.append(OffsetRange(t, p, s, e))
    return out


def check_start(
    topic: str,
    partition: int,
    start: int,
    log_start: int,
    *,
    fail_on_data_loss: bool,
    warn: Callable[[str], None],
) -> int:
    """``start``, or the log start when records below it were deleted and loss is allowed."""
    if start >= log_start:
        return start
    msg = (
        f"{topic}-{partition}: offsets {start} to {log_start - 1} were deleted (retention or "
        f"DeleteRecords; the log now starts at {log_start})"
    )
    if fail_on_data_loss:
        raise DataLossError(
            msg + ". Some data may have been lost; set failOnDataLoss=false "
            "to skip what is gone and read on"
        )
    warn(msg + "; skipped because failOnDataLoss=false")
    return log_start


def split_ranges(
    ranges: Sequence[OffsetRange],
    *,
    min_partitions: int | None,
    max_records_per_partition: int | None,
) -> list[OffsetRange]:
    """Split ranges so there are at least ``min_partitions`` and none above the record cap.

    As Kafka's ``KafkaOffsetRangeCalculator``: each range gets parts in proportion to its
    size (at least one), and every part of a range is about the same size.
    """
    ranges = [r for r in ranges if r.size > 0]
    parts_of = {r: 1 for r in ranges}
    if max_records_per_partition:
        for r in ranges:
            parts_of[r] = max(parts_of[r], math.ceil(r.size / max_records_per_partition))
    total = sum(r.size for r in ranges)
    if min_partitions and total and sum(parts_of.values()) < min_partitions:
        for r in ranges:
            share = max(1, round(r.size / total * min_partitions))
            parts_of[r] = max(parts_of[r], min(share, r.size))
    out = []
    for r in ranges:
        n = parts_of[r]
        for i in range(n):
            a = r.start + r.size * i // n
            b = r.start + r.size * (i + 1) // n
            if a < b:
                out.append(OffsetRange(r.topic, r.partition, a, b))
    return out


def rate_limit(start: Offsets, latest: Offsets, limit: int) -> Offsets:
    """End offsets that read at most ``limit`` records past ``start``, shared by backlog.

    Kafka's ``maxOffsetsPerTrigger`` rounds small shares up so no partition starves, which can
    overshoot the limit by one per partition. Here every partition with a backlog first gets
    one record (when the limit has room for all of them), the rest of the limit is shared in
    proportion to what is left, rounded down, and the records still left go one each to the
    largest remainders: a batch is exactly ``min(limit, backlog)``.
    """
    backlog = {
        (t, p): max(0, e - start.get(t, {}).get(p, e))
        for t, ps in latest.items()
        for p, e in ps.items()
    }
    total = sum(backlog.values())
    end: Offsets = {t: dict(ps) for t, ps in latest.items()}
    if total <= limit:
        return end
    active = [tp for tp, b in backlog.items() if b > 0]
    first = dict.fromkeys(active, 1 if len(active) <= limit else 0)
    budget = limit - sum(first.values())
    rest = {tp: backlog[tp] - first[tp] for tp in active}
    rest_total = sum(rest.values())  # > 0: total > limit >= sum(first)
    share = {tp: first[tp] + budget * rest[tp] // rest_total for tp in active}
    left = limit - sum(share.values())
    order = sorted(active, key=lambda tp: (-(budget * rest[tp] % rest_total), tp))
    for tp in order[:left]:
        share[tp] += 1
    for (t, p), n in share.items():
        end[t][p] = start[t][p] + n
    return end


def cap(end: Offsets, target: Offsets) -> Offsets:
    """``end`` never past ``target`` (availableNow's fixed end), partitions of ``target`` only
    (partitions created after the target was fixed wait for the next query)."""
    return {
        t: {p: min(o, target[t][p]) for p, o in ps.items() if p in target.get(t, {})}
        for t, ps in end.items()
        if t in target
    }
