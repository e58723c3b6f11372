"""``platform users`` and ``platform acls``: the cluster's SCRAM users and ACL bindings.

Thin shells over :mod:`eventplatform.tools.security`; a password is read from a
prompt or, with ``--password-stdin``, from the first line of standard input, and
never from an argument (it would be in the shell's history and the process list).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from eventplatform.tool_options import cluster_options, tool_errors
from eventplatform.tools.arguments import ClusterSettings

if TYPE_CHECKING:
    from eventplatform.tools.security import AclTarget

MECHANISM_CHOICES = ("SCRAM-SHA-256", "SCRAM-SHA-512")
ITERATIONS_DEFAULT = 8192


def _password(from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password is empty")
    return str(password)


mechanism_option = click.option(
    "--mechanism",
    "mechanisms",
    type=click.Choice(MECHANISM_CHOICES, case_sensitive=False),
    multiple=True,
    help="Which SCRAM credentials; repeatable.  [default: both]",
)


@click.group()
def users() -> None:
    """Create, list and delete SASL/SCRAM users."""


@users.command("add")
@click.argument("user")
@mechanism_option
@click.option(
    "--iterations", type=click.IntRange(4096, 16384), default=ITERATIONS_DEFAULT, show_default=True
)
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Write into a stopped broker's data directory instead (its first user, before "
    "ACLs let anyone in over the network).",
)
@cluster_options
def users_add(
    cluster: ClusterSettings,
    user: str,
    mechanisms: tuple[str, ...],
    iterations: int,
    password_stdin: bool,
    data_dir: Path | None,
) -> None:
    """Create USER, or give it a new password."""
    from eventplatform.tools.security import add_user, add_user_offline

    chosen = [m.upper() for m in mechanisms] or list(MECHANISM_CHOICES)
    password = _password(password_stdin)
    with tool_errors():
        if data_dir is not None:
            path = add_user_offline(
                data_dir, user, password, mechanisms=chosen, iterations=iterations
            )
            click.echo(f"user {user}: {', '.join(chosen)} credentials written to {path}")
            return
        add_user(
            cluster,
            user,
            password,
            mechanisms=chosen,
            iterations=iterations,
            echo=click.echo,
        )


@users.command("list")
@click.argument("names", nargs=-1)
@cluster_options
def users_list(cluster: ClusterSettings, names: tuple[str, ...]) -> None:
    """Every user (or those NAMES) with its mechanisms; never a secret."""
    from eventplatform.tools.security import list_users

    with tool_errors():
        list_users(cluster, names, echo=click.echo)


@users.command("delete")
@click.argument("user")
@mechanism_option
@cluster_options
def users_delete(cluster: ClusterSettings, user: str, mechanisms: tuple[str, ...]) -> None:
    """Delete USER's credentials (all of them unless --mechanism says which)."""
    from eventplatform.tools.security import delete_user

    chosen = [m.upper() for m in mechanisms] or None
    with tool_errors():
        delete_user(cluster, user, mechanisms=chosen, echo=click.echo)


def _resource_options(command: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(
        [
            click.option("--topic", default=None, help="A topic (or, with --prefixed, a prefix)."),
            click.option("--group", default=None, help="A consumer group (or a prefix)."),
            click.option("--transactional-id", default=None, help="A transactional id."),
            click.option("--cluster", "cluster_resource", is_flag=True, help="The cluster."),
            click.option("--prefixed", is_flag=True, help="The name is a prefix."),
        ]
    ):
        command = option(command)
    return command


def _target(
    topic: str | None,
    group: str | None,
    transactional_id: str | None,
    cluster_resource: bool,
    prefixed: bool,
) -> AclTarget | None:
    """The resource the options of :func:`_resource_options` name."""
    from eventplatform.tools.security import acl_target

    return acl_target(
        topic=topic,
        group=group,
        transactional_id=transactional_id,
        cluster=cluster_resource,
        prefixed=prefixed,
    )


@click.group()
def acls() -> None:
    """Grant, list and revoke access (Kafka's ACLs)."""


@acls.command("add")
@_resource_options
@click.option(
    "--principal", "principals", multiple=True, required=True, help="User:NAME; repeatable."
)
@click.option(
    "--operation", "operations", multiple=True, required=True, help="read, write, ...; repeatable."
)
@click.option("--deny", is_flag=True, help="Deny instead of allow (a deny wins).")
@click.option("--host", default="*", show_default=True, help="Only from this address.")
@cluster_options
def acls_add(
    cluster: ClusterSettings,
    topic: str | None,
    group: str | None,
    transactional_id: str | None,
    cluster_resource: bool,
    prefixed: bool,
    principals: tuple[str, ...],
    operations: tuple[str, ...],
    deny: bool,
    host: str,
) -> None:
    """Allow (or deny) PRINCIPALs OPERATIONs on one resource."""
    from eventplatform.tools import security

    with tool_errors():
        target = _target(topic, group, transactional_id, cluster_resource, prefixed)
        if target is None:
            raise click.UsageError(
                "name a resource: --topic, --group, --transactional-id or --cluster"
            )
        security.add_acls(
            cluster,
            target,
            [security.check_principal(p) for p in principals],
            security.parse_operations(operations),
            deny=deny,
            host=host,
            echo=click.echo,
        )


@acls.command("list")
@_resource_options
@click.option("--principal", default=None, help="Only this principal's.")
@cluster_options
def acls_list(
    cluster: ClusterSettings,
    topic: str | None,
    group: str | None,
    transactional_id: str | None,
    cluster_resource: bool,
    prefixed: bool,
    principal: str | None,
) -> None:
    """Every binding, or those of one resource or principal."""
    from eventplatform.tools import security

    with tool_errors():
        target = _target(topic, group, transactional_id, cluster_resource, prefixed)
        security.list_acls(cluster, target, principal, echo=click.echo)


@acls.command("remove")
@_resource_options
@click.option("--principal", default=None, help="Only this principal's.")
@click.option("--operation", "operations", multiple=True, help="Only these operations.")
@cluster_options
def acls_remove(
    cluster: ClusterSettings,
    topic: str | None,
    group: str | None,
    transactional_id: str | None,
    cluster_resource: bool,
    prefixed: bool,
    principal: str | None,
    operations: tuple[str, ...],
) -> None:
    """Remove the bindings of a resource and/or a principal."""
    from eventplatform.tools import security

    with tool_errors():
        target = _target(topic, group, transactional_id, cluster_resource, prefixed)
        security.remove_acls(
            cluster,
            target,
            principal,
            security.parse_operations(operations),
            echo=click.echo,
        )
