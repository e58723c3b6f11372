"""What ``platform cluster status`` shows: the active controller's view of the cluster.

:func:`fetch_cluster_status` asks the active controller (``describe``, over
:mod:`~eventplatform.log.cluster.rpc`) and :func:`render_cluster_status` lays the
answer out: the quorum (voters, the active one, its epoch and metadata
offset), each broker (live or fenced), each partition's leader, replicas and
ISR, the partitions that are under-replicated (ISR smaller than the replica
set) or offline (no leader), and the reassignments in progress.
:func:`call_controller` sends any other request the same way (``platform topics reassign`` does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import trio

from eventplatform.interrupts import python_sigint
from eventplatform.local_cluster import LocalCluster, LocalClusterError
from eventplatform.log.cluster.metadata import NO_LEADER
from eventplatform.log.cluster.network import TCP, Network, TlsNetwork
from eventplatform.log.cluster.rpc import ControllerClient, RpcError
from eventplatform.log.config import parse_voters
from eventplatform.log.security.tls import client_context
from eventplatform.tools.errors import ToolError

STATUS_TIMEOUT_S = 10.0
HEAL_POLL_S = 0.2


def controller_voters(
    *, data_dir: Path | None, controllers: str | None
) -> dict[int, tuple[str, int]]:
    """The controller quorum named by ``--controllers``, else by a ``cluster up`` directory."""
    if controllers:
        try:
            return {node: (host, port) for node, host, port in parse_voters(controllers)}
        except ValueError as exc:
            raise ToolError(f"--controllers: {exc}") from exc
    if data_dir is not None:
        try:
            return LocalCluster.load(data_dir).controllers
        except LocalClusterError as exc:
            raise ToolError(str(exc)) from exc
    raise ToolError("give --data-dir or --controllers")


def controller_network(data_dir: Path | None) -> Network:
    """How an operator reaches the controllers: plain TCP, or for a ``cluster up --secure``
    directory mutual TLS with its operator's certificate."""
    if data_dir is None:
        return TCP
    try:
        local = LocalCluster.load(data_dir)
    except LocalClusterError:
        return TCP
    if not local.secure:
        return TCP
    client = client_context(
        truststore=str(local.certificates / "ca.pem"),
        certificate=str(local.certificates / "admin.crt"),
        key=str(local.certificates / "admin.key"),
    )
    return TlsNetwork(TCP, None, client)


def call_controller(
    voters: Mapping[int, tuple[str, int]],
    method: str,
    params: dict[str, Any],
    *,
    timeout_s: float = STATUS_TIMEOUT_S,
    network: Network = TCP,
) -> dict[str, Any]:
    """The active controller's answer to one request
    (:mod:`~eventplatform.log.cluster.rpc`); raises ToolError when none answers in time,
    or with the controller's message when it refuses."""

    async def ask() -> dict[str, Any]:
        client = ControllerClient(voters, network)
        try:
            return await client.call(method, params, timeout_s=timeout_s)
        finally:
            await client.aclose()

    try:
        with python_sigint():
            return trio.run(ask)
    except trio.TooSlowError as exc:
        raise ToolError(f"no active controller answered within {timeout_s:.0f} s") from exc
    except RpcError as exc:
        raise ToolError(f"the controller refused: {exc}") from exc


def fetch_cluster_status(*, data_dir: Path | None, controllers: str | None) -> dict[str, Any]:
    """The active controller's ``describe`` answer; raises ToolError when none answers."""
    voters = controller_voters(data_dir=data_dir, controllers=controllers)
    return call_controller(voters, "describe", {}, network=controller_network(data_dir))


def render_cluster_status(status: dict[str, Any]) -> Iterator[str]:
    voters = ", ".join(str(v) for v in status["voters"])
    yield (
        f"controllers: {voters}; active {status['controller']} "
        f"(epoch {status['epoch']}, metadata offset {status['metadata_offset']})"
    )
    yield "brokers:"
    for broker in sorted(status["brokers"], key=lambda b: b["broker"]):
        state = "fenced" if broker["fenced"] else "live"
        address = f"{broker['host']}:{broker['port']}"
        yield f"  {broker['broker']}  {address}  {state}  epoch {broker['epoch']}"
    under: list[str] = []
    offline: list[str] = []
    yield "partitions:"
    for name in sorted(status["topics"]):
        for index, partition in enumerate(status["topics"][name]["partitions"]):
            label = f"{name}-{index}"
            leader = partition["leader"]
            if leader == NO_LEADER:
                offline.append(label)
            if len(partition["isr"]) < len(partition["replicas"]):
                under.append(label)
            yield (
                f"  {label}  leader {leader if leader != NO_LEADER else 'none'}"
                f"  epoch {partition['leader_epoch']}"
                f"  replicas {partition['replicas']}  isr {partition['isr']}"
            )
    yield f"under-replicated: {', '.join(under) if under else 'none'}"
    moving = [
        f"{r['topic']}-{r['partition']} to {r['target']} (adding {r['adding']}, "
        f"removing {r['removing']})"
        for r in status.get("reassignments", [])
    ]
    yield f"reassigning: {'; '.join(moving) if moving else 'none'}"
    yield f"offline: {', '.join(offline) if offline else 'none'}"


def healthy(status: dict[str, Any]) -> bool:
    """Every broker live, every partition led and its ISR whole."""
    return all(not b["fenced"] for b in status["brokers"]) and all(
        len(p["isr"]) == len(p["replicas"]) and p["leader"] != NO_LEADER
        for topic in status["topics"].values()
        for p in topic["partitions"]
    )


def wait_healthy(cluster: LocalCluster, timeout_s: float) -> bool:
    """Poll the active controller until the cluster is :func:`healthy`; False at the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if healthy(fetch_cluster_status(data_dir=cluster.directory, controllers=None)):
                return True
        except ToolError:
            pass
        time.sleep(HEAL_POLL_S)
    return False
