"""Following log files: lines as written, through rename and copy-truncate rotations and
restarts, with no line lost or taken twice; then the same through a real broker into the
projection, and stdin. Parsing a line never fails."""

from __future__ import annotations

import io
import threading
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from eventplatform.apps.log_aggregation import app
from eventplatform.apps.log_aggregation.events import MESSAGE_MAX, TOPIC
from eventplatform.apps.log_aggregation.lines import parse_line
from eventplatform.apps.log_aggregation.projections import lines as lines_projection
from eventplatform.apps.log_aggregation.tail import FileTail, TailSource, follow, read_stream
from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.projections.database import create_store_engine
from eventplatform.runtime import running_projections, wait_caught_up
from eventplatform.testing import fresh_database, running_broker

NOW = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
FOLLOW_TIMEOUT_S = 60.0


def taken(tail: FileTail) -> list[str]:
    return [raw.decode() for raw, _ in tail.lines()]


def write(path: Path, *lines: str, end: str = "\n") -> None:
    with path.open("a") as handle:
        handle.write("".join(line + end for line in lines))


def test_complete_lines_only_then_the_rest_once_finished(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    tail = FileTail(path, tmp_path / "app.state")
    assert taken(tail) == []  # no file yet
    write(path, "one", "two")
    write(path, "thr", end="")
    assert taken(tail) == ["one", "two"]
    write(path, "ee")
    assert taken(tail) == ["three"]
    assert taken(tail) == []


def test_a_file_renamed_before_the_first_read_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    write(path, "a1")
    tail = FileTail(path, tmp_path / "app.state", rotation_grace_s=0.0)
    path.rename(tmp_path / "app.log.1")
    write(path, "b1")
    assert taken(tail) == ["a1", "b1"]


def test_a_renamed_file_is_finished_before_the_new_one(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    tail = FileTail(path, tmp_path / "app.state", rotation_grace_s=0.0)
    write(path, "a1", "a2")
    assert taken(tail) == ["a1", "a2"]
    with path.open("a") as old:
        path.rename(tmp_path / "app.log.1")
        old.write("a3\na4")  # the writer finishes in the old file, the last line unterminated
    write(path, "b1")
    assert taken(tail) == ["a3", "a4", "b1"]


def test_the_grace_waits_for_a_writer_still_in_the_renamed_file(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    tail = FileTail(path, tmp_path / "app.state", rotation_grace_s=30.0)
    write(path, "a1")
    assert taken(tail) == ["a1"]
    path.rename(tmp_path / "app.log.1")
    write(path, "b1")
    assert taken(tail) == []  # in the grace: the renamed file may still grow
    write(tmp_path / "app.log.1", "a2")
    assert taken(tail) == ["a2"]


def test_a_truncated_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    tail = FileTail(path, tmp_path / "app.state")
    write(path, "long line one", "long line two")
    assert len(taken(tail)) == 2
    with path.open("r+") as handle:
        handle.truncate(0)
    write(path, "fresh")
    assert taken(tail) == ["fresh"]


def test_a_restart_resumes_after_the_saved_line_even_across_a_rotation(tmp_path: Path) -> None:
    path, state = tmp_path / "app.log", tmp_path / "app.state"
    write(path, "a1", "a2", "a3")
    first = FileTail(path, state)
    got = first.lines(limit=2)
    first.save(got[-1][1])  # what the log acknowledged: a1, a2
    first.close()
    write(path, "a4")
    path.rename(tmp_path / "app.log.1")
    write(path, "b1")

    again = FileTail(path, state)

    assert taken(again) == ["a3", "a4", "b1"]


def test_an_unreadable_state_starts_anew(tmp_path: Path) -> None:
    path, state = tmp_path / "app.log", tmp_path / "app.state"
    write(path, "x")
    state.write_text("{not json")
    assert taken(FileTail(path, state)) == ["x"]


@pytest.mark.parametrize(
    ("line", "level", "message"),
    [
        ("2026-11-25T10:00:00Z ERROR db down", "error", "db down"),
        ("[WARNING] disk 91% full", "warn", "disk 91% full"),
        ("Hello world", "info", "Hello world"),
        ('{"severity": "crit", "msg": "boom", "ts": 1795000000}', "fatal", "boom"),
        ("{half a json", "info", "{half a json"),
        ("\x00\x01 binary ok", "info", "\x00\x01 binary ok"),
    ],
)
def test_a_line_always_parses(line: str, level: str, message: str) -> None:
    parsed = parse_line(line, "svc", "h", NOW)
    assert (parsed.level, parsed.message) == (level, message)


def test_an_overlong_line_is_cut_and_marked() -> None:
    parsed = parse_line("x" * (MESSAGE_MAX + 10), "svc", "h", NOW)
    assert len(parsed.message) == MESSAGE_MAX and parsed.attributes == {"truncated": "true"}


def test_tailing_through_rotations_and_restarts_appends_every_line_once(tmp_path: Path) -> None:
    path, state = tmp_path / "app.log", tmp_path / "app.state"
    written: list[str] = []

    def emit(count: int) -> None:
        for _ in range(count):
            line = f"line {len(written)}"
            written.append(line)
            write(path, line)

    with (
        running_broker(tmp_path / "broker", ["num.partitions=2"]) as broker,
        fresh_database("sqlite", tmp_path) as url,
        EventProducer(broker.bootstrap) as producer,
    ):
        for round_ in range(3):  # each round a fresh tail on the same state: a restart
            emit(500)
            stop = threading.Event()
            tail = FileTail(path, state, rotation_grace_s=0.0)
            appended: list[int] = []
            source = TailSource(tail, "app", "host-1")
            thread = threading.Thread(
                target=follow,
                args=([source], producer),
                kwargs={"stop": stop, "batch_lines": 300, "on_batch": appended.append},
            )
            thread.start()
            try:
                emit(200)
                path.replace(tmp_path / f"app.log.{round_}")  # rotate mid-stream
                emit(300)
                _wait(lambda: sum(appended) >= 1000 or not thread.is_alive())  # noqa: B023
            finally:
                stop.set()
                thread.join(FOLLOW_TIMEOUT_S)
            assert sum(appended) == 1000
        migrate.upgrade(url, [app])
        names = [lines_projection.name]
        with running_projections(names, [app], url, broker.bootstrap):
            wait_caught_up(names, url, broker.bootstrap, [TOPIC], FOLLOW_TIMEOUT_S)
        assert _messages(url) == Counter(written)


def test_stdin_lines_are_appended(tmp_path: Path) -> None:
    stream = io.BytesIO(b"".join(f"ERROR failure {n}\n".encode() for n in range(25)))
    with (
        running_broker(tmp_path / "broker", ["num.partitions=1"]) as broker,
        fresh_database("sqlite", tmp_path) as url,
        EventProducer(broker.bootstrap) as producer,
    ):
        assert read_stream(stream, "cron", "h", producer, batch_lines=10) == 25
        migrate.upgrade(url, [app])
        names = [lines_projection.name]
        with running_projections(names, [app], url, broker.bootstrap):
            wait_caught_up(names, url, broker.bootstrap, [TOPIC], FOLLOW_TIMEOUT_S)
        assert _messages(url) == Counter(f"failure {n}" for n in range(25))


def _messages(url: str) -> Counter[str]:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            return Counter(
                row[0] for row in connection.execute(text("SELECT message FROM logs_recent"))
            )
    finally:
        engine.dispose()


def _wait(condition: object, timeout_s: float = FOLLOW_TIMEOUT_S) -> None:
    from eventplatform.testing import wait_until

    assert wait_until(condition, timeout_s)
