"""Each record field is declared once: the codec is derived from the dataclass (its fields'
order, annotations and ``since``), and a declaration the wire cannot carry is refused when
the module loads, not when a record is first written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from metalog import records
from metalog.records import (
    PartitionChangeRecord,
    PartitionRecord,
    TopicId,
    since,
    wire_fields,
)


def test_the_wire_order_is_the_declaration_order_and_since_drops_newer_fields() -> None:
    v0 = (
        "topic_id",
        "partition",
        "replicas",
        "isr",
        "leader",
        "leader_epoch",
        "partition_epoch",
        "leader_recovery_state",
    )
    assert wire_fields(PartitionRecord, 0) == v0
    assert wire_fields(PartitionRecord, 1) == (*v0, "eligible_leader_replicas")
    assert wire_fields(PartitionChangeRecord, 0)[-1] == "leader_recovery_state"
    assert wire_fields(PartitionChangeRecord, 1)[-1] == "eligible_leader_replicas"
    assert wire_fields(PartitionRecord, 2) == (*v0, "eligible_leader_replicas", "last_known_elr")
    assert wire_fields(PartitionChangeRecord, 2)[-2:] == (
        "eligible_leader_replicas",
        "last_known_elr",
    )


def test_a_field_the_wire_cannot_carry_is_refused() -> None:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class RatioRecord:
        TYPE_ID: ClassVar[int] = 99
        ratio: float
        version: int = 0

    with pytest.raises(TypeError, match="no wire kind"):
        records._build_codec(RatioRecord)  # type: ignore[arg-type]


def test_a_field_added_in_a_later_version_needs_a_default() -> None:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class GrownRecord:
        TYPE_ID: ClassVar[int] = 99
        topic_id: TopicId
        leader: int = since(1, default=-1)
        version: int = 1

    codec = records._build_codec(GrownRecord)  # type: ignore[arg-type]
    assert codec.names == (("topic_id",), ("topic_id", "leader"))

    @dataclass(frozen=True, slots=True, kw_only=True)
    class BadRecord:
        TYPE_ID: ClassVar[int] = 99
        leader: int = since(1, default=-1)
        topic_id: str = since(2, default="")
        version: int = 1

    with pytest.raises(TypeError, match=r"since\(2\) is not a version 0..1"):
        records._build_codec(BadRecord)  # type: ignore[arg-type]
