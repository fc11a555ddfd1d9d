"""One test per transition of the group state machine (the table in broker/groups/group.py)."""

from __future__ import annotations

from groups_harness import COOP, G, Harness, tp, tps

from broker.groups.group import GroupCoordinatorState, HeartbeatRequest, LeaveRequest, durable_view
from broker.groups.records import (
    GroupMetadataRecord,
    GroupTombstoneRecord,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
)
from broker.groups.types import ErrorCode, GroupState


def test_first_join_moves_an_empty_group_to_preparing_rebalance_and_parks_the_join() -> None:
    h = Harness()
    out = h.join(client="a")
    assert out.response is None
    assert out.parked == (G, "a-0")
    assert h.state() == GroupState.PREPARING_REBALANCE
    assert out.deadline_ms == h.config.initial_rebalance_delay_ms
    assert h.generation() == 0


def test_join_phase_from_empty_waits_the_initial_delay_then_completes_with_everyone() -> None:
    h = Harness()
    h.join(client="a")
    h.join(client="b")
    h.now = 99
    assert h.st.poll(h.now).joins_completed == {}
    out = h.advance(1)
    assert set(out.joins_completed) == {(G, "a-0"), (G, "b-1")}
    resp = out.joins_completed[(G, "a-0")]
    assert (resp.error, resp.generation, resp.leader, resp.members) == (
        ErrorCode.NONE,
        1,
        "a-0",
        ("a-0", "b-1"),
    )
    assert h.state() == GroupState.COMPLETING_REBALANCE
    (rec,) = out.records
    assert isinstance(rec, GroupMetadataRecord) and rec.generation == 1
    assert {m.member_id: m.assignment for m in rec.members} == {
        "a-0": tps("t-0", "t-1"),
        "b-1": tps("t-2", "t-3"),
    }


def test_without_initial_delay_a_lone_first_join_completes_at_once() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    out = h.join(client="a")
    assert out.response is not None and out.response.generation == 1
    assert h.state() == GroupState.COMPLETING_REBALANCE


def test_sync_hands_out_the_plan_and_the_last_sync_makes_the_group_stable() -> None:
    h = Harness()
    h.join(client="a")
    h.join(client="b")
    h.advance(100)
    out = h.sync("a-0", 1)
    assert out.response is not None and out.response.assignment == tps("t-0", "t-1")
    assert h.state() == GroupState.COMPLETING_REBALANCE
    h.sync("b-1", 1)
    assert h.state() == GroupState.STABLE


