"""A small linearizability checker, and the metadata workload's topic checks.

The search is Wing & Gong's, with Lowe's memoization as in Knossos' `wgl` and Porcupine:
depth-first over which pending operation takes effect next; an operation may go next only if
no other pending operation returned before it was invoked; a (set of linearized ops, model
state) pair already explored is never explored again. ``ok`` operations must be linearized;
``info`` operations (unknown outcome) may be linearized anywhere after their invocation, or not
at all; ``fail`` operations did not happen and are dropped. The search is bounded by
`max_states`; past it the answer is ``"unknown"``, never a guess.

Histories are checked per key (per topic): a register history is linearizable iff each key's is
(linearizability is local, Herlihy & Wing 1990), which keeps each search small.

Models are pure: `step(state, f, input, output) -> new state or INCONSISTENT`, with
``output=UNKNOWN`` for info ops. States must be hashable.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

from jepsen_tests.history import CREATE_TOPIC, DELETE_TOPIC, DESCRIBE_TOPIC, History, Pair

INF = 1 << 62


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


INCONSISTENT: Any = _Sentinel("INCONSISTENT")
UNKNOWN: Any = _Sentinel("UNKNOWN")


class Model(Protocol):
    def init(self) -> Hashable: ...

    def step(self, state: Any, f: str, input: Any, output: Any) -> Any:
        """The state after `f(input)` returned `output` in `state`, or INCONSISTENT."""
        ...


@dataclass(frozen=True)
class LinOp:
    id: int
    call_ns: int
    ret_ns: int  # INF for info ops
    f: str
    input: Any
    output: Any  # UNKNOWN for info ops
    required: bool  # ok: must be linearized; info: may be


def canonical(x: Any) -> Hashable:
    """A hashable, order-insensitive form of a JSON value."""
    if x is None or isinstance(x, str | int | float | bool):
        return x
    return json.dumps(x, sort_keys=True, separators=(",", ":"))


class RegisterModel:
    """A read/write/cas register: read -> value; write(v); cas([old, new]) -> bool."""

    def __init__(self, initial: Any = None) -> None:
        self.initial = canonical(initial)

    def init(self) -> Hashable:
        return self.initial

    def step(self, state: Any, f: str, input: Any, output: Any) -> Any:
        if f == "read":
            return state if output is UNKNOWN or canonical(output) == state else INCONSISTENT
        if f == "write":
            return canonical(input)
        if f == "cas":
            old, new = input
            matches = canonical(old) == state
            if output is UNKNOWN:
                return canonical(new) if matches else INCONSISTENT
            if bool(output) != matches:
                return INCONSISTENT
            return canonical(new) if matches else state
        raise ValueError(f"RegisterModel: unknown f {f!r}")


def _definition(d: Any) -> Hashable:
    """A definition as the model compares it: server-assigned ids left out."""
    if isinstance(d, dict):
        d = {k: v for k, v in d.items() if k != "topic_id"}
    return canonical(d)


class TopicModel:
    """One topic name as a register: absent (None) or its definition.

    Definitions are compared without ``topic_id`` (the server assigns it; the client that
    created the topic did not know it). `divergent_definitions` uses it instead.

    create_topic(definition) -> {"created": bool}   (false: it already existed)
    delete_topic()           -> {"deleted": bool}   (false: it did not exist)
    describe_topic()         -> {"definition": d or null}
    """

    def init(self) -> Hashable:
        return None

    def step(self, state: Any, f: str, input: Any, output: Any) -> Any:
        out = output if output is UNKNOWN else (output or {})
        if f == CREATE_TOPIC:
            d = _definition((input or {}).get("definition"))
            if out is UNKNOWN:
                return d if state is None else INCONSISTENT
            if out.get("created"):
                return d if state is None else INCONSISTENT
            return state if state is not None else INCONSISTENT
        if f == DELETE_TOPIC:
            if out is UNKNOWN:
                return None if state is not None else INCONSISTENT
            if out.get("deleted"):
                return None if state is not None else INCONSISTENT
            return state if state is None else INCONSISTENT
        if f == DESCRIBE_TOPIC:
            if out is UNKNOWN:
                return state
            return state if _definition(out.get("definition")) == state else INCONSISTENT
        raise ValueError(f"TopicModel: unknown f {f!r}")


def check_ops(ops: list[LinOp], model: Model, max_states: int = 200_000) -> dict[str, Any]:
    """Wing & Gong search with memoization. Returns {"valid": True | False | "unknown", ...}."""
    ops = sorted(ops, key=lambda o: (o.call_ns, o.id))
    n = len(ops)
    required_mask = 0
    for i, o in enumerate(ops):
        if o.required:
            required_mask |= 1 << i
    start = (0, model.init())
    seen: set[tuple[int, Hashable]] = {start}
    stack: list[tuple[int, Hashable, list[int]]] = [(0, start[1], [])]
    best: list[int] = []
    explored = 0
    while stack:
        mask, state, order = stack.pop()
        explored += 1
        if mask & required_mask == required_mask:
            return {
                "valid": True,
                "linearization": [ops[i].id for i in order],
                "states_explored": explored,
            }
        if len(order) > len(best):
            best = order
        if explored > max_states:
            return {
                "valid": "unknown",
                "reason": f"gave up after {max_states} states",
                "states_explored": explored,
            }
        pending = [i for i in range(n) if not mask >> i & 1]
        min_ret = min(ops[i].ret_ns for i in pending)
        for i in reversed(pending):  # reversed: earliest invocations are popped first
            o = ops[i]
            if o.call_ns > min_ret:
                continue
            nxt = model.step(state, o.f, o.input, o.output)
            if nxt is INCONSISTENT:
                continue
            key = (mask | 1 << i, nxt)
            if key in seen:
                continue
            seen.add(key)
            stack.append((key[0], nxt, [*order, i]))
    done = set(best)
    stuck = [ops[i] for i in range(n) if i not in done and ops[i].required]
    return {
        "valid": False,
        "states_explored": explored,
        "longest_linearizable_prefix_len": len(best),
        "prefix_tail": [ops[i].id for i in best[-5:]],
        "not_linearizable": [
            {"id": o.id, "f": o.f, "input": o.input, "output": o.output} for o in stuck[:10]
        ],
    }


def lin_ops(
    pairs: list[Pair],
    input_fn: Callable[[Pair], Any] = lambda p: p.invoke.value,
    output_fn: Callable[[Pair], Any] = lambda p: p.complete.value if p.complete else None,
    reads: tuple[str, ...] = ("read", DESCRIBE_TOPIC),
) -> list[LinOp]:
    out: list[LinOp] = []
    for p in pairs:
        if p.type == "fail":
            continue
        if p.type == "info" and p.f in reads:
            continue  # a read of unknown outcome constrains nothing
        ok = p.type == "ok"
        assert p.complete is not None or not ok
        out.append(
            LinOp(
                id=p.invoke.index,
                call_ns=p.invoke.time_ns,
                ret_ns=p.complete.time_ns if ok and p.complete is not None else INF,
                f=p.f,
                input=input_fn(p),
                output=output_fn(p) if ok else UNKNOWN,
                required=ok,
            )
        )
    return out


def check_register_history(
    history: History,
    model_factory: Callable[[], Model],
    key_fn: Callable[[Pair], str],
    max_states: int = 200_000,
) -> dict[str, Any]:
    """Check each key's sub-history; valid iff all are (unknown if any search gave up)."""
    by_key: dict[str, list[Pair]] = defaultdict(list)
    for p in history.pairs():
        by_key[key_fn(p)].append(p)
    results = {
        k: check_ops(lin_ops(ps), model_factory(), max_states) for k, ps in sorted(by_key.items())
    }
    verdicts = [r["valid"] for r in results.values()]
    valid: bool | str = False if False in verdicts else "unknown" if "unknown" in verdicts else True
    return {
        "valid": valid,
        "failures": {k: r for k, r in results.items() if r["valid"] is not True},
        "keys": len(results),
    }


