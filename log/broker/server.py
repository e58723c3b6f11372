"""The broker server: listen, accept, serve connections, shut down cleanly.

``BrokerServer.run`` is a trio task: it opens the broker's data, binds the
listener, reports the bound port through ``task_status.started()`` and
serves until cancelled or until ``shutdown()``. A shutdown stops accepting,
lets each connection finish the request it is handling for up to
``shutdown.grace.ms``, then closes every log cleanly and leaves the
clean-shutdown marker.

Accepting follows Kafka's connection quotas. While ``max.connections`` are
open the broker accepts nothing more (new clients wait in the listen backlog
until one closes); a connection from an address that already has
``max.connections.per.ip`` (or its ``max.connections.per.ip.overrides``
entry) is closed as soon as it is accepted. When ``accept`` fails because the
process or the system is out of descriptors or memory, the broker logs it
(once per ``ACCEPT_FAILURE_LOG_INTERVAL_S``, with the open-file figures),
waits ``ACCEPT_RETRY_DELAY_S`` and tries again; it neither spins nor stops.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import resource
import signal
import socket
import ssl
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from eventplatform.log.broker.broker import Broker, OffLoop
from eventplatform.log.broker.connection import (
    Connection,
    advertised_versions,
    configure_socket,
    peer_host,
)
from eventplatform.log.broker.context import Handler
from eventplatform.log.broker.descriptors import descriptors_in_use, open_files_limit
from eventplatform.log.broker.dispatcher import HANDLER_MODULES, build_handlers
from eventplatform.log.broker.erasing import run_erasures
from eventplatform.log.broker.metrics import BrokerCollector, QuorumCollector
from eventplatform.log.broker.transaction_markers import write_markers
from eventplatform.log.cluster.network import TCP, Network, TlsNetwork
from eventplatform.log.cluster.node import BrokerMember, ControllerNode
from eventplatform.log.config import BrokerConfig, BrokerConfigError
from eventplatform.log.groups.coordinator import GroupCoordinator
from eventplatform.log.invariants import find_invariant_error
from eventplatform.log.metrics_endpoint import new_registry, serve_metrics
from eventplatform.log.security.listeners import Endpoint, SecurityProtocol
from eventplatform.log.security.quotas import CONNECTION_CREATION_RATE, IP
from eventplatform.log.security.session import Session
from eventplatform.log.security.tls import (
    TlsConfigError,
    certificate_principal,
    client_context,
    server_context,
)
from eventplatform.log.storage.partition_log import wall_clock_ms
from eventplatform.log.transactions.coordinator import TransactionCoordinator

log = logging.getLogger("eventplatform.broker")

OPEN_FILES_WANTED = 65536
ACCEPT_RETRY_DELAY_S = 0.1
ACCEPT_FAILURE_LOG_INTERVAL_S = 10.0
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
"""accept() failures that mean "out of resources for now", not a broken listener."""
TLS_HANDSHAKE_TIMEOUT_S = 10.0
"""How long a client has to finish its TLS handshake; a silent one is closed."""


@dataclass(frozen=True, slots=True)
class BoundListener:
    """One configured listener as the server serves it."""

    endpoint: Endpoint
    protocol: SecurityProtocol
    tls: ssl.SSLContext | None


class BrokerServer:
    """See the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        network: Network = TCP,
        clock_ms: Callable[[], int] = wall_clock_ms,
        off_loop: OffLoop = trio.to_thread.run_sync,
        metrics_socket: socket.socket | None = None,
    ) -> None:
        """With a ``metrics_socket`` (see :mod:`eventplatform.log.metrics_endpoint`), the
        server serves its registry, :attr:`metrics`, on it while it runs."""
        self.config = config
        self.network = network
        self.metrics_socket = metrics_socket
        self.metrics = new_registry()
        self.off_loop = off_loop
        self.clock_ms = clock_ms
        self.handlers: dict[int, Handler] = build_handlers(HANDLER_MODULES)
        self.broker: Broker | None = None
        self.controller: ControllerNode | None = None
        self.port: int | None = None
        self._connections: set[Connection] = set()
        self._open_by_host: Counter[str] = Counter()
        self._connection_closed = trio.lowlevel.ParkingLot()
        self._accept_failures_unlogged = 0
        self._accept_failure_logged_at = -ACCEPT_FAILURE_LOG_INTERVAL_S
        self._accept_scope = trio.CancelScope()
        self._connections_scope = trio.CancelScope()
        self._stopped = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        raise_open_file_limit()
        broker = Broker.open(self.config, self.clock_ms, self.off_loop)
        broker.network = cluster_network(self.config, self.network)
        broker.peers.network = broker.network
        broker.api_versions = advertised_versions(self.handlers)
        broker.groups = GroupCoordinator(broker.config, broker.topics, broker.clock_ms)
        broker.transactions = TransactionCoordinator(broker.config, broker.topics, wall_clock_ms)
        self.broker = broker
        self.metrics.register(BrokerCollector(broker, lambda: self.open_connections))
        try:
            listeners = await self._bind(broker)
            async with trio.open_nursery() as nursery:
                await self._start_services(nursery, broker)
                with self._connections_scope:
                    async with trio.open_nursery() as connections:
                        with self._accept_scope:
                            # Once the node has joined its cluster: tools wait for this line.
                            self._log_serving(broker)
                            task_status.started(broker.port)
                            await self._serve_listeners(listeners, connections)
                nursery.cancel_scope.cancel()
        except BaseException as error:
            if find_invariant_error(error) is not None:
                # No clean close: the next start recovers the logs as after a kill.
                log.critical("a broken invariant stops broker %d", self.config.node_id)
                raise
            await self._close(broker)
            raise
        await self._close(broker)

    async def _bind(
        self, broker: Broker
    ) -> list[tuple[BoundListener, trio.abc.Listener[trio.abc.Stream]]]:
        """Bind every listener; the first one's port is the broker's own (replication's,
        and what ``task_status.started`` reports)."""
        bound: list[tuple[BoundListener, trio.abc.Listener[trio.abc.Stream]]] = []
        for endpoint in self.config.bound_listeners:
            protocol = self.config.security_protocol(endpoint.name)
            inter_broker = endpoint.name == self.config.inter_broker_listener
            require_certificate = inter_broker and self.config.cluster_tls
            tls = (
                _tls_context(self.config, require_certificate, sasl=protocol.sasl)
                if protocol.tls
                else None
            )
            served = BoundListener(endpoint, protocol, tls)
            sockets, port = await self.network.listen(endpoint.host, endpoint.port)
            broker.listener_ports[endpoint.name] = port
            bound.extend((served, listener) for listener in sockets)
            host, advertised_port = broker.advertised_address(endpoint.name)
            log.info(
                "listener %s (%s) on %s:%d, advertised as %s:%d",
                endpoint.name,
                protocol.value,
                endpoint.host or "*",
                port,
                host,
                advertised_port,
            )
        self.port = broker.listener_ports[self.config.inter_broker_listener]
        broker.port = self.port
        return bound

    async def _close(self, broker: Broker) -> None:
        with trio.CancelScope(shield=True):
            await self._stop_services(broker)
            broker.close()
            self._stopped.set()

    async def _start_services(self, nursery: trio.Nursery, broker: Broker) -> None:
        nursery.start_soon(broker.run_background)
        nursery.start_soon(broker.run_flusher)
        nursery.start_soon(run_erasures, broker)
        if "controller" in self.config.process_roles:
            self.controller = ControllerNode(self.config, broker.network)
            self.metrics.register(QuorumCollector(self.controller))
            await nursery.start(self.controller.run)
        if self.metrics_socket is not None:
            await nursery.start(serve_metrics, self.metrics, self.metrics_socket)
        if self.config.clustered:
            broker.membership = BrokerMember(broker)
        await nursery.start(broker.membership.run)
        if broker.groups is not None:
            broker.groups.shares.settings = broker.share_group_settings
            broker.groups.shares.partition_counts = broker.partition_counts
            await nursery.start(broker.groups.run)
        await nursery.start(broker.shares.run)
        transactions = broker.transactions
        if transactions is not None:
            transactions.allocate_producer_id = broker.membership.allocate_producer_id
            transactions.write_markers = functools.partial(write_markers, broker)
            await nursery.start(transactions.run)

    async def _stop_services(self, broker: Broker) -> None:
        if broker.groups is not None:
            broker.groups.close()

    async def controlled_shutdown(self) -> None:
        """A cluster member hands its leaderships over before it stops."""
        if self.broker is not None:
            await self.broker.membership.controlled_shutdown()

    async def _serve_listeners(
        self,
        listeners: Sequence[tuple[BoundListener, trio.abc.Listener[trio.abc.Stream]]],
        connections: trio.Nursery,
    ) -> None:
        async with trio.open_nursery() as nursery:
            for served, listener in listeners:
                nursery.start_soon(self._accept_loop, served, listener, connections)

    async def _accept_loop(
        self,
        served: BoundListener,
        listener: trio.abc.Listener[trio.abc.Stream],
        connections: trio.Nursery,
    ) -> None:
        """Accept within the connection quotas; see the module docstring."""
        async with listener:
            while True:
                while self.open_connections >= self.config.max_connections:
                    await self._connection_closed.park()
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                        raise
                    self._log_accept_failure(exc)
                    await trio.sleep(ACCEPT_RETRY_DELAY_S)
                    continue
                host = peer_host(stream)
                allowed = self.config.connections_max_for(host)
                if self._open_by_host[host] >= allowed:
                    log.info(
                        "refused a connection from %s: it has max.connections.per.ip=%d open",
                        host,
                        allowed,
                    )
                    await stream.aclose()
                    continue
                if not self._creation_rate_allows(host):
                    await stream.aclose()
                    continue
                self._open_by_host[host] += 1
                connections.start_soon(self._serve_connection, stream, host, served)

    def _log_serving(self, broker: Broker) -> None:
        first = self.config.bound_listeners[0]
        log.info(
            "serving on %s:%d (advertised %s)",
            first.host or "0.0.0.0",
            broker.listener_ports[first.name],
            broker.advertised_address(first.name)[0],
        )

    def _creation_rate_allows(self, host: str) -> bool:
        """Whether ``host`` is within its ``connection_creation_rate`` quota (an ``ip``
        entity's, or the default ip's); a connection over it is closed at once."""
        broker = self.broker
        assert broker is not None
        quota = broker.quotas.get(((IP, host),), CONNECTION_CREATION_RATE)
        if quota is None:
            quota = broker.quotas.get(((IP, None),), CONNECTION_CREATION_RATE)
        if quota is None:
            return True
        owed_ms = broker.rates.record(
            ((IP, host),), CONNECTION_CREATION_RATE, 1, quota, trio.current_time()
        )
        if owed_ms:
            log.info(
                "refused a connection from %s: over its connection_creation_rate of %g/s",
                host,
                quota,
            )
        return owed_ms == 0

    @property
    def open_connections(self) -> int:
        return self._open_by_host.total()

    def _log_accept_failure(self, exc: OSError) -> None:
        now = trio.current_time()
        if now - self._accept_failure_logged_at < ACCEPT_FAILURE_LOG_INTERVAL_S:
            self._accept_failures_unlogged += 1
            return
        log.error(
            "cannot accept connections: %s (%d descriptors open of the open-file limit %d, "
            "%d connections); %d more failures since the last report; retrying every %d ms",
            os.strerror(exc.errno or 0),
            descriptors_in_use(),
            open_files_limit(),
            self.open_connections,
            self._accept_failures_unlogged,
            ACCEPT_RETRY_DELAY_S * 1000,
        )
        self._accept_failure_logged_at = now
        self._accept_failures_unlogged = 0

    async def _serve_connection(
        self, stream: trio.abc.Stream, host: str, served: BoundListener
    ) -> None:
        try:
            assert self.broker is not None
            if isinstance(stream, trio.SocketStream):
                configure_socket(stream.socket)
            certificate = None
            if served.tls is not None:
                secured, certificate = await _tls_handshake(stream, served, host)
                if secured is None:
                    return
                stream = secured
            session = Session.open(
                served.endpoint.name,
                served.protocol,
                self.broker.sasl,
                certificate,
            )
            connection = Connection(stream, self.broker, self.handlers, session, peer=host)
            self._connections.add(connection)
            try:
                await connection.run()
            finally:
                self._connections.discard(connection)
        finally:
            self._open_by_host[host] -= 1
            if self._open_by_host[host] <= 0:
                del self._open_by_host[host]
            self._connection_closed.unpark_all()

    def shutdown(self) -> None:
        """Stop accepting; give busy connections ``shutdown.grace.ms``, close idle ones now.

        The group coordinator stops first, so JoinGroup and SyncGroup requests it
        holds are answered (NOT_COORDINATOR) instead of waiting out the grace.
        """
        self._accept_scope.cancel()
        if self.broker is not None and self.broker.groups is not None:
            self.broker.groups.close()
        self._connections_scope.deadline = (
            trio.current_time() + self.config.shutdown_grace_ms / 1000
        )
        for connection in list(self._connections):
            connection.stop_when_idle()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def _tls_context(
    config: BrokerConfig, require_certificate: bool = False, *, sasl: bool = False
) -> ssl.SSLContext:
    """The server context of the TLS listeners. The inter-broker listener of a cluster
    always asks for a client certificate; a SASL_SSL listener never does, whatever
    ``ssl.client.auth`` says (KIP-684): its clients are who SASL says they are."""
    client_auth = "required" if require_certificate else config.ssl_client_auth
    try:
        return server_context(
            keystore=config.ssl_keystore_location,
            key_password=config.ssl_key_password,
            truststore=config.ssl_truststore_location,
            client_auth="none" if sasl else client_auth,
        )
    except TlsConfigError as exc:
        raise BrokerConfigError(str(exc)) from exc


