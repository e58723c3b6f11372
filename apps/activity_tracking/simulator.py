"""A traffic simulator: visits to a website as activity events, with realistic shapes.

* **Diurnal load.** Sessions start as a Poisson process whose rate follows
  the time of day (UTC): a raised cosine from ``night_share`` of the peak
  at the quietest hour to the peak at ``peak_hour``.
* **Power-law popularity.** Pages and search terms are drawn with Zipf
  weights, so a few pages take most views; returning visitors too.
* **Sessions.** A visitor (signed in, or anonymous) lands from a referrer,
  views a geometric number of pages (some bounce after one), clicks and
  searches in between, with log-normal dwell times, and most sessions end
  explicitly.
* **Funnel.** Any page leads to pricing with ``pricing_share``, pricing to
  signup with ``signup_share``.
* **Bots.** ``bot_share`` of sessions are crawlers: dozens of views a second
  or two apart, a crawler user agent, a spam referrer.

Everything is drawn from one seeded generator: the same seed and window
give the same events.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import accumulate

from eventplatform.apps.activity_tracking.events import (
    ActivityEvent,
    Clicked,
    PageViewed,
    Searched,
    SessionEnded,
    SessionStarted,
)
from eventplatform.apps.activity_tracking.projections import PRICING_PATH, SIGNUP_PATH

SECONDS_PER_HOUR = 3600.0
HOURS_PER_DAY = 24
REFERRERS = (
    (None, 30.0),
    ("https://www.google.com/search?q=", 40.0),
    ("https://www.bing.com/search?q=", 6.0),
    ("https://news.ycombinator.com/item?id=", 5.0),
    ("https://twitter.com/i/web/status/", 5.0),
    ("https://www.reddit.com/r/programming/comments/", 4.0),
    ("https://duckduckgo.com/?q=", 4.0),
    ("https://github.com/", 6.0),
)
BOT_REFERRERS = ("https://spam.example/", "https://seo-ranks.example/top")
USER_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 Version/18.1 Safari/605",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (Linux; Android 15) AppleWebKit/537.36 Chrome/131.0 Mobile Safari/537.36",
)
BOT_USER_AGENTS = ("Mozilla/5.0 (compatible; RankCrawler/2.1; +https://seo-ranks.example/bot)",)
SECTIONS = ("docs", "blog", "products", "guides")
WORDS = (
    "install", "deploy", "pricing", "api", "events", "kafka", "replay", "metrics", "logs",
    "sessions", "funnel", "retention", "compaction", "spark", "sql", "export", "alerts",
    "billing", "teams", "security", "sso", "webhooks", "limits", "backup", "upgrade",
)  # fmt: skip


@dataclass(frozen=True)
class TrafficShape:
    """The knobs of the simulated traffic (rates per hour, shares in 0..1)."""

    site: str = "https://shop.example"
    sessions_per_hour: float = 600.0
    """At the peak hour."""
    night_share: float = 0.15
    peak_hour: float = 15.0
    pages: int = 300
    page_zipf: float = 1.1
    visitors: int = 20_000
    visitor_zipf: float = 0.8
    signed_in_share: float = 0.3
    bounce_share: float = 0.4
    pages_mean: float = 4.0
    """Mean pages of a session that does not bounce."""
    dwell_median_s: float = 25.0
    pricing_share: float = 0.12
    signup_share: float = 0.35
    click_share: float = 0.3
    search_share: float = 0.08
    zero_results_share: float = 0.15
    end_share: float = 0.8
    bot_share: float = 0.02
    bot_pages: tuple[int, int] = (25, 80)


@dataclass
class SimulatedSession:
    session_id: str
    bot: bool
    events: list[ActivityEvent] = field(default_factory=list)

    @property
    def start(self) -> datetime:
        return self.events[0].at


class _Zipf:
    """Draws indexes 0..n-1 with weights 1/(i+1)^s."""

    def __init__(self, n: int, s: float, rng: random.Random) -> None:
        self.cumulative = list(accumulate(1.0 / (i + 1) ** s for i in range(n)))
        self.rng = rng

    def draw(self) -> int:
        point = self.rng.random() * self.cumulative[-1]
        low, high = 0, len(self.cumulative) - 1
        while low < high:  # the first cumulative weight above the point
            middle = (low + high) // 2
            if self.cumulative[middle] <= point:
                low = middle + 1
            else:
                high = middle
        return low


class TrafficSimulator:
    """Sessions and their events for a window of time; see the module docstring."""

    def __init__(self, shape: TrafficShape | None = None, *, seed: int = 0) -> None:
        self.shape = shape or TrafficShape()
        self.rng = random.Random(seed)
        self.pages = self._catalog()
        self._page = _Zipf(len(self.pages), self.shape.page_zipf, self.rng)
        self._visitor = _Zipf(self.shape.visitors, self.shape.visitor_zipf, self.rng)
        self._word = _Zipf(len(WORDS), 1.0, self.rng)

    def rate(self, moment: datetime) -> float:
        """Sessions per hour at ``moment``: the diurnal curve."""
        shape = self.shape
        hour = moment.hour + moment.minute / 60 + moment.second / SECONDS_PER_HOUR
        phase = math.cos(2 * math.pi * (hour - shape.peak_hour) / HOURS_PER_DAY)
        return shape.sessions_per_hour * (
            shape.night_share + (1 - shape.night_share) * (1 + phase) / 2
        )

    def sessions(self, start: datetime, end: datetime) -> Iterator[SimulatedSession]:
        """The sessions that start in ``[start, end)``, in order of their start."""
        peak = self.shape.sessions_per_hour / SECONDS_PER_HOUR
        moment = start
        while True:  # a Poisson process at the peak rate, thinned to the curve
            moment += timedelta(seconds=self.rng.expovariate(peak))
            if moment >= end:
                return
            if self.rng.random() * self.shape.sessions_per_hour <= self.rate(moment):
                yield self._session(moment)

    def events(self, start: datetime, end: datetime) -> Iterator[ActivityEvent]:
        """Every event of the sessions that start in ``[start, end)``, in time order."""
        streams = (iter(session.events) for session in self.sessions(start, end))
        return heapq.merge(*streams, key=lambda event: event.at)

    # ------------------------------------------------------------ one session

    def _session(self, start: datetime) -> SimulatedSession:
        shape, rng = self.shape, self.rng
        session = SimulatedSession(f"s-{rng.getrandbits(64):016x}", rng.random() < shape.bot_share)
        if session.bot:
            self._bot(session, start)
            return session
        visitor = self._visitor.draw()
        who = (
            {"user_id": f"u-{visitor}"}
            if rng.random() < shape.signed_in_share
            else {"anonymous_id": f"a-{visitor}"}
        )
        common = {"session_id": session.session_id, "user_agent": rng.choice(USER_AGENTS), **who}
        referrer = self._referrer()
        path = self.pages[self._page.draw()]
        moment = start
        session.events.append(
            SessionStarted(url=self._url(path), referrer=referrer, at=moment, **common)
        )
        session.events.append(
            PageViewed(url=self._url(path), referrer=referrer, at=moment, **common)
        )
        pages = (
            1 if rng.random() < shape.bounce_share else 1 + self._geometric(shape.pages_mean - 1)
        )
        for _ in range(pages - 1):
            moment = self._after(moment)
            if rng.random() < shape.click_share:
                session.events.append(
                    Clicked(url=self._url(path), target=self._target(path), at=moment, **common)
                )
                moment = self._after(moment, 0.2)
            if rng.random() < shape.search_share:
                query = " ".join(WORDS[self._word.draw()] for _ in range(rng.randint(1, 3)))
                found = 0 if rng.random() < shape.zero_results_share else rng.randint(1, 40)
                session.events.append(
                    Searched(url=self._url(path), query=query, results=found, at=moment, **common)
                )
                moment = self._after(moment, 0.2)
            path = self._next_path(path)
            session.events.append(PageViewed(url=self._url(path), at=moment, **common))
        if rng.random() < shape.end_share:
            session.events.append(
                SessionEnded(url=self._url(path), at=self._after(moment), **common)
            )
        return session

    def _bot(self, session: SimulatedSession, start: datetime) -> None:
        rng = self.rng
        common = {
            "session_id": session.session_id,
            "anonymous_id": f"b-{rng.getrandbits(32):08x}",
            "user_agent": rng.choice(BOT_USER_AGENTS),
        }
        referrer = rng.choice(BOT_REFERRERS)
        moment = start
        session.events.append(
            SessionStarted(url=self._url("/"), referrer=referrer, at=moment, **common)
        )
        for _ in range(rng.randint(*self.shape.bot_pages)):
            path = self.pages[rng.randrange(len(self.pages))]
            session.events.append(PageViewed(url=self._url(path), at=moment, **common))
            moment += timedelta(seconds=rng.uniform(0.2, 2.0))

    def _next_path(self, path: str) -> str:
        shape, rng = self.shape, self.rng
        if path == PRICING_PATH and rng.random() < shape.signup_share:
            return SIGNUP_PATH
        if path != PRICING_PATH and rng.random() < shape.pricing_share:
            return PRICING_PATH
        return self.pages[self._page.draw()]

    def _after(self, moment: datetime, scale: float = 1.0) -> datetime:
        seconds = self.rng.lognormvariate(math.log(self.shape.dwell_median_s * scale), 1.0)
        return moment + timedelta(seconds=min(seconds, 1800.0))

    def _geometric(self, mean: float) -> int:
        """A draw from the geometric distribution on 1, 2, ... with the given mean."""
        success = 1 / max(mean, 1.0)
        return (
            1 + int(math.log(1 - self.rng.random()) / math.log(1 - success)) if success < 1 else 1
        )

    def _referrer(self) -> str | None:
        weights = [weight for _, weight in REFERRERS]
        base = self.rng.choices([url for url, _ in REFERRERS], weights)[0]
        return None if base is None else f"{base}{self.rng.getrandbits(24)}"

    def _url(self, path: str) -> str:
        return f"{self.shape.site}{path}"

    def _target(self, path: str) -> str:
        return "signup-button" if path == PRICING_PATH else f"link-{self.rng.randrange(12)}"

    def _catalog(self) -> list[str]:
        """The site's pages, most popular first: home, pricing, signup, then sections."""
        rng = random.Random(self.rng.getrandbits(64))
        pages = ["/", PRICING_PATH, "/docs", SIGNUP_PATH]
        while len(pages) < self.shape.pages:
            words = "-".join(rng.sample(WORDS, rng.randint(1, 3)))
            candidate = f"/{rng.choice(SECTIONS)}/{words}"
            if candidate not in pages:
                pages.append(candidate)
        return pages[: self.shape.pages]
