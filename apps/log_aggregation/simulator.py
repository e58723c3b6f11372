"""A log simulator: what a few services write, as log lines.

Each service runs on a few hosts and writes lines from its own set of
message templates, with the variables (ids, durations, addresses) drawn
fresh each time. Lines follow the day's load (a raised cosine), levels are
mostly ``info`` with some ``debug``, ``warn`` and ``error``, and now and then
a dependency fails and one host writes a burst of the same error.

Some lines leak a secret (a password in a login line, a bearer token in a
request dump): :attr:`Simulation.leaked` lists the text they hold, which
:func:`~.redaction.redact` takes.

Everything is drawn from one seeded generator: the same seed and window
give the same lines.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from eventplatform.apps.log_aggregation.events import Level, LogLine

HOURS_PER_DAY = 24
LEAKED_SECRET = "hunter2-s3cr3t"
Draw = Callable[[random.Random], str]


def _id(generator: random.Random) -> str:
    return f"{generator.getrandbits(32):08x}"


def _ms(generator: random.Random) -> str:
    return str(round(generator.lognormvariate(math.log(40), 0.8)))


def _user(generator: random.Random) -> str:
    return generator.choice(("alice", "bob", "carol", "dave", "erin", "frank"))


def _ip(generator: random.Random) -> str:
    return f"10.0.{generator.randrange(256)}.{generator.randrange(1, 255)}"


TEMPLATES: dict[str, tuple[tuple[Level, float, str, tuple[Draw, ...]], ...]] = {
    "api": (
        ("info", 50.0, "GET /v1/orders/{} 200 in {} ms", (_id, _ms)),
        ("info", 20.0, "POST /v1/orders 201 in {} ms for user '{}'", (_ms, _user)),
        ("debug", 10.0, "cache hit for order {}", (_id,)),
        ("warn", 3.0, "slow request {} took {} ms", (_id, _ms)),
        ("error", 1.0, "payment {} failed after {} ms for user '{}'", (_id, _ms, _user)),
    ),
    "worker": (
        ("info", 40.0, "job {} done in {} ms", (_id, _ms)),
        ("debug", 15.0, "picked job {} from queue default", (_id,)),
        ("warn", 2.0, "job {} retried after {} ms", (_id, _ms)),
        ("error", 1.0, "job {} failed: connection to {}:5432 refused", (_id, _ip)),
    ),
    "auth": (
        ("info", 30.0, "login ok for user '{}' from {}", (_user, _ip)),
        ("warn", 4.0, "login failed for user '{}' from {}", (_user, _ip)),
        ("error", 0.5, "token {} rejected: signature mismatch", (_id,)),
    ),
}
HOSTS_PER_SERVICE = 2
BURST_MESSAGE = "upstream db-primary unavailable after {} retries"


@dataclass(frozen=True)
class LogShape:
    lines_per_second: float = 4.0
    """Per service, at the daily peak."""
    peak_hour: float = 15.0
    night_share: float = 0.3
    burst_share: float = 0.002
    """The chance, per line, that a burst of errors starts."""
    burst_lines: int = 20
    leak_share: float = 0.01
    """The share of ``auth`` lines that leak a password."""


@dataclass
class Simulation:
    lines: list[LogLine] = field(default_factory=list)
    leaked: str = LEAKED_SECRET
    leaking: int = 0
    """How many lines hold :attr:`leaked`."""


class LogSimulator:
    def __init__(self, shape: LogShape | None = None, *, seed: int = 0) -> None:
        self.shape = shape or LogShape()
        self.random = random.Random(seed)

    def run(self, begin: datetime, end: datetime) -> Simulation:
        """The lines written in ``[begin, end)``, in time order."""
        simulation = Simulation()
        for service in TEMPLATES:
            self._service(simulation, service, begin, end)
        simulation.lines.sort(key=lambda line: line.at)
        return simulation

    def _service(self, into: Simulation, service: str, begin: datetime, end: datetime) -> None:
        shape, draw = self.shape, self.random
        moment = begin
        while True:
            rate = shape.lines_per_second * self._load(moment)
            moment += timedelta(seconds=draw.expovariate(rate))
            if moment >= end:
                return
            host = f"{service}-{draw.randrange(1, HOSTS_PER_SERVICE + 1)}"
            if draw.random() < shape.burst_share:
                for number in range(shape.burst_lines):
                    at = moment + timedelta(milliseconds=50 * number)
                    message = BURST_MESSAGE.format(number + 1)
                    into.lines.append(self._line(service, host, "error", message, at))
                continue
            level, message = self._message(service)
            if service == "auth" and draw.random() < shape.leak_share:
                message = f"{message} password={LEAKED_SECRET}"
                into.leaking += 1
            into.lines.append(self._line(service, host, level, message, moment))

    def _message(self, service: str) -> tuple[Level, str]:
        templates = TEMPLATES[service]
        pick = self.random.random() * sum(weight for _, weight, _, _ in templates)
        for level, weight, text, draws in templates:
            pick -= weight
            if pick < 0:
                return level, text.format(*(value(self.random) for value in draws))
        level, _, text, draws = templates[-1]
        return level, text.format(*(value(self.random) for value in draws))

    def _line(self, service: str, host: str, level: Level, message: str, at: datetime) -> LogLine:
        attributes = {"request_id": _id(self.random)} if service == "api" else {}
        return LogLine(
            service=service, host=host, level=level, message=message, attributes=attributes, at=at
        )

    def _load(self, moment: datetime) -> float:
        shape = self.shape
        hour = moment.hour + moment.minute / 60
        phase = math.cos(2 * math.pi * (hour - shape.peak_hour) / HOURS_PER_DAY)
        return shape.night_share + (1 - shape.night_share) * (1 + phase) / 2
