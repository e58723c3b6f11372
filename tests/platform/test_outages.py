"""Outages, as an operator meets them: the cluster down, the database down, Ctrl-C.

Every long-running command (a projection runner, the apps' collectors, a log
tail, a broker) runs as a real ``platform`` process. Each must end on SIGINT
within :data:`EXIT_BOUND_S`, print at most :data:`FEW_LINES` lines and no
traceback; with the cluster unreachable, the ones that keep running must stay
quiet (librdkafka reports every connection attempt, dozens a second). Commands
that cannot reach a database fail in one line that names it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import projection_test_app
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from eventplatform.cli import main
from eventplatform.events import EventProducer
from eventplatform.projections import registry, schema
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.migrate import upgrade
from eventplatform.projections.registry import RegisteredProjection, reported_status
from eventplatform.projections.runner import ProjectionRunner
from eventplatform.projections.store import ProjectionStore
from eventplatform.testing import BrokerProcess

pytestmark = pytest.mark.alone  # tests/conftest.py: Spark, clusters, timed kills or a browser

PLATFORM = Path(sys.executable).with_name("platform")
SUPPORT = Path(__file__).resolve().parents[1] / "support"
STARTUP_S = 2.0
"""How long a command runs before it is interrupted (it is up well within it)."""
QUIET_WATCH_S = 2.5
"""How long a command runs against an unreachable cluster before its lines are counted."""
EXIT_BOUND_S = 15.0
FEW_LINES = 6
FAIL_BOUND_S = 15.0


def dead_address() -> str:
    """A loopback port nothing listens on (bound once, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@contextmanager
def platform_process(
    arguments: list[str], cwd: Path, bootstrap: str
) -> Iterator[subprocess.Popen[str]]:
    python_path = os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [str(PLATFORM), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env={
            **os.environ,
            "PYTHONPATH": python_path,
            "PYTHONUNBUFFERED": "1",
            "EVENTPLATFORM_BOOTSTRAP": bootstrap,
        },
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=EXIT_BOUND_S)


def interrupted(process: subprocess.Popen[str]) -> tuple[int, str, float]:
    """SIGINT, then the exit status, everything printed, and the seconds until exit."""
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=EXIT_BOUND_S)
    return process.returncode, output, time.monotonic() - started


def assert_clean(status: int, output: str, seconds: float) -> None:
    assert status in (0, 130), output
    assert "Traceback" not in output, output
    assert len(output.strip().splitlines()) <= FEW_LINES, output
    assert seconds < EXIT_BOUND_S


def migrated_database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    upgrade(url, [projection_test_app.app])
    return url


