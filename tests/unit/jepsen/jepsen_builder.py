"""A tiny builder for handcrafted histories: explicit processes, times in steps of 1 ms."""

from __future__ import annotations

from typing import Any

from jepsen_tests.history import History, Op


class H:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.t = 0

    def _add(
        self, process: int | str, type: str, f: str, value: Any = None, node: str | None = None
    ) -> H:
        self.t += 1_000_000
        self.ops.append(Op(len(self.ops), process, type, f, value, self.t, node))
        return self

    def op(
        self,
        process: int | str,
        f: str,
        invoke: Any,
        type: str,
        result: Any = None,
        node: str | None = None,
    ) -> H:
        self._add(process, "invoke", f, invoke)
        return self._add(process, type, f, result if result is not None else invoke, node)

    def invoke(self, process: int | str, f: str, value: Any = None) -> H:
        return self._add(process, "invoke", f, value)

    def complete(
        self, process: int | str, type: str, f: str, value: Any = None, node: str | None = None
    ) -> H:
        return self._add(process, type, f, value, node)

    # queue workload shorthands
    def send(
        self,
        p: int,
        key: str,
        value: int,
        type: str = "ok",
        offset: int | None = None,
        node: str | None = None,
    ) -> H:
        res: dict[str, Any] = {"key": key, "value": value}
        if offset is not None:
            res["offset"] = offset
        return self.op(p, "send", {"key": key, "value": value}, type, res, node)

    def poll(
        self, p: int, reads: dict[str, list[tuple[int, int]]], final: bool = False, type: str = "ok"
    ) -> H:
        inv = {"final": True} if final else {}
        return self.op(
            p, "poll", inv, type, {"reads": {k: [list(r) for r in v] for k, v in reads.items()}}
        )

    def assign(self, p: int, keys: list[str], f: str = "assign") -> H:
        return self.op(p, f, {"keys": keys}, "ok")

    # consumer-group shorthands (the shapes GroupQueueWorker records)
    def subscribe(self, p: int, member: str, keys: list[str], group: str = "g") -> H:
        return self.op(
            p,
            "subscribe",
            {"keys": keys, "group": group, "member": member, "assignor": "range"},
            "ok",
        )

    def rebalance(self, member: str, event: str, keys: list[str], group: str = "g") -> H:
        return self.op(
            member,
            "rebalance",
            {"group": group, "member": member, "event": event, "keys": keys},
            "ok",
        )

    def gpoll(
        self, p: int, member: str, reads: dict[str, list[tuple[int, int]]], group: str = "g"
    ) -> H:
        inv = {"group": group, "member": member}
        return self.op(
            p,
            "poll",
            inv,
            "ok",
            {**inv, "reads": {k: [list(r) for r in v] for k, v in reads.items()}},
        )

    def commit(
        self, p: int, member: str, offsets: dict[str, int], type: str = "ok", group: str = "g"
    ) -> H:
        return self.op(p, "commit", {"group": group, "member": member, "offsets": offsets}, type)

    def nemesis(self, f: str, wid: str, kind: str, targets: list[str]) -> H:
        return self._add("nemesis", "info", f, {"id": wid, "kind": kind, "targets": targets})

    def history(self) -> History:
        return History(self.ops)
