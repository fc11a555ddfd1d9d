"""Eager versus cooperative rebalancing, message by message (KIP-429's worked example).

Two members own t-0..t-5 (three each); a third joins. The sticky target moves one partition
from each old member to the newcomer.
"""

from __future__ import annotations

from groups_harness import COOP, EAGER, Harness, tps

from broker.groups.group import SyncResponse
from broker.groups.types import ErrorCode, GroupState, RebalanceProtocol


def sync_ok(h: Harness, mid: str, gen: int) -> SyncResponse:
    out = h.sync(mid, gen)
    assert out.response is not None and out.response.error == ErrorCode.NONE
    return out.response


def start(protocol: RebalanceProtocol, assignor: str) -> tuple[Harness, str, str]:
    h = Harness({"t": 6})
    a, b = h.stable_group(2, protocol=protocol, assignor=assignor)
    assert len(h.assignment(a)) == len(h.assignment(b)) == 3
    assert h.assignment(a) | h.assignment(b) == tps(*(f"t-{i}" for i in range(6)))
    return h, a, b


def test_eager_everyone_revokes_everything_then_gets_the_new_plan_in_one_round() -> None:
    h, a, b = start(EAGER, "sticky")
    before_a = h.assignment(a)
    h.join(client="c", protocol=EAGER, assignor="sticky")
    c = h.last_parked
    assert h.heartbeat(a, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    # An eager member gives up all it owns before it rejoins: from here a owns nothing.
    h.join(a, protocol=EAGER, assignor="sticky")
    assert h.st.groups["g"].members[a].owned == frozenset()
    gen = h.rejoin_all([b], protocol=EAGER, assignor="sticky")
    assert gen == 2
    plans = {m: sync_ok(h, m, gen) for m in (a, b, c)}
    assert h.state() == GroupState.STABLE
    # Sticky: a and b keep two each and c gets the rest; nothing is revoked at sync
    # (it was all revoked at join) and no second round is needed.
    assert {m: len(p.assignment) for m, p in plans.items()} == {a: 2, b: 2, c: 2}
    assert plans[a].assignment < before_a
    assert all(p.revoked == frozenset() and not p.rejoin for p in plans.values())
    assert h.generation() == 2


def test_cooperative_moves_go_through_revoke_then_assign_in_two_rounds() -> None:
    h, a, b = start(COOP, "cooperative-sticky")
    gen1_a = h.assignment(a)
    h.join(client="c", protocol=COOP, assignor="cooperative-sticky")
    c = h.last_parked
    assert h.heartbeat(a, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    # Round 1: a and b rejoin keeping their partitions.
    gen = h.rejoin_all([a, b], protocol=COOP, assignor="cooperative-sticky")
    assert gen == 2
    assert h.st.groups["g"].members[a].owned == gen1_a
    r1 = {m: sync_ok(h, m, gen) for m in (a, b, c)}
    # The moved partitions are revoked from a and b and withheld from c.
    assert r1[c].assignment == frozenset()
    assert len(r1[a].revoked) == len(r1[b].revoked) == 1
    assert r1[a].rejoin and r1[b].rejoin and not r1[c].rejoin
    moved = r1[a].revoked | r1[b].revoked
    # The group is STABLE for an instant and immediately starts the follow-up round.
    assert h.state() == GroupState.PREPARING_REBALANCE
    # Round 2: everyone rejoins; a and b have given up the revoked partitions.
    gen = h.rejoin_all([a, b, c], protocol=COOP, assignor="cooperative-sticky")
    assert gen == 3
    r2 = {m: sync_ok(h, m, gen) for m in (a, b, c)}
    assert r2[c].assignment == moved
    assert r2[a].assignment == r1[a].assignment and r2[b].assignment == r1[b].assignment
    assert all(p.revoked == frozenset() for p in r2.values())
    assert h.state() == GroupState.STABLE


def test_a_cooperative_member_that_keeps_its_partitions_never_gets_a_revoke_of_them() -> None:
    h, a, b = start(COOP, "cooperative-sticky")
    kept_by = {a: h.assignment(a), b: h.assignment(b)}
    h.join(client="c", protocol=COOP, assignor="cooperative-sticky")
    c = h.last_parked
    revoked_ever: dict[str, frozenset] = {a: frozenset(), b: frozenset()}
    for _round in range(2):
        gen = h.rejoin_all(
            [m for m in (a, b, c) if m in h.st.groups["g"].members],
            protocol=COOP,
            assignor="cooperative-sticky",
        )
        for m in (a, b, c):
            r = sync_ok(h, m, gen)
            if m in revoked_ever:
                revoked_ever[m] |= r.revoked
    for m in (a, b):
        final = h.assignment(m)
        assert final <= kept_by[m]
        assert not (revoked_ever[m] & final), "a kept partition was revoked"
        assert revoked_ever[m] == kept_by[m] - final


def test_cooperative_members_keep_their_partitions_through_a_rebalance_of_others() -> None:
    """A member leaves: the survivors keep everything and only gain."""
    h = Harness({"t": 6})
    a, b, c = h.stable_group(3, protocol=COOP, assignor="cooperative-sticky")
    before = {m: h.assignment(m) for m in (a, b)}
    h.leave(c)
    gen = h.rejoin_all([a, b], protocol=COOP, assignor="cooperative-sticky")
    for m in (a, b):
        r = sync_ok(h, m, gen)
        assert r.revoked == frozenset() and before[m] < r.assignment
    assert h.state() == GroupState.STABLE  # nothing was withheld: no second round


def test_mixed_eager_and_cooperative_members_still_never_share_a_partition() -> None:
    """A rolling upgrade: the group runs eager rules for the eager member only."""
    h = Harness({"t": 6})
    a, b = h.stable_group(2, protocol=COOP, assignor="sticky")
    h.join(client="c", protocol=EAGER, assignor="sticky")
    c = h.last_parked
    h.join(a, protocol=COOP, assignor="sticky")
    h.join(b, protocol=EAGER, assignor="sticky")  # b switches to eager: revokes all
    gen = h.completed[b].generation
    assert h.st.describe("g").protocol == RebalanceProtocol.EAGER
    for m in (a, b, c):
        sync_ok(h, m, gen)
    owned = [tp for m in h.st.groups["g"].members.values() for tp in m.owned]
    assert len(owned) == len(set(owned))
