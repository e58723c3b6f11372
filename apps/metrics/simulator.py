"""A fleet simulator: what a few services' agents report, as metric points.

Every ``interval_s`` each host of each service reports:

* ``http.requests`` (counter, tagged service, host, method and status):
  requests since the last report, Poisson with a diurnal rate;
* ``http.latency_ms`` (histogram, tagged service and host): one observation
  per request sampled (at most ``latency_samples`` per report), log-normal
  with a slow tail;
* ``cpu.utilization`` (gauge, percent) and ``queue.depth`` (gauge), each a
  random walk that follows the load.

One host's agent is faulty for a while (``faulty_minutes``, from the middle
of the window): it reports CPU as a fraction times 100 again, so values
come out a hundred times too large. :attr:`Simulation.faulty` says which
series and window, with the values it should have sent, which is what
:func:`~.corrections.correct_points` takes.

Everything is drawn from one seeded generator: the same seed and window
give the same points.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from eventplatform.apps.metrics.events import MetricPoint, series_of

SERVICES = ("checkout", "search", "catalog")
HOSTS_PER_SERVICE = 2
METHODS = (("GET", 0.8), ("POST", 0.2))
STATUSES = (("200", 0.95), ("404", 0.03), ("500", 0.02))
LATENCY_MEDIAN_MS = {"checkout": 120.0, "search": 45.0, "catalog": 30.0}
FAULTY_FACTOR = 100.0
HOURS_PER_DAY = 24


@dataclass(frozen=True)
class FleetShape:
    interval_s: float = 10.0
    requests_per_second: float = 5.0
    """Per host, at the daily peak."""
    latency_samples: int = 10
    peak_hour: float = 15.0
    night_share: float = 0.3
    faulty_minutes: float = 10.0


@dataclass(frozen=True)
class FaultyWindow:
    series: str
    start: datetime
    end: datetime
    true_points: tuple[MetricPoint, ...]


@dataclass
class Simulation:
    points: list[MetricPoint] = field(default_factory=list)
    faulty: FaultyWindow | None = None


class FleetSimulator:
    def __init__(self, shape: FleetShape | None = None, *, seed: int = 0) -> None:
        self.shape = shape or FleetShape()
        self.random = random.Random(seed)

    def hosts(self) -> list[tuple[str, str]]:
        return [
            (service, f"{service}-{number}")
            for service in SERVICES
            for number in range(1, HOSTS_PER_SERVICE + 1)
        ]

    def run(self, begin: datetime, end: datetime) -> Simulation:
        """The points reported in ``[begin, end)``, in time order."""
        shape = self.shape
        simulation = Simulation()
        faulty_host = self.hosts()[-1][1]
        fault_start = begin + (end - begin) / 2
        fault_end = min(end, fault_start + timedelta(minutes=shape.faulty_minutes))
        cpu = {host: 20.0 for _, host in self.hosts()}
        queue = {host: 0.0 for _, host in self.hosts()}
        true_points = []
        step = timedelta(seconds=shape.interval_s)
        moment = begin
        while moment < end:
            load = self._load(moment)
            for service, host in self.hosts():
                simulation.points.extend(self._requests(service, host, load, moment))
                cpu[host] = _walk(self.random, cpu[host], 15 + 60 * load, 0, 100)
                queue[host] = _walk(self.random, queue[host], 40 * load, 0, math.inf)
                reading = MetricPoint(
                    name="cpu.utilization",
                    tags={"service": service, "host": host},
                    value=round(cpu[host], 2),
                    kind="gauge",
                    at=moment,
                )
                if host == faulty_host and fault_start <= moment < fault_end:
                    true_points.append(reading)
                    reading = reading.model_copy(update={"value": reading.value * FAULTY_FACTOR})
                simulation.points.append(reading)
                simulation.points.append(
                    MetricPoint(
                        name="queue.depth",
                        tags={"service": service, "host": host},
                        value=float(round(queue[host])),
                        kind="gauge",
                        at=moment,
                    )
                )
            moment += step
        if true_points:
            faulty_service = self.hosts()[-1][0]
            series = series_of("cpu.utilization", {"service": faulty_service, "host": faulty_host})
            simulation.faulty = FaultyWindow(series, fault_start, fault_end, tuple(true_points))
        return simulation

    def _load(self, moment: datetime) -> float:
        """The share of the peak rate at ``moment``: a raised cosine over the day."""
        shape = self.shape
        hour = moment.hour + moment.minute / 60
        phase = math.cos(2 * math.pi * (hour - shape.peak_hour) / HOURS_PER_DAY)
        return shape.night_share + (1 - shape.night_share) * (1 + phase) / 2

    def _requests(
        self, service: str, host: str, load: float, moment: datetime
    ) -> list[MetricPoint]:
        shape = self.shape
        total = _poisson(self.random, shape.requests_per_second * load * shape.interval_s)
        counts: dict[tuple[str, str], int] = {}
        for _ in range(total):
            method = _choice(self.random, METHODS)
            status = _choice(self.random, STATUSES)
            counts[method, status] = counts.get((method, status), 0) + 1
        made = [
            MetricPoint(
                name="http.requests",
                tags={"service": service, "host": host, "method": method, "status": status},
                value=float(count),
                kind="counter",
                at=moment,
            )
            for (method, status), count in sorted(counts.items())
        ]
        median = LATENCY_MEDIAN_MS[service]
        for _ in range(min(total, shape.latency_samples)):
            slow = self.random.random() < 0.05
            latency = self.random.lognormvariate(math.log(median * (4 if slow else 1)), 0.5)
            made.append(
                MetricPoint(
                    name="http.latency_ms",
                    tags={"service": service, "host": host},
                    value=round(latency, 3),
                    kind="histogram",
                    at=moment,
                )
            )
        return made


def _walk(generator: random.Random, value: float, target: float, low: float, high: float) -> float:
    moved = value + 0.2 * (target - value) + generator.gauss(0, 2)
    return min(high, max(low, moved))


def _choice(generator: random.Random, weighted: tuple[tuple[str, float], ...]) -> str:
    pick = generator.random()
    for value, weight in weighted:
        pick -= weight
        if pick < 0:
            return value
    return weighted[-1][0]


def _poisson(generator: random.Random, mean: float) -> int:
    if mean > 50:  # normal approximation: Knuth's loop costs one draw per event
        return max(0, round(generator.gauss(mean, math.sqrt(mean))))
    limit, count, product = math.exp(-mean), 0, generator.random()
    while product > limit:
        count += 1
        product *= generator.random()
    return count
