"""Secrets in known shapes are masked at ingest: in plain, JSON and syslog lines, in the
message and in attributes, and a line read from standard input reaches the log without
its secret, so no consumer of the topic can read it back."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from eventplatform.apps.log_aggregation.events import ATTRIBUTES_MAX, TOPIC
from eventplatform.apps.log_aggregation.lines import parse_line
from eventplatform.apps.log_aggregation.retention import ensure_topic
from eventplatform.apps.log_aggregation.secrets import MASK, redact_line, redact_text
from eventplatform.apps.log_aggregation.syslog import parse_message
from eventplatform.apps.log_aggregation.tail import read_stream
from eventplatform.events import EventProducer
from eventplatform.testing import running_broker

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
POLL_TIMEOUT_S = 10.0
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        ("login ok for bob password=hunter2-s3cr3t", "hunter2-s3cr3t", "login ok for bob"),
        ('config {"api_key": "ak-123456", "region": "eu"}', "ak-123456", '"region": "eu"'),
        ("DB_PASSWORD='p@ss word' host=db", "p@ss word", "host=db"),
        ("GET /me Authorization: Bearer abcdefghijklmnop.qrs", "abcdefghijklmnop", "GET /me"),
        ("dial postgres://app:tiger-9@db.internal/app", "tiger-9", "postgres://app:"),
        ("aws key AKIAIOSFODNN7EXAMPLE in env", "AKIAIOSFODNN7EXAMPLE", "aws key"),
        (f"session {JWT} refreshed", JWT, "refreshed"),
        (
            "key -----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- end",
            "MIIEow",
            " end",
        ),
    ],
)
def test_known_shapes_of_secrets_are_masked(text: str, secret: str, kept: str) -> None:
    masked, found = redact_text(text)
    assert secret not in masked and MASK in masked and found >= 1
    assert kept in masked


@pytest.mark.parametrize(
    "text",
    [
        "passwordless login enabled for 3 users",
        "token bucket refilled: 40 tokens",
        "GET https://shop.example/search?q=secrets 200",
        "user=bob action=logout",
        "cd PWD=/home/app OLDPWD=/",
    ],
)
def test_lines_without_secrets_are_left_alone(text: str) -> None:
    assert redact_text(text) == (text, 0)


def test_plain_json_and_syslog_lines_are_masked_with_a_count() -> None:
    plain = parse_line("2026-11-27T11:59:00Z ERROR token=t0k3n-value failed", "api", "h", NOW)
    assert plain.message == f"token={MASK} failed"
    assert plain.attributes["redacted"] == "1"

    document = '{"level": "warn", "msg": "retry", "password": "pw-1", "client_secret": "cs-2"}'
    structured = parse_line(document, "api", "h", NOW)
    assert structured.attributes["password"] == MASK
    assert structured.attributes["client_secret"] == MASK
    assert structured.attributes["redacted"] == "2"

    raw = b'<11>1 - web nginx - - [auth token="tk-9"] upstream https://u:pw-3@api/x failed'
    syslog = parse_message(raw, "10.0.0.1", NOW)
    assert "pw-3" not in syslog.message and syslog.attributes["auth.token"] == MASK
    assert syslog.attributes["redacted"] == "2"

    clean = parse_line("all good", "api", "h", NOW)
    assert "redacted" not in clean.attributes


def test_a_full_line_keeps_its_attributes_and_masks_its_secret() -> None:
    attributes = {f"field{n}": "x" for n in range(ATTRIBUTES_MAX - 1)} | {"token": "t-1"}
    message, cleaned = redact_line("token=t-2", attributes, ATTRIBUTES_MAX)
    assert message == f"token={MASK}" and cleaned["token"] == MASK
    assert len(cleaned) == ATTRIBUTES_MAX and "redacted" not in cleaned


def test_a_secret_read_from_stdin_never_reaches_the_log(tmp_path: Path) -> None:
    lines = b"start\nlogin for bob password=hunter2-s3cr3t ok\nstop\n"
    with running_broker(tmp_path / "broker") as broker:
        ensure_topic(broker.bootstrap)
        with EventProducer(broker.bootstrap) as producer:
            appended = read_stream(io.BytesIO(lines), "auth", "h1", producer)
        assert appended == 3
        values = read_topic(broker.bootstrap, appended)
    assert len(values) == 3
    assert not any(b"hunter2" in value for value in values)
    assert any(b"password=[REDACTED]" in value for value in values)


def read_topic(bootstrap: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "secrets-test", "enable.auto.commit": False}
    )
    try:
        metadata = consumer.list_topics(TOPIC, timeout=POLL_TIMEOUT_S)
        partitions = sorted(metadata.topics[TOPIC].partitions)
        consumer.assign([TopicPartition(TOPIC, partition, 0) for partition in partitions])
        values: list[bytes] = []
        while len(values) < count:
            message = consumer.poll(POLL_TIMEOUT_S)
            assert message is not None, f"read {len(values)} of {count} records"
            assert message.error() is None, message.error()
            values.append(message.value())
        return values
    finally:
        consumer.close()
