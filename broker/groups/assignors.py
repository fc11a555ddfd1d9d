"""Partition assignors: who in a group reads which partition.

The group coordinator runs these (not a leader member, as in Kafka's classic protocol), so
the input is what the coordinator knows of each member (``MemberSubscription``: subscribed
topics, the partitions the member currently owns and the generation in which it got them) and
the partition count of every topic. The output maps every member id to the partitions it
should own. Every assignor is deterministic: the same input gives the same output, whatever
the order of ``members``.

* ``range`` (Kafka ``RangeAssignor``): per topic, the subscribed members sorted by id get
  contiguous ranges; the first ``partitions % members`` get one more. Balanced per topic
  only: with several topics the first members collect the extras of every topic.
* ``roundrobin`` (``RoundRobinAssignor``): all partitions sorted by (topic, partition) dealt
  in turn to the members sorted by id, skipping members not subscribed to the topic. Balanced
  when every member subscribes to the same topics.
* ``sticky`` (``StickyAssignor``, KIP-54): balanced, and a member keeps what it owns unless
  balance forces a move. Balanced means no partition can move from one member to another
  member subscribed to its topic that has at least two fewer partitions; between members with
  the same subscription the counts therefore differ by at most one.
* ``cooperative-sticky`` (``CooperativeStickyAssignor``, KIP-429): the sticky target, except
  that a partition currently owned by another member is withheld from its new owner. The old
  owner's assignment lacks it, so it revokes it; the partition is handed over in the
  follow-up rebalance, once nobody claims it any more. Across both rounds no partition has
  two owners.

Claims of ownership are resolved per partition before anything else (as Kafka's
``AbstractStickyAssignor`` does with its generation-tagged owned partitions): a claim counts
only if the member still subscribes to the topic and the partition exists; among the valid
claimants the highest generation wins, and a tie at the highest generation leaves the
partition unowned (two members claiming it in the same generation is a bug somewhere, and
neither is trusted).

Pure: no I/O, no clock, no random.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from broker.groups.types import TopicPartition
from common.invariant import invariant

Assignment = dict[str, frozenset[TopicPartition]]
"""Member id -> the partitions it should own. Every member of the input has an entry."""

NO_GENERATION = -1
"""Generation of a member that owns nothing yet, or whose generation is unknown."""


@dataclass(frozen=True)
class MemberSubscription:
    """What an assignor knows of one member."""

    member_id: str
    topics: frozenset[str]
    owned: frozenset[TopicPartition] = frozenset()
    """Partitions the member owns now (cooperative members keep them through a rebalance)."""
    generation: int = NO_GENERATION
    """Generation in which ``owned`` was assigned; newer claims win over older ones."""


Assignor = Callable[[Iterable[MemberSubscription], Mapping[str, int]], Assignment]


def subscribed_partitions(
    members: Iterable[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> list[TopicPartition]:
    """Every existing partition of a topic somebody subscribes to, sorted.

    A subscribed topic missing from ``partitions_per_topic`` (not created yet) contributes
    nothing, as in Kafka, where the assignor sees only topics in the metadata.
    """
    topics = sorted({t for m in members for t in m.topics if t in partitions_per_topic})
    return [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]


def resolve_owners(
    members: Iterable[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> dict[TopicPartition, str]:
    """The member whose claim on each owned partition stands (see the module docstring)."""
    best: dict[TopicPartition, tuple[int, list[str]]] = {}
    for m in members:
        for tp in m.owned:
            if tp.topic not in m.topics or not 0 <= tp.partition < partitions_per_topic.get(
                tp.topic, 0
            ):
                continue
            gen, claimants = best.get(tp, (NO_GENERATION - 1, []))
            if m.generation > gen:
                best[tp] = (m.generation, [m.member_id])
            elif m.generation == gen:
                claimants.append(m.member_id)
    return {tp: c[0] for tp, (_, c) in best.items() if len(c) == 1}


def _by_id(members: Iterable[MemberSubscription]) -> list[MemberSubscription]:
    ms = sorted(members, key=lambda m: m.member_id)
    invariant(
        len({m.member_id for m in ms}) == len(ms),
        "duplicate member ids in %r",
        [m.member_id for m in ms],
    )
    return ms


def _freeze(assignment: Mapping[str, Iterable[TopicPartition]]) -> Assignment:
    return {mid: frozenset(tps) for mid, tps in assignment.items()}


def range_assign(
    members: Iterable[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """Kafka's range assignor: contiguous ranges per topic, extras to the first members."""
    ms = _by_id(members)
    out: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ms}
    topics = sorted({t for m in ms for t in m.topics if t in partitions_per_topic})
    for topic in topics:
        subs = [m.member_id for m in ms if topic in m.topics]
        count = partitions_per_topic[topic]
        quota, extra = divmod(count, len(subs))
        start = 0
        for i, mid in enumerate(subs):
            n = quota + (1 if i < extra else 0)
            out[mid].extend(TopicPartition(topic, p) for p in range(start, start + n))
            start += n
    return _freeze(out)


