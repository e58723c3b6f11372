"""Parsing of command-line values, without a cluster."""

from __future__ import annotations

import pytest

from eventplatform.tools.arguments import (
    parse_bootstrap,
    parse_key_separator,
    parse_setting,
    parse_settings,
    parse_timestamp_ms,
)
from eventplatform.tools.consume import ConsumeOptions, check_options
from eventplatform.tools.errors import InvalidInputError
from eventplatform.tools.groups import ResetKind, ResetTarget, reset_target
from eventplatform.tools.produce import split_line, strip_line_ending
from eventplatform.tools.topics import check_alterations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", "127.0.0.1:9092"),
        (" a:1 , b:65535 ", "a:1,b:65535"),
        ("[::1]:9092", "[::1]:9092"),
    ],
)
def test_bootstrap_lists_are_validated_and_tidied(text: str, expected: str) -> None:
    assert parse_bootstrap(text) == expected


@pytest.mark.parametrize("text", ["localhost", ":9092", "host:", "host:0", "host:65536", "a:1,"])
def test_bad_bootstrap_addresses_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError, match="is not host:port"):
        parse_bootstrap(text)


def test_settings_split_at_the_first_equals_sign() -> None:
    assert parse_setting("retention.ms=1000") == ("retention.ms", "1000")
    assert parse_setting("a=b=c") == ("a", "b=c")
    assert parse_setting("empty=") == ("empty", "")
    assert parse_settings(("a=1", "b=2")) == {"a": "1", "b": "2"}


@pytest.mark.parametrize("text", ["no-equals", "=value", " =x"])
def test_settings_without_a_key_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError, match="is not key=value"):
        parse_setting(text)


def test_a_setting_given_twice_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="more than once"):
        parse_settings(("a=1", "a=2"))


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("2024-05-01T10:00:00Z", 1_714_557_600_000),
        ("2024-05-01T12:00:00+02:00", 1_714_557_600_000),
        ("2024-05-01T10:00:00", 1_714_557_600_000),
        ("2024-05-01T10:00:00.001Z", 1_714_557_600_001),
        ("2024-05-01", 1_714_521_600_000),
    ],
)
def test_timestamps_are_milliseconds_or_iso_datetimes_in_utc(text: str, expected_ms: int) -> None:
    assert parse_timestamp_ms(text) == expected_ms


@pytest.mark.parametrize("text", ["yesterday", "-5", "2024-13-01"])
def test_unreadable_timestamps_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError, match="ISO-8601"):
        parse_timestamp_ms(text)


def test_key_separators_are_non_empty_utf8() -> None:
    assert parse_key_separator(None) is None
    assert parse_key_separator("→") == "→".encode()
    with pytest.raises(InvalidInputError):
        parse_key_separator("")


def test_lines_lose_their_line_ending_only() -> None:
    assert strip_line_ending(b"value\n") == b"value"
    assert strip_line_ending(b"value\r\n") == b"value"
    assert strip_line_ending(b"value") == b"value"
    assert strip_line_ending(b"value\n\n") == b"value\n"


def test_lines_split_into_key_and_value_at_the_first_separator() -> None:
    assert split_line(b"k|v|w", b"|") == (b"k", b"v|w")
    assert split_line(b"|v", b"|") == (b"", b"v")
    assert split_line(b"no separator", b"|") == (None, b"no separator")
    assert split_line(b"k|v", None) == (None, b"k|v")


def test_reset_targets_need_exactly_one_option() -> None:
    assert reset_target(
        to_earliest=True, to_latest=False, to_offset=None, to_datetime=None
    ) == ResetTarget(ResetKind.EARLIEST)
    assert reset_target(
        to_earliest=False, to_latest=False, to_offset=None, to_datetime="1000"
    ) == ResetTarget(ResetKind.DATETIME, timestamp_ms=1000)
    assert reset_target(
        to_earliest=False, to_latest=False, to_offset=0, to_datetime=None
    ) == ResetTarget(ResetKind.OFFSET, offset=0)
    for options in (
        {"to_earliest": False, "to_latest": False, "to_offset": None, "to_datetime": None},
        {"to_earliest": True, "to_latest": False, "to_offset": 3, "to_datetime": None},
    ):
        with pytest.raises(InvalidInputError, match="exactly one"):
            reset_target(**options)  # type: ignore[arg-type]


def test_consume_options_name_one_starting_point() -> None:
    check_options(ConsumeOptions("t", partition=0, offset=5))
    check_options(ConsumeOptions("t", group="g", from_beginning=True))
    with pytest.raises(InvalidInputError, match="needs --partition"):
        check_options(ConsumeOptions("t", offset=5))
    with pytest.raises(InvalidInputError, match="different starting points"):
        check_options(ConsumeOptions("t", from_beginning=True, from_timestamp_ms=1))
    with pytest.raises(InvalidInputError, match="cannot be used with --group"):
        check_options(ConsumeOptions("t", group="g", from_timestamp_ms=1))


def test_alterations_must_change_something_and_not_contradict() -> None:
    check_alterations({"a": "1"}, ["b"], None)
    check_alterations({}, [], 3)
    with pytest.raises(InvalidInputError, match="nothing to change"):
        check_alterations({}, [], None)
    with pytest.raises(InvalidInputError, match="cannot both"):
        check_alterations({"a": "1"}, ["a"], None)
