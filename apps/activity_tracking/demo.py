"""The activity app's part of ``platform demo``: hours of website traffic, then its bots
retracted, and the sessions rebuilt by Spark as the replay check."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from eventplatform.apps.activity_tracking import bots
from eventplatform.apps.activity_tracking.events import ActivityEvent
from eventplatform.apps.activity_tracking.projections import traffic, visits
from eventplatform.apps.activity_tracking.simulator import TrafficShape, TrafficSimulator
from eventplatform.projections import AppDemo, DemoRun, DemoSimulation


def simulate(run: DemoRun) -> DemoSimulation:
    """Sessions at ``run.sessions_per_hour`` at the peak, their events in time order."""
    shape = replace(TrafficShape(), sessions_per_hour=run.sessions_per_hour)
    sessions = list(TrafficSimulator(shape, seed=run.seed).sessions(run.begin, run.end))
    events = sorted((event for session in sessions for event in session.events), key=_moment)
    bots_simulated = sum(session.bot for session in sessions)
    report = f"{len(events)} events of {len(sessions)} sessions ({bots_simulated} bots)"
    return DemoSimulation(events, report, correct=retract_bots)


def retract_bots(run: DemoRun) -> Sequence[str]:
    """Every session the sessions projection shows to be a bot, retracted."""
    retracted = bots.retract_bots(run.database_url, run.bootstrap)
    events = sum(retraction.events for retraction in retracted)
    return [f"retracted {len(retracted)} bot sessions ({events} events)"]


def _moment(event: ActivityEvent) -> datetime:
    return event.at


demo = AppDemo(
    simulate=simulate,
    simulates="website traffic",
    corrects="bots",
    streamed=(traffic.name, visits.name),
    replayed=(visits.name,),
)
