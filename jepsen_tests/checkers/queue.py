"""The queue checker: Kafka-style anomalies in a send/poll history.

Follows Jepsen's `jepsen.tests.kafka` (jepsen/src/jepsen/tests/kafka.clj). Keys name partitions
and every sent value is unique in a run, so a value identifies its send.

Op shapes (values are JSON; keys are strings):

* ``send``      invoke ``{"key": k, "value": v}``; ok adds ``"offset": o``; the completion's
  ``node`` names the partition leader that acknowledged it, when the client knows.
* ``poll``      invoke ``{}`` or ``{"final": true}`` for the final reads after healing; ok
  ``{"reads": {k: [[offset, value], ...]}}``. A group member's poll adds ``"group": g,
  "member": m`` (invoke and ok).
* ``assign`` / ``subscribe``  ``{"keys": [...]}``: reset the process's consumer position
  (a subscribe also names ``group``, ``member`` and ``assignor``).
* ``commit``    ``{"group": g, "offsets": {k: o}}`` (and ``member``): consumer-group offsets,
  each the offset of the next record to read (Kafka's convention).
* ``rebalance`` ``{"group": g, "member": m, "event": "assigned"|"revoked"|"lost",
  "keys": [...]}``, recorded by process ``m`` at the moment member ``m``'s assignment
  changed. A member *owns* a key from an ``assigned`` to the next ``revoked``/``lost`` (or
  ``assigned``) of that key: one *ownership*.

A send is *committed* if it is ok, or info (unknown) with its value read by some ok poll.

Anomalies (those in `ALWAYS_ALLOWED` but ``lost-prefix`` without retention, and the poll
ones for subscribing processes, are reported but do not make the history invalid):

* ``lost-write``  a committed send at or below the highest offset any ok poll read for its key,
  whose value no ok poll read (Jepsen's definition).
* ``lost-prefix`` / ``lost-middle`` / ``lost-postfix``  committed sends missing from the final
  reads, split as jepsen-io/nats's queue checker does: ordered by offset, lost values before the
  first value the final reads saw, between read values, and after the last. Middle losses are
  definite (later writes survived); a postfix may just be final reads that did not catch up,
  and a prefix may be retention (allowed only with ``retention=True``: the harness's topics
  have none, and a leader that came back empty lost exactly a prefix).
* ``unseen``  ok sends no poll ever read (informational).
* ``duplicate``  one value at two or more offsets of a key (from reads and send acks).
* ``inconsistent-offsets``  one key+offset with two or more values across all readers and
  send acknowledgements.
* ``G1a``  an ok poll read a value whose send failed (aborted read).
* ``phantom``  an ok poll read a value nobody sent.
* ``poll-skip`` / ``nonmonotonic-poll``  per process and key, a poll starts more than one
  position past / at or before the last position that process read; reset on assign.
  Positions are ranks in the key's version order (distinct offsets anyone observed), so gaps
  in offsets that nobody ever saw a value at are not skips.
* ``int-poll-skip`` / ``int-nonmonotonic-poll``  the same between successive records of one poll.
* ``nonmonotonic-send``  a process's successive ok sends to a key got offsets that go backwards.
* ``committed-offset-regression``  a group's committed offset for a key observed lower than one
  an op that completed earlier (in real time) had already committed.

Consumer groups (the harness's group members record ``rebalance`` ops; Jepsen allows
poll-skip and nonmonotonic-poll with subscribe because rebalances move positions, and knowing
each ownership lets the checker hold every ownership to the stricter rule):

* ``group-poll-unassigned``  a member's poll returned records of a key it did not own.
* ``group-poll-skip`` / ``group-nonmonotonic-poll``  within one ownership, a record's offset
  is more than one past / at or before the previous record's (across polls and inside one;
  offsets, not ranks: the workload's log has no compaction or transaction markers, so its
  offsets are dense).
* ``group-resume-past-commit``  an ownership's first record lies past every offset the group
  could have handed the member: past the offsets of all commits (ok or info) of the key
  invoked before the ownership began, or past 0 without any. The records between were
  skipped by the group: lost by a consumer. Resuming *earlier* is allowed (re-delivery).
* ``commit-past-high-watermark``  an ok commit of an offset above the high watermark any op
  had seen for the key (1 + the highest offset read or acknowledged by ops completed
  before the commit completed): the group would skip records that do not exist yet.

Lost writes are bucketed by the fault windows active when they were acknowledged, and by the
node that acknowledged them (``lost-on-node``, the per-replica view of split brain).

Pure: reads a `History`, returns a dict.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jepsen_tests.history import (
    ASSIGN,
    COMMIT,
    POLL,
    REBALANCE,
    SEND,
    SUBSCRIBE,
    FaultWindow,
    History,
    Pair,
)

INVALIDATING = (
    "lost-write",
    "lost-middle",
    "duplicate",
    "inconsistent-offsets",
    "G1a",
    "phantom",
    "poll-skip",
    "nonmonotonic-poll",
    "int-poll-skip",
    "int-nonmonotonic-poll",
    "nonmonotonic-send",
    "committed-offset-regression",
    "group-poll-unassigned",
    "group-poll-skip",
    "group-nonmonotonic-poll",
    "group-resume-past-commit",
    "commit-past-high-watermark",
)
ALWAYS_ALLOWED = ("unseen", "lost-prefix", "lost-postfix")
SUBSCRIBE_ALLOWED = ("poll-skip", "nonmonotonic-poll")
ANOMALY_TYPES = INVALIDATING + ALWAYS_ALLOWED
LIST_LIMIT = 200  # offending ops kept per anomaly type; counts are always exact


@dataclass
class _Send:
    pair: Pair
    key: str
    value: Any

    @property
    def offset(self) -> int | None:
        v = self.pair.complete.value if self.pair.complete is not None else None
        if self.pair.type == "ok" and isinstance(v, dict) and v.get("offset") is not None:
            return int(v["offset"])
        return None

    @property
    def ack_ns(self) -> int:
        return (self.pair.complete or self.pair.invoke).time_ns

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "key": self.key,
            "value": self.value,
            "type": self.pair.type,
            "invoke_index": self.pair.invoke.index,
            "process": self.pair.process,
        }
        if self.pair.complete is not None:
            d["complete_index"] = self.pair.complete.index
        if self.offset is not None:
            d["offset"] = self.offset
        if self.pair.node is not None:
            d["node"] = self.pair.node
        return d


def _reads(p: Pair) -> dict[str, list[tuple[int, Any]]]:
    v = p.complete.value if p.complete is not None else None
    if not isinstance(v, dict):
        return {}
    out: dict[str, list[tuple[int, Any]]] = {}
    for k, recs in (v.get("reads") or {}).items():
        out[str(k)] = [(int(o), val) for o, val in recs]
    return out


def check(history: History, *, retention: bool = False, idempotent: bool = True) -> dict[str, Any]:
    """`retention`: the cluster may delete a log's oldest records, so a lost prefix is
    allowed. The harness's runs configure none, so by default a lost prefix is a loss.
    `idempotent`: the producers were idempotent; without that a retried send may be written
    twice (at least once, as Kafka's producers without idempotence), so duplicates are
    reported as ``allowed-duplicate`` and do not make the history invalid."""
    pairs = history.pairs()
    windows = history.fault_windows()
    anomalies: dict[str, list[dict[str, Any]]] = defaultdict(list)
    counts: Counter[str] = Counter()

    def add(kind: str, entry: dict[str, Any]) -> None:
        counts[kind] += 1
        if len(anomalies[kind]) < LIST_LIMIT:
            anomalies[kind].append(entry)

    # ---- sends
    sends: dict[Any, _Send] = {}
    send_list: list[_Send] = []
    for p in pairs:
        if p.f != SEND:
            continue
        iv = p.invoke.value or {}
        s = _Send(p, str(iv.get("key")), iv.get("value"))
        send_list.append(s)
        sends[s.value] = s

    # ---- reads: who read what where
    polls = [p for p in pairs if p.f == POLL and p.type == "ok"]
    final_polls = [
        p for p in polls if isinstance(p.invoke.value, dict) and p.invoke.value.get("final")
    ]
    read_values: dict[str, set[Any]] = defaultdict(set)
    final_values: dict[str, set[Any]] = defaultdict(set)
    max_read_offset: dict[str, int] = {}
    # key -> offset -> value -> list of op indexes that observed it there
    at: dict[str, dict[int, dict[Any, list[int]]]] = defaultdict(lambda: defaultdict(dict))
    final_ids = {p.invoke.index for p in final_polls}
    for p in polls:
        assert p.complete is not None
        is_final = p.invoke.index in final_ids
        for k, recs in _reads(p).items():
            for off, val in recs:
                read_values[k].add(val)
                if is_final:
                    final_values[k].add(val)
                max_read_offset[k] = max(max_read_offset.get(k, -1), off)
                at[k][off].setdefault(val, []).append(p.complete.index)
    for s in send_list:
        ack_off = s.offset
        if ack_off is not None and s.pair.complete is not None:
            at[s.key][ack_off].setdefault(s.value, []).append(s.pair.complete.index)

    # ---- inconsistent offsets, duplicates
    value_offsets: dict[tuple[str, Any], set[int]] = defaultdict(set)
    for k, by_off in at.items():
        for off, vals in sorted(by_off.items()):
            for val in vals:
                value_offsets[(k, val)].add(off)
            if len(vals) > 1:
                add(
                    "inconsistent-offsets",
                    {
                        "key": k,
                        "offset": off,
                        "values": {str(v): ops[:5] for v, ops in vals.items()},
                        "observations": {str(v): len(ops) for v, ops in vals.items()},
                    },
                )
    for (k, val), offs in sorted(value_offsets.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        if len(offs) > 1:
            add(
                "duplicate" if idempotent else "allowed-duplicate",
                {"key": k, "value": val, "offsets": sorted(offs)},
            )

    # ---- committed sends, G1a, phantom
    all_read = {(k, v) for k, vs in read_values.items() for v in vs}
    committed = [
        s
        for s in send_list
        if s.pair.type == "ok" or (s.pair.type == "info" and (s.key, s.value) in all_read)
    ]
    for k, vs in sorted(read_values.items()):
        for v in sorted(vs, key=str):
            sender = sends.get(v)
            if sender is None:
                add("phantom", {"key": k, "value": v, "read_at": sorted(value_offsets[(k, v)])})
            elif sender.pair.type == "fail":
                add("G1a", {**sender.describe(), "read_at": sorted(value_offsets[(k, v)])})

    # ---- lost writes (Jepsen kafka) and unseen
    lost_definite: dict[Any, _Send] = {}
    for s in committed:
        s_off = s.offset
        seen = s.value in read_values.get(s.key, ())
        if not seen and s.pair.type == "ok":
            add("unseen", s.describe())
        if not seen and s_off is not None and s_off <= max_read_offset.get(s.key, -1):
            add("lost-write", {**s.describe(), "max_read_offset": max_read_offset[s.key]})
            lost_definite[s.value] = s

    # ---- lost prefix / middle / postfix against the final reads (jepsen-io/nats)
    final = final_values if final_polls else read_values
    by_key: dict[str, list[_Send]] = defaultdict(list)
    for s in committed:
        by_key[s.key].append(s)

    def position(s: _Send) -> tuple[int, int]:
        off = s.offset
        if off is None:
            offs = value_offsets.get((s.key, s.value))
            off = min(offs) if offs else 1 << 62
        return (off, s.ack_ns)

    for k, ss in sorted(by_key.items()):
        ss.sort(key=position)
        seen_idx = [i for i, s in enumerate(ss) if s.value in final.get(k, ())]
        first = seen_idx[0] if seen_idx else len(ss)
        last = seen_idx[-1] if seen_idx else -1
        for i, s in enumerate(ss):
            if s.value in final.get(k, ()):
                continue
            if i < first:
                add("lost-prefix", s.describe())
            elif i > last:
                add("lost-postfix", s.describe())
            else:
                add("lost-middle", s.describe())
                lost_definite[s.value] = s

    # ---- per-process poll and send order
    ranks: dict[str, dict[int, int]] = {
        k: {off: i for i, off in enumerate(sorted(by_off))} for k, by_off in at.items()
    }
    subscribed: set[int | str] = set()
    last_rank: dict[tuple[int | str, str], tuple[int, int]] = {}  # -> (rank, op index)
    last_send: dict[tuple[int | str, str], tuple[int, int]] = {}
    for p in pairs:
        if p.f in (ASSIGN, SUBSCRIBE) and p.type == "ok":
            for pk in [pk for pk in last_rank if pk[0] == p.process]:
                del last_rank[pk]
            if p.f == SUBSCRIBE:
                subscribed.add(p.process)
            else:
                subscribed.discard(p.process)
        elif p.f == POLL and p.type == "ok":
            assert p.complete is not None
            sub = p.process in subscribed
            for k, recs in _reads(p).items():
                if not recs:
                    continue
                rs = [ranks[k][off] for off, _ in recs]
                for i in range(1, len(recs)):
                    o1, r1, o2, r2 = recs[i - 1][0], rs[i - 1], recs[i][0], rs[i]
                    if r2 <= r1:
                        add(
                            "int-nonmonotonic-poll",
                            {"op": p.complete.index, "key": k, "offsets": [o1, o2]},
                        )
                    elif r2 > r1 + 1:
                        add(
                            "int-poll-skip", {"op": p.complete.index, "key": k, "offsets": [o1, o2]}
                        )
                prev = last_rank.get((p.process, k))
                if prev is not None:
                    kind = (
                        "nonmonotonic-poll"
                        if rs[0] <= prev[0]
                        else "poll-skip"
                        if rs[0] > prev[0] + 1
                        else None
                    )
                    if kind is not None:
                        add(
                            ("allowed-" if sub else "") + kind,
                            {
                                "op": p.complete.index,
                                "previous_op": prev[1],
                                "key": k,
                                "process": p.process,
                                "from_rank": prev[0],
                                "to_rank": rs[0],
                                "offset": recs[0][0],
                            },
                        )
                last_rank[(p.process, k)] = (rs[-1], p.complete.index)
        elif p.f == SEND and p.type == "ok":
            assert p.complete is not None
            s = sends[(p.invoke.value or {}).get("value")]
            sent_off = s.offset
            if sent_off is None:
                continue
            prev_s = last_send.get((p.process, s.key))
            if prev_s is not None and sent_off <= prev_s[0]:
                add(
                    "nonmonotonic-send",
                    {
                        "op": p.complete.index,
                        "previous_op": prev_s[1],
                        "key": s.key,
                        "offsets": [prev_s[0], sent_off],
                    },
                )
            last_send[(p.process, s.key)] = (sent_off, p.complete.index)

    # ---- committed consumer-group offsets never go backwards in real time
    commits = sorted(
        (p for p in pairs if p.f == COMMIT and p.type == "ok"), key=lambda p: p.invoke.time_ns
    )
    done: list[tuple[int, str, str, int, int]] = []  # (complete_ns, group, key, offset, index)
    for p in commits:
        assert p.complete is not None
        v = p.complete.value or {}
        g = str(v.get("group"))
        for k, off in (v.get("offsets") or {}).items():
            before = [
                d
                for d in done
                if d[1] == g and d[2] == str(k) and d[0] < p.invoke.time_ns and d[3] > int(off)
            ]
            if before:
                worst = max(before, key=lambda d: d[3])
                add(
                    "committed-offset-regression",
                    {
                        "group": g,
                        "key": str(k),
                        "op": p.complete.index,
                        "offset": int(off),
                        "earlier_op": worst[4],
                        "earlier_offset": worst[3],
                    },
                )
            done.append((p.complete.time_ns, g, str(k), int(off), p.complete.index))

    group_stats = _check_groups(pairs, polls, send_list, add)

    # ---- where lost writes happened
    lost_by_fault: Counter[str] = Counter()
    lost_by_node: Counter[str] = Counter()
    for s in lost_definite.values():
        lost_by_fault[_bucket(s.ack_ns, windows, s.pair.node)] += 1
        lost_by_node[s.pair.node or "unknown"] += 1

    allowed_here = set(ALWAYS_ALLOWED) | {k for k in counts if k.startswith("allowed-")}
    if not retention:
        allowed_here.discard("lost-prefix")
    found = sorted(k for k in counts if k not in allowed_here)
    send_types = Counter(s.pair.type for s in send_list)
    poll_types = Counter(p.type for p in pairs if p.f == POLL)
    stats: dict[str, Any] = {
        "sends": dict(send_types),
        "polls": dict(poll_types),
        "final_polls": len(final_polls),
        "keys": len(set(s.key for s in send_list) | set(read_values)),
        "committed": len(committed),
        "values_read": len(all_read),
    }
    if group_stats is not None:
        stats["group"] = group_stats
    return {
        "valid": not found,
        "anomaly_types": found,
        "counts": dict(sorted(counts.items())),
        "anomalies": {k: v for k, v in sorted(anomalies.items())},
        "lost_by_fault": dict(lost_by_fault),
        "lost_by_node": dict(lost_by_node),
        "stats": stats,
    }


@dataclass
class _Ownership:
    """One member's uninterrupted ownership of one key, from its ``assigned`` op."""

    group: str
    member: str
    key: str
    start_ns: int
    assigned_op: int
    first: tuple[int, int] | None = None  # (offset, poll op index) of the first record read
    last: tuple[int, int] | None = None


def _check_groups(
    pairs: list[Pair],
    polls: list[Pair],
    send_list: list[_Send],
    add: Callable[[str, dict[str, Any]], None],
) -> dict[str, Any] | None:
    """The consumer-group anomalies; statistics, or None for a history without groups."""
    rebalances = [p for p in pairs if p.f == REBALANCE and p.type == "ok"]
    group_polls = [
        p
        for p in polls
        if isinstance(p.invoke.value, dict) and p.invoke.value.get("member") is not None
    ]
    commits = [p for p in pairs if p.f == COMMIT]
    if not rebalances and not group_polls and not commits:
        return None

    # Ownerships and the member's reads within them, in the order things happened: a poll's
    # records belong to the ownership open when the poll completed.
    timeline = sorted(
        [*rebalances, *group_polls],
        key=lambda p: p.complete.index if p.complete is not None else -1,
    )
    open_: dict[tuple[str, str], _Ownership] = {}
    ownerships: list[_Ownership] = []
    records = 0
    for p in timeline:
        assert p.complete is not None
        if p.f == REBALANCE:
            v = p.complete.value or {}
            member, event = str(v.get("member")), v.get("event")
            for k in v.get("keys") or ():
                open_.pop((member, str(k)), None)
                if event == "assigned":
                    new = _Ownership(
                        str(v.get("group")), member, str(k), p.complete.time_ns, p.complete.index
                    )
                    open_[(member, str(k))] = new
                    ownerships.append(new)
            continue
        member = str(p.invoke.value["member"])
        for k, recs in _reads(p).items():
            if not recs:
                continue
            records += len(recs)
            o = open_.get((member, k))
            if o is None:
                add(
                    "group-poll-unassigned",
                    {
                        "op": p.complete.index,
                        "process": p.process,
                        "member": member,
                        "key": k,
                        "offsets": [recs[0][0], recs[-1][0]],
                    },
                )
                continue
            for off, _ in recs:
                prev = o.last
                if prev is None:
                    o.first = (off, p.complete.index)
                elif off <= prev[0] or off > prev[0] + 1:
                    add(
                        "group-nonmonotonic-poll" if off <= prev[0] else "group-poll-skip",
                        {
                            "op": p.complete.index,
                            "previous_op": prev[1],
                            "process": p.process,
                            "member": member,
                            "key": k,
                            "offsets": [prev[0], off],
                            "assigned_op": o.assigned_op,
                        },
                    )
                o.last = (off, p.complete.index)

    # Commits that may have taken effect (ok, or unknown), per group and key.
    may_commit: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
    for p in commits:
        v = p.value if isinstance(p.value, dict) else {}
        if p.type == "fail":
            continue
        for k, off in (v.get("offsets") or {}).items():
            may_commit[(str(v.get("group")), str(k))].append(
                (p.invoke.time_ns, int(off), (p.complete or p.invoke).index)
            )

    for o in ownerships:
        if o.first is None:
            continue
        before = [c for c in may_commit.get((o.group, o.key), ()) if c[0] < o.start_ns]
        latest = max(before, key=lambda c: c[1], default=None)
        allowed = latest[1] if latest is not None else 0
        if o.first[0] > allowed:
            add(
                "group-resume-past-commit",
                {
                    "group": o.group,
                    "member": o.member,
                    "key": o.key,
                    "assigned_op": o.assigned_op,
                    "op": o.first[1],
                    "first_offset": o.first[0],
                    "committed_offset_max": allowed,
                    "commit_op": latest[2] if latest is not None else None,
                    "skipped": [allowed, o.first[0] - 1],
                },
            )

    # The high watermark each key was seen to reach, over time.
    seen: dict[str, list[tuple[int, int]]] = defaultdict(list)  # key -> (complete_ns, end)
    for p in polls:
        assert p.complete is not None
        for k, recs in _reads(p).items():
            if recs:
                seen[k].append((p.complete.time_ns, max(off for off, _ in recs) + 1))
    for s in send_list:
        if s.offset is not None and s.pair.complete is not None:
            seen[s.key].append((s.pair.complete.time_ns, s.offset + 1))
    hw_times: dict[str, list[int]] = {}
    hw_max: dict[str, list[int]] = {}
    for k, evs in seen.items():
        evs.sort()
        hw_times[k] = [t for t, _ in evs]
        running, maxes = 0, []
        for _, end in evs:
            running = max(running, end)
            maxes.append(running)
        hw_max[k] = maxes
    for p in commits:
        if p.type != "ok":
            continue
        assert p.complete is not None
        v = p.complete.value or {}
        for k, off in (v.get("offsets") or {}).items():
            k = str(k)
            i = bisect_left(hw_times.get(k, []), p.complete.time_ns)
            hw = hw_max[k][i - 1] if i > 0 else 0
            if int(off) > hw:
                add(
                    "commit-past-high-watermark",
                    {
                        "op": p.complete.index,
                        "process": p.process,
                        "group": v.get("group"),
                        "key": k,
                        "offset": int(off),
                        "high_watermark_seen": hw,
                    },
                )

    return {
        "polls": len(group_polls),
        "records": records,
        "commits": dict(Counter(p.type for p in commits)),
        "rebalances": len(rebalances),
        "ownerships": len(ownerships),
    }


def _bucket(t_ns: int, windows: list[FaultWindow], node: str | None) -> str:
    active = [w.label for w in windows if w.contains(t_ns)]
    if active:
        return "during " + " + ".join(sorted(set(active)))
    # Not during a fault: name the next fault to start, the likeliest to have destroyed it
    # (an acked write lost to a later kill of a node that had not synced it), preferring the
    # next one that hit the node that acknowledged the write.
    later = [w for w in windows if w.start_ns > t_ns]
    on_node = [w for w in later if node is not None and node in w.targets]
    later = on_node or later
    if later:
        nxt = min(later, key=lambda w: w.start_ns)
        return f"no fault active; next: {nxt.label}"
    return "no fault active; none after"
