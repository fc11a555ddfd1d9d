"""Fuzz of every internal route of a real cluster (issue 17): three controller and three
broker processes are handed Hypothesis-generated bodies on the Raft message route and on
every internal msgpack route of the brokers, and must

* never answer 500 (nor a group op's UNKNOWN_SERVER_ERROR, which is a 500 in a 200);
* answer 400 to every body that breaks the route's rules (docs/operations.md, "Validation"),
  and change nothing: the metadata image, every replica's offsets on every broker, and every
  controller's term and leader are what they were before;
* stay healthy: ``/v3/health`` and ``/v3/health/ready`` answer 200 on every node, so no
  essential task died (it would turn them 503).

Two kinds of bodies: *broken* ones, a real message or request with one part made wrong (a
field of the wrong type or out of range, a required field missing, an impossible entry
list, a sender the node does not know, a commit beyond the log, a body that is not msgpack or
not a map), which must get 400; and *junk*, random maps on the routes' own field names and
stale Raft messages, which may be valid and must only not hurt. The broken ones run first
and the state is compared after them.

``LONGBOAT_FUZZ_SCALE`` multiplies every test's examples (default 1: about 30 s on 2 cores
with the cluster's start; docs/fault-injection.md, "The fuzz suite").
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from http_cluster_support import HttpCluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raft_wire_strategies import messages

from api.node.localcluster import running_cluster
from raft import messages as rm
from raft.types import NodeId, Term
from storage.batch import encode_batch

pytestmark = pytest.mark.slow

SCALE = max(1, int(os.environ.get("LONGBOAT_FUZZ_SCALE", "1")))
TOPIC, PARTITIONS = "fuzz", 3
GROUP = "fuzz-group"
RAFT_ROUTE = "/internal/raft/v1/messages"
BROKER_PREFIX = "/internal/broker/v1"
MSGPACK = "application/msgpack"
I32, I64 = 2**31 - 1, 2**63 - 1


def examples(n: int) -> Any:
    return settings(max_examples=n * SCALE, deadline=None, suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------------ the cluster


class Fuzzed:
    def __init__(self, c: HttpCluster) -> None:
        self.c = c
        self.q = c.quorum
        self.brokers = c.brokers
        self.controller_ids = list(range(1, self.q.n + 1))
        self.before: dict[str, Any] = {}

    def post(self, url: str, path: str, body: bytes, ctype: str = MSGPACK) -> tuple[int, Any]:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=20)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": ctype})
            r = conn.getresponse()
            payload = r.read()
        finally:
            conn.close()
        parsed: Any = payload
        if "msgpack" in (r.getheader("Content-Type") or ""):
            parsed = msgpack.unpackb(payload, raw=False)
        elif payload:
            parsed = payload.decode(errors="replace")
        return r.status, parsed

    def raft_status(self, i: int) -> dict[str, Any]:
        st: dict[str, Any] = self.q.status(i)
        return st

    def state(self) -> dict[str, Any]:
        """What no refused body may change. The metadata offset moves on its own (a
        NoOpRecord every half second, KAFKA-13955): the image's contents may not."""
        active = self.q.wait_active_leader()
        metadata = self.q.metadata(active)
        del metadata["offset"]
        return {
            "metadata": metadata,
            "replicas": {
                b: self.brokers.get(b, f"{BROKER_PREFIX}/replicas") for b in self.brokers.ids
            },
            "raft": {
                i: (s["term"], s["leader_id"])
                for i in self.controller_ids
                for s in [self.raft_status(i)]
            },
        }

    def assert_healthy(self) -> None:
        for url in [*self.q.urls, *(self.brokers.url(b) for b in self.brokers.ids)]:
            for path in ("/v3/health", "/v3/health/ready"):
                conn = http.client.HTTPConnection(
                    url.removeprefix("http://").split(":")[0], int(url.rsplit(":", 1)[1]), timeout=5
                )
                try:
                    conn.request("GET", path)
                    r = conn.getresponse()
                    assert r.status == 200, (url, path, r.status, r.read())
                finally:
                    conn.close()