def cluster_network(config: BrokerConfig, network: Network = TCP) -> Network:
    """The network the node's cluster traffic takes: ``network`` itself, or mutual TLS over
    it when the inter-broker listener is SSL (see :class:`TlsNetwork`)."""
    if not config.cluster_tls:
        return network
    try:
        client = client_context(
            truststore=config.ssl_truststore_location,
            certificate=config.ssl_keystore_location,
            key_password=config.ssl_key_password,
        )
    except TlsConfigError as exc:
        raise BrokerConfigError(str(exc)) from exc
    return TlsNetwork(network, _tls_context(config, require_certificate=True), client)


async def _tls_handshake(
    stream: trio.abc.Stream, served: BoundListener, host: str
) -> tuple[trio.SSLStream[trio.abc.Stream] | None, str | None]:
    """The TLS stream and the principal its verified client certificate names; no stream
    when the handshake failed or took longer than ``TLS_HANDSHAKE_TIMEOUT_S``."""
    assert served.tls is not None
    secured = trio.SSLStream(stream, served.tls, server_side=True)
    try:
        with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
            await secured.do_handshake()
    except (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError, OSError) as exc:
        reason = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
        log.info(
            "TLS handshake with %s on listener %s failed: %s",
            host,
            served.endpoint.name,
            reason or type(exc).__name__,
        )
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await _send_alert(secured, stream)
            await stream.aclose()
        return None, None
    return secured, certificate_principal(secured.getpeercert())


