"""An app's part of ``platform demo``: what it simulates, corrects and computes with Spark.

An app takes part in the demo by naming an :class:`AppDemo` in its
declaration, ``App(demo="package.module:attribute")``. The demo runs the
parts of every app that declares one, step by step, each step for all apps
before the next:

1. ``simulate`` makes the events of the window (and may create its topics);
   the demo appends them and prints the report line;
2. the runners fold the events into the ``streamed`` projections;
3. the simulation's ``correct`` retracts or replaces what it made wrong;
4. Spark rebuilds the ``replayed`` projections, which must come out equal
   to the runners' tables; then each of ``spark_steps`` runs;
5. the app's named queries print, with ``query_parameters`` where needed.

Nothing here imports Spark, click or the broker: the demo passes the Spark
session in, typed ``Any``, as the Spark jobs of :mod:`eventplatform.spark_projections`
take it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from eventplatform.client_config import KafkaConnection
from eventplatform.events import Event

__all__ = ["AppDemo", "DemoRun", "DemoSimulation", "DemoSparkStep"]


@dataclass(frozen=True)
class DemoRun:
    """What the demo gives each app: its broker, its database and the simulated window.

    ``bootstrap`` is the demo's broker, as the SDK's clients take it (a plaintext
    :class:`~eventplatform.client_config.ClientConfig`). ``source_options`` are the
    options of Spark's ``eventlog`` source that read the demo's log;
    ``sessions_per_hour`` is ``--sessions-per-hour``, the rate of visits at the daily
    peak, for apps that simulate visits.
    """

    bootstrap: KafkaConnection
    database_url: str
    begin: datetime
    end: datetime
    seed: int
    sessions_per_hour: float
    source_options: Mapping[str, str]


@dataclass(frozen=True)
class DemoSimulation:
    """What an app simulated: events to append in this order, and how to correct them.

    ``report`` is one line, printed after the app's name. ``correct`` runs
    once the runners have applied the events, and returns the lines to print.
    """

    events: Sequence[Event]
    report: str
    correct: Callable[[DemoRun], Sequence[str]]


@dataclass(frozen=True)
class DemoSparkStep:
    """A Spark job the demo runs as one titled step: ``run(spark, demo_run)`` returns lines."""

    title: str
    run: Callable[[Any, DemoRun], Sequence[str]]


@dataclass(frozen=True)
class AppDemo:
    """An app's part of ``platform demo``.

    ``simulates`` and ``corrects`` name, in a few words, what the app
    simulates ("website traffic") and what its correction fixes ("bots"), for
    the titles of those steps. ``streamed`` names the projections the demo's
    runners keep (not those only a Spark step writes); ``replayed`` those the
    demo then rebuilds with Spark and checks, row for row, against the
    runners' tables. ``query_parameters`` gives, per named query, the
    ``--param`` values the demo passes, for queries that need one.
    """

    simulate: Callable[[DemoRun], DemoSimulation]
    simulates: str
    corrects: str = ""
    streamed: Sequence[str] = ()
    replayed: Sequence[str] = ()
    spark_steps: Sequence[DemoSparkStep] = ()
    query_parameters: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