@pytest.fixture(scope="module")
def f(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    root: Path = tmp_path_factory.mktemp("fuzz")
    # No initial rebalance delay: a junk join that happens to be valid answers at once.
    with running_cluster(
        root, broker_args=["--override", "group_initial_rebalance_delay_ms=0"]
    ) as (q, brokers):
        c = HttpCluster(q, brokers)
        c.create_topic(TOPIC, partitions=PARTITIONS, rf=3)
        for p in range(PARTITIONS):
            st_, _, body = c.call(
                "POST",
                f"{c.v3()}/topics/{TOPIC}/records",
                {"partition_id": p, "value": {"type": "JSON", "data": p}},
            )
            assert st_ == 200 and body["error_code"] == 200, body
        fz = Fuzzed(c)
        # Let the high watermarks settle (followers fetch the records) before the baseline.
        deadline = time.monotonic() + 20
        while True:
            first = fz.state()
            time.sleep(0.5)
            if fz.state() == first:
                break
            assert time.monotonic() < deadline, "the cluster did not settle"
        fz.before = first
        yield fz


# ------------------------------------------------------------------------ values

junk_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.sampled_from([-2, -1, 0, 1, 2, I32, I32 + 1, 2**62, 2**62 + 1, I64, "fuzz", GROUP]),
)
junk = st.recursive(
    junk_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)

NOT_MSGPACK = st.sampled_from(
    [b"", b"\xc1", b"\x81", b"\x92\x01", msgpack.packb({"a": 1}) + b"x", b"\xdf\xff\xff\xff\xff"]
)
NOT_A_MAP = st.one_of(junk_scalars, st.lists(junk_scalars, max_size=3)).map(
    lambda v: msgpack.packb(v, use_bin_type=True)
)


def bad_ints(lo: int, hi: int) -> st.SearchStrategy[Any]:
    """Values an integer field in [lo, hi] must refuse."""
    out: list[Any] = [str(lo), float(lo), True, False, [lo], {"v": lo}, b"\x00"]
    if lo > -(2**63):
        out.append(lo - 1)
    if hi < 2**64 - 1:
        out.append(hi + 1)
    return st.one_of(
        st.sampled_from(out),
        st.integers(hi + 1, 2**64 - 1) if hi < 2**64 - 1 else st.nothing(),
        st.integers(-(2**63), lo - 1) if lo > -(2**63) else st.nothing(),
    )


# ------------------------------------------------------------------------ the Raft route

RAFT_BAD: dict[str, st.SearchStrategy[Any]] = {
    "NodeId": bad_ints(1, I32),
    "Term": bad_ints(0, I32),
    "LogIndex": bad_ints(0, 2**62),
    "bool": st.sampled_from([0, 1, "true", None, b"", [True], 1.0]),
    "bytes": st.sampled_from(["ctx", 1, None, [b"x"], b"x" * 1025]),
}


