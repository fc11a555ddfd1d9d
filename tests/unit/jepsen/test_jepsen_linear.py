"""The linearizability checker on known-linearizable and known-non-linearizable histories."""

from __future__ import annotations

from jepsen_builder import H

from jepsen_tests.checkers.linear import (
    INF,
    UNKNOWN,
    LinOp,
    RegisterModel,
    check_metadata,
    check_ops,
)


def op(
    i: int,
    call: int,
    ret: int | None,
    f: str,
    inp: object = None,
    out: object = None,
) -> LinOp:
    return LinOp(
        i,
        call,
        INF if ret is None else ret,
        f,
        inp,
        UNKNOWN if ret is None else out,
        ret is not None,
    )


def test_sequential_register_is_linearizable() -> None:
    ops = [
        op(0, 0, 1, "write", 1),
        op(1, 2, 3, "read", out=1),
        op(2, 4, 5, "write", 2),
        op(3, 6, 7, "read", out=2),
    ]
    assert check_ops(ops, RegisterModel())["valid"] is True


def test_stale_read_after_write_completed_is_not_linearizable() -> None:
    ops = [op(0, 0, 1, "write", 1), op(1, 2, 3, "write", 2), op(2, 4, 5, "read", out=1)]
    r = check_ops(ops, RegisterModel())
    assert r["valid"] is False
    assert r["not_linearizable"]


def test_concurrent_write_may_be_read_either_way() -> None:
    # read overlaps the write of 2: both 1 and 2 are fine
    for seen in (1, 2):
        ops = [op(0, 0, 1, "write", 1), op(1, 2, 6, "write", 2), op(2, 3, 5, "read", out=seen)]
        assert check_ops(ops, RegisterModel())["valid"] is True


def test_reads_must_not_flip_back() -> None:
    # Two sequential reads inside a concurrent write: new then old is not linearizable.
    ops = [
        op(0, 0, 1, "write", 1),
        op(1, 2, 10, "write", 2),
        op(2, 3, 4, "read", out=2),
        op(3, 5, 6, "read", out=1),
    ]
    assert check_ops(ops, RegisterModel())["valid"] is False


def test_info_write_may_take_effect_later_or_never() -> None:
    took = [op(0, 0, None, "write", 5), op(1, 10, 11, "read", out=5)]
    never = [op(0, 0, None, "write", 5), op(1, 10, 11, "read", out=None)]
    assert check_ops(took, RegisterModel())["valid"] is True
    assert check_ops(never, RegisterModel())["valid"] is True


def test_cas_register() -> None:
    ok = [
        op(0, 0, 1, "write", 0),
        op(1, 2, 3, "cas", [0, 1], True),
        op(2, 4, 5, "cas", [0, 2], False),
        op(3, 6, 7, "read", out=1),
    ]
    bad = [
        op(0, 0, 1, "write", 0),
        op(1, 2, 3, "cas", [0, 1], True),
        op(2, 4, 5, "cas", [0, 2], True),
    ]
    assert check_ops(ok, RegisterModel())["valid"] is True
    assert check_ops(bad, RegisterModel())["valid"] is False


def test_search_is_bounded_and_says_unknown() -> None:
    # Many concurrent writes then a read of a value no one wrote: exhaustive search is large.
    ops = [op(i, 0, 100, "write", i) for i in range(14)] + [op(99, 101, 102, "read", out=-1)]
    r = check_ops(ops, RegisterModel(), max_states=500)
    assert r["valid"] == "unknown"


def test_memoization_keeps_wide_concurrency_fast() -> None:
    ops = [op(i, 0, 100, "write", i % 3) for i in range(16)] + [op(99, 101, 102, "read", out=2)]
    r = check_ops(ops, RegisterModel(), max_states=200_000)
    assert r["valid"] is True


def _topic(
    h: H,
    p: int,
    f: str,
    topic: str,
    result: dict | None,
    type: str = "ok",
    definition: dict | None = None,
) -> None:
    inv: dict = {"topic": topic}
    if definition is not None:
        inv["definition"] = definition
    h.op(p, f, inv, type, result)


def test_metadata_history_linearizable() -> None:
    h = H()
    d = {"partitions": 3, "topic_id": "u1"}
    _topic(h, 0, "describe_topic", "t", {"definition": None})
    _topic(h, 1, "create_topic", "t", {"created": True}, definition=d)
    _topic(h, 2, "create_topic", "t", {"created": False}, definition={"partitions": 1})
    _topic(h, 0, "describe_topic", "t", {"definition": d})
    _topic(h, 1, "delete_topic", "t", {"deleted": True})
    _topic(h, 0, "describe_topic", "t", {"definition": None})
    r = check_metadata(h.history())
    assert r["valid"] is True, r


def test_metadata_two_creates_both_succeeding_is_not_linearizable() -> None:
    h = H()
    _topic(h, 1, "create_topic", "t", {"created": True}, definition={"partitions": 3})
    _topic(h, 2, "create_topic", "t", {"created": True}, definition={"partitions": 1})
    r = check_metadata(h.history())
    assert r["valid"] is False
    assert r["counts"]["nonlinearizable-topics"] == 1


def test_metadata_describe_after_delete_acked_is_stale() -> None:
    h = H()
    d = {"partitions": 3}
    _topic(h, 1, "create_topic", "t", {"created": True}, definition=d)
    _topic(h, 1, "delete_topic", "t", {"deleted": True})
    _topic(h, 0, "describe_topic", "t", {"definition": d})
    assert check_metadata(h.history())["valid"] is False


def test_two_definitions_of_one_topic_id_are_divergent() -> None:
    h = H()
    _topic(h, 0, "describe_topic", "t", {"definition": {"partitions": 3, "topic_id": "u1"}})
    _topic(h, 1, "describe_topic", "t", {"definition": {"partitions": 1, "topic_id": "u1"}})
    r = check_metadata(h.history())
    assert r["counts"]["divergent-definition"] == 1
    assert r["valid"] is False
