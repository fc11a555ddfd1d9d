"""``api.client.offset_reset``'s parsing and pure plan: kafka-consumer-groups' rules."""

from __future__ import annotations

import pytest

from api.client.offset_reset import (
    ResetError,
    ResetSpec,
    new_offsets,
    parse_duration_ms,
    parse_offsets_csv,
    parse_scope,
    parse_time_ms,
)
from api.client.types import TopicPartition

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
FIRST = {A: 5, B: 0}
END = {A: 50, B: 20}


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT1H", 3_600_000),
        ("P1DT30M", 86_400_000 + 1_800_000),
        ("PT0.5S", 500),
        ("P0D", 0),
        ("pt2m", 120_000),
    ],
)
def test_durations_are_java_duration_parse_strings(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["1h", "P", "PT", "-PT1H", "P1H", "PT1D", ""])
def test_a_bad_duration_is_refused_with_the_expected_form(text: str) -> None:
    with pytest.raises(ResetError, match=r"PnDTnHnMnS|negative"):
        parse_duration_ms(text)


def test_scopes_are_a_topic_or_a_topic_with_partitions() -> None:
    assert parse_scope("orders") == ("orders", None)
    assert parse_scope("orders:2,0,2") == ("orders", [0, 2])
    for bad in ["orders:", "orders:a", ":1", "orders:-1"]:
        with pytest.raises(ResetError):
            parse_scope(bad)


def test_times_are_epoch_ms_or_iso_8601() -> None:
    assert parse_time_ms("1700000000000") == 1_700_000_000_000
    assert parse_time_ms("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_time_ms("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(ResetError, match="ISO-8601"):
        parse_time_ms("yesterday")


def test_the_csv_takes_three_columns_or_this_groups_four_column_lines() -> None:
    text = "t,0,7\ng,t,1,9\nother,t,1,1\n\n"
    assert parse_offsets_csv(text, "g") == {A: 7, B: 9}
    for bad in ["t,0\n", "t,x,1\n", "t,0,-1\n"]:
        with pytest.raises(ResetError, match="line 1"):
            parse_offsets_csv(bad, "g")
    with pytest.raises(ResetError, match="no offsets"):
        parse_offsets_csv("other,t,0,1\n", "g")


def plan(spec: ResetSpec, current: dict[TopicPartition, int], found: object = None) -> object:
    return new_offsets(
        spec,
        [A, B],
        first=FIRST,
        end=END,
        current=current,
        found=found,  # type: ignore[arg-type]
    )


def test_each_target_within_the_log_range() -> None:
    cur = {A: 10, B: 3}
    assert plan(ResetSpec("earliest"), cur) == {A: 5, B: 0}
    assert plan(ResetSpec("latest"), cur) == {A: 50, B: 20}
    assert plan(ResetSpec("current"), {A: 10}) == {A: 10, B: 20}  # none: the end
    assert plan(ResetSpec("offset", 30), cur) == {A: 30, B: 20}  # clamped to B's end
    assert plan(ResetSpec("shift-by", -8), cur) == {A: 5, B: 0}  # clamped to the starts
    assert plan(ResetSpec("shift-by", 4), cur) == {A: 14, B: 7}
    assert plan(ResetSpec("datetime", 0), cur, {A: 12, B: None}) == {A: 12, B: 20}
    assert plan(ResetSpec("file", {A: 1, B: 19}), cur) == {A: 5, B: 19}


def test_shift_by_without_a_committed_offset_is_refused() -> None:
    with pytest.raises(ResetError, match="cannot shift t-1"):
        plan(ResetSpec("shift-by", 1), {A: 10})
