"""The logs app's part of ``platform demo``: services' lines, some leaking a password, and
those lines redacted from the tables and erased from the log."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from eventplatform.apps.log_aggregation.projections import lines
from eventplatform.apps.log_aggregation.redaction import redact
from eventplatform.apps.log_aggregation.retention import ensure_topic
from eventplatform.apps.log_aggregation.simulator import LogShape, LogSimulator, Simulation
from eventplatform.projections import AppDemo, DemoRun, DemoSimulation

SERVICES = LogShape(lines_per_second=1.0)
"""Fewer lines than the simulator's default, so the demo's hours append in seconds."""


def simulate(run: DemoRun) -> DemoSimulation:
    """The services' lines over the window, on the ``logs`` topic with its retention."""
    services = LogSimulator(SERVICES, seed=run.seed).run(run.begin, run.end)
    ensure_topic(run.bootstrap)
    report = f"{len(services.lines)} lines ({services.leaking} leak a password)"
    return DemoSimulation(services.lines, report, correct=partial(redact_leaks, services))


def redact_leaks(services: Simulation, run: DemoRun) -> Sequence[str]:
    """Every line holding the leaked password, retracted from every projection and then
    erased from the log (the demo's runners are running, so the retraction applies)."""
    reason = "a password in the auth service's log"
    redacted = redact(run.database_url, run.bootstrap, services.leaked, reason, erase=True)
    return [
        f"redacted {redacted.lines} log lines that held a password: out of every table, "
        f"and {redacted.erased} records erased from the log"
    ]


demo = AppDemo(
    simulate=simulate,
    simulates="logs",
    corrects="leaked passwords",
    streamed=(lines.name,),
    query_parameters={"search": {"q": "login failed"}},
)