def long_running(name: str, tmp_path: Path) -> list[str]:
    """The arguments of each long-running command, on ports the system picks."""
    if name == "projections run":
        return [
            "projections",
            "run",
            projection_test_app.totals_projection.name,
            "--app",
            projection_test_app.__name__,
            "--database",
            migrated_database(tmp_path),
        ]
    followed = tmp_path / "service.log"
    followed.write_text("first line\n")
    return {
        "statsd": ["apps", "metrics", "statsd", "--listen", "127.0.0.1:0"],
        "syslog": ["apps", "logs", "syslog", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0"],
        "beacons": ["apps", "activity", "collect", "--listen", "127.0.0.1:0", "--open"],
        "tail": ["apps", "logs", "tail", str(followed), "--service", "svc"],
        "scrape": ["apps", "metrics", "scrape", "--target", "http://127.0.0.1:9/metrics"],
        "console": [
            "console",
            "--listen",
            "127.0.0.1:0",
            "--database",
            migrated_database(tmp_path),
        ],
        "consume": ["consume", "__consumer_offsets", "--timeout", "60"],
        "serve": [
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--listen",
            "127.0.0.1:0",
            "--log-level",
            "WARNING",
        ],
    }[name]


LONG_RUNNING = [
    "projections run",
    "statsd",
    "syslog",
    "beacons",
    "tail",
    "scrape",
    "console",
    "consume",
    "serve",
]


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_ctrl_c_ends_a_long_running_command_cleanly(
    name: str, broker: BrokerProcess, tmp_path: Path
) -> None:
    """Regression: Ctrl-C printed 40-97 lines of traceback in the collectors."""
    with platform_process(long_running(name, tmp_path), tmp_path, broker.bootstrap) as process:
        time.sleep(STARTUP_S)
        assert process.poll() is None, process.communicate()[0]
        assert_clean(*interrupted(process))


@pytest.mark.parametrize(
    "name", ["projections run", "statsd", "syslog", "beacons", "tail", "scrape"]
)
def test_a_long_running_command_waits_quietly_for_an_unreachable_cluster(
    name: str, tmp_path: Path
) -> None:
    """Regression: a runner against a dead broker wrote about 38 librdkafka lines a second."""
    unreachable = dead_address()
    with platform_process(long_running(name, tmp_path), tmp_path, unreachable) as process:
        before = _send_statsd_when_listening(process) if name == "statsd" else ""
        time.sleep(QUIET_WATCH_S)
        assert process.poll() is None, before + process.communicate()[0]
        status, output, seconds = interrupted(process)
    assert_clean(status, before + output, seconds)


def _send_statsd_when_listening(process: subprocess.Popen[str]) -> str:
    """Read up to the line that names the port, and send a metric there, so the collector
    has something to append while the cluster is unreachable; what was read."""
    assert process.stdout is not None
    read = ""
    for _ in range(FEW_LINES):
        line = process.stdout.readline()
        read += line
        if line.startswith("receiving StatsD on udp://"):
            host, port = line.rsplit("//", 1)[1].strip().rsplit(":", 1)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
                sender.sendto(b"requests:1|c", (host, int(port)))
            return read
    raise AssertionError(f"the collector did not say where it listens: {read}")


def test_a_runner_fails_in_one_line_naming_a_database_it_cannot_reach(tmp_path: Path) -> None:
    url = f"postgresql://postgres:hush@{dead_address()}/nothing"
    arguments = [
        "projections",
        "run",
        projection_test_app.totals_projection.name,
        "--app",
        projection_test_app.__name__,
        "--database",
        url,
    ]
    started = time.monotonic()
    with platform_process(arguments, tmp_path, dead_address()) as process:
        output, _ = process.communicate(timeout=FAIL_BOUND_S)
    assert time.monotonic() - started < FAIL_BOUND_S
    assert process.returncode == 1, output
    errors = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert errors and errors[0].startswith("Error: database postgresql://postgres:***@127.0.0.1:")
    assert "hush" not in output and "Traceback" not in output, output


def test_a_database_without_the_platforms_tables_says_to_upgrade(tmp_path: Path) -> None:
    """Regression: projections status on a fresh database printed a traceback."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    result = CliRunner().invoke(main, ["projections", "list", "--database", url])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "run `platform db upgrade`" in lines[0], result.output
    assert lines[0].startswith(f"Error: database {url}: no such table: ep_projections")


def test_status_reports_the_database_when_the_cluster_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: projections status took 32 s, printed 578 lines, then a traceback."""
    monkeypatch.setattr("eventplatform.projections.operations.STATUS_LOG_TIMEOUT_S", 2.0)
    url = migrated_database(tmp_path)
    started = time.monotonic()
    result = CliRunner().invoke(
        main,
        [
            "projections",
            "status",
            "--app",
            projection_test_app.__name__,
            "--database",
            url,
            "--bootstrap",
            dead_address(),
        ],
    )
    assert time.monotonic() - started < FAIL_BOUND_S
    assert result.exit_code == 0, result.output
    assert "lag: unknown (the cluster at 127.0.0.1:" in result.output
    assert "rows pt_totals: 0" in result.output


def test_groups_list_names_the_cluster_it_could_not_reach() -> None:
    unreachable = dead_address()
    result = CliRunner().invoke(
        main, ["groups", "list", "--bootstrap", unreachable, "--request-timeout", "1"]
    )
    assert result.exit_code == 1, result.output
    assert f"no answer from the cluster at {unreachable}" in result.output


def _row(status: str, updated_at: datetime) -> RegisteredProjection:
    return RegisteredProjection("p", "projection.p", ["t"], ["t1"], status, None, None, updated_at)


def test_a_running_row_whose_runner_went_silent_is_not_running() -> None:
    """Regression: status said running after the runner was SIGKILLed."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    fresh = now - timedelta(seconds=registry.RUNNER_HEARTBEAT_S)
    silent = now - timedelta(seconds=registry.RUNNER_SILENT_S + 1)
    assert reported_status(_row("running", fresh), True, now) == "running"
    assert reported_status(_row("running", silent.replace(tzinfo=None)), True, now).startswith(
        "not running: its runner has not been heard from for 31s"
    )
    assert reported_status(_row("stopped", silent), True, now) == "stopped"


def test_a_projection_no_runner_ran_but_whose_tables_hold_rows_says_so() -> None:
    """Regression: metrics.daily said 'never run' while its tables had rows."""
    assert reported_status(None, False) == "never run"
    assert reported_status(None, True).startswith("no runner; its tables hold rows")


def test_an_idle_runner_keeps_its_row_fresh(
    broker: BrokerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("eventplatform.projections.runner.RUNNER_HEARTBEAT_S", 0.2)
    url = migrated_database(tmp_path)
    engine = create_store_engine(url)
    store = ProjectionStore(engine, projection_test_app.totals_projection)
    runner = ProjectionRunner(store, broker.bootstrap, poll_timeout_s=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,))
    thread.start()
    try:
        first = _updated_at(engine)
        deadline = time.monotonic() + EXIT_BOUND_S
        while _updated_at(engine) == first and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _updated_at(engine) > first
    finally:
        stop.set()
        thread.join(EXIT_BOUND_S)
        engine.dispose()


def _updated_at(engine: object) -> datetime:
    table = schema.projections
    with engine.connect() as connection:  # type: ignore[attr-defined]
        value = connection.execute(select(table.c.updated_at)).scalar()
    deadline = time.monotonic() + EXIT_BOUND_S
    while value is None and time.monotonic() < deadline:  # the runner registers first
        time.sleep(0.05)
        with engine.connect() as connection:  # type: ignore[attr-defined]
            value = connection.execute(select(table.c.updated_at)).scalar()
    assert value is not None
    return value  # type: ignore[no-any-return]


def test_a_runner_shows_in_its_group_by_projection_host_and_process(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """Regression: a group's members showed up as rdkafka-<uuid>."""
    url = migrated_database(tmp_path)
    engine = create_store_engine(url)
    projection = projection_test_app.totals_projection
    for topic in projection.topics:  # a member joins once its topics exist
        CliRunner().invoke(main, ["topics", "create", topic, "--bootstrap", broker.bootstrap])
    runner = ProjectionRunner(ProjectionStore(engine, projection), broker.bootstrap)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,))
    thread.start()
    try:
        expected = f"{projection.name}@{socket.gethostname()}:{os.getpid()}"
        deadline = time.monotonic() + EXIT_BOUND_S
        described = ""
        while expected not in described and time.monotonic() < deadline:
            time.sleep(0.2)
            described = (
                CliRunner()
                .invoke(
                    main,
                    ["groups", "describe", str(runner.group_id), "--bootstrap", broker.bootstrap],
                )
                .output
            )
        assert expected in described, described
    finally:
        stop.set()
        thread.join(EXIT_BOUND_S)
        engine.dispose()


