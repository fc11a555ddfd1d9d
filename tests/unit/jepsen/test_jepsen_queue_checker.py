"""The queue checker finds each Jepsen Kafka anomaly, and passes valid histories."""

from __future__ import annotations

import random

from jepsen_builder import H

from jepsen_tests.checkers.queue import check


def _valid_base() -> H:
    h = H()
    h.send(0, "k", 1, offset=0).send(0, "k", 2, offset=1).send(1, "k", 3, offset=2)
    h.poll(2, {"k": [(0, 1), (1, 2)]}).poll(2, {"k": [(2, 3)]})
    h.poll(3, {"k": [(0, 1), (1, 2), (2, 3)]}, final=True)
    return h


def test_valid_history_passes() -> None:
    r = check(_valid_base().history())
    assert r["valid"], r
    assert r["counts"] == {}
    assert r["stats"]["committed"] == 3


def test_lost_write_below_highest_read_offset_is_detected() -> None:
    h = H()
    h.send(0, "k", 1, offset=0).send(0, "k", 2, offset=1, node="n1").send(0, "k", 3, offset=2)
    h.poll(1, {"k": [(0, 1), (2, 3)]}, final=True)
    r = check(h.history())
    assert not r["valid"]
    assert r["counts"]["lost-write"] == 1
    assert r["anomalies"]["lost-write"][0]["value"] == 2
    assert r["counts"]["lost-middle"] == 1  # 1 and 3 survived around it: definite
    assert r["lost_by_node"] == {"n1": 1}


def test_lost_split_prefix_middle_postfix_against_final_reads() -> None:
    h = H()
    for i in range(6):
        h.send(0, "k", 10 + i, offset=i)
    # final reads see offsets 2 and 4 only (say, a replica that lost the rest)
    h.poll(1, {"k": [(2, 12), (4, 14)]}, final=True)
    r = check(h.history())
    lost = {
        k: sorted(e["value"] for e in r["anomalies"].get(k, []))
        for k in ("lost-prefix", "lost-middle", "lost-postfix")
    }
    assert lost == {"lost-prefix": [10, 11], "lost-middle": [13], "lost-postfix": [15]}
    assert "lost-middle" in r["anomaly_types"]
    assert "lost-postfix" not in r["anomaly_types"]  # may be slow final reads


def test_lost_prefix_invalidates_unless_the_cluster_has_retention() -> None:
    h = H()
    for i in range(4):
        h.send(0, "k", 10 + i, offset=i)
    # a leader that came back empty: the first two are gone, the rest re-read
    h.poll(1, {"k": [(2, 12), (3, 13)]}, final=True)
    assert "lost-prefix" in check(h.history())["anomaly_types"]
    r = check(h.history(), retention=True)
    assert r["counts"]["lost-prefix"] == 2 and "lost-prefix" not in r["anomaly_types"]


def test_unseen_tail_alone_is_informational() -> None:
    h = H()
    h.send(0, "k", 1, offset=0).send(0, "k", 2, offset=1)
    h.poll(1, {"k": [(0, 1)]}, final=True)
    r = check(h.history())
    assert r["valid"], r
    assert r["counts"]["unseen"] == 1
    assert r["counts"]["lost-postfix"] == 1


def test_info_send_read_later_is_committed_and_can_be_lost_in_the_middle() -> None:
    h = H()
    h.send(0, "k", 1, offset=0)
    h.send(1, "k", 2, type="info")  # unknown outcome
    h.send(0, "k", 3, offset=2)
    h.poll(2, {"k": [(0, 1), (1, 2)]})  # someone saw 2: it was committed
    h.poll(3, {"k": [(0, 1), (2, 3)]}, final=True)  # but the final reads lost it
    r = check(h.history())
    assert r["counts"]["lost-middle"] == 1
    assert r["anomalies"]["lost-middle"][0]["value"] == 2
    assert not r["valid"]


def test_info_send_never_read_is_not_lost() -> None:
    h = H()
    h.send(0, "k", 1, offset=0).send(1, "k", 2, type="info").send(0, "k", 3, offset=1)
    h.poll(2, {"k": [(0, 1), (1, 3)]}, final=True)
    assert check(h.history())["valid"]


def test_duplicate_value_at_two_offsets() -> None:
    h = H()
    h.send(0, "k", 1, offset=0)
    h.poll(1, {"k": [(0, 1), (1, 1)]})
    r = check(h.history())
    assert r["counts"]["duplicate"] == 1
    assert r["anomalies"]["duplicate"][0]["offsets"] == [0, 1]
    assert not r["valid"]
    # Without idempotent producers a retried send may be written twice: reported, allowed.
    r = check(h.history(), idempotent=False)
    assert r["counts"] == {"allowed-duplicate": 1} and r["valid"]


