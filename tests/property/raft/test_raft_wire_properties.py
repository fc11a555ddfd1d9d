"""Properties of the Raft message boundary (``raft.messages.message_from_wire``) and of the
core behind it (``RaftCore.check_message`` / ``step``):

* every well-formed message round-trips through msgpack;
* whatever the decoder accepts round-trips through the encoder (it accepts nothing the
  encoder could not have written), and it refuses everything else with
  ``MalformedMessageError``, never another exception;
* a core stepped with any message the decoder accepts, from any member, in any state a small
  cluster reaches, raises nothing but ``InvalidMessageError``: no invariant breaks, which is
  what would end a node's task.

Every message the core itself emits decodes: the simulator round-trips each one through the
wire (tests/sim/raft_sim.py).
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raft_wire_strategies import messages

from raft.core import InvalidMessageError
from raft.messages import MalformedMessageError, Message, message_from_wire
from raft.types import ConfState, NodeId
from tests.unit.raft.raft_harness import Network


def _through_msgpack(w: Any) -> Any:
    return msgpack.unpackb(msgpack.packb(w, use_bin_type=True), raw=False, strict_map_key=False)


@settings(max_examples=500)
@given(messages())
def test_every_well_formed_message_round_trips_through_msgpack(m: Message) -> None:
    assert message_from_wire(_through_msgpack(m.to_wire())) == m


# Values of every msgpack type, including the ones no field takes.
junk_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.sampled_from([-1, 0, 1, 2**31 - 1, 2**31, 2**62, 2**62 + 1, 2**63 - 1, 2**64 - 1]),
)
junk = st.recursive(
    junk_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)


@st.composite
def mutated_wire(draw: st.DrawFn) -> Any:
    """A real message's wire dict with one part broken: a field replaced by junk, removed,
    or added; an entry or the snapshot reshaped; or the whole thing replaced."""
    w = draw(messages()).to_wire()
    how = draw(st.sampled_from(["replace", "remove", "add", "entry", "snapshot", "whole"]))
    keys = sorted(w)
    if how == "replace":
        w[draw(st.sampled_from(keys))] = draw(junk)
    elif how == "remove":
        del w[draw(st.sampled_from(keys))]
    elif how == "add":
        w[draw(st.text(max_size=12))] = draw(junk)
    elif how == "entry" and w.get("entries"):
        e = list(draw(st.sampled_from(w["entries"])))
        e[draw(st.integers(0, 3))] = draw(junk)
        w["entries"][draw(st.integers(0, len(w["entries"]) - 1))] = e
    elif how == "snapshot" and "snapshot" in w:
        snap = w["snapshot"]
        part = draw(st.integers(0, 5))
        if part < 4:
            snap[part] = draw(junk)
        else:
            snap[2][part - 4] = draw(st.lists(junk, max_size=3))
    elif how == "whole":
        return draw(junk)
    return w


@settings(max_examples=1500)
@given(mutated_wire())
def test_the_decoder_accepts_only_what_the_encoder_writes(w: Any) -> None:
    try:
        m = message_from_wire(w)
    except MalformedMessageError as e:
        assert str(e)  # says what is wrong
        return
    written = _through_msgpack(m.to_wire())
    assert message_from_wire(written) == m
    sent = _through_msgpack(w)  # as it arrived; a missing field took its default
    assert {k: written[k] for k in sent} == sent


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_a_configuration_decodes_only_from_its_own_encoding(b: bytes) -> None:
    try:
        cs = ConfState.from_bytes(b)
    except ValueError:
        return
    assert cs.to_bytes() == b


# ------------------------------------------------------------------ the core behind it


def _cluster(shape: int) -> Network:
    """Three voters and an observer in one of a few states a real cluster passes through."""
    net = Network([1, 2, 3], [4], seed=shape)
    if shape >= 1:
        net.elect(1)
        for i in range(shape * 3):
            net.propose(1, b"p%d" % i)
    if shape >= 3:
        net.isolate(3)
        for i in range(4):
            net.propose(1, b"q%d" % i)
        net.recover()
    return net


DELIVERIES_MAX = 2_000


def _run(net: Network, msgs: list[Message]) -> None:
    """``Network.send`` as a node does it: a message the core refuses is dropped. (Forged
    messages can leave nodes whose logs contradict each other, and then even their honest
    replies are refused: a follower's commit beyond a new leader's log, say.)"""
    queue = list(msgs)
    # Bounded: forged messages can leave two nodes answering each other for ever (a
    # liveness question, not this test's: it asks that no accepted message crash a core).
    # Unbounded, one drawn example grew the queue to gigabytes and never ended.
    for _ in range(DELIVERIES_MAX):
        if not queue:
            return
        m = queue.pop(0)
        if m.dst not in net.nodes:
            continue
        node = net[m.dst]
        with contextlib.suppress(InvalidMessageError):
            node.core.step(m)
        queue.extend(node.process_ready())


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.integers(0, 3),
    steps=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 4), st.data(), st.integers(0, 3)),
        min_size=1,
        max_size=12,
    ),
)
def test_no_accepted_message_breaks_a_core(shape: int, steps: list[Any]) -> None:
    net = _cluster(shape)
    for to, frm, data, ticks in steps:
        if to == frm:
            continue
        m = data.draw(messages(src=st.just(NodeId(frm)), dst=st.just(NodeId(to))))
        m = message_from_wire(_through_msgpack(m.to_wire()))
        node = net[to]
        c = node.core
        before = (c.term, c.vote, c.role, c.log.committed, c.log.last_index(), c.conf)
        try:
            c.step(m)
        except InvalidMessageError:
            assert (
                c.term,
                c.vote,
                c.role,
                c.log.committed,
                c.log.last_index(),
                c.conf,
            ) == before, "a refused message changed the core"
            assert not c.has_ready() or node.process_ready() == []
        # Whatever it caused runs on: replies delivered, ticks (elections, heartbeats).
        _run(net, node.process_ready())
        for _ in range(ticks):
            for n in net.nodes.values():
                n.core.tick()
            _run(net, [m for n in net.nodes.values() for m in n.process_ready()])
