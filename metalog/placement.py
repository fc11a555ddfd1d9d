"""Rack-aware replica placement: which brokers host the replicas of new partitions.

The algorithm is Kafka's rack-aware assignment (``AdminUtils.assignReplicasToBrokersRackAware``,
which ``StripedReplicaPlacer`` generalised in KRaft, KIP-660/631):

1. Arrange the usable brokers in a *rack-alternated* list: racks sorted, then one broker from
   each rack in turn (``r1b1, r2b1, r3b1, r1b2, ...``), so neighbours sit in different racks.
2. Partition ``p``'s first replica (its preferred leader) is the broker at
   ``(p + start_index) % n``: leaders stripe evenly over the brokers and therefore the racks.
3. Further replicas walk the list from the leader with a shift that grows by one every ``n``
   partitions (so followers of consecutive leaders spread out instead of always sitting next to
   each other), taking a broker only if its rack has no replica yet (until every rack has one)
   and it holds none of this partition's replicas.

Every broker thus leads ``num_partitions / n`` partitions give or take one, replicas spread
as evenly, and a partition's replicas cover ``min(replication_factor, racks)`` racks. A broker
with no rack belongs to the "no rack" rack.

Randomness is injected: ``start_index`` and ``replica_shift`` are Kafka's two random draws.
The controller derives them from the topic name (stable across controllers) so that leaders of
different topics do not all start on the same broker.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from metalog.records import BrokerId


class PlacementError(ValueError):
    """The request cannot be placed on these brokers (too few of them)."""


@dataclass(frozen=True, slots=True)
class PlacementBroker:
    """A broker that may receive new replicas (unfenced, not shutting down)."""

    broker_id: BrokerId
    rack: str | None = None


def rack_alternated(brokers: Sequence[PlacementBroker]) -> list[BrokerId]:
    """Brokers ordered one per rack in turn (racks and brokers within a rack sorted)."""
    by_rack: dict[str, list[BrokerId]] = {}
    for b in brokers:
        by_rack.setdefault(b.rack or "", []).append(b.broker_id)
    columns = [sorted(by_rack[r]) for r in sorted(by_rack)]
    out: list[BrokerId] = []
    for i in range(max((len(c) for c in columns), default=0)):
        out.extend(c[i] for c in columns if i < len(c))
    return out


def place(
    brokers: Sequence[PlacementBroker],
    num_partitions: int,
    replication_factor: int,
    *,
    start_partition: int = 0,
    start_index: int = 0,
    replica_shift: int | None = None,
) -> list[tuple[BrokerId, ...]]:
    """Replica lists for partitions ``start_partition .. start_partition + num_partitions - 1``.

    Raises ``PlacementError`` if ``replication_factor`` exceeds the number of brokers.
    """
    if num_partitions <= 0:
        raise PlacementError(f"number of partitions must be positive, got {num_partitions}")
    if replication_factor <= 0:
        raise PlacementError(f"replication factor must be positive, got {replication_factor}")
    if len({b.broker_id for b in brokers}) != len(brokers):
        raise PlacementError("duplicate broker ids")
    n = len(brokers)
    if replication_factor > n:
        raise PlacementError(
            f"the target replication factor of {replication_factor} cannot be reached "
            f"because only {n} broker(s) are usable"
        )
    arranged = rack_alternated(brokers)
    rack_of = {b.broker_id: (b.rack or "") for b in brokers}
    num_racks = len(set(rack_of.values()))
    start = start_index % n
    shift = (start_index if replica_shift is None else replica_shift) % n
    # Kafka bumps the shift once per full round of leaders, counted from partition 0, so
    # partitions added later continue the same pattern.
    shift += start_partition // n
    out: list[tuple[BrokerId, ...]] = []
    for p in range(start_partition, start_partition + num_partitions):
        if p > start_partition and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = arranged[first]
        chosen = [leader]
        racks = {rack_of[leader]}
        k = 0
        while len(chosen) < replication_factor:
            idx = (first + 1 + (shift * num_racks + k) % (n - 1)) % n
            b = arranged[idx]
            k += 1
            rack_ok = rack_of[b] not in racks or len(racks) == num_racks
            if rack_ok and b not in chosen:
                chosen.append(b)
                racks.add(rack_of[b])
            elif k > 2 * n * n:  # unreachable: n >= rf distinct brokers exist
                raise PlacementError("placement did not converge")
        out.append(tuple(chosen))
    return out
