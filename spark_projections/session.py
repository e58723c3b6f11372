"""The SparkSession the replay jobs run in.

The master comes from ``--spark-master``, else ``$EVENTPLATFORM_SPARK_MASTER``,
else ``local[*]``. ``spark.*`` settings come from the caller (the CLI's
``--spark-conf KEY=VALUE``) and from ``$EVENTPLATFORM_SPARK_CONF``
(``KEY=VALUE`` pairs separated by commas); the caller's win.

Python workers run the driver's interpreter (``PYSPARK_PYTHON`` defaults to
``sys.executable``), so on a standalone cluster every worker host needs the
same environment at the same path: eventplatform installed, and the modules
that define the projections importable.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from eventplatform.interrupts import in_main_thread, note_interrupt
from eventplatform.spark_projections.errors import ReplayConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

MASTER_ENV = "EVENTPLATFORM_SPARK_MASTER"
CONF_ENV = "EVENTPLATFORM_SPARK_CONF"
MASTER_DEFAULT = "local[*]"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
APP_NAME_DEFAULT = "eventplatform"

DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "true",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
}
"""What the platform sets unless told otherwise. Shuffles are small (one row per
projection row, not per event), so a few shuffle partitions suffice."""
PY4J_LOG_LEVEL = logging.WARNING
"""py4j says at INFO each time it opens or closes a connection to the JVM."""
INTERRUPTED_LOG4J_LEVEL = "OFF"
"""The JVM's log level once the user interrupted: what it says while the cancelled
jobs and the context wind down is noise to someone who asked it to stop."""
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
"""The driver's log configuration (errors only), unless the settings give the driver's
Java options themselves."""


def master_of(master: str | None) -> str:
    return master or os.environ.get(MASTER_ENV) or MASTER_DEFAULT


def settings_of(pairs: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``spark.*`` settings: defaults, then ``$EVENTPLATFORM_SPARK_CONF``, then ``pairs``."""
    settings = dict(DEFAULTS)
    if LOG4J_CONFIG.is_file():
        settings[DRIVER_JAVA_OPTIONS] = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
    settings.update(parse_pairs(os.environ.get(CONF_ENV, ""), source=f"${CONF_ENV}"))
    settings.update(pairs or {})
    for key in settings:
        if not key.startswith("spark."):
            raise ReplayConfigError(f"{key!r} is not a spark.* setting")
    return settings


def parse_pairs(text: str, *, source: str) -> dict[str, str]:
    """``KEY=VALUE,KEY=VALUE`` as a dict; a pair without ``=`` is an error."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ReplayConfigError(f"{source}: {item!r} is not KEY=VALUE")
        pairs[key.strip()] = value.strip()
    return pairs


def spark_session(
    master: str | None = None,
    settings: Mapping[str, str] | None = None,
    app_name: str = APP_NAME_DEFAULT,
) -> SparkSession:
    """Get or create the session, with the ``eventlog`` data source registered."""
    from pyspark.sql import SparkSession

    from eventplatform.spark_projections.source import EventLogDataSource

    logging.getLogger("py4j").setLevel(PY4J_LOG_LEVEL)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master_of(master)).appName(app_name)
    for key, value in settings_of(settings).items():
        builder = builder.config(key, value)
    with _interrupts_deferred():
        session = builder.getOrCreate()
        session.dataSource.register(EventLogDataSource)
        _interrupt_cancels_jobs(session)
    return session


def _interrupt_cancels_jobs(session: SparkSession) -> None:
    """Ctrl-C cancels the session's jobs, from a thread of its own; it raises
    KeyboardInterrupt only where the main thread is not waiting on the JVM.

    Spark's own handler cancels the jobs from inside the signal handler. When the
    main thread is waiting for the JVM's answer (a job running), that call re-enters
    the py4j connection the main thread is reading, which breaks it: the command then
    printed pages of py4j and Java stack traces and exited 1. Cancelled from another
    thread (another connection), the job ends and the main thread's call returns the
    cancellation, which the ``platform`` group reads as the interrupt it noted.

    The JVM's own log falls silent first: a cancelled task can still be finishing
    as this process exits and stops the context, and Spark logs that at ERROR with
    its stack trace (``Block broadcast_0 does not exist``), after ``Interrupted.``"""
    if not in_main_thread():
        return
    context = session.sparkContext

    def cancel() -> None:
        try:
            context.setLogLevel(INTERRUPTED_LOG4J_LEVEL)
            context.cancelAllJobs()
        except Exception:  # the session stopped meanwhile: no job is left to cancel
            log.debug("cancelling Spark's jobs failed", exc_info=True)

    def handler(number: int, frame: FrameType | None) -> None:
        note_interrupt()
        threading.Thread(target=cancel, name="cancel-spark-jobs", daemon=True).start()
        if not _waiting_on_the_jvm(frame):
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)


def _waiting_on_the_jvm(frame: FrameType | None) -> bool:
    """Whether ``frame`` (where a signal found the main thread) is inside py4j."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("py4j."):
            return True
        frame = frame.f_back
    return False


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) during the block takes effect when it ends.

    Creating the first session launches Spark's JVM and waits for it to say where
    it listens. Interrupted half way, the launch forgets the JVM, which then runs on
    after this process ends (Spark starts it ignoring SIGINT) and prints a stack trace.
    So the signal is blocked, not handled, while the session is made: it stays
    pending, and arrives, to whatever handler is then installed (the platform's, see
    :func:`_interrupt_cancels_jobs`), once the session exists and this process's exit
    ends the JVM with it. Threads started in the block keep
    the signal blocked, as they should: only the main thread handles it."""
    if not in_main_thread():
        yield
        return
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