@st.composite
def broken_raft_bodies(draw: st.DrawFn, f: Fuzzed) -> tuple[int, bytes, str]:
    """(controller, body, what is wrong) for a body the controller must refuse."""
    to = draw(st.sampled_from(f.controller_ids))
    frm = draw(st.sampled_from([i for i in f.controller_ids if i != to]))
    st_ = f.raft_status(to)
    term, last = Term(st_["term"]), st_["last_index"]
    m = draw(messages(src=st.just(NodeId(frm)), dst=st.just(NodeId(to)), term=st.just(term)))
    w = m.to_wire()
    how = draw(
        st.sampled_from(
            [
                "field",
                "remove",
                "add",
                "type",
                "entries",
                "snapshot",
                "src",
                "dst",
                "sender",
                "envelope",
                "commit",
                "body",
            ]
        )
    )
    envelope: Any = {"from": frm, "msgs": [w]}
    fields = {fl.name: str(fl.type) for fl in dataclasses.fields(type(m))}
    if how == "field":
        name = draw(st.sampled_from(sorted(n for n, t in fields.items() if t in RAFT_BAD)))
        w[name] = draw(RAFT_BAD[fields[name]])
    elif how == "remove":
        required = [
            fl.name for fl in dataclasses.fields(type(m)) if fl.default is dataclasses.MISSING
        ]
        del w[draw(st.sampled_from(required))]
    elif how == "add":
        w[draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in w))] = draw(junk)
    elif how == "type":
        w["type"] = draw(
            st.one_of(
                st.text(max_size=20).filter(lambda t: t not in rm._TYPES),
                junk_scalars.filter(lambda t: not isinstance(t, str)),
            )
        )
    elif how == "entries" and isinstance(m, rm.AppendEntries):
        pi, n = m.prev_log_index, len(m.entries)
        w["entries"] = draw(
            st.sampled_from(
                [
                    "x",
                    {},
                    [[pi + 1]],
                    [{"index": pi + 1}],
                    [[pi + 2, term, 0, b""]],
                    [[pi + 1, term + 1, 0, b""]],
                    [[pi + 1, term, 2, b""]],
                    [[pi + 1, term, 0, "s"]],
                    [[pi + 1, term, 1, b"\x00\x01"]],
                    [[pi + 1, 0, 0, b""]],
                    [*w["entries"], [pi + n + 2, term, 0, b""]],
                ]
            )
        )
    elif how == "snapshot" and isinstance(m, rm.InstallSnapshot):
        w["snapshot"] = draw(
            st.sampled_from(
                [
                    None,
                    [],
                    {"index": 1},
                    [0, 1, [[1], []], b""],
                    [1, 1, [[], [1]], b""],
                    [1, 1, [[1], [1]], b""],
                    [1, term + 1, [[1], []], b""],
                    [1, 1, [[1], []], "x"],
                ]
            )
        )
    elif how == "src":
        w["src"] = draw(st.sampled_from([i for i in (*f.controller_ids, 99) if i != frm]))
    elif how == "dst":
        w["dst"] = draw(st.sampled_from([i for i in (*f.controller_ids, 99) if i != to]))
    elif how == "sender":
        envelope["from"] = draw(st.one_of(st.just(99), RAFT_BAD["NodeId"]))
        w["src"] = envelope["from"] if type(envelope["from"]) is int else w["src"]
    elif how == "envelope":
        envelope = draw(
            st.sampled_from(
                [
                    {"msgs": [w]},
                    {"from": frm},
                    {"from": frm, "msgs": w},
                    {"from": frm, "msgs": "x"},
                    {"from": frm, "msgs": [w, 5]},
                    [frm, [w]],
                ]
            )
        )
    elif how == "commit":
        # Well formed, from a voter, in the current term: a commit no log here holds.
        w = rm.Heartbeat(NodeId(frm), NodeId(to), term, rm.LogIndex(last + 10**6)).to_wire()
        envelope["msgs"] = [w]
    elif how == "body":
        return to, draw(st.one_of(NOT_MSGPACK, NOT_A_MAP)), how
    else:  # "entries"/"snapshot" drawn for another message type: break its term instead
        w["term"] = draw(RAFT_BAD["Term"])
        how = "term"
    return to, msgpack.packb(envelope, use_bin_type=True), how


@examples(150)
@given(data=st.data())
def test_the_raft_route_refuses_every_broken_body_with_400(f: Fuzzed, data: st.DataObject) -> None:
    to, body, how = data.draw(broken_raft_bodies(f))
    status, text = f.post(f.q.url(to), RAFT_ROUTE, body, "application/x-msgpack")
    assert status == 400, (how, body[:200], status, text)
    assert isinstance(text, str) and text.startswith("bad raft message body: "), text


# ------------------------------------------------------------------------ broker routes

# (kind, required) of every field a route reads, and a real body to break one field of.
Spec = dict[str, tuple[Any, bool]]
TPS = ("tps", False)


