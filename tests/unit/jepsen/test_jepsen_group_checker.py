"""The queue checker's consumer-group checks, on handmade histories: each ownership of a key
(from a member's ``assigned`` to its ``revoked``/``lost``) reads densely, starts no later
than the group's commits allow, and commits never pass the high watermark anyone saw."""

from __future__ import annotations

import random

from jepsen_builder import H

from jepsen_tests.checkers.queue import check


def _sends(h: H, n: int, key: str = "k") -> H:
    for i in range(n):
        h.send(9, key, 100 + i, offset=i)
    return h


def _final(h: H, n: int, key: str = "k") -> H:
    return h.poll(10, {key: [(i, 100 + i) for i in range(n)]}, final=True)


def _handover(first_read_by_m2: int, commit_type: str = "ok") -> H:
    """m1 reads 0..1 and commits 2; the key moves to m2, whose first read is given."""
    h = _sends(H(), 5)
    h.subscribe(0, "m1", ["k"]).subscribe(1, "m2", ["k"])
    h.rebalance("m1", "assigned", ["k"])
    h.gpoll(0, "m1", {"k": [(0, 100), (1, 101)]}).commit(0, "m1", {"k": 2}, commit_type)
    h.rebalance("m1", "revoked", ["k"]).rebalance("m2", "assigned", ["k"])
    h.gpoll(1, "m2", {"k": [(o, 100 + o) for o in range(first_read_by_m2, 5)]})
    return _final(h, 5)


def test_a_handover_that_resumes_at_the_commit_is_valid() -> None:
    r = check(_handover(2).history())
    assert r["valid"], r
    g = r["stats"]["group"]
    assert (g["polls"], g["records"], g["commits"], g["rebalances"], g["ownerships"]) == (
        2,
        5,
        {"ok": 1},
        3,
        2,
    )


def test_resuming_before_the_commit_is_redelivery_not_an_anomaly() -> None:
    assert check(_handover(0).history())["valid"]


def test_resuming_past_the_last_commit_skips_records() -> None:
    r = check(_handover(3).history())
    assert r["anomaly_types"] == ["group-resume-past-commit"], r
    [e] = r["anomalies"]["group-resume-past-commit"]
    assert (e["member"], e["key"], e["first_offset"], e["committed_offset_max"], e["skipped"]) == (
        "m2",
        "k",
        3,
        2,
        [2, 2],
    )
    assert e["commit_op"] is not None and e["assigned_op"] < e["op"]


def test_a_failed_commit_does_not_excuse_a_resume_past_it() -> None:
    # m1's commit of 2 was refused: the group still has nothing, so m2 must start at 0.
    r = check(_handover(2, commit_type="fail").history())
    assert r["anomaly_types"] == ["group-resume-past-commit"]
    assert r["anomalies"]["group-resume-past-commit"][0]["skipped"] == [0, 1]


def test_a_commit_of_unknown_outcome_may_have_moved_the_group() -> None:
    assert check(_handover(2, commit_type="info").history())["valid"]


def test_a_commit_invoked_after_the_ownership_began_cannot_explain_its_start() -> None:
    h = _sends(H(), 4)
    h.subscribe(0, "m1", ["k"]).subscribe(1, "m2", ["k"])
    h.rebalance("m2", "assigned", ["k"])
    h.gpoll(3, "x", {})  # a member's empty poll is harmless
    h.commit(0, "m1", {"k": 2})  # a zombie's commit, after m2 fetched the group's offsets
    h.gpoll(1, "m2", {"k": [(2, 102), (3, 103)]})
    r = check(_final(h, 4).history())
    assert r["anomaly_types"] == ["group-resume-past-commit"]
    assert r["anomalies"]["group-resume-past-commit"][0]["committed_offset_max"] == 0


