"""The console tools' words (``api.cli.console_format``): kcat's -f, the default line, where a
read starts, and the producer's header and JSON-lines input."""

from __future__ import annotations

import re

import pytest

from api.cli.console_format import (
    FormatError,
    LineRecord,
    compile_format,
    default_line,
    parse_jsonl,
    parse_offset,
    split_headers,
    start_offset,
)
from api.client.types import ConsumerRecord

R = ConsumerRecord("t", 2, 41, 1700000000000, 0, b"k1", b"hello", (("a", b"1"), ("b", None)))
NULLS = ConsumerRecord("t", 0, 0, 5, 0, None, None, ())


@pytest.mark.parametrize(
    ("fmt", "out"),
    [
        ("%t %p %o\\n", b"t 2 41\n"),
        ("%k=%s\\t%T", b"k1=hello\t1700000000000"),
        ("%K %S [%h] 100%%", b"2 5 [a=1,b=] 100%"),
        ("plain", b"plain"),
        ("\\\\%s\\0", b"\\hello\0"),
    ],
)
def test_kcat_format_tokens_and_escapes(fmt: str, out: bytes) -> None:
    assert compile_format(fmt)(R) == out


def test_kcat_format_of_null_key_and_value_is_empty_with_length_minus_one() -> None:
    assert compile_format("[%k][%s] %K %S [%h]")(NULLS) == b"[][] -1 -1 []"


@pytest.mark.parametrize("fmt", ["%x", "50%", "a\\", "\\q"])
def test_a_bad_format_names_the_problem(fmt: str) -> None:
    with pytest.raises(FormatError, match=r"unknown|lone"):
        compile_format(fmt)


def test_default_line_columns_in_kafka_console_consumer_order() -> None:
    assert default_line(R) == b"hello\n"
    line = default_line(
        R, print_timestamp=True, print_headers=True, print_offset=True, print_key=True
    )
    assert line == b"CreateTime:1700000000000\ta:1,b:null\t2:41\tk1\thello\n"
    assert default_line(NULLS, print_headers=True, print_key=True) == b"NO_HEADERS\tnull\tnull\n"


@pytest.mark.parametrize(
    ("text", "first", "end", "start"),
    [
        ("earliest", 3, 10, 3),
        ("beginning", 3, 10, 3),
        ("latest", 3, 10, 10),
        ("-2", 3, 10, 8),
        ("-20", 3, 10, 3),
        ("5", 3, 10, 5),
        ("1", 3, 10, 3),
        ("99", 3, 10, 10),
    ],
)
def test_where_a_read_starts(text: str, first: int, end: int, start: int) -> None:
    how, n = parse_offset(text)
    assert start_offset(how, n, first, end) == start


def test_an_unknown_offset_word_is_refused() -> None:
    with pytest.raises(FormatError, match="earliest, latest, -N"):
        parse_offset("soon")


def test_header_prefix_of_a_line() -> None:
    assert split_headers(b"a:1,b:x:y\tk:v", 1) == ([("a", b"1"), ("b", b"x:y")], b"k:v")
    assert split_headers(b"\tvalue", 1) == ([], b"value")
    with pytest.raises(FormatError, match="line 3 has no tab"):
        split_headers(b"value", 3)
    with pytest.raises(FormatError, match="line 4: header 'novalue'"):
        split_headers(b"novalue\tv", 4)


def test_json_lines_carry_every_field() -> None:
    line = (
        b'{"key": "k", "value": {"n": 1}, "headers": {"h": "v", "b": {"base64": "AAE="}},'
        b' "timestamp": 7, "partition": 1, "topic": "ignored", "offset": 3}'
    )
    assert parse_jsonl(line, 1) == LineRecord(
        value=b'{"n":1}',
        key=b"k",
        headers=(("h", b"v"), ("b", b"\0\1")),
        timestamp_ms=7,
        partition=1,
    )
    assert parse_jsonl(b'{"value": null, "headers": [["h", null]]}', 1) == LineRecord(
        None, None, (("h", None),)
    )


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"nope", "is not JSON"),
        (b"[1]", "expected a JSON object"),
        (b'{"partition": -1}', "partition must be an integer >= 0"),
        (b'{"timestamp": "now"}', "timestamp must be an integer"),
        (b'{"headers": [["h"]]}', "a header must be [name, value]"),
        (b'{"value": {"base64": "!!"}}', "value.base64 is not base64"),
    ],
)
def test_bad_json_lines_say_which_line_and_what(line: bytes, says: str) -> None:
    with pytest.raises(FormatError, match=f"line 9.*{re.escape(says)}"):
        parse_jsonl(line, 9)