def test_join_of_a_new_member_makes_a_stable_group_rebalance_and_heartbeats_say_so() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    out = h.join(client="c")
    assert out.response is None
    assert h.state() == GroupState.PREPARING_REBALANCE
    assert h.heartbeat(a, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    h.join(a)
    assert h.state() == GroupState.PREPARING_REBALANCE
    out = h.join(b)
    assert out.response is not None and out.response.generation == 2
    assert h.state() == GroupState.COMPLETING_REBALANCE
    assert len(out.joins_completed) == 2  # a and c, parked earlier


def test_join_with_the_same_metadata_in_stable_answers_the_current_generation() -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    out = h.join(a)
    assert out.response is not None
    assert (out.response.error, out.response.generation) == (ErrorCode.NONE, 1)
    assert h.state() == GroupState.STABLE
    assert out.records == ()


def test_join_with_a_new_subscription_in_stable_starts_a_rebalance() -> None:
    h = Harness({"t": 4, "u": 2})
    a, _ = h.stable_group(2)
    out = h.join(a, topics=("t", "u"))
    assert out.response is None
    assert h.state() == GroupState.PREPARING_REBALANCE


def test_join_with_the_same_metadata_while_completing_repeats_the_join_answer() -> None:
    h = Harness()
    h.join(client="a")
    h.join(client="b")
    h.advance(100)
    out = h.join("a-0")
    assert out.response is not None and out.response.generation == 1
    assert h.state() == GroupState.COMPLETING_REBALANCE


def test_join_with_new_metadata_while_completing_starts_over() -> None:
    h = Harness({"t": 4, "u": 1})
    h.join(client="a")
    h.join(client="b")
    h.advance(100)
    h.join("a-0", topics=("u",))
    assert h.state() == GroupState.PREPARING_REBALANCE


def test_leave_from_stable_rebalances_the_rest() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    assert h.leave(b) == ErrorCode.NONE
    assert h.state() == GroupState.PREPARING_REBALANCE
    out = h.join(a)
    assert out.response is not None and out.response.generation == 2
    assert h.sync(a, 2).response.assignment == tps("t-0", "t-1", "t-2", "t-3")  # type: ignore[union-attr]


def test_leave_while_completing_rebalances() -> None:
    h = Harness()
    h.join(client="a")
    h.join(client="b")
    h.advance(100)
    h.leave("b-1")
    assert h.state() == GroupState.PREPARING_REBALANCE


def test_leave_of_the_last_member_empties_the_group_and_bumps_the_generation() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.records.clear()
    h.leave(a)
    assert h.state() == GroupState.EMPTY
    assert h.generation() == 2
    (rec,) = h.records
    assert isinstance(rec, GroupMetadataRecord) and rec.members == () and rec.generation == 2


def test_leave_of_a_parked_member_answers_its_join_with_unknown_member_id() -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    h.join(a, topics=("t", "u"))  # new metadata: a rebalance, a parked until b rejoins
    out = h.st.handle_leave(LeaveRequest(G, a), h.now)
    assert out.joins_completed[(G, a)].error == ErrorCode.UNKNOWN_MEMBER_ID
    # b is the only one left and has not rejoined: still preparing.
    assert h.state() == GroupState.PREPARING_REBALANCE


def test_session_timeout_removes_a_silent_member_and_the_group_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group(2)  # session timeout 1000 ms, synced at t=100
    h.advance(500)
    assert h.heartbeat(a, 1) == ErrorCode.NONE
    out = h.advance(500)  # b silent since t=100: expires at 1100
    assert h.state() == GroupState.PREPARING_REBALANCE
    assert b not in {m.member_id for m in h.st.describe(G).members}
    assert out.deadline_ms is not None


def test_a_member_parked_in_a_join_is_not_expired_by_its_session() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.join(a, topics=("t", "u"))  # parked until b rejoins or the rebalance timeout passes
    for _ in range(3):  # b keeps its session; a says nothing for 2400 ms > its session
        h.advance(800)
        assert h.heartbeat(b, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.state() == GroupState.PREPARING_REBALANCE
    assert a in {m.member_id for m in h.st.describe(G).members}


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.join(a, topics=("t", "u"))  # rebalance timeout 5000 ms
    for _ in range(5):  # b heartbeats but never rejoins
        h.advance(999)
        h.heartbeat(b, 1)
    out = h.advance(10)
    assert out.joins_completed[(G, a)].generation == 2
    assert [m.member_id for m in h.st.describe(G).members] == [a]


def test_sync_timeout_removes_members_that_never_fetch_their_plan() -> None:
    h = Harness()
    h.join(client="a")
    h.join(client="b")
    h.advance(100)
    h.sync("a-0", 1)
    for _ in range(10):  # a heartbeats; b never syncs (rebalance timeout 5000 ms)
        h.advance(500)
        h.heartbeat("a-0", 1)
    assert h.state() == GroupState.PREPARING_REBALANCE
    assert [m.member_id for m in h.st.describe(G).members] == ["a-0"]


def test_max_poll_interval_expiry_removes_a_member_that_stopped_polling() -> None:
    h = Harness()
    h.join(client="a", poll_ms=3_000)
    h.join(client="b", poll_ms=3_000)
    h.advance(100)
    h.sync("a-0", 1)
    h.sync("b-1", 1)
    for _ in range(4):  # both heartbeat (the heartbeat thread runs) but only a polls
        h.advance(900)
        h.heartbeat("a-0", 1)
        h.heartbeat("b-1", 1)
        h.st.handle_member_poll(G, "a-0", h.now)
    assert h.state() == GroupState.PREPARING_REBALANCE
    assert [m.member_id for m in h.st.describe(G).members] == ["a-0"]


def test_topic_growth_makes_a_stable_group_rebalance() -> None:
    h = Harness()
    h.stable_group(2)
    h.st.update_topics({"t": 6}, h.now)
    assert h.state() == GroupState.PREPARING_REBALANCE


def test_offsets_of_an_empty_group_expire_after_retention_then_the_group_is_dead() -> None:
    h = Harness(retention_minutes=1)
    (a,) = h.stable_group(1)
    assert h.commit({tp("t", 0): 5}, a, 1) == ErrorCode.NONE
    h.leave(a)
    emptied = h.now
    h.records.clear()
    out = h.advance(59_999)
    assert out.records == () and h.state() == GroupState.EMPTY
    assert out.deadline_ms == emptied + 60_000
    out = h.advance(1)
    assert out.records == (OffsetTombstoneRecord(G, "t", 0), GroupTombstoneRecord(G))
    assert h.state() == GroupState.DEAD
    assert G not in h.st.groups


def test_offsets_of_a_simple_group_expire_each_from_its_commit() -> None:
    h = Harness(retention_minutes=1)
    h.commit({tp("t", 0): 1})
    h.advance(30_000)
    h.commit({tp("t", 1): 1})
    out = h.advance(30_000)
    assert out.records == (OffsetTombstoneRecord(G, "t", 0),)
    assert set(h.st.fetch_offsets(G)) == {tp("t", 1)}
    out = h.advance(30_000)
    assert out.records == (OffsetTombstoneRecord(G, "t", 1), GroupTombstoneRecord(G))


def test_an_empty_group_without_offsets_dies_at_the_next_poll() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.leave(a)
    out = h.advance(0)
    assert out.records == (GroupTombstoneRecord(G),)
    assert h.st.describe(G).state == GroupState.DEAD


def test_delete_group_tombstones_its_offsets_and_metadata() -> None:
    h = Harness()
    h.commit({tp("t", 0): 1, tp("t", 1): 2})
    out = h.st.handle_delete_group(G, h.now)
    assert out.response == ErrorCode.NONE
    assert out.records == (
        OffsetTombstoneRecord(G, "t", 0),
        OffsetTombstoneRecord(G, "t", 1),
        GroupTombstoneRecord(G),
    )
    assert h.st.fetch_offsets(G) == {}


def test_commit_records_carry_offset_metadata_and_timestamp() -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    h.records.clear()
    h.now = 777
    assert h.commit({tp("t", 0): 42}, a, 1) == ErrorCode.NONE
    assert h.records == [OffsetCommitRecord(G, "t", 0, 42, "md42", 777)]
    c = h.st.fetch_offsets(G)[tp("t", 0)]
    assert (c.offset, c.metadata, c.commit_ts_ms) == (42, "md42", 777)


def test_commit_during_preparing_rebalance_from_the_current_generation_is_accepted() -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    h.join(client="c")
    assert h.state() == GroupState.PREPARING_REBALANCE
    assert h.commit({tp("t", 0): 1}, a, 1) == ErrorCode.NONE


def test_reset_offsets_of_an_empty_group() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.leave(a)
    out = h.st.handle_offset_reset(G, {tp("t", 0): 0, tp("t", 1): 17}, h.now)
    assert out.response == ErrorCode.NONE
    assert {k: v.offset for k, v in h.st.fetch_offsets(G).items()} == {
        tp("t", 0): 0,
        tp("t", 1): 17,
    }


def test_lag_is_log_end_minus_committed_with_the_owner_from_the_plan() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.commit({tp("t", 0): 40, tp("t", 2): 10}, a, 1)
    lag = h.st.lag(G, {tp("t", 0): 100, tp("t", 2): 10, tp("t", 3): 5})
    assert (lag[tp("t", 0)].lag, lag[tp("t", 0)].member_id) == (60, a)
    assert (lag[tp("t", 2)].lag, lag[tp("t", 2)].member_id) == (0, b)
    assert (lag[tp("t", 3)].current_offset, lag[tp("t", 3)].lag) == (None, None)


def test_replaying_the_records_rebuilds_the_group_after_failover() -> None:
    h = Harness()
    a, b = h.stable_group(2, protocol=COOP, assignor="cooperative-sticky")
    h.commit({tp("t", 0): 3}, a, 1)
    h.now = 5_000
    other = GroupCoordinatorState(h.config, new_member_id=str, partitions_per_topic={"t": 4})
    for rec in h.records:
        other.replay(rec)
    assert durable_view(other.groups[G]) == durable_view(h.st.groups[G])
    other.on_loaded(h.now)
    # The members carry on with their generation at the new coordinator.
    assert other.handle_heartbeat(HeartbeatRequest(G, b, 1), h.now).response == ErrorCode.NONE


def test_after_failover_a_cooperative_hand_over_still_due_starts_the_follow_up_round() -> None:
    h = Harness({"t": 4})
    (a,) = h.stable_group(1, protocol=COOP, assignor="cooperative-sticky")
    h.join(client="b", protocol=COOP, assignor="cooperative-sticky")
    b = h.last_parked
    gen = h.rejoin_all([a], protocol=COOP, assignor="cooperative-sticky")
    h.sync(a, gen)  # a learns it must give up two partitions; b has not synced yet
    other = GroupCoordinatorState(h.config, new_member_id=str, partitions_per_topic={"t": 4})
    for rec in h.records:
        other.replay(rec)
    assert other.describe(G).state == GroupState.STABLE
    assert other.describe(G).generation == gen
    out = other.on_loaded(h.now)
    assert other.describe(G).state == GroupState.PREPARING_REBALANCE
    assert out.deadline_ms == h.now + 1_000  # session clocks restart at load
    assert {m.member_id for m in other.describe(G).members} == {a, b}


def test_poll_returns_the_earliest_deadline_over_all_groups() -> None:
    h = Harness()
    h.join(client="a", group="g1")  # join phase ends at 100
    h.now = 30
    h.join(client="b", group="g2")  # ends at 130
    assert h.st.poll(h.now).deadline_ms == 100


def test_a_deleted_topic_makes_a_stable_group_rebalance_without_it() -> None:
    h = Harness({"t": 2, "u": 2})
    a, b = h.stable_group(2)
    h.join(a, topics=("t", "u"))
    h.join(b, topics=("t", "u"))
    for m in (a, b):
        h.sync(m, 2)
    assert h.state() == GroupState.STABLE
    h.st.update_topics({"t": 2}, h.now)
    assert h.state() == GroupState.PREPARING_REBALANCE
    gen = h.rejoin_all([a, b])
    plans = [h.sync(m, gen).response for m in (a, b)]
    assert {p.topic for r in plans if r is not None for p in r.assignment} == {"t"}


def test_poll_reports_of_an_unknown_member_are_refused() -> None:
    h = Harness()
    h.stable_group(1)
    assert h.st.handle_member_poll(G, "stranger", h.now).response == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.st.handle_member_poll("nope", "stranger", h.now).response == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )


def test_describe_of_an_unknown_group_says_dead() -> None:
    assert Harness().st.describe("nope").state == GroupState.DEAD


def test_offset_delete_of_an_empty_group_tombstones_those_offsets_and_the_last_kills_it() -> None:
    h = Harness()
    h.commit({tp("t", 0): 1, tp("t", 1): 2, tp("u", 0): 3})
    out = h.st.handle_offset_delete(G, [tp("t", 0), tp("t", 1), tp("t", 9)], h.now)
    assert out.response == ErrorCode.NONE
    # An offset the group never had (t-9) is no record.
    assert out.records == (OffsetTombstoneRecord(G, "t", 0), OffsetTombstoneRecord(G, "t", 1))
    assert set(h.st.fetch_offsets(G)) == {tp("u", 0)}
    out = h.st.handle_offset_delete(G, [tp("u", 0)], h.now)
    assert out.records == (OffsetTombstoneRecord(G, "u", 0), GroupTombstoneRecord(G))
    assert h.st.describe(G).state == GroupState.DEAD


def test_offset_delete_of_a_topic_a_member_subscribes_to_is_refused_whole() -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    h.commit({tp("t", 0): 1}, a, 1)
    h.records.clear()
    out = h.st.handle_offset_delete(G, [tp("t", 0)], h.now)
    assert (out.response, out.records) == (ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ())
    assert set(h.st.fetch_offsets(G)) == {tp("t", 0)}
    assert h.st.handle_offset_delete("nope", [tp("t", 0)], h.now).response == (
        ErrorCode.GROUP_ID_NOT_FOUND
    )