def _routes() -> dict[str, tuple[dict[str, Any], Spec]]:
    batch = encode_batch([(b"k", b"v", 1_700_000_000_000, ())])
    group_member: Spec = {
        "group": ("str", True),
        "member_id": ("str", True),
        "generation": (("int", -1, I32), True),
    }
    return {
        "produce": (
            {"topic": TOPIC, "partition": 0, "acks": -1, "timeout_ms": 2000, "batch": batch},
            {
                "topic": ("topic", True),
                "partition": ("partition", True),
                "acks": (("choice", (-1, 0, 1)), False),
                "timeout_ms": (("int", 0, I32), False),
                "batch": ("bytes", True),
                "forwarded": ("bool", False),
            },
        ),
        "fetch": (
            {
                "topic": TOPIC,
                "partition": 0,
                "fetch_offset": 0,
                "max_bytes": 1000,
                "max_wait_ms": 0,
                "replica_id": -1,
            },
            {
                "topic": ("topic", True),
                "partition": ("partition", True),
                "replica_id": (("int", -2, I32), False),
                "fetch_offset": (("int", 0, I64), True),
                "leader_epoch": (("int", -1, I32), False),
                "last_fetched_epoch": (("int", -1, I32), False),
                "max_bytes": (("int", 0, I32), False),
                "max_wait_ms": (("int", 0, I32), False),
                "min_bytes": (("int", 0, I32), False),
                "high_watermark": (("int", -1, I64), False),
                "broker_epoch": (("int", -1, I64), False),
                "timeout_ms": (("int", 0, I32), False),
                "forwarded": ("bool", False),
            },
        ),
        "offsets_for_leader_epoch": (
            {"topic": TOPIC, "partition": 0, "current_leader_epoch": -1, "epoch": 0},
            {
                "topic": ("topic", True),
                "partition": ("partition", True),
                "current_leader_epoch": (("int", -1, I32), False),
                "epoch": (("int", 0, I32), True),
            },
        ),
        "list_offsets": (
            {"topic": TOPIC, "partition": 0, "timestamp": -1},
            {
                "topic": ("topic", True),
                "partition": ("partition", True),
                "timestamp": (("int", -2, I64), True),
                "timeout_ms": (("int", 0, I32), False),
                "forwarded": ("bool", False),
            },
        ),
        "group/find_coordinator": ({"group": GROUP}, {"group": ("str", True)}),
        "group/join": (
            {
                "group": GROUP,
                "topics": [TOPIC],
                "session_timeout_ms": 10_000,
                "rebalance_timeout_ms": 10_000,
                "owned": [[TOPIC, 0]],
            },
            {
                "group": ("str", True),
                "member_id": ("str", False),
                "topics": ("topics", False),
                "protocol": ("protocol", False),
                "assignor": ("str", False),
                "client_id": ("str", False),
                "session_timeout_ms": (("int", 0, I32), False),
                "rebalance_timeout_ms": (("int", 0, I32), False),
                "owned": TPS,
            },
        ),
        "group/sync": ({"group": GROUP, "member_id": "m", "generation": 1}, group_member),
        "group/heartbeat": ({"group": GROUP, "member_id": "m", "generation": 1}, group_member),
        "group/leave": (
            {"group": GROUP, "member_id": "m"},
            {"group": ("str", True), "member_id": ("str", True)},
        ),
        "group/commit": (
            {"group": GROUP, "offsets": [[TOPIC, 0, 1, "m"]]},
            {
                "group": ("str", True),
                "offsets": ("commit_offsets", False),
                "member_id": ("str", False),
                "generation": (("int", -1, I32), False),
            },
        ),
        "group/fetch_offsets": (
            {"group": GROUP, "partitions": [[TOPIC, 0]]},
            {"group": ("str", True), "partitions": TPS},
        ),
        "group/describe": ({"group": GROUP}, {"group": ("str", True)}),
        "group/lag": ({"group": GROUP}, {"group": ("str", True)}),
        "group/reset_offsets": (
            {"group": GROUP, "offsets": [[TOPIC, 0, 1]]},
            {"group": ("str", True), "offsets": ("reset_offsets", False)},
        ),
        "group/delete": ({"group": GROUP}, {"group": ("str", True)}),
        "group/list": ({}, {}),
        "init_producer_id": ({}, {}),
    }


ROUTES = _routes()