def test_inconsistent_offsets_across_readers() -> None:
    h = H()
    h.send(0, "k", 1, offset=0).send(0, "k", 2, offset=1)
    h.poll(1, {"k": [(0, 1)]}).poll(2, {"k": [(0, 2)]})
    r = check(h.history())
    assert r["counts"]["inconsistent-offsets"] == 1
    assert set(r["anomalies"]["inconsistent-offsets"][0]["values"]) == {"1", "2"}


def test_send_ack_offset_conflicting_with_read_is_inconsistent() -> None:
    h = H()
    h.send(0, "k", 1, offset=0)
    h.send(0, "k", 2, offset=0)  # the server handed out offset 0 twice
    h.poll(1, {"k": [(0, 2)]}, final=True)
    r = check(h.history())
    assert r["counts"]["inconsistent-offsets"] == 1
    assert r["counts"]["lost-write"] == 1
    assert r["counts"]["nonmonotonic-send"] == 1


def test_g1a_read_of_failed_send() -> None:
    h = H()
    h.send(0, "k", 1, type="fail")
    h.poll(1, {"k": [(0, 1)]})
    r = check(h.history())
    assert r["counts"]["G1a"] == 1
    assert not r["valid"]


def test_phantom_read_of_a_value_nobody_sent() -> None:
    h = H()
    h.poll(1, {"k": [(0, 99)]})
    assert check(h.history())["counts"]["phantom"] == 1


def test_poll_skip_and_nonmonotonic_poll_per_process() -> None:
    h = H()
    for i in range(4):
        h.send(0, "k", i, offset=i)
    h.poll(3, {"k": [(0, 0)]})  # other reader establishes offsets
    h.poll(3, {"k": [(1, 1), (2, 2), (3, 3)]})
    h.poll(1, {"k": [(0, 0)]}).poll(1, {"k": [(2, 2)]})  # skips offset 1
    h.poll(2, {"k": [(0, 0), (1, 1)]}).poll(2, {"k": [(1, 1)]})  # goes back
    r = check(h.history())
    assert r["counts"]["poll-skip"] == 1
    assert r["counts"]["nonmonotonic-poll"] == 1
    assert r["anomalies"]["poll-skip"][0]["process"] == 1


def test_assign_resets_the_position() -> None:
    h = H()
    for i in range(3):
        h.send(0, "k", i, offset=i)
    h.poll(1, {"k": [(0, 0), (1, 1), (2, 2)]})
    h.assign(1, ["k"])
    h.poll(1, {"k": [(0, 0)]})  # rewound after assign: fine
    assert check(h.history())["valid"]


def test_subscribe_makes_poll_skips_allowed() -> None:
    h = H()
    for i in range(3):
        h.send(0, "k", i, offset=i)
    h.poll(2, {"k": [(0, 0), (1, 1), (2, 2)]})
    h.assign(1, ["k"], f="subscribe")
    h.poll(1, {"k": [(0, 0)]}).poll(1, {"k": [(2, 2)]})
    r = check(h.history())
    assert r["valid"], r
    assert r["counts"]["allowed-poll-skip"] == 1


def test_internal_skip_and_nonmonotonic_within_one_poll() -> None:
    h = H()
    for i in range(3):
        h.send(0, "k", i, offset=i)
    h.poll(2, {"k": [(0, 0), (1, 1), (2, 2)]})
    h.poll(1, {"k": [(0, 0), (2, 2)]})
    h.poll(3, {"k": [(1, 1), (0, 0)]})
    r = check(h.history())
    assert r["counts"]["int-poll-skip"] == 1
    assert r["counts"]["int-nonmonotonic-poll"] == 1


def test_offset_gaps_nobody_observed_are_not_skips() -> None:
    h = H()
    h.send(0, "k", 1, offset=0).send(0, "k", 2, offset=5)  # e.g. a transaction marker between
    h.poll(1, {"k": [(0, 1), (5, 2)]}, final=True)
    assert check(h.history())["valid"]


def test_nonmonotonic_send() -> None:
    h = H()
    h.send(0, "k", 1, offset=3).send(0, "k", 2, offset=1)
    h.poll(1, {"k": [(1, 2), (3, 1)]}, final=True)
    r = check(h.history())
    assert r["counts"]["nonmonotonic-send"] == 1


