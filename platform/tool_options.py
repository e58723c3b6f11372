"""What the cluster tools' commands share: the cluster options, argument parsers as
click callbacks, and one way to report a tool's refusal.

``topics``, ``groups``, ``produce``, ``consume``, ``users``, ``acls`` and ``erase``
each take ``--bootstrap``, ``--client-config`` and ``--request-timeout`` through
:func:`cluster_options`, and receive one :class:`~eventplatform.tools.arguments.ClusterSettings`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from eventplatform.cli_support import client_options
from eventplatform.client_config import ClientConfig
from eventplatform.tools.arguments import (
    REQUEST_TIMEOUT_S_DEFAULT,
    ClusterSettings,
)
from eventplatform.tools.errors import ToolError

Decorated = TypeVar("Decorated", bound=Callable[..., Any])


def parsed(parse: Callable[[Any], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that runs a parser from ``eventplatform.tools.arguments``."""

    def callback(context: click.Context, parameter: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ToolError as error:
            raise click.BadParameter(str(error), context, parameter) from error

    return callback


def cluster_options(command: Decorated) -> Decorated:
    """:func:`~eventplatform.cli_support.client_options` and ``--request-timeout``; the
    command receives ``cluster``, with the client config's security (docs/security.md)."""

    @client_options
    @click.option(
        "--request-timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=REQUEST_TIMEOUT_S_DEFAULT,
        show_default=True,
        metavar="SECONDS",
        help="How long one request to the cluster may take.",
    )
    @functools.wraps(command)
    def with_cluster(
        *args: Any, client: ClientConfig, request_timeout: float, **kwargs: Any
    ) -> Any:
        cluster = ClusterSettings(
            bootstrap=client.bootstrap, request_timeout_s=request_timeout, client=client
        )
        return command(*args, cluster=cluster, **kwargs)

    return with_cluster  # type: ignore[return-value]


@contextmanager
def tool_errors() -> Iterator[None]:
    """Turn a :class:`ToolError` into click's one-line ``Error: ...`` and exit status 1."""
    try:
        yield
    except ToolError as error:
        raise click.ClickException(str(error)) from error
