"""The log app end to end: lines through a real broker into the counts, fingerprints and
recent lines, checked against lines worked out by hand and against a reference fold of
simulated services, on SQLite and PostgreSQL; a redaction leaves every table and the search
index as if the leaking lines had never been sent; pruning follows the log's start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import confluent_kafka
import logs_reference as reference
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from projection_threads import apply_all

from eventplatform.apps.log_aggregation import app
from eventplatform.apps.log_aggregation.events import TOPIC, LogLine, level_of
from eventplatform.apps.log_aggregation.fingerprint import fingerprint, template
from eventplatform.apps.log_aggregation.projections import lines as lines_projection
from eventplatform.apps.log_aggregation.redaction import matching_lines, redact
from eventplatform.apps.log_aggregation.retention import RETENTION_MS, ensure_topic, prune
from eventplatform.apps.log_aggregation.simulator import LogShape, LogSimulator
from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.testing import fresh_database, running_broker

BROKER_OVERRIDES = ["num.partitions=3", "group.initial.rebalance.delay.ms=0"]
APPLY_TIMEOUT_S = 180.0
NAME = lines_projection.name


def at(hour: int, minute: int, second: int) -> datetime:
    return datetime(2026, 11, 20, hour, minute, second, tzinfo=UTC)


def line(service: str, level: Any, message: str, moment: datetime, host: str = "h1") -> LogLine:
    return LogLine(service=service, host=host, level=level, message=message, at=moment)


def hand_lines() -> list[LogLine]:
    return [
        line("api", "info", "GET /orders/17 200 in 12 ms", at(9, 0, 1)),
        line("api", "error", "payment 8f14e45f failed after 312 ms", at(9, 0, 2)),
        line("api", "info", "GET /orders/18 200 in 15 ms", at(9, 0, 40), host="h2"),
        line("auth", "info", "login ok for user 'bob' password=hunter2", at(9, 0, 41)),
        line("api", "error", "payment c9f0f895 failed after 1200 ms", at(9, 1, 5), host="h2"),
        line("auth", "warn", "login failed for user 'eve'", at(9, 1, 30)),
        line("worker", "fatal", "out of memory at 0x7ffd1234", at(9, 2, 0)),
        line("auth", "info", "Connection refused by upstream, retrying", at(9, 2, 10)),
    ]


PAYMENT = "payment <hex> failed after <num> ms"
OOM = "out of memory at <hex>"
HAND_COUNTS = {
    ("api", "info", at(9, 0, 0)): 2,
    ("api", "error", at(9, 0, 0)): 1,
    ("auth", "info", at(9, 0, 0)): 1,
    ("api", "error", at(9, 1, 0)): 1,
    ("auth", "warn", at(9, 1, 0)): 1,
    ("worker", "fatal", at(9, 2, 0)): 1,
    ("auth", "info", at(9, 2, 0)): 1,
}
HAND_FINGERPRINTS = {
    ("api", fingerprint("api", PAYMENT)): (PAYMENT, 2, at(9, 0, 2), at(9, 1, 5)),
    ("worker", fingerprint("worker", OOM)): (OOM, 1, at(9, 2, 0), at(9, 2, 0)),
}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_lines_fold_as_worked_out_by_hand_and_a_redaction_removes_them_everywhere(
    kind: str, tmp_path: Path
) -> None:
    with (
        running_broker(tmp_path / "broker", BROKER_OVERRIDES) as broker,
        fresh_database(kind, tmp_path) as url,
    ):
        assert ensure_topic(broker.bootstrap)
        with EventProducer(broker.bootstrap) as producer:
            refs = producer.append(hand_lines())
        migrate.upgrade(url, [app])
        apply_all(NAME, [app], url, broker.bootstrap, refs)
        views = reference.read_views(url)
        assert views["counts"] == HAND_COUNTS
        assert views["fingerprints"] == HAND_FINGERPRINTS
        assert len(views["recent"]) == 8
        volume = reference.named(url, "logs.volume")
        assert sorted(volume) == sorted(
            (
                service,
                level,
                sum(n for (s, lv, _), n in HAND_COUNTS.items() if (s, lv) == (service, level)),
            )
            for service, level in {(s, lv) for s, lv, _ in HAND_COUNTS}
        )
        errors = reference.named(url, "logs.errors")
        assert [(row[0], row[2], row[3]) for row in errors] == [
            ("api", PAYMENT, 2),
            ("worker", OOM, 1),
        ]
        assert [row[4] for row in reference.named(url, "logs.recent", service="worker")] == [
            "out of memory at 0x7ffd1234"
        ]
        found = reference.search(url, "connection REFUSED")
        assert [(row[1], row[4]) for row in found] == [
            ("auth", "Connection refused by upstream, retrying")
        ]
        assert reference.search(url, "refused connection") == []  # a phrase: words in order
        assert [row[4] for row in reference.search(url, "hunter2")] == [
            "login ok for user 'bob' password=hunter2"
        ]

        done = redact(url, broker.bootstrap, "password=", "a password in a login line")
        assert done.lines == 1 and len(done.appended) == 2
        apply_all(NAME, [app], url, broker.bootstrap, list(done.appended), APPLY_TIMEOUT_S)

        views = reference.read_views(url)
        counts = dict(HAND_COUNTS)
        del counts["auth", "info", at(9, 0, 0)]
        assert views["counts"] == counts
        assert views["fingerprints"] == HAND_FINGERPRINTS
        assert len(views["recent"]) == 7
        assert reference.search(url, "hunter2") == []
        assert matching_lines(url, "password=") == []


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_simulated_services_with_their_leaks_redacted_match_the_reference(
    kind: str, tmp_path: Path
) -> None:
    begin = datetime(2026, 11, 20, 14, 0, tzinfo=UTC)
    shape = LogShape(lines_per_second=3.0, burst_share=0.004, leak_share=0.05)
    simulation = LogSimulator(shape, seed=3).run(begin, begin + timedelta(minutes=20))
    assert simulation.leaking > 5 and len(simulation.lines) > 5_000
    with (
        running_broker(tmp_path / "broker", BROKER_OVERRIDES) as broker,
        fresh_database(kind, tmp_path) as url,
    ):
        ensure_topic(broker.bootstrap)
        with EventProducer(broker.bootstrap) as producer:
            refs = producer.append(simulation.lines)
        migrate.upgrade(url, [app])
        apply_all(NAME, [app], url, broker.bootstrap, refs, APPLY_TIMEOUT_S)
        assert reference.read_views(url) == reference.expected(simulation.lines)
        leaking = reference.search(url, simulation.leaked)
        assert len(leaking) == simulation.leaking

        done = redact(url, broker.bootstrap, simulation.leaked, "leaked password")
        assert done.lines == simulation.leaking
        apply_all(NAME, [app], url, broker.bootstrap, list(done.appended), APPLY_TIMEOUT_S)
        clean = [item for item in simulation.lines if simulation.leaked not in item.message]
        assert reference.read_views(url) == reference.expected(clean)
        assert reference.search(url, simulation.leaked) == []


def test_pruning_follows_the_log_start_and_the_retention(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    old = [
        line("api", "error", f"old failure {n}", now - timedelta(days=8, minutes=n))
        for n in range(3)
    ]
    new = [line("api", "error", f"new failure {n}", now - timedelta(minutes=n)) for n in range(3)]
    with (
        running_broker(tmp_path / "broker", ["num.partitions=1"]) as broker,
        fresh_database("sqlite", tmp_path) as url,
    ):
        ensure_topic(broker.bootstrap, partitions=1)
        assert _retention_ms(broker.bootstrap) == str(RETENTION_MS)
        assert not ensure_topic(broker.bootstrap)  # already there: only the retention is set
        with EventProducer(broker.bootstrap) as producer:
            refs = producer.append([*old, *new])
        migrate.upgrade(url, [app])
        apply_all(NAME, [app], url, broker.bootstrap, refs)
        _delete_records(broker.bootstrap, before=len(old))  # what the retention would delete

        pruned = prune(url, broker.bootstrap)

        assert (pruned.lines, pruned.errors, pruned.count_rows) == (3, 3, 3)
        assert reference.read_views(url) == reference.expected(new)
        assert prune(url, broker.bootstrap) == type(pruned)(0, 0, 0, 0)


def _retention_ms(bootstrap: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    configs = admin.describe_configs([resource])[resource].result(30)
    return str(configs["retention.ms"].value)


def _delete_records(bootstrap: str, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([confluent_kafka.TopicPartition(TOPIC, 0, before)])
    for future in futures.values():
        future.result(30)


def test_templates_mask_what_varies() -> None:
    assert template("payment 8f14e45f failed after 312 ms for 'bob'") == (
        "payment <hex> failed after <num> ms for <str>"
    )
    assert (
        template(
            "user a.b@example.org from 10.1.2.3:443 got 123e4567-e89b-12d3-a456-426614174000 "
            "via https://x.example/a?b=1 facade 0xff12ab"
        )
        == "user <email> from <ip> got <uuid> via <url> facade <hex>"
    )
    assert template("  spaced\tout  -1.5e3  ") == "spaced out <num>"
    # an id masks alike whatever digits it drew; short words and numbers stay what they are
    for job in ("12345678", "fcbdcccf", "8f14e45f"):
        assert template(f"job {job} took 312 ms") == "job <hex> took <num> ms"
    assert template("bad face 42") == "bad face <num>"
    assert fingerprint("api", "x") != fingerprint("worker", "x")


@pytest.mark.parametrize(
    ("name", "level"),
    [("WARNING", "warn"), ("err", "error"), ("CRIT", "fatal"), ("notice", "info"), ("nope", None)],
)
def test_level_names_normalize(name: str, level: str | None) -> None:
    assert level_of(name) == level


@pytest.mark.parametrize(
    "fields",
    [
        {"service": "", "host": "h"},
        {"service": "a@b", "host": "h"},
        {"service": "s", "host": "h", "level": "loud"},
        {"service": "s", "host": "h", "message": "x" * 20_000},
        {"service": "s", "host": "h", "attributes": {"": "v"}},
    ],
)
def test_invalid_lines_are_refused(fields: dict[str, Any]) -> None:
    values = {"level": "info", "message": "m", "at": at(9, 0, 0), **fields}
    with pytest.raises(ValueError):
        LogLine(**values)