async def _send_alert(secured: trio.SSLStream[trio.abc.Stream], stream: trio.abc.Stream) -> None:
    """Send the TLS alert OpenSSL wrote when it refused the handshake (an expired or
    unknown certificate, a protocol mismatch), so the client is told why rather than
    seeing the connection drop. trio raises before it sends what is pending, so the
    bytes are taken from its outgoing buffer."""
    outgoing = getattr(secured, "_outgoing", None)
    pending = outgoing.read() if isinstance(outgoing, ssl.MemoryBIO) else b""
    if pending:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await stream.send_all(pending)


def raise_open_file_limit() -> None:
    """Every segment holds a few descriptors; lift the soft limit towards the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def serve(
    config: BrokerConfig, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run a broker until cancelled; ``task_status.started`` reports the bound port."""
    await BrokerServer(config).run(task_status=task_status)


async def serve_until_signalled(
    config: BrokerConfig,
    *,
    metrics_socket: socket.socket | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until SIGINT or SIGTERM, then shut down gracefully (``platform serve``).

    A cluster member first hands its leaderships over (controlled shutdown); a node
    that is only a controller serves its quorum port alone (and, given a
    ``metrics_socket``, its quorum's metrics)."""
    if config.process_roles == frozenset({"controller"}):
        await _serve_controller_until_signalled(
            config, metrics_socket=metrics_socket, task_status=task_status
        )
        return
    server = BrokerServer(config, metrics_socket=metrics_socket)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.run)
            task_status.started(port)
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                await server.controlled_shutdown()
                server.shutdown()
                break
            await server.wait_stopped()


async def _serve_controller_until_signalled(
    config: BrokerConfig,
    *,
    metrics_socket: socket.socket | None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    raise_open_file_limit()
    node = ControllerNode(config, cluster_network(config))
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(node.run)
            if metrics_socket is not None:
                registry = new_registry()
                registry.register(QuorumCollector(node))
                await nursery.start(serve_metrics, registry, metrics_socket)
            log.info("serving on %s:%d (controller only)", config.listen_host, port)
            task_status.started(port)
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                break
            nursery.cancel_scope.cancel()
