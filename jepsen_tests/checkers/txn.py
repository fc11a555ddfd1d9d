"""The transactional checker: anomalies of Kafka transactions in a txn/ctp/poll history.

After Jepsen's Kafka test with transactions (jepsen.tests.kafka, and the Bufstream 0.1.0
analysis): keys name partitions (output partitions of the consume-transform-produce variant
are named ``out/<key>``), every value a ``txn`` op sends is unique per key, so ``(key,
value)`` identifies the send that wrote it and its transaction.

Outputs of ``ctp`` steps are not unique: a step's output is its input's value, and an input
consumed by a step that then failed is consumed again by a later step, which sends the same
value. A record read at ``(key, offset, value)`` is therefore credited to the writer that
explains it best (`_Writers.of`): an ok transaction that acked that value at that offset,
else one whose offset is unknown, by outcome (ok, then info, then fail). Only a record no
transaction but a failed one can explain is an aborted read.

Op shapes:

* ``txn``  invoke ``{"sends": [[k, v], ...], "abort": bool}``; ok ``{"sends": [[k, v, offset],
  ...], "commit_ns": t}``; ``fail`` (certainly not committed: aborted on purpose, or aborted
  after an abortable error) and ``info`` (the commit's outcome is unknown) carry the invoke's
  value plus ``commit_ns`` when the commit had been asked for.
* ``ctp``  a consume-transform-produce step: invoke ``{"group": g, "member": m}``; every
  completion ``{"reads": {k: [[o, v], ...]}, "sends": [[k, v(, offset)], ...],
  "offsets": {k: next}, "commit_ns": t?}``: what the step consumed (read_committed), the
  outputs it sent in its transaction and the consumer offsets it sent with it.
* ``poll``  invoke ``{"keys": [...]}`` (``"final": true`` for the reads after healing); ok
  ``{"reads": {k: [[offset, value], ...]}}``, read at read_committed. The final poll that
  finds a key's end adds ``"complete": true``: the final reads of that key saw all of it.
* ``committed``  ok ``{"group": g, "offsets": {k: next}}``: the group's committed offsets,
  read after healing.

``commit_ns`` is the history time at which ``commit_transaction`` was called: no
read_committed read that completed before it may return the transaction's records.

A transaction is *committed* if it is ok, or if it is info and any of its records was read.

Anomalies (all make the history invalid but ``G0``, ``unseen`` and ``unread-info``):

* ``lost-write``  a committed transaction's record that no read returned, although some read
  of its key returned a record at a higher offset (Jepsen's definition), or the final reads
  of its key, which read to the end, missed it.
* ``torn-txn``  a committed transaction some of whose records were read by the final reads
  and some not (of keys the final reads read to the end).
* ``duplicate``  one value at two or more offsets of a key.
* ``inconsistent-offsets``  one key+offset with two or more values across readers and acks.
* ``G1a``  a read returned a record of a transaction that failed (aborted read).
* ``G1b``  a read completed before the commit of the transaction whose record it returned was
  asked for: it saw the transaction's intermediate state (a read_committed reader reading
  uncommitted data).
* ``phantom``  a read returned a value no transaction sent.
* ``nonmonotonic-poll``  per process and key, a poll's offsets go backwards (within one poll or
  from the previous poll of that process).
* ``nonmonotonic-send``  per process and key, a later committed transaction's record got an
  offset at or below an earlier one's (or within one transaction).
* ``G0`` / ``G1c``  cycles in the dependency graph of committed transactions: ww edges from
  each key's log order (the final reads), wr edges from a ctp step to the transactions whose
  records it consumed. A cycle of ww edges only is G0; one with a wr edge is G1c. G0 is
  reported, not invalidating: Kafka orders each partition on its own, so two concurrent
  transactions over the same two partitions may land in opposite orders (Jepsen found such
  write cycles in Kafka itself and treats them as allowed).
* ``offsets-without-outputs``  the group's committed offset of an input key lies past an input
  record whose output no final read returned: the offset committed, the output did not.
* ``outputs-without-offsets``  an output read by the final reads whose input lies at or past
  the group's committed offset of its key: the output committed, the offset did not.

Pure: reads a `History`, returns a dict.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from jepsen_tests.history import POLL, History, Pair

TXN = "txn"
CTP = "ctp"
COMMITTED = "committed"
OUT_PREFIX = "out/"
ALLOWED = frozenset({"G0", "unseen", "unread-info"})
EXAMPLES_MAX = 20

Rec = tuple[str, Any]  # (key, value)


def output_key(key: str) -> str:
    return OUT_PREFIX + key


def input_key(out_key: str) -> str:
    return out_key[len(OUT_PREFIX) :]


@dataclass
class _Txn:
    pair: Pair
    sends: list[tuple[str, Any, int | None]]
    reads: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)
    commit_ns: int | None = None
    committed: bool = False

    @property
    def id(self) -> int:
        return self.pair.invoke.index

    @property
    def type(self) -> str:
        return self.pair.type


def _reads_of(v: Any) -> dict[str, list[tuple[int, Any]]]:
    if not isinstance(v, dict):
        return {}
    return {
        str(k): [(int(o), val) for o, val in recs] for k, recs in (v.get("reads") or {}).items()
    }


def _txn(p: Pair) -> _Txn:
    inv = p.invoke.value or {}
    done = p.complete.value if p.complete is not None and p.complete.value is not None else {}
    raw = done.get("sends", inv.get("sends", []))
    sends = [(str(s[0]), s[1], int(s[2]) if len(s) > 2 and s[2] is not None else None) for s in raw]
    if p.type != "ok":  # an offset is only known from an ok commit's acks
        sends = [(k, v, None) for k, v, _ in sends]
    t = _Txn(p, sends, commit_ns=done.get("commit_ns"))
    if p.f == CTP:
        t.reads = _reads_of(done)
        t.offsets = {str(k): int(o) for k, o in (done.get("offsets") or {}).items()}
    return t


def check(history: History) -> dict[str, Any]:
    pairs = history.pairs()
    counts: Counter[str] = Counter()
    anomalies: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def add(kind: str, entry: dict[str, Any]) -> None:
        counts[kind] += 1
        if len(anomalies[kind]) < EXAMPLES_MAX:
            anomalies[kind].append(entry)

    txns = [_txn(p) for p in pairs if p.f in (TXN, CTP)]
    writer = _Writers(txns)
    credited: set[int] = set()  # transactions some read is credited to

    # ---- every observation: (key, offset, value, completion time, op index, process, final)
    polls = [p for p in pairs if p.f == POLL and p.type == "ok"]
    final_ids = {
        p.invoke.index
        for p in polls
        if isinstance(p.invoke.value, dict) and p.invoke.value.get("final")
    }
    observations: list[Obs] = []
    for p in polls:
        assert p.complete is not None
        for k, recs in _reads_of(p.complete.value).items():
            for o, v in recs:
                observations.append(
                    (
                        k,
                        o,
                        v,
                        p.complete.time_ns,
                        p.invoke.index,
                        p.process,
                        p.invoke.index in final_ids,
                    )
                )
    for t in txns:
        if t.pair.complete is None:
            continue
        for k, recs in t.reads.items():
            for o, v in recs:
                observations.append((k, o, v, t.pair.complete.time_ns, t.id, t.pair.process, False))

    read: set[Rec] = set()
    final_read: dict[str, set[Any]] = defaultdict(set)
    max_read_offset: dict[str, int] = {}
    at_offset: dict[tuple[str, int], set[Any]] = defaultdict(set)
    offsets_of: dict[Rec, set[int]] = defaultdict(set)
    for k, o, v, t_ns, op, _proc, final in observations:
        read.add((k, v))
        at_offset[(k, o)].add(v)
        offsets_of[(k, v)].add(o)
        max_read_offset[k] = max(max_read_offset.get(k, -1), o)
        if final:
            final_read[k].add(v)
        w = writer.of(k, o, v)
        if w is None:
            add("phantom", {"key": k, "offset": o, "value": v, "op": op})
            continue
        credited.add(w.id)
        if w.type == "fail":
            add("G1a", {"key": k, "offset": o, "value": v, "op": op, "writer": w.id})
        elif w.commit_ns is None or t_ns < w.commit_ns:
            add(
                "G1b",
                {
                    "key": k,
                    "offset": o,
                    "value": v,
                    "op": op,
                    "writer": w.id,
                    "read_done_ns": t_ns,
                    "commit_ns": w.commit_ns,
                },
            )
    for t in txns:
        for k, v, acked in t.sends:
            if acked is not None:
                at_offset[(k, acked)].add(v)
                offsets_of[(k, v)].add(acked)

    for (k, o), vs in sorted(at_offset.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if len(vs) > 1:
            add("inconsistent-offsets", {"key": k, "offset": o, "values": sorted(vs, key=str)})
    for (k, v), os_ in sorted(offsets_of.items(), key=lambda kv: str(kv[0])):
        if len(os_) > 1:
            add("duplicate", {"key": k, "value": v, "offsets": sorted(os_)})

    # ---- committed transactions, lost and torn
    final_complete = _final_complete(polls, final_ids)
    for t in txns:
        t.committed = t.type == "ok" or (t.type == "info" and t.id in credited)
    for t in txns:
        if not t.committed:
            if t.type == "info" and t.sends:
                counts["unread-info"] += 1
            continue
        seen_final = [k in final_complete and v in final_read[k] for k, v, _ in t.sends]
        missing = []
        for (k, v, acked), in_final in zip(t.sends, seen_final, strict=True):
            if k in final_complete:
                # Read to the end after healing: what is not there is gone.
                if not in_final:
                    missing.append([k, v])
            elif (k, v) not in read:
                if acked is not None and max_read_offset.get(k, -1) > acked:
                    missing.append([k, v])
                else:
                    counts["unseen"] += 1
        for k, v in missing:
            add("lost-write", {"key": k, "value": v, "txn": t.id, "status": t.type})
        judged = [
            s for s, (k, _, _) in zip(seen_final, t.sends, strict=True) if k in final_complete
        ]
        if any(judged) and not all(judged):
            add(
                "torn-txn",
                {
                    "txn": t.id,
                    "status": t.type,
                    "sends": [[k, v] for k, v, _ in t.sends],
                    "read": [[k, v] for k, v, _ in t.sends if v in final_read[k]],
                },
            )

    # ---- monotonic polls and sends, per process and key
    last_poll: dict[tuple[Any, str], int] = {}
    for p in polls:
        if p.invoke.index in final_ids:
            continue
        assert p.complete is not None
        for k, recs in _reads_of(p.complete.value).items():
            prev = last_poll.get((p.process, k))
            for o, _ in recs:
                if prev is not None and o <= prev:
                    add(
                        "nonmonotonic-poll",
                        {
                            "process": p.process,
                            "key": k,
                            "offset": o,
                            "after": prev,
                            "op": p.invoke.index,
                        },
                    )
                prev = o
            if prev is not None:
                last_poll[(p.process, k)] = prev
    last_send: dict[tuple[Any, str], int] = {}
    for t in sorted(
        (t for t in txns if t.type == "ok"),
        key=lambda t: t.pair.complete.time_ns if t.pair.complete else 0,
    ):
        for k, _, acked in t.sends:
            if acked is None:
                continue
            prev = last_send.get((t.pair.process, k))
            if prev is not None and acked <= prev:
                add(
                    "nonmonotonic-send",
                    {
                        "process": t.pair.process,
                        "key": k,
                        "offset": acked,
                        "after": prev,
                        "txn": t.id,
                    },
                )
            last_send[(t.pair.process, k)] = acked

    # ---- dependency graph: G0 / G1c
    for kind, cycle in _cycles(txns, writer, observations):
        add(kind, {"cycle": cycle})

    # ---- consume-transform-produce: offsets and outputs commit together
    _check_ctp(pairs, final_read, final_complete, observations, add)

    found = sorted(k for k in counts if k not in ALLOWED)
    return {
        "valid": not found,
        "anomaly_types": found,
        "counts": dict(sorted(counts.items())),
        "anomalies": dict(sorted(anomalies.items())),
        "stats": {
            "txns": dict(Counter(t.type for t in txns if t.pair.f == TXN)),
            "ctp": dict(Counter(t.type for t in txns if t.pair.f == CTP)),
            # Drawn to abort and with something to abort (a ctp step that consumed nothing
            # had nothing).
            "aborted_on_purpose": sum(
                1
                for t in txns
                if isinstance(t.pair.invoke.value, dict)
                and t.pair.invoke.value.get("abort")
                and t.sends
            ),
            "committed": sum(1 for t in txns if t.committed),
            "polls": len(polls),
            "records_read": len(read),
            "final_complete_keys": sorted(final_complete),
        },
    }


def _final_complete(polls: list[Pair], final_ids: set[int]) -> set[str]:
    """Keys whose final reads reached the end: a final poll says ``complete``."""
    out: set[str] = set()
    for p in polls:
        if p.invoke.index in final_ids and p.complete is not None:
            v = p.complete.value
            if isinstance(v, dict) and v.get("complete"):
                out.update(_reads_of(v))
    return out


Obs = tuple[str, int, Any, int, int, Any, bool]


class _Writers:
    """Which transaction wrote a record: see the module docstring."""

    _RANK = {"ok": 0, "info": 1, "fail": 2}

    def __init__(self, txns: list[_Txn]) -> None:
        self._by_rec: dict[Rec, list[_Txn]] = defaultdict(list)
        for t in txns:
            for k, v, _ in t.sends:
                if not self._by_rec[(k, v)] or self._by_rec[(k, v)][-1] is not t:
                    self._by_rec[(k, v)].append(t)

    def of(self, k: str, o: int, v: Any) -> _Txn | None:
        """The writer of ``v`` read at offset ``o`` of ``k``, or None (a phantom)."""
        cands = self._by_rec.get((k, v))
        if not cands:
            return None
        if len(cands) == 1:
            return cands[0]
        best: _Txn | None = None
        best_rank = 99
        for t in cands:
            acked = {a for kk, vv, a in t.sends if kk == k and vv == v}
            if o in acked:
                return t  # acked at this very offset
            if acked - {None}:
                continue  # acked elsewhere: not this record
            rank = self._RANK.get(t.type, 3)
            if rank < best_rank:
                best, best_rank = t, rank
        # All acked elsewhere: a value at two offsets (the duplicate check reports it).
        return best if best is not None else cands[-1]


def _cycles(
    txns: list[_Txn], writer: _Writers, observations: list[Obs]
) -> list[tuple[str, list[int]]]:
    """Strongly connected components of more than one committed transaction, as G0 (ww
    edges only) or G1c (a wr edge inside)."""
    committed = {t.id: t for t in txns if t.committed}
    edges: dict[int, set[int]] = defaultdict(set)
    wr: set[tuple[int, int]] = set()
    logs: dict[str, dict[int, Any]] = defaultdict(dict)
    for k, o, v, *_ in observations:
        logs[k].setdefault(o, v)
    for t in txns:
        for k, v, acked in t.sends:
            if acked is not None:
                logs[k].setdefault(acked, v)
    for k, log in logs.items():
        prev: int | None = None
        for o in sorted(log):
            w = writer.of(k, o, log[o])
            if w is None or w.id not in committed:
                continue
            if prev is not None and prev != w.id:
                edges[prev].add(w.id)
            prev = w.id
    for t in committed.values():
        for k, recs in t.reads.items():
            for o, v in recs:
                w = writer.of(k, o, v)
                if w is not None and w.id in committed and w.id != t.id:
                    edges[w.id].add(t.id)
                    wr.add((w.id, t.id))
    out: list[tuple[str, list[int]]] = []
    for scc in _sccs(sorted(committed), edges):
        if len(scc) < 2:
            continue
        members = set(scc)
        kind = "G1c" if any(a in members and b in members for a, b in wr) else "G0"
        out.append((kind, sorted(scc)[:10]))
    return out


def _sccs(nodes: list[int], edges: dict[int, set[int]]) -> list[list[int]]:
    """Tarjan's algorithm, iterative (histories have thousands of transactions)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[int, list[int]]] = [(root, sorted(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, succ = work[-1]
            if succ:
                w = succ.pop()
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, sorted(edges.get(w, ()))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp: list[int] = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def _check_ctp(
    pairs: list[Pair],
    final_read: dict[str, set[Any]],
    final_complete: set[str],
    observations: list[Obs],
    add: Any,
) -> None:
    committed: dict[str, int] = {}
    for p in pairs:
        if p.f == COMMITTED and p.type == "ok" and p.complete is not None:
            for k, o in ((p.complete.value or {}).get("offsets") or {}).items():
                committed[str(k)] = int(o)
    if not any(p.f == COMMITTED and p.type == "ok" for p in pairs):
        return
    input_log: dict[str, dict[int, Any]] = defaultdict(dict)
    for k, o, v, _t, _op, _proc, final in observations:
        if final and not k.startswith(OUT_PREFIX):
            input_log[k][o] = v
    for k, log in sorted(input_log.items()):
        out = output_key(k)
        if out not in final_complete:
            continue
        c = committed.get(k, 0)
        for o, v in sorted(log.items()):
            if o < c and v not in final_read[out]:
                add(
                    "offsets-without-outputs",
                    {"key": k, "offset": o, "value": v, "committed_offset": c},
                )
        where = {v: o for o, v in log.items()}
        for v in sorted(final_read[out], key=str):
            o = where.get(v)
            if o is not None and o >= c:
                add(
                    "outputs-without-offsets",
                    {"key": k, "offset": o, "value": v, "committed_offset": c},
                )