def test_reads_within_one_ownership_must_be_dense_and_increasing() -> None:
    h = _sends(H(), 6)
    h.subscribe(0, "m1", ["k"]).rebalance("m1", "assigned", ["k"])
    h.gpoll(0, "m1", {"k": [(0, 100), (1, 101)]})
    h.gpoll(0, "m1", {"k": [(3, 103)]})  # skips offset 2
    h.gpoll(0, "m1", {"k": [(2, 102)]})  # goes back
    h.gpoll(0, "m1", {"k": [(3, 103), (5, 105)]})  # skips 4 inside one poll
    r = check(_final(h, 6).history())
    assert r["counts"]["group-poll-skip"] == 2
    assert r["counts"]["group-nonmonotonic-poll"] == 1
    assert [e["offsets"] for e in r["anomalies"]["group-poll-skip"]] == [[1, 3], [3, 5]]
    # Jepsen's per-process view allows both for subscribers; the ownership view does not.
    assert r["counts"]["allowed-poll-skip"] == 1
    assert "group-poll-skip" in r["anomaly_types"]


def test_a_new_ownership_of_the_same_member_may_restart_from_the_commit() -> None:
    # Eager rebalance: everything revoked and assigned again; the commit of 4 failed, so the
    # member resumes at 2, which it had already read: allowed.
    h = _sends(H(), 5)
    h.subscribe(0, "m1", ["k"]).rebalance("m1", "assigned", ["k"])
    h.gpoll(0, "m1", {"k": [(0, 100), (1, 101)]}).commit(0, "m1", {"k": 2})
    h.gpoll(0, "m1", {"k": [(2, 102), (3, 103)]}).commit(0, "m1", {"k": 4}, "fail")
    h.rebalance("m1", "revoked", ["k"]).rebalance("m1", "assigned", ["k"])
    h.gpoll(0, "m1", {"k": [(2, 102), (3, 103), (4, 104)]}).commit(0, "m1", {"k": 5})
    r = check(_final(h, 5).history())
    assert r["valid"], r
    assert r["stats"]["group"]["ownerships"] == 2


def test_an_assigned_after_a_lost_member_rejoined_opens_a_new_ownership() -> None:
    h = _sends(H(), 4)
    h.subscribe(0, "m1", ["k"]).rebalance("m1", "assigned", ["k"])
    h.gpoll(0, "m1", {"k": [(0, 100), (1, 101)]})  # uncommitted
    h.rebalance("m1", "assigned", ["k"])  # fenced, rejoined, the key came back (loss unseen)
    h.gpoll(0, "m1", {"k": [(0, 100), (1, 101), (2, 102), (3, 103)]})
    assert check(_final(h, 4).history())["valid"]


def test_records_of_a_key_the_member_does_not_own_are_flagged() -> None:
    h = _sends(H(), 3)
    h.subscribe(0, "m1", ["k"]).rebalance("m1", "assigned", ["k"])
    h.gpoll(0, "m1", {"k": [(0, 100)]})
    h.rebalance("m1", "lost", ["k"])
    h.gpoll(0, "m1", {"k": [(1, 101), (2, 102)]})
    r = check(_final(h, 3).history())
    assert r["anomaly_types"] == ["group-poll-unassigned"]
    assert r["anomalies"]["group-poll-unassigned"][0]["offsets"] == [1, 2]


def test_a_commit_past_what_anyone_had_seen_is_flagged() -> None:
    h = _sends(H(), 2)
    h.subscribe(0, "m1", ["k"]).rebalance("m1", "assigned", ["k"])
    h.gpoll(0, "m1", {"k": [(0, 100), (1, 101)]})
    h.commit(0, "m1", {"k": 2})  # the high watermark seen: fine
    h.commit(0, "m1", {"k": 5})
    r = check(_final(h, 2).history())
    assert r["anomaly_types"] == ["commit-past-high-watermark"]
    [e] = r["anomalies"]["commit-past-high-watermark"]
    assert (e["offset"], e["high_watermark_seen"]) == (5, 2)


