"""Operation histories: what clients and nemeses did, and when.

Owns the `Op` record, the thread- and asyncio-safe `Recorder` that appends to a history while
a run goes on, and the JSON-lines format a run saves (`history.jsonl`, one op per line) and
`check` loads back.

Every client operation appears twice, as in Jepsen: an ``invoke`` when the client starts it,
then exactly one completion from the same process:

* ``ok``   -- it happened, and ``value`` holds what it returned;
* ``fail`` -- it definitely did not happen (the server refused it before doing anything);
* ``info`` -- unknown: a timeout, a dropped connection, a crash. It may have happened, or may
  happen later. A process whose op ended in ``info`` is considered crashed; the worker goes on
  as a new process id so that per-process checks (monotonic polls, sends) stay sound.

Nemesis fault windows are ops of process ``"nemesis"``, type ``info``, with ``f`` ``start`` or
``stop`` and ``value = {"id": ..., "kind": ..., "targets": [...]}``.

Times are monotonic nanoseconds since the run started (``time.monotonic_ns`` minus the
recorder's origin), so they order events in one harness process and never jump with the wall
clock (which a clock nemesis may be bending for the nodes).

Does not talk to a cluster and imports no server package.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

OpType = Literal["invoke", "ok", "fail", "info"]
OP_TYPES: tuple[str, ...] = ("invoke", "ok", "fail", "info")
NEMESIS = "nemesis"

# Operation names used by the workloads. Free-form strings are allowed; these are the ones
# the checkers understand.
SEND = "send"
POLL = "poll"
ASSIGN = "assign"
SUBSCRIBE = "subscribe"
COMMIT = "commit"
REBALANCE = "rebalance"
CREATE_TOPIC = "create_topic"
DELETE_TOPIC = "delete_topic"
DESCRIBE_TOPIC = "describe_topic"
REGISTER_SCHEMA = "register_schema"
READ_SCHEMA_ID = "read_schema_id"
READ_SUBJECT_VERSION = "read_subject_version"
READ_SUBJECT = "read_subject"


@dataclass(frozen=True)
class Op:
    """One history event. `index` is its position in the history (assigned by the recorder)."""

    index: int
    process: int | str
    type: str
    f: str
    value: Any = None
    time_ns: int = 0
    node: str | None = None  # which node served it (for a send: the partition leader at ack)
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def is_client(self) -> bool:
        return self.process != NEMESIS

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
            "time_ns": self.time_ns,
        }
        if self.node is not None:
            d["node"] = self.node
        if self.error is not None:
            d["error"] = self.error
        if self.extra:
            d["extra"] = self.extra
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> Op:
        t = d["type"]
        if t not in OP_TYPES:
            raise ValueError(f"op {d.get('index')}: unknown type {t!r}")
        return Op(
            index=int(d["index"]),
            process=d["process"],
            type=t,
            f=str(d["f"]),
            value=d.get("value"),
            time_ns=int(d.get("time_ns", 0)),
            node=d.get("node"),
            error=d.get("error"),
            extra=d.get("extra") or {},
        )


@dataclass(frozen=True)
class Pair:
    """An invocation and its completion (None while it is still open at the end of the run)."""

    invoke: Op
    complete: Op | None

    @property
    def type(self) -> str:
        """ok / fail / info; an op never completed counts as info (unknown outcome)."""
        return self.complete.type if self.complete is not None else "info"

    @property
    def f(self) -> str:
        return self.invoke.f

    @property
    def process(self) -> int | str:
        return self.invoke.process

    @property
    def value(self) -> Any:
        """The completion's value if there is one, else the invocation's."""
        if self.complete is not None and self.complete.value is not None:
            return self.complete.value
        return self.invoke.value

    @property
    def node(self) -> str | None:
        if self.complete is not None and self.complete.node is not None:
            return self.complete.node
        return self.invoke.node

    @property
    def latency_ns(self) -> int | None:
        if self.complete is None:
            return None
        return self.complete.time_ns - self.invoke.time_ns


class HistoryError(ValueError):
    """A history that breaks the invoke/complete discipline."""


class History:
    """An ordered, immutable list of ops with the pairing helpers the checkers need."""

    def __init__(self, ops: Iterable[Op]) -> None:
        self.ops: list[Op] = list(ops)

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def client_ops(self) -> list[Op]:
        return [o for o in self.ops if o.is_client()]

    def nemesis_ops(self) -> list[Op]:
        return [o for o in self.ops if not o.is_client()]

    def pairs(self) -> list[Pair]:
        """Client invocations matched to completions, in invocation order.

        Raises HistoryError when a process completes without an open invocation, invokes twice
        without completing, or completes with a different `f`.
        """
        open_: dict[int | str, Op] = {}
        out: list[Pair] = []
        slot: dict[int, int] = {}
        for o in self.ops:
            if not o.is_client():
                continue
            if o.type == "invoke":
                if o.process in open_:
                    raise HistoryError(
                        f"op {o.index}: process {o.process} invoked while op "
                        f"{open_[o.process].index} is still open"
                    )
                open_[o.process] = o
                slot[o.index] = len(out)
                out.append(Pair(o, None))
            else:
                inv = open_.pop(o.process, None)
                if inv is None:
                    raise HistoryError(
                        f"op {o.index}: {o.type} from process {o.process} without an open invoke"
                    )
                if inv.f != o.f:
                    raise HistoryError(
                        f"op {o.index}: completes {o.f!r} but {inv.f!r} "
                        f"(op {inv.index}) was invoked"
                    )
                out[slot[inv.index]] = Pair(inv, o)
        return out

    def fault_windows(self) -> list[FaultWindow]:
        """Nemesis windows from start/stop ops; a window never stopped ends at the last op."""
        end = self.ops[-1].time_ns if self.ops else 0
        starts: dict[str, Op] = {}
        out: list[FaultWindow] = []
        for o in self.ops:
            if o.is_client() or not isinstance(o.value, dict):
                continue
            wid = str(o.value.get("id"))
            if o.f == "start":
                starts[wid] = o
            elif o.f == "stop" and wid in starts:
                s = starts.pop(wid)
                out.append(FaultWindow.from_ops(s, o.time_ns))
        out.extend(FaultWindow.from_ops(s, end) for s in starts.values())
        out.sort(key=lambda w: w.start_ns)
        return out

    # -- persistence ---------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            for o in self.ops:
                fh.write(json.dumps(o.to_json(), separators=(",", ":"), sort_keys=True))
                fh.write("\n")

    @staticmethod
    def load(path: str | Path) -> History:
        ops: list[Op] = []
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    ops.append(Op.from_json(json.loads(line)))
                except (ValueError, KeyError) as e:
                    raise HistoryError(f"{path}:{lineno}: {e}") from e
        return History(ops)


@dataclass(frozen=True)
class FaultWindow:
    id: str
    kind: str
    targets: tuple[str, ...]
    start_ns: int
    end_ns: int

    @staticmethod
    def from_ops(start: Op, end_ns: int) -> FaultWindow:
        v = start.value
        return FaultWindow(
            str(v.get("id")),
            str(v.get("kind")),
            tuple(str(t) for t in v.get("targets") or ()),
            start.time_ns,
            end_ns,
        )

    def contains(self, t_ns: int) -> bool:
        return self.start_ns <= t_ns <= self.end_ns

    @property
    def label(self) -> str:
        return f"{self.kind}({','.join(self.targets)})" if self.targets else self.kind


class Recorder:
    """Appends ops to a history from many threads and asyncio tasks.

    A plain lock suffices for asyncio too: the critical section never awaits. Optionally
    streams every op to a JSON-lines file as it is recorded, so a run that dies still leaves
    its history behind.
    """

    def __init__(self, stream_to: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self._origin_ns = time.monotonic_ns()
        self._fh = open(stream_to, "w", encoding="utf-8") if stream_to is not None else None  # noqa: SIM115

    def now_ns(self) -> int:
        return time.monotonic_ns() - self._origin_ns

    def record(
        self,
        process: int | str,
        type: str,
        f: str,
        value: Any = None,
        *,
        node: str | None = None,
        error: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Op:
        if type not in OP_TYPES:
            raise ValueError(f"unknown op type {type!r}")
        with self._lock:
            op = Op(
                len(self._ops), process, type, f, value, self.now_ns(), node, error, extra or {}
            )
            self._ops.append(op)
            if self._fh is not None:
                self._fh.write(json.dumps(op.to_json(), separators=(",", ":"), sort_keys=True))
                self._fh.write("\n")
                self._fh.flush()
        return op

    def invoke(self, process: int | str, f: str, value: Any = None, **kw: Any) -> Op:
        return self.record(process, "invoke", f, value, **kw)

    def ok(self, process: int | str, f: str, value: Any = None, **kw: Any) -> Op:
        return self.record(process, "ok", f, value, **kw)

    def fail(self, process: int | str, f: str, value: Any = None, **kw: Any) -> Op:
        return self.record(process, "fail", f, value, **kw)

    def info(self, process: int | str, f: str, value: Any = None, **kw: Any) -> Op:
        return self.record(process, "info", f, value, **kw)

    def history(self) -> History:
        with self._lock:
            return History(list(self._ops))

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