def bad_values(kind: Any) -> st.SearchStrategy[Any]:
    """Values a field of ``kind`` must refuse (never nil: nil means "use the default")."""
    if isinstance(kind, tuple) and kind[0] == "int":
        return bad_ints(kind[1], kind[2])
    if isinstance(kind, tuple) and kind[0] == "choice":
        return st.sampled_from([2, -2, 100, "1", 1.0, True, [1]])
    tables: dict[str, list[Any]] = {
        "topic": [5, "", "a b", "a/b", "x" * 250, b"fuzz", [TOPIC], True, 1.5, {}],
        "partition": [-1, 2**31, 2**64 - 1, "0", 0.0, True, [0], b"\x00"],
        "str": [5, b"x", ["x"], "x" * 32_768, True, 1.5, {}],
        "bool": [0, 1, "true", "false", b"", [True], 1.0],
        "bytes": ["x", 10**9, 2**63, [1, 2], True, {}],
        "topics": ["t", 5, {"a": 1}, [5], ["a b"], [TOPIC, None]],
        "protocol": ["lazy", "EAGER", 5, b"eager"],
        "tps": [
            "x",
            5,
            [[TOPIC]],
            [[TOPIC, -1]],
            [[1, 0]],
            [[TOPIC, 0, 1]],
            [{"t": 1}],
            [TOPIC, 0],
        ],
        "commit_offsets": [
            "x",
            [5],
            [[TOPIC, 0]],
            [[TOPIC, 0, -1]],
            [[TOPIC, 0, 1, 5]],
            [[TOPIC, 0, 1, "m" * 4097]],
            [["a b", 0, 1]],
            [[TOPIC, 0, 1.5]],
            [[TOPIC, 0, 1, "m", 5]],
        ],
        "reset_offsets": [
            "x",
            [[TOPIC, 0, 1, "m"]],
            [[TOPIC, 0]],
            [[TOPIC, 0, -1]],
            [[TOPIC, "0", 1]],
        ],
    }
    return st.sampled_from(tables[kind])


@st.composite
def broken_broker_bodies(draw: st.DrawFn) -> tuple[str, bytes, str]:
    route = draw(st.sampled_from(sorted(ROUTES)))
    body, spec = ROUTES[route]
    body = dict(body)
    how = draw(st.sampled_from(["field", "field", "field", "remove", "body"])) if spec else "body"
    if how == "remove" and not any(req for _, req in spec.values()):
        how = "field"
    if how == "body":
        return route, draw(st.one_of(NOT_MSGPACK, NOT_A_MAP)), how
    if how == "remove":
        name = draw(st.sampled_from(sorted(k for k, (_, req) in spec.items() if req)))
        body.pop(name, None)
        if draw(st.booleans()):
            body[name] = None  # nil is missing too
        return route, msgpack.packb(body, use_bin_type=True), f"remove {name}"
    name = draw(st.sampled_from(sorted(spec)))
    body[name] = draw(bad_values(spec[name][0]))
    return route, msgpack.packb(body, use_bin_type=True), f"{name}={body[name]!r:.40}"


@examples(300)
@given(broken=broken_broker_bodies(), broker=st.integers(0, 2))
def test_the_broker_routes_refuse_every_broken_body_with_400(
    f: Fuzzed, broken: tuple[str, bytes, str], broker: int
) -> None:
    route, body, how = broken
    status, answer = f.post(f.brokers.url(f.brokers.ids[broker]), f"{BROKER_PREFIX}/{route}", body)
    assert status == 400, (route, how, status, answer)
    assert answer["error"] == "INVALID_REQUEST" and answer["message"], answer


def test_no_broken_body_changed_anything_and_every_node_is_healthy(f: Fuzzed) -> None:
    after = f.state()
    assert after["raft"] == f.before["raft"], "a refused body moved a term or a leader"
    assert after["metadata"] == f.before["metadata"], "a refused body changed the metadata"
    for b, replicas in after["replicas"].items():
        assert replicas == f.before["replicas"][b], f"a refused body changed broker {b}'s logs"
    f.assert_healthy()


# ------------------------------------------------------------------------ junk


