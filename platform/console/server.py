"""The console's web application: Starlette routes rendering Jinja2 templates, served by uvicorn.

Pages are read-only views rendered on the server; the one form posts a retry of a
projection's parked events. Readers block on the cluster or the database, so the
routes are plain functions, which Starlette runs in its thread pool. A reader's
failure (the cluster did not answer, the database is missing) is shown on the page
as one line, never as a traceback. A POST must come from the console's own pages:
one whose ``Origin`` names another site is refused.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from eventplatform.cli_failures import BROKERS_META_KEY, DATABASE_META_KEY, failure_message
from eventplatform.console.chart import bar_chart
from eventplatform.console.data import (
    RECORDS_DEFAULT,
    RECORDS_MAX,
    ConsoleSettings,
    browse,
    read_cluster,
    read_groups,
)
from eventplatform.projections.errors import ProjectionError
from eventplatform.tools.errors import ToolError

HERE = Path(__file__).resolve().parent
SHUTDOWN_TIMEOUT_S = 5.0
"""How long Ctrl-C waits for requests in flight before closing them."""
READ_ERRORS = (ToolError, ProjectionError)


def console_app(settings: ConsoleSettings) -> Starlette:
    templates = Jinja2Templates(directory=HERE / "templates")

    def page(request: Request, name: str, title: str, **context: Any) -> Response:
        return templates.TemplateResponse(
            request, name, {"title": title, "page": name.removesuffix(".html"), **context}
        )

    reached = {
        DATABASE_META_KEY: settings.database_url,
        BROKERS_META_KEY: settings.client.bootstrap,
    }

    def attempt(read: Callable[[], Any]) -> tuple[Any, str | None]:
        """What ``read`` returns, or the one line the command line would print for its
        failure (a database or cluster it could not use); any other exception is a defect."""
        try:
            return read(), None
        except READ_ERRORS as error:
            return None, str(error)
        except Exception as error:
            message = failure_message(error, reached)
            if message is None:
                raise
            return None, message

    def cluster_page(request: Request) -> Response:
        view, error = attempt(lambda: read_cluster(settings))
        return page(request, "cluster.html", "Cluster", cluster=view, error=error)

    def groups_page(request: Request) -> Response:
        view, error = attempt(lambda: read_groups(settings))
        return page(request, "groups.html", "Groups", groups=view, error=error)

    def projections_page(request: Request) -> Response:
        from eventplatform.projections.operations import projection_status

        statuses, error = attempt(
            lambda: projection_status(
                settings.apps, database_url=settings.database_url, bootstrap=settings.client
            )
        )
        return page(
            request,
            "projections.html",
            "Projections",
            statuses=statuses,
            error=error,
            rows_chart=_rows_chart(statuses or []),
            lag_chart=_lag_chart(statuses or []),
            operator=settings.operator,
            message=request.query_params.get("message"),
        )

    def retry(request: Request) -> Response:
        from eventplatform.projections.operations import retry_dead_letters

        if not settings.operator:
            return PlainTextResponse(
                "refused: this console only reads (start it with --operator)", status_code=403
            )
        if not _same_origin(request):
            return PlainTextResponse("refused: the form came from another site", status_code=403)
        name = request.path_params["name"]
        outcome, error = attempt(
            lambda: retry_dead_letters(
                name, settings.apps, database_url=settings.database_url, bootstrap=settings.client
            )
        )
        message = error or (
            f"{name}: {outcome.retried} retried, {outcome.still_parked} still parked"
        )
        return RedirectResponse(f"/projections?{urlencode({'message': message})}", status_code=303)

    def topics_page(request: Request) -> Response:
        cluster, error = attempt(lambda: read_cluster(settings))
        topic = request.query_params.get("topic")
        browsed = None
        if topic and error is None:
            try:
                partition = int(request.query_params.get("partition", "0"))
                offset_text = request.query_params.get("offset", "")
                offset = int(offset_text) if offset_text.strip() else None
                count = int(request.query_params.get("count", str(RECORDS_DEFAULT)))
            except ValueError:
                error = "partition, offset and count are whole numbers"
            else:
                browsed, error = attempt(lambda: browse(settings, topic, partition, offset, count))
        return page(
            request,
            "topics.html",
            "Topics",
            cluster=cluster,
            topic=topic,
            browsed=browsed,
            error=error,
            records_default=RECORDS_DEFAULT,
            records_max=RECORDS_MAX,
        )

    def apps_page(request: Request) -> Response:
        from eventplatform.console.dashboards import app_dashboard

        with_queries = [app for app in settings.apps if app.queries]
        chosen = request.path_params.get("name")
        app = next((each for each in with_queries if each.name == chosen), None)
        error = None
        if chosen is not None and app is None:
            error = f"no installed app {chosen!r} ships named queries"
        panels, read_error = (
            attempt(lambda: app_dashboard(app, settings.database_url)) if app else (None, None)
        )
        return page(
            request,
            "apps.html",
            f"App {app.name}" if app else "Apps",
            apps=with_queries,
            app=app,
            panels=panels,
            error=error or read_error,
        )

    templates.env.filters["quote"] = lambda text: quote(str(text), safe="")
    return Starlette(
        routes=[
            Route("/", cluster_page),
            Route("/groups", groups_page),
            Route("/projections", projections_page),
            Route("/projections/{name}/retry", retry, methods=["POST"]),
            Route("/topics", topics_page),
            Route("/apps", apps_page),
            Route("/apps/{name}", apps_page),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]
    )


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    return origin is None or origin == f"{request.url.scheme}://{request.url.netloc}"


def _rows_chart(statuses: Sequence[Any]) -> str:
    bars = [
        (f"{status.name}: {table}", rows)
        for status in statuses
        for table, rows in sorted(status.rows.items())
        if rows is not None
    ]
    return bar_chart(bars, title="Rows per table")


def _lag_chart(statuses: Sequence[Any]) -> str:
    bars = [(status.name, status.lag_events) for status in statuses if status.lag_error is None]
    return bar_chart(bars, title="Lag in events")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0 picks one); ``OSError`` when the
    address is in use or not this machine's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


class _Server(uvicorn.Server):
    """uvicorn's server, ending on SIGINT or SIGTERM like the platform's other long-running
    commands: it stops serving and returns, where uvicorn's own handling raises the signal
    again once it has stopped."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        signals = (signal.SIGINT, signal.SIGTERM)
        previous = {number: signal.signal(number, self.handle_exit) for number in signals}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


def serve(settings: ConsoleSettings, sock: socket.socket) -> None:
    """Serve the console on ``sock`` until SIGINT or SIGTERM (call it from the main thread)."""
    config = uvicorn.Config(
        console_app(settings),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=int(SHUTDOWN_TIMEOUT_S),
    )
    _Server(config).run(sockets=[sock])
