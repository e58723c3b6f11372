"""``platform apps guestbook``: the guestbook's one command, written with the platform's
public command-line support only."""

from __future__ import annotations

import click

from eventplatform.cli_support import append_in_chunks, bootstrap_option
from external_app.events import TOPIC, Signed


@click.group()
def commands() -> None:
    """A guestbook."""


@commands.command()
@bootstrap_option
@click.option("--guest", required=True, help="Who signs.")
@click.option("--message", default="hello", show_default=True, help="What they write.")
@click.option("--times", type=click.IntRange(1), default=1, show_default=True)
def sign(bootstrap: str, guest: str, message: str, times: int) -> None:
    """Sign the guestbook, --times times."""
    append_in_chunks(bootstrap, [Signed(guest=guest, message=message) for _ in range(times)])
    click.echo(f"{guest} signed {times} times on {TOPIC!r}")