@examples(100)
@given(data=st.data())
def test_stale_raft_messages_and_junk_are_answered_and_harmless(
    f: Fuzzed, data: st.DataObject
) -> None:
    to = data.draw(st.sampled_from(f.controller_ids))
    frm = data.draw(st.sampled_from([i for i in f.controller_ids if i != to]))
    kind = data.draw(st.sampled_from(["stale", "junk", "junk map"]))
    if kind == "stale":
        # Well formed, from a voter, of term 0: Raft answers or ignores them, nothing moves.
        ms = data.draw(
            st.lists(
                messages(
                    src=st.just(NodeId(frm)), dst=st.just(NodeId(to)), term=st.just(Term(0))
                ).filter(lambda m: m.term == 0),
                min_size=1,
                max_size=4,
            )
        )
        body = msgpack.packb({"from": frm, "msgs": [m.to_wire() for m in ms]}, use_bin_type=True)
    elif kind == "junk":
        body = msgpack.packb(data.draw(junk), use_bin_type=True)
    else:
        body = msgpack.packb(
            {
                "from": data.draw(st.one_of(st.just(frm), junk_scalars)),
                "msgs": data.draw(st.lists(junk, max_size=3)),
            },
            use_bin_type=True,
        )
    status, text = f.post(f.q.url(to), RAFT_ROUTE, body, "application/x-msgpack")
    if kind == "stale":
        assert status == 204, (text, body[:200])
    else:
        assert status in (204, 400), (status, text)


# Keys each route reads, so junk maps meet the readers rather than only unknown keys.
FIELD_NAMES = sorted({k for _, spec in ROUTES.values() for k in spec} | {"extra"})
FAST = {
    "max_wait_ms": 50,
    "timeout_ms": 500,
    "session_timeout_ms": 6000,
    "rebalance_timeout_ms": 500,
}


@examples(200)
@given(route=st.sampled_from(sorted(ROUTES)), broker=st.integers(0, 2), data=st.data())
def test_junk_bodies_never_get_a_server_error(
    f: Fuzzed, route: str, broker: int, data: st.DataObject
) -> None:
    # A real body with junk added or replaced (its batch is not one: produce may not append).
    real = {**ROUTES[route][0], **({"batch": b"\x00" * 61} if route == "produce" else {})}
    body: Any = data.draw(
        st.one_of(
            st.dictionaries(st.sampled_from(FIELD_NAMES), junk, max_size=6),
            st.builds(
                lambda extra: {**real, **extra},
                st.dictionaries(st.sampled_from(FIELD_NAMES), junk, max_size=2),
            ),
            junk,
        )
    )
    if isinstance(body, dict):
        # Long polls and waits that happen to be valid end quickly; a valid join is the
        # first member of its own group (a rebalance of a crowded one waits for everyone).
        for k, v in FAST.items():
            if type(body.get(k)) is int and body[k] > v:
                body[k] = v
        if route == "group/join" and isinstance(body.get("group"), str):
            body["group"] = f"junk-{data.draw(st.uuids())}"
    status, answer = f.post(
        f.brokers.url(f.brokers.ids[broker]),
        f"{BROKER_PREFIX}/{route}",
        msgpack.packb(body, use_bin_type=True),
    )
    assert status in (200, 400), (route, body, status, answer)
    assert answer.get("error") != "UNKNOWN_SERVER_ERROR", (route, body, answer)


def test_after_the_junk_every_node_is_healthy_and_the_data_is_untouched(f: Fuzzed) -> None:
    f.assert_healthy()
    after = f.state()
    assert after["raft"] == f.before["raft"], "stale messages moved a term or a leader"
    data_topic = [t for t in after["metadata"]["topics"] if t["name"] == TOPIC]
    assert data_topic == [t for t in f.before["metadata"]["topics"] if t["name"] == TOPIC]
    for b, replicas in after["replicas"].items():
        mine = [r for r in replicas if r["topic"] == TOPIC]
        assert mine == [r for r in f.before["replicas"][b] if r["topic"] == TOPIC], json.dumps(mine)
