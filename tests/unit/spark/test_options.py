"""spark.options and spark.planning: option parsing, offsets JSON, range planning, rate limits."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark.options import (
    LongboatOptionError,
    OffsetSpec,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from spark.planning import (
    DataLossError,
    OffsetRange,
    batch_ranges,
    cap,
    rate_limit,
    resolve,
    split_ranges,
    timestamps_needed,
)

B = {"bootstrap": "http://127.0.0.1:8082"}


def test_kafka_names_are_accepted_case_insensitively() -> None:
    o = parse_source_options(
        {
            "kafka.bootstrap.servers": "127.0.0.1:8082,h2:9",
            "SUBSCRIBE": "a, b",
            "startingoffsets": "earliest",
            "IncludeHeaders": "TRUE",
        },
        streaming=False,
    )
    assert o.bootstrap == ("http://127.0.0.1:8082", "http://h2:9")
    assert o.subscribe == ("a", "b") and o.include_headers


def test_defaults_follow_kafka_batch_earliest_to_latest_stream_latest() -> None:
    batch = parse_source_options({**B, "subscribe": "t"}, streaming=False)
    stream = parse_source_options({**B, "subscribe": "t"}, streaming=True)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert stream.starting.kind == "latest"
    assert batch.fail_on_data_loss and not batch.include_headers


def test_kafka_isolation_level_is_read_as_sparks_kafka_source_reads_it() -> None:
    o = parse_source_options(
        {**B, "subscribe": "t", "kafka.isolation.level": "READ_COMMITTED"}, streaming=True
    )
    assert o.isolation_level == "read_committed"
    assert parse_source_options({**B, "subscribe": "t"}, streaming=True).isolation_level == (
        "read_uncommitted"
    )
    with pytest.raises(LongboatOptionError, match=r"'kafka\.isolation\.level' must be"):
        parse_source_options({**B, "subscribe": "t", "kafka.isolation.level": "x"}, streaming=True)


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        ({"subscribe": "t"}, "'bootstrap' is required"),
        ({**B}, "exactly one of"),
        ({**B, "subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of.*got subscribe, assign"),
        (
            {**B, "subscribe": "t", "startingOffset": "earliest"},
            "unknown source option 'startingoffset'",
        ),
        ({**B, "subscribePattern": "("}, "not a valid regular expression"),
        ({**B, "assign": '{"t": 0}'}, "list of partitions"),
        ({**B, "assign": "[1]"}, "must be a JSON object"),
        ({**B, "assign": "{bad"}, "not valid JSON"),
        ({**B, "subscribe": "t", "startingOffsets": "first"}, "'earliest', 'latest' or JSON"),
        ({**B, "subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, "-2 \\(earliest\\)"),
        ({**B, "subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, "not an integer"),
        ({**B, "subscribe": "t", "startingOffsets": '{"u": {"0": 1}}'}, "topics not subscribed"),
        ({**B, "assign": '{"t": [0]}', "endingOffsets": '{"t": {"1": 5}}'}, "not in 'assign'"),
        ({**B, "subscribe": "t", "startingOffsets": "latest"}, "cannot be 'latest' for a batch"),
        ({**B, "subscribe": "t", "endingOffsets": "earliest"}, "cannot be 'earliest'"),
        ({**B, "subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'}, "-1 \\(latest\\) is not"),
        ({**B, "subscribe": "t", "minPartitions": "0"}, "at least 1"),
        ({**B, "subscribe": "t", "maxOffsetsPerTrigger": "ten"}, "must be an integer"),
        ({**B, "subscribe": "t", "failOnDataLoss": "yes"}, "true or false"),
        ({**B, "subscribe": "t", "minOffsetsPerTrigger": "5"}, "not supported"),
        ({"bootstrap": "ftp://x", "subscribe": "t"}, "not a broker URL"),
    ],
)
def test_bad_batch_options_are_clear_errors(opts: dict[str, str], match: str) -> None:
    with pytest.raises(LongboatOptionError, match=match):
        parse_source_options(opts, streaming=False)


def test_ending_options_are_refused_for_streams() -> None:
    with pytest.raises(LongboatOptionError, match="for batch reads"):
        parse_source_options({**B, "subscribe": "t", "endingOffsets": "latest"}, streaming=True)


def test_timestamps_take_precedence_over_offsets() -> None:
    o = parse_source_options(
        {
            **B,
            "subscribe": "t",
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"t": {"0": 5}}',
            "startingTimestamp": "1000",
        },
        streaming=False,
    )
    assert o.starting == OffsetSpec("timestamp", timestamp_ms=1000)
    o = parse_source_options(
        {**B, "subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": 5}}'}, streaming=False
    )
    assert o.starting == OffsetSpec("timestamps", {"t": {0: 5}})


def test_subscribe_pattern_skips_internal_topics() -> None:
    o = parse_source_options({**B, "subscribePattern": "ev.*|__c.*"}, streaming=False)
    assert o.matches("events") and not o.matches("__consumer_offsets")
    assert not o.matches("xevents")


def test_sink_options() -> None:
    s = parse_sink_options({**B, "topic": "out", "kafka.acks": "1"})
    assert (s.topic, s.acks, s.include_headers) == ("out", 1, True)
    with pytest.raises(LongboatOptionError, match="acks"):
        parse_sink_options({**B, "acks": "2"})
    with pytest.raises(LongboatOptionError, match="unknown sink option 'subscribe'"):
        parse_sink_options({**B, "subscribe": "t"})


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=5),
        st.dictionaries(st.integers(0, 100), st.integers(0, 2**62), min_size=1),
    )
)
def test_offsets_json_round_trips_through_spark_string_keys(offsets) -> None:
    as_json = json.loads(json.dumps(offsets_to_json(offsets)))
    assert all(isinstance(p, str) for ps in as_json.values() for p in ps)
    assert offsets_from_json(as_json) == offsets
    assert offsets_from_json(json.dumps(as_json)) == offsets


# ---------------------------------------------------------------- planning

TPS = {"t": [0, 1]}
EARLIEST = {"t": {0: 5, 1: 0}}
LATEST = {"t": {0: 50, 1: 20}}


def test_resolve_specific_offsets_with_minus_two_and_minus_one() -> None:
    spec = OffsetSpec("offsets", {"t": {0: -2, 1: -1}})
    assert resolve(spec, TPS, EARLIEST, LATEST, {}, which="starting", no_match_is_error=True) == {
        "t": {0: 5, 1: 20}
    }


def test_resolve_requires_every_partition_like_kafka() -> None:
    with pytest.raises(LongboatOptionError, match=r"missing \['t-1'\]"):
        resolve(
            OffsetSpec("offsets", {"t": {0: 3}}),
            TPS,
            EARLIEST,
            LATEST,
            {},
            which="starting",
            no_match_is_error=True,
        )
    with pytest.raises(LongboatOptionError, match=r"do not exist.*t-7"):
        resolve(
            OffsetSpec("offsets", {"t": {0: 3, 1: 3, 7: 1}}),
            TPS,
            EARLIEST,
            LATEST,
            {},
            which="starting",
            no_match_is_error=True,
        )


def test_resolve_timestamps_without_a_match() -> None:
    spec = OffsetSpec("timestamp", timestamp_ms=99)
    assert timestamps_needed(spec, TPS) == {("t", 0): 99, ("t", 1): 99}
    found = {("t", 0): 7, ("t", 1): None}
    assert resolve(spec, TPS, EARLIEST, LATEST, found, which="ending", no_match_is_error=False) == {
        "t": {0: 7, 1: 20}
    }
    with pytest.raises(LongboatOptionError, match="t-1"):
        resolve(spec, TPS, EARLIEST, LATEST, found, which="starting", no_match_is_error=True)


def test_batch_ranges_cap_at_the_high_watermark_and_handle_lost_starts() -> None:
    warnings: list[str] = []
    start = {"t": {0: 2, 1: 0}}
    end = {"t": {0: 60, 1: 0}}
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        batch_ranges(start, end, EARLIEST, LATEST, fail_on_data_loss=True, warn=warnings.append)
    got = batch_ranges(start, end, EARLIEST, LATEST, fail_on_data_loss=False, warn=warnings.append)
    assert got == [OffsetRange("t", 0, 5, 50)]
    assert any("high watermark" in w for w in warnings)
    assert any("2 to 4 were deleted" in w for w in warnings)
    with pytest.raises(LongboatOptionError, match="after the ending offset"):
        batch_ranges(
            {"t": {0: 40}},
            {"t": {0: 30}},
            EARLIEST,
            LATEST,
            fail_on_data_loss=True,
            warn=warnings.append,
        )


ranges = st.lists(
    st.builds(
        lambda p, s, n: OffsetRange("t", p, s, s + n),
        st.integers(0, 50),
        st.integers(0, 10**6),
        st.integers(0, 10**4),
    ),
    max_size=6,
    unique_by=lambda r: r.partition,
)


@settings(max_examples=200)
@given(ranges, st.one_of(st.none(), st.integers(1, 64)), st.one_of(st.none(), st.integers(1, 5000)))
def test_split_ranges_cover_exactly_and_respect_both_bounds(rs, min_parts, max_records) -> None:
    out = split_ranges(rs, min_partitions=min_parts, max_records_per_partition=max_records)
    for r in rs:
        pieces = sorted((o for o in out if o.partition == r.partition), key=lambda o: o.start)
        covered = [x for o in pieces for x in (o.start, o.end)]
        if r.size == 0:
            assert pieces == []
            continue
        assert covered[0] == r.start and covered[-1] == r.end
        assert all(a == b for a, b in zip(covered[1::2], covered[2::2], strict=False))
        assert all(o.size > 0 for o in pieces)
        if max_records:
            assert all(o.size <= max_records for o in pieces)
    records = sum(r.size for r in rs)
    if min_parts and records >= min_parts:
        assert len(out) >= min(min_parts, records) or len(out) >= len([r for r in rs if r.size])


def test_min_partitions_splits_in_proportion_to_size() -> None:
    out = split_ranges(
        [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 0, 100)],
        min_partitions=10,
        max_records_per_partition=None,
    )
    assert [o.size for o in out if o.partition == 0] == [100] * 9
    assert [o.size for o in out if o.partition == 1] == [100]


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.integers(0, 8), st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1
    ),
    st.integers(1, 3000),
)
def test_rate_limit_reads_exactly_min_of_limit_and_backlog(parts, limit) -> None:
    start = {"t": {p: a for p, (a, _) in parts.items()}}
    latest = {"t": {p: a + n for p, (a, n) in parts.items()}}
    end = rate_limit(start, latest, limit)
    got = {p: end["t"][p] - start["t"][p] for p in parts}
    backlog = sum(n for _, n in parts.values())
    assert sum(got.values()) == min(limit, backlog)
    assert all(0 <= got[p] <= parts[p][1] for p in parts)
    with_backlog = [p for p, (_, n) in parts.items() if n > 0]
    if len(with_backlog) <= limit:
        assert all(got[p] >= 1 for p in with_backlog)


def test_cap_keeps_the_available_now_target() -> None:
    assert cap({"t": {0: 10, 1: 3}, "u": {0: 1}}, {"t": {0: 7}}) == {"t": {0: 7}}