def round_robin_assign(
    members: Iterable[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """Kafka's round-robin assignor: deal sorted partitions to sorted members in turn."""
    ms = _by_id(members)
    out: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ms}
    if not ms:
        return {}
    i = 0
    for tp in subscribed_partitions(ms, partitions_per_topic):
        # Somebody subscribes to tp.topic, so this loop ends within len(ms) steps.
        while tp.topic not in ms[i % len(ms)].topics:
            i += 1
        out[ms[i % len(ms)].member_id].append(tp)
        i += 1
    return _freeze(out)


def sticky_assign(
    members: Iterable[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """Balanced, moving as few owned partitions as balance allows.

    1. Every member keeps the partitions whose claim stands (``resolve_owners``).
    2. Unowned partitions go, those with the fewest eligible members first, to the eligible
       member with the fewest partitions (ties by member id).
    3. While some member has a partition that an eligible member with at least two fewer
       partitions could take, move it from the most loaded such member to the least loaded
       eligible one. Each move lowers the sum of squared counts, so this ends; a member only
       ever loses or only ever gains, so nothing moves twice.
    """
    ms = _by_id(members)
    if not ms:
        return {}
    topics_of = {m.member_id: m.topics for m in ms}
    ids = [m.member_id for m in ms]
    parts = subscribed_partitions(ms, partitions_per_topic)
    eligible = {tp: [mid for mid in ids if tp.topic in topics_of[mid]] for tp in parts}
    owned: dict[str, set[TopicPartition]] = {mid: set() for mid in ids}
    owners = resolve_owners(ms, partitions_per_topic)
    for tp, mid in owners.items():
        owned[mid].add(tp)
    for tp in sorted((tp for tp in parts if tp not in owners), key=lambda t: (len(eligible[t]), t)):
        dst = min(eligible[tp], key=lambda mid: (len(owned[mid]), mid))
        owned[dst].add(tp)
    while (move := _find_balancing_move(ids, owned, eligible)) is not None:
        tp, src, dst = move
        owned[src].remove(tp)
        owned[dst].add(tp)
    return _freeze(owned)


def _find_balancing_move(
    ids: list[str],
    owned: Mapping[str, set[TopicPartition]],
    eligible: Mapping[TopicPartition, list[str]],
) -> tuple[TopicPartition, str, str] | None:
    count_min = min(len(owned[mid]) for mid in ids)
    for src in sorted(ids, key=lambda mid: (-len(owned[mid]), mid)):
        limit = len(owned[src]) - 2
        if limit < count_min:
            return None  # sources are sorted by count: nobody further down can give either
        for tp in sorted(owned[src]):
            dsts = [d for d in eligible[tp] if len(owned[d]) <= limit]
            if dsts:
                return tp, src, min(dsts, key=lambda d: (len(owned[d]), d))
    return None


def withhold_owned_by_others(
    target: Mapping[str, frozenset[TopicPartition]],
    claims: Mapping[str, Iterable[TopicPartition]],
) -> Assignment:
    """KIP-429's first round: drop from each member's target what another member still claims.

    ``claims`` is every member's current ownership (any generation: a stale claim still
    withholds, which is the safe side). The old owner's target lacks the partition, so it
    revokes it; a follow-up rebalance then hands it over.
    """
    claimed_by: dict[TopicPartition, set[str]] = {}
    for mid, tps in claims.items():
        for tp in tps:
            claimed_by.setdefault(tp, set()).add(mid)
    return {
        mid: frozenset(tp for tp in tps if not (claimed_by.get(tp, set()) - {mid}))
        for mid, tps in target.items()
    }


def cooperative_sticky_assign(
    members: Iterable[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """The sticky target minus the partitions that must first be revoked by their owner."""
    ms = _by_id(members)
    target = sticky_assign(ms, partitions_per_topic)
    return withhold_owned_by_others(target, {m.member_id: m.owned for m in ms})


def partitions_withheld(
    target: Mapping[str, frozenset[TopicPartition]],
    assignment: Mapping[str, frozenset[TopicPartition]],
) -> frozenset[TopicPartition]:
    """Partitions in the target but handed to nobody this round: a follow-up rebalance is due."""
    return frozenset(
        tp for mid, tps in target.items() for tp in tps - assignment.get(mid, frozenset())
    )


ASSIGNORS: Mapping[str, Assignor] = {
    "range": range_assign,
    "roundrobin": round_robin_assign,
    "sticky": sticky_assign,
    "cooperative-sticky": cooperative_sticky_assign,
}
"""Assignors by the names Kafka's clients use in ``partition.assignment.strategy``."""