def check_metadata(history: History, max_states: int = 200_000) -> dict[str, Any]:
    """The metadata workload: per-topic linearizability and no divergent definitions."""
    topic_pairs = [
        p for p in history.pairs() if p.f in (CREATE_TOPIC, DELETE_TOPIC, DESCRIBE_TOPIC)
    ]
    lin = check_register_history(
        History([o for p in topic_pairs for o in (p.invoke, p.complete) if o is not None]),
        TopicModel,
        lambda p: str((p.invoke.value or {}).get("topic")),
        max_states,
    )
    divergent = divergent_definitions(topic_pairs)
    valid: bool | str = lin["valid"]
    if divergent:
        valid = False
    counts = {
        "nonlinearizable-topics": sum(1 for r in lin["failures"].values() if r["valid"] is False),
        "unknown-topics": sum(1 for r in lin["failures"].values() if r["valid"] == "unknown"),
        "divergent-definition": len(divergent),
    }
    counts = {k: n for k, n in counts.items() if n}
    return {
        "valid": valid,
        "linearizable": lin,
        "divergent-definition": divergent,
        "counts": counts,
        "anomaly_types": sorted(k for k in counts if k != "unknown-topics"),
        "anomalies": {"divergent-definition": divergent} if divergent else {},
    }


def divergent_definitions(pairs: list[Pair]) -> list[dict[str, Any]]:
    """Two different definitions of one topic observed by ok describes.

    A topic is identified by its ``topic_id`` when definitions carry one (a deleted and
    recreated topic gets a new id, so it is a different topic); otherwise by its name.
    """
    seen: dict[tuple[str, str], dict[Hashable, list[int]]] = defaultdict(dict)
    original: dict[Hashable, Any] = {}
    for p in pairs:
        if p.f != DESCRIBE_TOPIC or p.type != "ok" or p.complete is None:
            continue
        d = (p.complete.value or {}).get("definition")
        if d is None:
            continue
        name = str((p.invoke.value or {}).get("topic"))
        ident = str(d.get("topic_id", "")) if isinstance(d, dict) else ""
        original[canonical(d)] = d
        seen[(name, ident)].setdefault(canonical(d), []).append(p.complete.index)
    return [
        {
            "topic": name,
            "topic_id": ident or None,
            "definitions": [{"definition": original[d], "ops": ops} for d, ops in defs.items()],
        }
        for (name, ident), defs in sorted(seen.items())
        if len(defs) > 1
    ]
