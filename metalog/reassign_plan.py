"""Reassignment plans: which replicas partitions should move to (``partitions reassign
--generate``, ``brokers drain``, ``topics alter --replication-factor``).

Three planners over an assignment (``{(topic, partition): replicas}``) and the brokers that may
hold replicas (``PlacementBroker``: id and rack):

* ``balanced_plan``: spread each topic's partitions, and their preferred leaders, evenly over
  the brokers, rack-aware: the placement of ``metalog.placement.place`` (Kafka's own, what
  kafka-reassign-partitions ``--generate`` proposes), with one improvement: its replica sets
  are handed to the partitions that already hold most of them, so a plan moves as few
  replicas as the balanced placement allows (a topic already balanced the same way moves
  nothing; an optimal matching up to ``MATCH_OPTIMAL_MAX`` partitions per topic, a greedy
  one beyond). Which partition gets which replica set changes no broker's count, so the balance
  and the rack coverage are exactly ``place``'s.
* ``drain_plan``: every replica on one broker goes to another, position kept (a drained
  preferred leader's replacement becomes preferred); the replacement is the broker with the
  fewest replicas among those in a rack the partition does not use yet (else any rack),
  lowest id on ties. Nothing else moves.
* ``replication_factor_plan``: grows a topic's partitions by the least loaded brokers (racks
  the partition does not use first), or shrinks them by dropping their last replicas (the
  preferred leader stays).

Pure: no I/O, no clock, no global random (placement draws come from the topic name, as the
controller's).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from metalog.placement import PlacementBroker, PlacementError, place
from metalog.records import BrokerId

Assignment = Mapping[tuple[str, int], tuple[BrokerId, ...]]


def _by_topic(assignment: Assignment) -> dict[str, dict[int, tuple[BrokerId, ...]]]:
    out: dict[str, dict[int, tuple[BrokerId, ...]]] = {}
    for (t, p), replicas in assignment.items():
        out.setdefault(t, {})[p] = tuple(replicas)
    return out


def balanced_plan(
    assignment: Assignment, brokers: Sequence[PlacementBroker]
) -> dict[tuple[str, int], tuple[BrokerId, ...]]:
    """The proposed replicas of every partition of ``assignment`` (same replication factor
    per partition) over ``brokers``. ``PlacementError`` if a replication factor exceeds the
    number of brokers."""
    out: dict[tuple[str, int], tuple[BrokerId, ...]] = {}
    for topic, parts in sorted(_by_topic(assignment).items()):
        by_rf: dict[int, list[int]] = {}
        for p, replicas in parts.items():
            by_rf.setdefault(len(replicas), []).append(p)
        for rf, ps in sorted(by_rf.items()):
            h = zlib.crc32(topic.encode())
            proposed = place(brokers, len(ps), rf, start_index=h, replica_shift=h >> 16)
            out.update(_match(topic, sorted(ps), parts, proposed))
    return out


MATCH_OPTIMAL_MAX = 400
"""Topics with up to this many partitions (of one replication factor) get the matching that
moves the fewest replicas (Hungarian algorithm, O(n^3)); larger ones a greedy one."""


def _match(
    topic: str,
    ps: list[int],
    current: Mapping[int, tuple[BrokerId, ...]],
    proposed: list[tuple[BrokerId, ...]],
) -> dict[tuple[str, int], tuple[BrokerId, ...]]:
    """Hand the proposed replica sets to partitions so that as many replicas as possible
    stay where they are; among those, as many preferred leaders; among those, as many
    replica lists unchanged (so a plan of a balanced topic is the topic as it is)."""
    n = len(ps)
    w = n + 1  # one more replica kept outweighs every leader kept, and so on
    gain = [
        [
            w * w * len(set(current[p]) & set(rs))
            + w * (rs[0] == current[p][0])
            + (rs == current[p])
            for rs in proposed
        ]
        for p in ps
    ]
    if n <= MATCH_OPTIMAL_MAX:
        chosen = _hungarian_max(gain)
    else:
        chosen = _greedy_max(gain)
    return {(topic, ps[i]): proposed[j] for i, j in enumerate(chosen)}


def _greedy_max(gain: list[list[int]]) -> list[int]:
    n = len(gain)
    pairs = sorted((-gain[i][j], i, j) for i in range(n) for j in range(n))
    out = [-1] * n
    taken: set[int] = set()
    for _, i, j in pairs:
        if out[i] < 0 and j not in taken:
            out[i] = j
            taken.add(j)
    return out


def _hungarian_max(gain: list[list[int]]) -> list[int]:
    """For a square matrix, the column of each row in a matching of maximal total gain
    (Kuhn-Munkres with potentials, minimising the negated gains)."""
    n = len(gain)
    inf = float("inf")
    u = [0.0] * (n + 1)
    v = [0.0] * (n + 1)
    match = [0] * (n + 1)  # match[column] = row, 1-based; 0: free
    way = [0] * (n + 1)
    for i in range(1, n + 1):
        match[0] = i
        j0 = 0
        minv = [inf] * (n + 1)
        used = [False] * (n + 1)
        while True:
            used[j0] = True
            i0, delta, j1 = match[j0], inf, 0
            for j in range(1, n + 1):
                if not used[j]:
                    cur = -gain[i0 - 1][j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j], way[j] = cur, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(n + 1):
                if used[j]:
                    u[match[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if match[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            match[j0] = match[j1]
            j0 = j1
    out = [-1] * n
    for j in range(1, n + 1):
        out[match[j] - 1] = j - 1
    return out


def replica_counts(assignment: Assignment, brokers: Iterable[BrokerId] = ()) -> Counter[BrokerId]:
    """Replicas per broker (brokers listed in ``brokers`` count 0 if they hold none)."""
    c: Counter[BrokerId] = Counter({b: 0 for b in brokers})
    for replicas in assignment.values():
        c.update(replicas)
    return c


def _pick(
    candidates: Sequence[PlacementBroker],
    exclude: set[BrokerId],
    racks_used: set[str],
    load: Counter[BrokerId],
) -> PlacementBroker | None:
    free = [b for b in candidates if b.broker_id not in exclude]
    if not free:
        return None
    new_rack = [b for b in free if (b.rack or "") not in racks_used]
    pool = new_rack or free
    return min(pool, key=lambda b: (load[b.broker_id], b.broker_id))


def drain_plan(
    assignment: Assignment, broker_id: BrokerId, brokers: Sequence[PlacementBroker]
) -> dict[tuple[str, int], tuple[BrokerId, ...]]:
    """New replicas for the partitions with a replica on ``broker_id`` (only those).
    ``brokers`` are the ones that may receive replicas (``broker_id`` among them or not);
    ``PlacementError`` if a partition has nowhere to go."""
    targets = [b for b in brokers if b.broker_id != broker_id]
    rack_of = {b.broker_id: (b.rack or "") for b in brokers}
    load = replica_counts(assignment, (b.broker_id for b in targets))
    out: dict[tuple[str, int], tuple[BrokerId, ...]] = {}
    for key in sorted(assignment):
        replicas = assignment[key]
        if broker_id not in replicas:
            continue
        others = {b for b in replicas if b != broker_id}
        racks = {rack_of.get(b, "") for b in others}
        choice = _pick(targets, others, racks, load)
        if choice is None:
            raise PlacementError(
                f"{key[0]}-{key[1]}: no broker outside {sorted(replicas)} can take the replica "
                f"of broker {broker_id}"
            )
        load[choice.broker_id] += 1
        load[broker_id] -= 1
        out[key] = tuple(choice.broker_id if b == broker_id else b for b in replicas)
    return out


def replication_factor_plan(
    assignment: Assignment, replication_factor: int, brokers: Sequence[PlacementBroker]
) -> dict[tuple[str, int], tuple[BrokerId, ...]]:
    """New replicas for every partition of ``assignment`` whose replica count differs from
    ``replication_factor``; ``PlacementError`` if there are too few brokers."""
    if replication_factor <= 0:
        raise PlacementError(f"replication factor must be positive, got {replication_factor}")
    if replication_factor > len(brokers):
        raise PlacementError(
            f"replication factor {replication_factor} needs as many brokers, "
            f"{len(brokers)} are usable"
        )
    rack_of = {b.broker_id: (b.rack or "") for b in brokers}
    load = replica_counts(assignment, (b.broker_id for b in brokers))
    out: dict[tuple[str, int], tuple[BrokerId, ...]] = {}
    for key in sorted(assignment):
        replicas = list(assignment[key])
        if len(replicas) == replication_factor:
            continue
        while len(replicas) > replication_factor:
            load[replicas.pop()] -= 1
        while len(replicas) < replication_factor:
            racks = {rack_of.get(b, "") for b in replicas}
            choice = _pick(brokers, set(replicas), racks, load)
            if choice is None:  # unreachable: rf <= len(brokers)
                raise PlacementError(f"{key[0]}-{key[1]}: no broker left to add")
            replicas.append(choice.broker_id)
            load[choice.broker_id] += 1
        out[key] = tuple(replicas)
    return out
