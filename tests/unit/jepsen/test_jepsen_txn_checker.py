"""The transactional checker finds each anomaly in a hand-made history, and passes a clean one."""

from __future__ import annotations

from typing import Any

from jepsen_tests.checkers.txn import check, output_key
from jepsen_tests.history import History, Op


class T:
    """A history builder: each call appends an invoke and its completion, one tick apart."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.t = 0

    def _op(self, process: Any, type_: str, f: str, value: Any) -> Op:
        self.t += 10
        op = Op(len(self.ops), process, type_, f, value, self.t)
        self.ops.append(op)
        return op

    def txn(
        self,
        p: Any,
        sends: list[tuple[str, int, int]],
        *,
        status: str = "ok",
        abort: bool = False,
        commit_ns: int | None = -1,
    ) -> int:
        """A transaction of ``(key, value, offset)`` sends; returns its id (invoke index)."""
        inv = self._op(p, "invoke", "txn", {"sends": [[k, v] for k, v, _ in sends], "abort": abort})
        commit = self.t + 5 if commit_ns == -1 else commit_ns
        if status == "ok":
            value: dict[str, Any] = {"sends": [[k, v, o] for k, v, o in sends]}
        else:
            value = {"sends": [[k, v] for k, v, _ in sends], "abort": abort}
        if commit is not None:
            value["commit_ns"] = commit
        self._op(p, status, "txn", value)
        return inv.index

    def poll(
        self,
        p: Any,
        reads: dict[str, list[tuple[int, int]]],
        *,
        final: bool = False,
        complete: bool = False,
    ) -> T:
        self._op(p, "invoke", "poll", {"keys": sorted(reads), **({"final": True} if final else {})})
        value: dict[str, Any] = {"reads": {k: [[o, v] for o, v in r] for k, r in reads.items()}}
        if complete:
            value["complete"] = True
        self._op(p, "ok", "poll", value)
        return self

    def final(self, logs: dict[str, list[tuple[int, int]]]) -> T:
        """Final reads of each key to its end (then an empty read: complete)."""
        for k, recs in logs.items():
            self.poll(10_000, {k: recs}, final=True)
            self.poll(10_000, {k: []}, final=True, complete=True)
        return self

    def ctp(
        self,
        p: Any,
        reads: dict[str, list[tuple[int, int]]],
        sends: list[tuple[str, int, int]],
        offsets: dict[str, int],
        *,
        status: str = "ok",
    ) -> int:
        inv = self._op(p, "invoke", "ctp", {"group": "g", "member": "m"})
        self._op(
            p,
            status,
            "ctp",
            {
                "reads": {k: [[o, v] for o, v in r] for k, r in reads.items()},
                "sends": [[k, v, o] if status == "ok" else [k, v] for k, v, o in sends],
                "offsets": offsets,
                "commit_ns": self.t + 5,
            },
        )
        return inv.index

    def committed(self, offsets: dict[str, int]) -> T:
        self._op(10_001, "invoke", "committed", {"group": "g"})
        self._op(10_001, "ok", "committed", {"group": "g", "offsets": offsets})
        return self

    def history(self) -> History:
        return History(self.ops)


def _clean() -> T:
    h = T()
    h.txn(0, [("a", 1, 0), ("b", 2, 0)])
    h.txn(1, [("a", 3, 2), ("b", 4, 2)], status="fail", abort=True)  # aborted on purpose
    h.txn(0, [("a", 5, 4), ("b", 6, 4)])
    h.poll(2, {"a": [(0, 1)]}).poll(2, {"a": [(4, 5)], "b": [(0, 2), (4, 6)]})
    h.final({"a": [(0, 1), (4, 5)], "b": [(0, 2), (4, 6)]})
    return h


def _only(r: dict[str, Any], kind: str) -> None:
    assert not r["valid"], r
    assert kind in r["anomaly_types"], r
    assert r["anomaly_types"] == [kind], r["anomaly_types"]


def test_clean_history_is_valid() -> None:
    r = check(_clean().history())
    assert r["valid"], r
    assert r["counts"] == {}
    assert r["stats"]["committed"] == 2
    assert r["stats"]["aborted_on_purpose"] == 1


def test_lost_write_missing_from_complete_final_reads() -> None:
    h = T()
    h.txn(0, [("a", 1, 0)])
    h.txn(0, [("a", 2, 2)])
    h.final({"a": [(0, 1)]})
    r = check(h.history())
    _only(r, "lost-write")
    assert r["anomalies"]["lost-write"][0]["value"] == 2


def test_lost_write_below_a_higher_read_without_final_reads() -> None:
    h = T()
    h.txn(0, [("a", 1, 0)])
    h.txn(0, [("a", 2, 2)])
    h.poll(1, {"a": [(2, 2)]})
    r = check(h.history())
    _only(r, "lost-write")


def test_duplicate() -> None:
    h = T()
    h.txn(0, [("a", 1, 0)])
    h.final({"a": [(0, 1), (2, 1)]})
    _only(check(h.history()), "duplicate")


def test_inconsistent_offsets() -> None:
    h = T()
    h.txn(0, [("a", 1, 0)])
    h.txn(1, [("a", 2, 2)])
    h.poll(2, {"a": [(0, 2)]})
    h.final({"a": [(0, 1), (2, 2)]})
    r = check(h.history())
    assert "inconsistent-offsets" in r["anomaly_types"]


def test_aborted_read_g1a() -> None:
    h = _clean()
    h.poll(3, {"a": [(2, 3)]})  # the aborted transaction's record
    _only(check(h.history()), "G1a")


def test_aborted_read_in_the_final_reads_is_g1a_too() -> None:
    h = T()
    h.txn(0, [("a", 1, 0)], status="fail", abort=True)
    h.final({"a": [(0, 1)]})
    _only(check(h.history()), "G1a")


def test_intermediate_read_g1b_before_the_commit_was_asked_for() -> None:
    h = T()
    h.poll(2, {"a": [(0, 1)]})  # completes at t=20
    h.txn(0, [("a", 1, 0)], commit_ns=100)
    h.final({"a": [(0, 1)]})
    r = check(h.history())
    _only(r, "G1b")
    assert r["anomalies"]["G1b"][0]["commit_ns"] == 100


def test_phantom() -> None:
    h = _clean()
    h.poll(3, {"a": [(6, 99)]})
    assert "phantom" in check(h.history())["anomaly_types"]


def test_torn_info_transaction_half_visible() -> None:
    h = T()
    # unknown outcome: one of its records was read, so it committed; the other is missing
    h.txn(0, [("a", 1, 0), ("b", 2, 0)], status="info")
    h.final({"a": [(0, 1)], "b": []})
    r = check(h.history())
    assert "torn-txn" in r["anomaly_types"]
    assert r["counts"]["lost-write"] == 1


def test_info_transaction_never_read_is_allowed() -> None:
    h = T()
    h.txn(0, [("a", 1, 0), ("b", 2, 0)], status="info")
    h.final({"a": [], "b": []})
    r = check(h.history())
    assert r["valid"], r
    assert r["counts"] == {"unread-info": 1}


def test_final_reads_that_did_not_reach_the_end_prove_no_loss() -> None:
    h = T()
    h.txn(0, [("a", 1, 0)])
    h.txn(0, [("a", 2, 2)])
    h.poll(10_000, {"a": [(0, 1)]}, final=True)  # then the final reads ran out of time
    r = check(h.history())
    assert r["valid"], r
    assert r["counts"] == {"unseen": 1}


def test_nonmonotonic_poll() -> None:
    h = T()
    h.txn(0, [("a", 1, 0), ("a", 2, 1)])
    h.poll(2, {"a": [(0, 1), (1, 2)]}).poll(2, {"a": [(1, 2)]})
    h.final({"a": [(0, 1), (1, 2)]})
    _only(check(h.history()), "nonmonotonic-poll")


def test_nonmonotonic_send() -> None:
    h = T()
    h.txn(0, [("a", 1, 5)])
    h.txn(0, [("a", 2, 3)])
    h.poll(2, {"a": [(3, 2), (5, 1)]})
    r = check(h.history())
    _only(r, "nonmonotonic-send")


def test_write_cycle_g0_is_reported_but_allowed() -> None:
    h = T()
    h.txn(0, [("a", 1, 0), ("b", 2, 1)])
    h.txn(1, [("a", 3, 1), ("b", 4, 0)])
    h.final({"a": [(0, 1), (1, 3)], "b": [(0, 4), (1, 2)]})
    r = check(h.history())
    assert r["valid"], r
    assert r["counts"]["G0"] == 1


def test_cycle_through_a_read_is_g1c() -> None:
    h = T()
    # P writes a=1 then out/a=..., C reads a=1 (wr: P -> C) and writes out/a before P's
    # output on out/a (ww: C -> P): information flowed both ways.
    oa = output_key("a")
    p = h.txn(0, [("a", 1, 0), (oa, 7, 1)])
    c = h.ctp(1, {"a": [(0, 1)]}, [(oa, 1, 0)], {"a": 1})
    h.final({"a": [(0, 1)], oa: [(0, 1), (1, 7)]})
    r = check(h.history())
    assert "G1c" in r["anomaly_types"], r
    assert sorted(r["anomalies"]["G1c"][0]["cycle"]) == sorted([p, c])


def test_ctp_clean() -> None:
    h = T()
    oa = output_key("a")
    h.txn(0, [("a", 1, 0), ("a", 2, 1)])
    h.ctp(1, {"a": [(0, 1), (1, 2)]}, [(oa, 1, 0), (oa, 2, 1)], {"a": 2})
    h.ctp(1, {"a": []}, [], {}, status="fail")
    h.committed({"a": 2})
    h.final({"a": [(0, 1), (1, 2)], oa: [(0, 1), (1, 2)]})
    r = check(h.history())
    assert r["valid"], r


def test_offsets_committed_without_outputs() -> None:
    h = T()
    oa = output_key("a")
    h.txn(0, [("a", 1, 0), ("a", 2, 1)])
    h.ctp(1, {"a": [(0, 1), (1, 2)]}, [(oa, 1, 0), (oa, 2, 1)], {"a": 2}, status="fail")
    h.committed({"a": 2})  # the offsets of an aborted step committed
    h.final({"a": [(0, 1), (1, 2)], oa: []})
    _only(check(h.history()), "offsets-without-outputs")


def test_outputs_committed_without_offsets() -> None:
    h = T()
    oa = output_key("a")
    h.txn(0, [("a", 1, 0)])
    h.ctp(1, {"a": [(0, 1)]}, [(oa, 1, 0)], {"a": 1})
    h.committed({})  # the output committed, its offset did not
    h.final({"a": [(0, 1)], oa: [(0, 1)]})
    _only(check(h.history()), "outputs-without-offsets")


def test_ctp_output_written_twice_is_a_duplicate() -> None:
    h = T()
    oa = output_key("a")
    h.txn(0, [("a", 1, 0)])
    h.ctp(1, {"a": [(0, 1)]}, [(oa, 1, 0)], {"a": 1})
    h.ctp(2, {"a": [(0, 1)]}, [(oa, 1, 2)], {"a": 1})
    h.committed({"a": 1})
    h.final({"a": [(0, 1)], oa: [(0, 1), (2, 1)]})
    assert "duplicate" in check(h.history())["anomaly_types"]


def test_ctp_output_also_sent_by_a_failed_step_is_credited_to_the_committed_one() -> None:
    """Finding 15: an input consumed by a step that failed is consumed again, and its output
    (the same value) sent again; a failed step invoked after the committed one must not
    turn the committed record into an aborted read."""
    h = T()
    oa = output_key("a")
    h.txn(0, [("a", 1, 0)])
    h.ctp(1, {"a": [(0, 1)]}, [(oa, 1, 0)], {"a": 1})
    h.ctp(2, {"a": [(0, 1)]}, [(oa, 1, 1)], {"a": 1}, status="fail")  # aborted at offset 1
    h.committed({"a": 1})
    h.final({"a": [(0, 1)], oa: [(0, 1)]})
    r = check(h.history())
    assert r["valid"], r


def test_ctp_output_read_where_only_the_failed_step_wrote_it_is_g1a() -> None:
    """The same two steps, but the record read sits where the committed step did not ack
    it: only the failed step explains it."""
    h = T()
    oa = output_key("a")
    h.txn(0, [("a", 1, 0)])
    h.ctp(1, {"a": [(0, 1)]}, [(oa, 1, 0)], {"a": 1})
    h.ctp(2, {"a": [(0, 1)]}, [(oa, 1, 1)], {"a": 1}, status="fail")
    h.committed({"a": 1})
    h.final({"a": [(0, 1)], oa: [(1, 1)]})
    r = check(h.history())
    assert "G1a" in r["anomaly_types"], r