def test_committed_offsets_moving_backwards_in_real_time() -> None:
    h = H()
    h.op(0, "commit", {"group": "g", "offsets": {"k": 5}}, "ok")
    h.op(1, "commit", {"group": "g", "offsets": {"k": 3}}, "ok")
    r = check(h.history())
    assert r["counts"]["committed-offset-regression"] == 1


def test_concurrent_commits_are_not_a_regression() -> None:
    h = H()
    for i in range(5):  # offsets 0..4 exist: committing 5 is not past the high watermark
        h.send(2, "k", i, offset=i)
    h.poll(3, {"k": [(i, i) for i in range(5)]})
    h.invoke(0, "commit", {"group": "g", "offsets": {"k": 5}})
    h.invoke(1, "commit", {"group": "g", "offsets": {"k": 3}})
    h.complete(0, "ok", "commit", {"group": "g", "offsets": {"k": 5}})
    h.complete(1, "ok", "commit", {"group": "g", "offsets": {"k": 3}})
    assert check(h.history())["valid"]


def test_lost_writes_are_bucketed_by_fault_window() -> None:
    h = H()
    h.send(0, "k", 1, offset=0)
    h.nemesis("start", "w1", "kill", ["n2"])
    h.send(0, "k", 2, offset=1, node="n2")
    h.nemesis("stop", "w1", "kill", ["n2"])
    h.send(0, "k", 3, offset=2, node="n1")
    h.send(0, "k", 4, offset=3, node="n1")
    h.poll(1, {"k": [(0, 1), (2, 3)]}, final=True)
    h.poll(1, {"k": [(3, 4)]}, final=True)
    r = check(h.history())
    assert r["lost_by_fault"] == {"during kill(n2)": 1}
    assert r["lost_by_node"] == {"n2": 1}


def test_lost_write_acked_outside_faults_names_the_next_fault() -> None:
    h = H()
    h.send(0, "k", 1, offset=0, node="n3")
    h.send(0, "k", 2, offset=1, node="n3")  # acked, not yet durable...
    h.nemesis("start", "w0", "pause", ["n1"])  # the next fault, but not on n3
    h.nemesis("stop", "w0", "pause", ["n1"])
    h.nemesis("start", "w1", "lose-unsynced", ["n3"])  # ...then lost here
    h.nemesis("stop", "w1", "lose-unsynced", ["n3"])
    h.send(0, "k", 3, offset=2, node="n3")
    h.poll(1, {"k": [(0, 1), (2, 3)]}, final=True)
    r = check(h.history())
    assert r["lost_by_fault"] == {"no fault active; next: lose-unsynced(n3)": 1}


def test_generated_correct_histories_pass() -> None:
    """A model of a correct log with concurrent producers, crashes and consumers."""
    for seed in range(20):
        rng = random.Random(seed)
        h = H()
        logs: dict[str, list[int]] = {"a": [], "b": []}
        pos: dict[tuple[int, str], int] = {}
        v = 0
        for _ in range(200):
            p = rng.randrange(4)
            k = rng.choice("ab")
            if rng.random() < 0.5:
                v += 1
                outcome = rng.choice(["ok", "ok", "ok", "fail", "info", "info-applied"])
                if outcome in ("ok", "info-applied"):
                    logs[k].append(v)
                if outcome == "ok":
                    h.send(p, k, v, offset=len(logs[k]) - 1)
                else:
                    h.send(p, k, v, type="fail" if outcome == "fail" else "info")
            else:
                start = pos.get((p, k), 0)
                n = rng.randrange(0, 4)
                recs = [(o, logs[k][o]) for o in range(start, min(start + n, len(logs[k])))]
                h.poll(p, {k: recs})
                if recs:
                    pos[(p, k)] = recs[-1][0] + 1
        h.poll(9, {k: list(enumerate(log)) for k, log in logs.items()}, final=True)
        r = check(h.history())
        assert r["valid"], (seed, r["anomaly_types"])


def test_generated_histories_with_a_dropped_record_fail() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        h = H()
        log = []
        for v in range(30):
            log.append(v)
            h.send(0, "k", v, offset=v)
        drop = rng.randrange(1, 29)
        h.poll(1, {"k": [(o, x) for o, x in enumerate(log) if o != drop]}, final=True)
        r = check(h.history())
        assert r["counts"]["lost-write"] == 1 and r["counts"]["lost-middle"] == 1
        assert r["counts"]["int-poll-skip"] == 1  # offset `drop` is known from the send ack
