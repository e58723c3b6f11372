"""How a ``platform`` command fails: one line that names what it could not reach or use.

Commands report their own failures where they know what was being done (``Error:
cannot create topic 'events': ...``). What is left reaches :class:`PlatformGroup`,
the top-level group, which turns the failures an operator meets into click's
one-line ``Error: ...`` and exit status 1, without a traceback:

- a database that cannot be reached, or that lacks the platform's tables (then the
  line says to run ``platform db upgrade``), named by its URL without the password;
- a Kafka client error, named with the brokers the command was given;
- an operating-system error (a file that cannot be read, a disk that is full).

Ctrl-C (SIGINT) ends any command with ``Interrupted.`` and exit status 130, however
deep the interrupt was raised (trio and thread pools wrap it in exception groups), and
whatever exception a C extension made of it: :mod:`eventplatform.interrupts` notes each
SIGINT while a command runs. A command runs trio under its ``python_sigint`` (or
``cli_support.run_trio_until_interrupted``).

Any other exception is a defect, and keeps its traceback.

The commands note what they reach in the click context (:func:`note_database`,
:func:`note_brokers`), so that the line can name it. SQLAlchemy and the Kafka client
are not imported here: an exception of theirs can only be raised once they are.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from eventplatform.interrupts import interrupt_noted, noting_sigint

INTERRUPTED_EXIT_STATUS = 130
"""The status of a command ended by SIGINT, as shells report it (128 + 2)."""
CHAIN_DEPTH_MAX = 8
"""How far back through an exception's causes an interrupt is looked for."""
DATABASE_META_KEY = "eventplatform.database"
BROKERS_META_KEY = "eventplatform.brokers"
MISSING_TABLE_SIGNS = ("no such table", "no such column", "does not exist", "undefined")
"""Words of SQLite's and PostgreSQL's errors for a table or column that is not there (a
database the platform's migrations have not reached)."""


class PlatformGroup(click.Group):
    """The ``platform`` group: its commands' failures end in one line (see the module)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with noting_sigint():
                return super().invoke(ctx)
        except click.exceptions.Exit:
            raise
        except BaseException as exc:
            if interrupt_noted() or interrupted(exc):
                click.echo("Interrupted.", err=True)
                raise click.exceptions.Exit(INTERRUPTED_EXIT_STATUS) from None
            if isinstance(exc, click.ClickException | click.Abort):
                raise
            message = failure_message(exc, ctx.meta)
            if message is None:
                raise
            raise click.ClickException(message) from None


def note_database(url: str) -> None:
    """The command uses the database at ``url``: a failure of it names it."""
    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[DATABASE_META_KEY] = url


def note_brokers(bootstrap: str) -> None:
    """The command reaches the brokers ``bootstrap``: a failure of them names them."""
    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[BROKERS_META_KEY] = bootstrap


def interrupted(exc: BaseException | None, depth: int = 0) -> bool:
    """A KeyboardInterrupt, a group of exceptions that holds one, or an exception raised
    while one was being handled (a clean-up that failed on the way out, a call into
    Spark's JVM that the interrupt broke), up to :data:`CHAIN_DEPTH_MAX` links back."""
    if exc is None or depth > CHAIN_DEPTH_MAX:
        return False
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(interrupted(inner, depth + 1) for inner in exc.exceptions)
    return interrupted(exc.__cause__ or exc.__context__, depth + 1)


def failure_message(exc: BaseException, meta: dict[str, Any]) -> str | None:
    """The one line for ``exc``, or None for an exception that is a defect."""
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return failure_message(exc.exceptions[0], meta)
    database = _database_failure(exc, meta.get(DATABASE_META_KEY))
    if database is not None:
        return database
    kafka = _kafka_failure(exc, meta.get(BROKERS_META_KEY))
    if kafka is not None:
        return kafka
    if isinstance(exc, OSError):
        return _first_line(str(exc)) or type(exc).__name__
    return None


def _database_failure(exc: BaseException, url: str | None) -> str | None:
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")
    if sqlalchemy_exc is None or not isinstance(exc, sqlalchemy_exc.DBAPIError):
        return None
    reason = _first_line(str(exc.orig)) or type(exc.orig).__name__
    where = f"database {_without_password(url)}" if url else "the database"
    if any(sign in reason.lower() for sign in MISSING_TABLE_SIGNS):
        return f"{where}: {reason} (run `platform db upgrade` to bring its tables up to date)"
    return f"{where}: {reason}"


def _kafka_failure(exc: BaseException, brokers: str | None) -> str | None:
    confluent_kafka = sys.modules.get("confluent_kafka")
    if confluent_kafka is None or not isinstance(exc, confluent_kafka.KafkaException):
        return None
    error = exc.args[0] if exc.args else None
    if isinstance(error, confluent_kafka.KafkaError):
        reason = f"{error.str()} ({error.name()})"
    else:
        reason = str(exc)
    where = f"the cluster at {brokers}" if brokers else "the cluster"
    return f"{where}: {reason}"


def _without_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL fails before it is used; show none of it
        return "(the database URL given)"


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0].strip()
