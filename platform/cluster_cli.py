"""``platform cluster up|down|status``: a local multi-node cluster, and what it looks like."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from eventplatform.tools.errors import ToolError

if TYPE_CHECKING:
    from eventplatform.local_cluster import LocalCluster

data_dir_option = click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path(".eventplatform/cluster"),
    show_default=True,
    help="The directory of a `platform cluster up` cluster: each node's data and log, "
    "and the cluster's ports.",
)
controllers_option = click.option(
    "--controllers",
    default=None,
    metavar="ID@HOST:PORT[,...]",
    help="The controller quorum, instead of --data-dir.",
)


@click.group()
def cluster() -> None:
    """Run a local replicated cluster, and show its state."""


@cluster.command("up")
@click.option("--brokers", type=click.IntRange(1, 9), default=3, show_default=True)
@data_dir_option
@click.option(
    "--override",
    "-o",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="A broker setting for every node (first start only); repeatable.",
)
@click.option(
    "--racks",
    "rack_prefix",
    default="",
    metavar="PREFIX",
    help="Put node N in rack PREFIX<N> (broker.rack, first start only), so that a consumer "
    "naming its client.rack can read from a follower there.",
)
@click.option(
    "--secure",
    is_flag=True,
    help="Mutual TLS between the nodes, SASL_SSL for applications and ACLs, with a local "
    "CA for development (first start only); prints the client configs to use.",
)
@click.option(
    "--metrics",
    is_flag=True,
    help="Each node serves Prometheus metrics on a port of its own (chosen free, then "
    "kept; docs/metrics.md); prints the endpoints.",
)
@click.option("--detach", is_flag=True, help="Leave the nodes running and return.")
def cluster_up(
    brokers: int,
    data_dir: Path,
    overrides: tuple[str, ...],
    rack_prefix: str,
    secure: bool,
    metrics: bool,
    detach: bool,
) -> None:
    """Start a cluster of BROKERS nodes, each broker and controller, as separate processes.

    Without --detach it runs until Ctrl-C, then stops every node with a controlled
    shutdown; with --detach, `platform cluster down` stops it. Nodes an earlier
    detached up left running are left alone: only the missing ones start."""
    from eventplatform.local_cluster import LocalCluster, LocalClusterError

    try:
        local = LocalCluster.create(
            data_dir, brokers, overrides, rack_prefix=rack_prefix, secure=secure, metrics=metrics
        )
        running = local.detached_running()
        missing = [node_id for node_id in local.nodes if node_id not in running]
        local.start(missing)
    except LocalClusterError as exc:
        raise ToolError(str(exc)) from exc
    if running:
        started = ", ".join(map(str, missing)) or "none"
        click.echo(
            f"{brokers}-node cluster is up: started node(s) {started}; the others ran already"
        )
    else:
        click.echo(f"{brokers}-node cluster is up")
    click.echo(f"  bootstrap:   {local.bootstrap}")
    click.echo(f"  controllers: {local.voters}")
    click.echo(f"  logs:        {data_dir}/node-<id>.log")
    for node_id, url in local.metrics_urls.items():
        click.echo(f"  metrics:     node {node_id} at {url}")
    if local.secure:
        _print_secure_configs(local)
    if detach or running:
        # Nodes an earlier detached up left run on: this up joins them, detached too.
        local.write_pids(running)
        if running and not detach:
            click.echo(
                "detached, as the nodes already running are: `platform cluster down` stops all"
            )
        return
    click.echo("Ctrl-C stops it.")
    try:
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        while all(local.running(n) for n in local.nodes):
            time.sleep(0.5)
        click.echo("a node exited; stopping the others", err=True)
    except KeyboardInterrupt:
        pass
    finally:
        local.stop()
        click.echo("cluster stopped")


def _print_secure_configs(local: LocalCluster) -> None:
    """Write the operator's client config, and say how applications connect."""
    admin = local.certificates / "admin.properties"
    admin.write_text("".join(f"{key}={value}\n" for key, value in local.admin_settings().items()))
    admin.chmod(0o600)
    template = local.client_settings("<user>", "<password>")
    click.echo("  secured:     mutual TLS inside, SASL_SSL for applications, ACLs on")
    click.echo(f"  operator:    --client-config {admin}  (the super user User:CN=admin)")
    click.echo(f"  applications connect to {local.client_bootstrap} with:")
    for key, value in template.items():
        click.echo(f"                {key}={value}")
    click.echo("  first user:  platform users add alice --client-config " + str(admin))
    click.echo(
        "  first grant: platform acls add --topic orders --principal User:alice "
        f"--operation write --operation read --client-config {admin}"
    )


@cluster.command("down")
@data_dir_option
def cluster_down(data_dir: Path) -> None:
    """Stop the nodes a detached `cluster up` started."""
    from eventplatform.local_cluster import LocalCluster

    stopped = LocalCluster(data_dir).stop_detached()
    click.echo(f"stopped {stopped} nodes")


@cluster.command("status")
@data_dir_option
@controllers_option
@click.option("--json", "as_json", is_flag=True, help="Print the controller's answer as JSON.")
def show_cluster_status(data_dir: Path, controllers: str | None, as_json: bool) -> None:
    """Controllers, brokers, partition leaders and ISRs, and under-replicated partitions."""
    from eventplatform.tools.cluster_status import fetch_cluster_status, render_cluster_status

    status = fetch_cluster_status(data_dir=data_dir, controllers=controllers)
    if as_json:
        import orjson

        click.echo(orjson.dumps(status, option=orjson.OPT_INDENT_2).decode())
    else:
        for line in render_cluster_status(status):
            click.echo(line)
