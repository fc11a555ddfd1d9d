"""Every refusal of the group state machine, table-driven: (setup, request) -> error."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from groups_harness import G, Harness, tp

from broker.groups.group import JoinRequest
from broker.groups.types import ErrorCode, GroupState


def stable2() -> tuple[Harness, list[str]]:
    h = Harness()
    return h, h.stable_group(2)


def completing2() -> tuple[Harness, list[str]]:
    h = Harness()
    h.join(client="a")
    h.join(client="b")
    h.advance(100)
    assert h.state() == GroupState.COMPLETING_REBALANCE
    return h, ["a-0", "b-1"]


def preparing2() -> tuple[Harness, list[str]]:
    h, ids = stable2()
    h.join(client="c")
    assert h.state() == GroupState.PREPARING_REBALANCE
    return h, ids


def empty_consumer_group() -> tuple[Harness, list[str]]:
    h = Harness()
    (a,) = h.stable_group(1)
    h.commit({tp("t", 0): 1}, a, 1)
    h.leave(a)
    assert h.state() == GroupState.EMPTY
    return h, [a]


def nothing() -> tuple[Harness, list[str]]:
    return Harness(), ["ghost"]


Setup = Callable[[], tuple[Harness, list[str]]]
Act = Callable[[Harness, list[str]], ErrorCode]


def join_error(h: Harness, **kw: object) -> ErrorCode:
    out = h.join(**kw)  # type: ignore[arg-type]
    assert out.response is not None
    return out.response.error


def sync_error(h: Harness, mid: str, gen: int) -> ErrorCode:
    out = h.sync(mid, gen)
    assert out.response is not None
    return out.response.error


CASES: list[tuple[str, Setup, Act, ErrorCode]] = [
    # join
    ("join with an id the group does not know", stable2,
     lambda h, ids: join_error(h, member_id="stranger"), ErrorCode.UNKNOWN_MEMBER_ID),
    ("join with an id into a group that does not exist", nothing,
     lambda h, ids: join_error(h, member_id="stranger"), ErrorCode.UNKNOWN_MEMBER_ID),
    ("join with an id into an empty group", empty_consumer_group,
     lambda h, ids: join_error(h, member_id=ids[0]), ErrorCode.UNKNOWN_MEMBER_ID),
    ("join with a session timeout below the broker minimum", nothing,
     lambda h, ids: join_error(h, session_ms=1), ErrorCode.INVALID_SESSION_TIMEOUT),
    ("join with a session timeout above the broker maximum", nothing,
     lambda h, ids: join_error(h, session_ms=10**9), ErrorCode.INVALID_SESSION_TIMEOUT),
    ("join naming an assignor the coordinator lacks", nothing,
     lambda h, ids: join_error(h, assignor="magic"), ErrorCode.UNSUPPORTED_ASSIGNOR),
    ("join with another assignor than the group's", stable2,
     lambda h, ids: join_error(h, assignor="sticky"), ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
    ("join with an empty group id", nothing,
     lambda h, ids: join_error(h, group=""), ErrorCode.INVALID_GROUP_ID),
    # sync
    ("sync from an unknown member", stable2,
     lambda h, ids: sync_error(h, "stranger", 1), ErrorCode.UNKNOWN_MEMBER_ID),
    ("sync to a group that does not exist", nothing,
     lambda h, ids: sync_error(h, "ghost", 1), ErrorCode.UNKNOWN_MEMBER_ID),
    ("sync with a stale generation", stable2,
     lambda h, ids: sync_error(h, ids[0], 0), ErrorCode.ILLEGAL_GENERATION),
    ("sync while the group prepares a rebalance", preparing2,
     lambda h, ids: sync_error(h, ids[0], 1), ErrorCode.REBALANCE_IN_PROGRESS),
    # heartbeat
    ("heartbeat from an unknown member", stable2,
     lambda h, ids: h.heartbeat("stranger", 1), ErrorCode.UNKNOWN_MEMBER_ID),
    ("heartbeat to a group that does not exist", nothing,
     lambda h, ids: h.heartbeat("ghost", 0), ErrorCode.UNKNOWN_MEMBER_ID),
    ("heartbeat to an empty group", empty_consumer_group,
     lambda h, ids: h.heartbeat(ids[0], 2), ErrorCode.UNKNOWN_MEMBER_ID),
    ("heartbeat with a stale generation", stable2,
     lambda h, ids: h.heartbeat(ids[0], 0), ErrorCode.ILLEGAL_GENERATION),
    ("heartbeat while the group prepares a rebalance", preparing2,
     lambda h, ids: h.heartbeat(ids[0], 1), ErrorCode.REBALANCE_IN_PROGRESS),
    # leave
    ("leave from an unknown member", stable2,
     lambda h, ids: h.leave("stranger"), ErrorCode.UNKNOWN_MEMBER_ID),
    ("leave from a group that does not exist", nothing,
     lambda h, ids: h.leave("ghost"), ErrorCode.UNKNOWN_MEMBER_ID),
    # offset commit (Kafka's validateOffsetCommit)
    ("commit with a generation to a group that does not exist", nothing,
     lambda h, ids: h.commit({tp("t", 0): 1}, "ghost", 3), ErrorCode.ILLEGAL_GENERATION),
    ("commit from an unknown member", stable2,
     lambda h, ids: h.commit({tp("t", 0): 1}, "stranger", 1), ErrorCode.UNKNOWN_MEMBER_ID),
    ("commit from a stale generation", stable2,
     lambda h, ids: h.commit({tp("t", 0): 1}, ids[0], 0), ErrorCode.ILLEGAL_GENERATION),
    ("commit from a future generation", stable2,
     lambda h, ids: h.commit({tp("t", 0): 1}, ids[0], 2), ErrorCode.ILLEGAL_GENERATION),
    ("commit before the member has its plan", completing2,
     lambda h, ids: h.commit({tp("t", 0): 1}, ids[0], 1), ErrorCode.REBALANCE_IN_PROGRESS),
    ("simple commit (no member) into a group with members", stable2,
     lambda h, ids: h.commit({tp("t", 0): 1}), ErrorCode.UNKNOWN_MEMBER_ID),
    ("commit naming a member into an empty group", empty_consumer_group,
     lambda h, ids: h.commit({tp("t", 0): 1}, ids[0], 1), ErrorCode.UNKNOWN_MEMBER_ID),
    ("commit with an empty group id", nothing,
     lambda h, ids: h.commit({tp("t", 0): 1}, group=""), ErrorCode.INVALID_GROUP_ID),
    # reset and delete
    ("reset offsets of a group with members", stable2,
     lambda h, ids: h.st.handle_offset_reset(G, {tp("t", 0): 0}, h.now).response,
     ErrorCode.NON_EMPTY_GROUP),
    ("reset offsets during a rebalance", preparing2,
     lambda h, ids: h.st.handle_offset_reset(G, {tp("t", 0): 0}, h.now).response,
     ErrorCode.NON_EMPTY_GROUP),
    ("delete a group with members", stable2,
     lambda h, ids: h.st.handle_delete_group(G, h.now).response, ErrorCode.NON_EMPTY_GROUP),
    ("delete a group that does not exist", nothing,
     lambda h, ids: h.st.handle_delete_group(G, h.now).response, ErrorCode.GROUP_ID_NOT_FOUND),
]  # fmt: skip


@pytest.mark.parametrize(
    ("setup", "act", "error"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_refusal(setup: Setup, act: Act, error: ErrorCode) -> None:
    h, ids = setup()
    before = (h.state(), h.generation(), len(h.records))
    assert act(h, ids) == error
    # A refusal changes nothing and persists nothing.
    assert (h.state(), h.generation(), len(h.records)) == before


def test_group_max_size_refuses_one_member_too_many() -> None:
    h = Harness(group_size_max=2)
    h.join(client="a")
    h.join(client="b")
    assert join_error(h, client="c") == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_a_refused_first_join_leaves_no_group_behind() -> None:
    h = Harness()
    join_error(h, session_ms=1)
    assert G not in h.st.groups


def test_simple_commit_into_an_empty_or_missing_group_is_accepted() -> None:
    h = Harness()
    assert h.commit({tp("t", 0): 1}) == ErrorCode.NONE
    assert h.st.describe(G).is_simple
    h2, _ = empty_consumer_group()
    assert h2.commit({tp("t", 0): 9}) == ErrorCode.NONE


def test_join_request_defaults_are_kafkas() -> None:
    req = JoinRequest(G, "", frozenset({"t"}))
    assert (req.session_timeout_ms, req.rebalance_timeout_ms) == (45_000, 300_000)