@pytest.mark.parametrize(
    "arguments",
    [
        ["topics", "list"],
        ["produce", "t"],
        ["consume", "t", "--max-messages", "1"],
        ["groups", "list"],
    ],
)
def test_every_tool_takes_its_brokers_from_the_environment(
    arguments: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    unreachable = dead_address()
    monkeypatch.setenv("EVENTPLATFORM_BOOTSTRAP", unreachable)
    result = CliRunner().invoke(main, [*arguments, "--request-timeout", "1"], input="x\n")
    assert result.exit_code == 1, result.output
    assert unreachable in result.output, result.output


JVM_EXIT_BOUND_S = 15.0
"""How long Spark's JVM may take to end after the command it served exited."""
SPARK_INTERRUPT_EXIT_BOUND_S = 90.0
"""How long a replay interrupted while Spark starts may take to exit: the interrupt
waits until the session exists, and on a loaded machine Spark's start alone has taken
more than 15 s."""


@pytest.mark.parametrize("moment", ["while Spark starts", "while a job runs"])
def test_ctrl_c_during_a_replay_ends_it_cleanly_and_leaves_no_jvm_behind(
    moment: str, broker: BrokerProcess, tmp_path: Path
) -> None:
    """Regression: an interrupt during Spark's start printed a traceback, and the JVM
    the launch had started ran on after the command ended. One while a job ran printed
    pages of py4j and Java stack traces (Spark's own handler called the JVM from inside
    the signal handler, re-entering the call the main thread waited in) and exited 1."""
    with EventProducer(broker.bootstrap) as producer:  # something to replay
        producer.append([projection_test_app.Tick(entity="e", amount=1, label="a")])
    arguments = [
        str(PLATFORM),
        "replay",
        "--projection",
        projection_test_app.totals_projection.name,
        "--app",
        projection_test_app.__name__,
        "--database",
        migrated_database(tmp_path),
        "--spark-master",
        "local[1]",
    ]
    python_path = os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")]))
    environment = {
        **os.environ,
        "PYTHONPATH": python_path,
        "EVENTPLATFORM_BOOTSTRAP": broker.bootstrap,
    }
    output = tmp_path / "replay.out"
    with output.open("w") as sink:
        process = subprocess.Popen(
            arguments,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=environment,
            start_new_session=True,
        )
    try:
        if moment == "while Spark starts":
            time.sleep(2.0)
        else:
            _wait_for_a_running_stage(process, output)
        process.send_signal(signal.SIGINT)
        process.wait(SPARK_INTERRUPT_EXIT_BOUND_S)
        deadline = time.monotonic() + JVM_EXIT_BOUND_S
        while _group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _group_alive(process.pid), "Spark's JVM outlived the command"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    text = output.read_text()
    assert process.returncode in (0, 130), text
    assert "Traceback" not in text and "Exception" not in text, text
    said = [line for line in text.splitlines() if line.strip() and "[Stage " not in line]
    assert len(said) <= FEW_LINES, text


SPARK_JOB_WAIT_S = 120.0
"""How long a replay may take to show its first job running (Spark's start included)."""


def _wait_for_a_running_stage(process: subprocess.Popen[bytes], output: Path) -> None:
    """Until Spark's progress bar shows a stage of the replay's first job (it shows one
    that has run for half a second): the driver is then waiting on the JVM for the job."""
    deadline = time.monotonic() + SPARK_JOB_WAIT_S
    while "[Stage " not in output.read_text():
        assert process.poll() is None, output.read_text()
        assert time.monotonic() < deadline, f"no Spark job in {SPARK_JOB_WAIT_S:.0f} s"
        time.sleep(0.05)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_rebuild_in_progress_shows_in_the_status() -> None:
    started = datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)
    row = _row(registry.STATUS_REBUILDING, started)
    assert reported_status(row, True, changed=True) == (
        "rebuilding since 2026-01-01 12:00:05: the live tables serve until the swap"
    )
    assert reported_status(_row("stopped", started), True, changed=True).startswith(
        "definition changed since its tables were built"
    )
