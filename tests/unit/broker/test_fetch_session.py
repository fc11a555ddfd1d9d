"""Fetch sessions (broker.fetch_session, KIP-227): the leader's cache and the follower's side,
each on its own and talking to each other, and against a model of "serve what was wanted"."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.fetch_plan import PartitionFetch
from broker.fetch_session import (
    INT32_MAX,
    NO_SESSION,
    OPEN,
    FetchSessionCache,
    FetchSessionIdNotFoundError,
    FollowerSession,
    InvalidFetchSessionEpochError,
    next_epoch,
)


def pf(p: int, offset: int = 0, hw: int = 0) -> PartitionFetch:
    return PartitionFetch("t", p, offset, 0, 0, hw, 0, 1 << 20)


def ids() -> itertools.count[int]:
    return itertools.count(100)


def test_no_session_serves_the_request_as_it_is_and_keeps_nothing() -> None:
    c = FetchSessionCache()
    sid, parts = c.resolve(
        replica_id=1,
        session_id=0,
        session_epoch=NO_SESSION,
        changed=[pf(0), pf(1)],
        forgotten=[],
        now_s=0,
        new_id=ids().__next__,
    )
    assert (sid, parts, len(c)) == (0, [pf(0), pf(1)], 0)


def test_an_incremental_request_carries_only_changes_and_is_served_for_all() -> None:
    c = FetchSessionCache()
    new = ids().__next__
    sid, parts = c.resolve(
        replica_id=1,
        session_id=0,
        session_epoch=OPEN,
        changed=[pf(0), pf(1), pf(2)],
        forgotten=[],
        now_s=0,
        new_id=new,
    )
    assert sid == 100 and parts == [pf(0), pf(1), pf(2)]
    _, parts = c.resolve(
        replica_id=1,
        session_id=sid,
        session_epoch=1,
        changed=[pf(1, offset=5)],
        forgotten=[("t", 2)],
        now_s=1,
        new_id=new,
    )
    assert parts == [pf(0), pf(1, offset=5)]
    assert (c.counts.incremental, c.counts.partitions_sent, c.counts.partitions_served) == (1, 1, 2)


def test_a_wrong_epoch_or_an_unknown_or_foreign_session_is_refused_and_changes_nothing() -> None:
    c = FetchSessionCache()
    new = ids().__next__
    sid, _ = c.resolve(
        replica_id=1,
        session_id=0,
        session_epoch=OPEN,
        changed=[pf(0)],
        forgotten=[],
        now_s=0,
        new_id=new,
    )
    for replica, session, epoch, err in (
        (1, sid, 2, InvalidFetchSessionEpochError),  # the next is 1
        (1, sid + 1, 1, FetchSessionIdNotFoundError),
        (2, sid, 1, FetchSessionIdNotFoundError),  # another replica's session
    ):
        with pytest.raises(err):
            c.resolve(
                replica_id=replica,
                session_id=session,
                session_epoch=epoch,
                changed=[pf(9)],
                forgotten=[("t", 0)],
                now_s=1,
                new_id=new,
            )
    _, parts = c.resolve(
        replica_id=1,
        session_id=sid,
        session_epoch=1,
        changed=[],
        forgotten=[],
        now_s=1,
        new_id=new,
    )
    assert parts == [pf(0)]
    assert c.counts.refused == 3


def test_opening_again_closes_the_old_session_and_old_idle_sessions_expire() -> None:
    c = FetchSessionCache(max_sessions=2, idle_s=10)
    new = ids().__next__

    def open_(replica: int, old: int, now: float) -> int:
        sid, _ = c.resolve(
            replica_id=replica,
            session_id=old,
            session_epoch=OPEN,
            changed=[pf(0)],
            forgotten=[],
            now_s=now,
            new_id=new,
        )
        return sid

    a = open_(1, 0, 0)
    b = open_(1, a, 1)  # a is closed by its own replica
    assert len(c) == 1 and a != b
    open_(2, b, 2)  # another replica cannot close b
    assert len(c) == 2
    open_(3, 0, 3)  # over the bound: the least recently used (b) goes
    assert len(c) == 2
    with pytest.raises(FetchSessionIdNotFoundError):
        c.resolve(
            replica_id=1,
            session_id=b,
            session_epoch=1,
            changed=[],
            forgotten=[],
            now_s=3,
            new_id=new,
        )
    open_(4, 0, 100)  # everything else idle for over 10 s
    assert len(c) == 1


def test_epochs_wrap_to_one_never_to_the_opening_epoch() -> None:
    assert next_epoch(OPEN) == 1
    assert next_epoch(INT32_MAX) == 1


def test_the_follower_sends_what_changed_and_forgets_what_it_no_longer_wants() -> None:
    f = FollowerSession()
    first = f.request([pf(0), pf(1)])
    assert (first.session_id, first.session_epoch, first.partitions) == (0, OPEN, [pf(0), pf(1)])
    f.answered(first, [pf(0), pf(1)], 77)
    nxt = f.request([pf(0, offset=3), pf(2)])
    assert (nxt.session_id, nxt.session_epoch) == (77, 1)
    assert nxt.partitions == [pf(0, offset=3), pf(2)] and nxt.forgotten == [("t", 1)]
    f.answered(nxt, [pf(0, offset=3), pf(2)], 77)
    assert f.request([pf(0, offset=3), pf(2)]).partitions == []  # nothing changed
    f.reset()
    reopen = f.request([pf(2)])
    assert (reopen.session_id, reopen.session_epoch) == (77, OPEN)  # closes 77 on the leader
    f.answered(reopen, [pf(2)], 78)
    assert f.request([pf(2)]).session_id == 78


def test_a_leader_that_keeps_no_session_gets_whole_requests() -> None:
    f = FollowerSession()
    req = f.request([pf(0)])
    f.answered(req, [pf(0)], 0)  # an older leader: no session_id in its answer
    again = f.request([pf(0)])
    assert again.session_epoch == OPEN and again.partitions == [pf(0)]


wants = st.lists(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 3)),
        max_size=6,
        unique_by=lambda t: t[0],
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(wants, st.lists(st.integers(0, 24), max_size=5))
def test_every_round_is_served_exactly_what_the_follower_wanted(
    rounds: list[list[tuple[int, int, int]]], lost: list[int]
) -> None:
    """Model: whatever the follower wants in a round is what the leader serves, including
    rounds after a lost answer (the leader took the request, the follower never heard)."""
    c, f = FetchSessionCache(), FollowerSession()
    new = ids().__next__
    for i, want in enumerate(rounds):
        wanted = [pf(p, off, hw) for p, off, hw in want]
        for _attempt in range(2):
            req = f.request(wanted)
            try:
                sid, served = c.resolve(
                    replica_id=1,
                    session_id=req.session_id,
                    session_epoch=req.session_epoch,
                    changed=req.partitions,
                    forgotten=req.forgotten,
                    now_s=i,
                    new_id=new,
                )
            except (FetchSessionIdNotFoundError, InvalidFetchSessionEpochError):
                f.reset()  # as the fetcher does, then once more, whole
                continue
            if i in lost:
                f.reset()  # the answer never came: the fetcher starts over
                break
            f.answered(req, wanted, sid)
            # A session given up is closed by the next one; one whose opening answer was
            # lost was never known to the follower, and waits for the idle expiry.
            assert len(c) <= 1 + len(lost)
            assert sorted(served, key=lambda p: p.partition) == sorted(
                wanted, key=lambda p: p.partition
            )
            break
