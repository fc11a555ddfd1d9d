"""metalog.wire refuses a controller command whose fields have the wrong types (issue 17).

Before, ``from_wire`` built any registered dataclass from whatever the body held: a
``RegisterBroker`` with an int ``incarnation_id`` became a record that every voter then failed
to replay. Now a field that does not fit its annotation is a ``WireError`` (the controller
route's 400), anything else that is not a command too, and every well-typed command
round-trips.
"""

from __future__ import annotations

import dataclasses

import msgpack
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from metalog import commands, wire
from metalog.records import Endpoint, TopicRecord

COMMANDS = [
    c
    for c in vars(commands).values()
    if isinstance(c, type) and issubclass(c, commands.Command) and c is not commands.Command
]


def _body(cls_name: str, **fields: object) -> bytes:
    return msgpack.packb({"@": cls_name, **fields}, use_bin_type=True)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            _body("RegisterBroker", broker_id=1, incarnation_id=12345),
            "RegisterBroker.incarnation_id",
        ),
        (_body("RegisterBroker", broker_id="1", incarnation_id="x"), "RegisterBroker.broker_id"),
        (_body("CreateTopic", name="t", num_partitions="3"), "CreateTopic.num_partitions"),
        (_body("CreateTopic", name="t", num_partitions=True), "CreateTopic.num_partitions"),
        (
            _body("CreateTopic", name="t", assignments={"@m": [[0, ["a"]]]}),
            "CreateTopic.assignments",
        ),
        (
            _body("BrokerHeartbeat", broker_id=1, broker_epoch=2, current_metadata_offset=[1]),
            "BrokerHeartbeat.current_metadata_offset",
        ),
        (
            _body(
                "RegisterBroker",
                broker_id=1,
                incarnation_id="x",
                endpoints=[{"@": "Endpoint", "name": "http", "host": "h", "port": "80"}],
            ),
            "Endpoint.port",
        ),
        (_body("ElectLeaders", partitions=[["t", "0"]]), "ElectLeaders.partitions"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_with_its_name(body: bytes, field: str) -> None:
    with pytest.raises(wire.WireError, match=field.replace(".", r"\.")):
        wire.loads_command(body)


@pytest.mark.parametrize(
    "body",
    [
        msgpack.packb([1, 2, 3]),
        msgpack.packb({"@": "Nope"}),
        msgpack.packb({"@m": "not pairs"}),
        msgpack.packb({"@e": "ElectionType", "v": 99}),
        msgpack.packb({"@e": "ElectionType"}),
        msgpack.packb({"@m": [[[1], 2]]}),
        b"\xc1",
        wire.dumps(TopicRecord(name="t", topic_id="x")),
    ],
)
def test_bodies_that_are_not_commands_are_wire_errors(body: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.loads_command(body)


@given(st.sampled_from(COMMANDS).flatmap(st.from_type))
def test_every_well_typed_command_round_trips(command: commands.Command) -> None:
    try:
        body = wire.dumps(command)
    except OverflowError:  # an int beyond msgpack's 64 bits: no sender can encode it
        assume(False)
    assert wire.loads_command(body) == command


_junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["@", "@m", "@e", "v", "name", "broker_id"]), inner, max_size=3
        )
    ),
    max_leaves=12,
)


@given(st.sampled_from(COMMANDS), st.dictionaries(st.text(max_size=20), _junk, max_size=4))
def test_junk_fields_give_a_command_or_a_wire_error_and_nothing_else(
    cls: type, fields: dict[str, object]
) -> None:
    names = {f.name for f in dataclasses.fields(cls)}
    body = msgpack.packb(
        {"@": cls.__name__, **{k: v for k, v in fields.items() if k != "@"}}, use_bin_type=True
    )
    try:
        got = wire.loads_command(body)
    except wire.WireError:
        return
    assert isinstance(got, cls)
    assert set(fields) - {"@"} <= names


def test_a_valid_register_broker_still_decodes() -> None:
    c = commands.RegisterBroker(
        broker_id=commands.BrokerId(3),
        incarnation_id="inc",
        endpoints=(Endpoint("http", "127.0.0.1", 8082),),
        rack=None,
    )
    assert wire.loads_command(wire.dumps(c)) == c