def test_the_high_watermark_counts_only_what_was_seen_before_the_commit_completed() -> None:
    h = H()
    h.subscribe(0, "m1", ["k"]).rebalance("m1", "assigned", ["k"])
    h.commit(0, "m1", {"k": 1})  # nothing seen yet
    h.send(9, "k", 100, offset=0)
    h.gpoll(0, "m1", {"k": [(0, 100)]}).commit(0, "m1", {"k": 1})
    r = check(_final(h, 1).history())
    assert r["counts"] == {"commit-past-high-watermark": 1}, r


def _group_model(seed: int, skip_on_resume: bool) -> tuple[H, bool]:
    """A correct group (or one whose new owners start one past the commit): members poll
    their keys densely from their position and commit after each poll (ok, refused, or
    unknown and then applied or not); keys move between members (revoked or lost, then
    assigned, resuming at the group's committed offset). Returns the history and whether a
    skipped resume was followed by a read."""
    rng = random.Random(seed)
    h = H()
    keys = ["a", "b", "c"]
    members = ["m0.1", "m1.1", "m2.1"]
    log: dict[str, list[int]] = {k: [] for k in keys}
    committed = dict.fromkeys(keys, 0)
    owner: dict[str, str | None] = dict.fromkeys(keys)
    pos: dict[tuple[str, str], int] = {}
    skipped: set[tuple[str, str]] = set()
    skip_seen = False
    for i, m in enumerate(members):
        h.subscribe(i, m, keys)
    v = 0
    for _ in range(400):
        r = rng.random()
        if r < 0.35:
            k = rng.choice(keys)
            v += 1
            log[k].append(v)
            h.send(9, k, v, offset=len(log[k]) - 1)
        elif r < 0.8:
            m = rng.choice(members)
            p = members.index(m)
            reads: dict[str, list[tuple[int, int]]] = {}
            for k in keys:
                if owner[k] != m:
                    continue
                start = pos[(m, k)]
                recs = [
                    (o, log[k][o]) for o in range(start, min(start + rng.randrange(4), len(log[k])))
                ]
                if recs:
                    reads[k] = recs
                    pos[(m, k)] = recs[-1][0] + 1
                    skip_seen |= (m, k) in skipped
            h.gpoll(p, m, reads)
            offsets = {k: recs[-1][0] + 1 for k, recs in reads.items()}
            if offsets:
                outcome = rng.choice(["ok", "ok", "ok", "fail", "info"])
                h.commit(p, m, offsets, outcome)
                if outcome == "ok" or (outcome == "info" and rng.random() < 0.5):
                    committed.update(offsets)
        else:
            k = rng.choice(keys)
            old = owner[k]
            if old is not None:
                h.rebalance(old, rng.choice(["revoked", "lost"]), [k])
            new = rng.choice(members)
            owner[k] = new
            start = committed[k]
            skipped.discard((new, k))
            if skip_on_resume and start < len(log[k]) - 1:
                start += 1
                skipped.add((new, k))
            pos[(new, k)] = start
            h.rebalance(new, "assigned", [k])
    h.poll(10, {k: list(enumerate(vs)) for k, vs in log.items()}, final=True)
    return h, skip_seen


def test_generated_correct_group_histories_pass() -> None:
    for seed in range(30):
        h, _ = _group_model(seed, skip_on_resume=False)
        r = check(h.history())
        assert r["valid"], (seed, r["anomaly_types"], r["anomalies"])
        assert r["stats"]["group"]["ownerships"] > 10


def test_generated_group_histories_that_skip_on_resume_fail() -> None:
    flagged = 0
    for seed in range(30):
        h, skip_seen = _group_model(seed, skip_on_resume=True)
        r = check(h.history())
        if skip_seen:
            assert "group-resume-past-commit" in r["anomaly_types"], seed
            flagged += 1
    assert flagged >= 20
