"""Broker configuration: Kafka's broker-level names, a TOML file and overrides.

``BrokerConfig.load(path, overrides)`` reads an optional TOML file (flat
``"key" = value`` pairs or nested tables, which join with dots:
``[log] retention.ms = 1000`` is ``log.retention.ms``) and then applies
``key=value`` overrides. Unknown keys and bad values raise
``BrokerConfigError`` naming the key.

Broker-level ``log.*`` keys are the defaults of every topic; a topic's own
configs (CreateTopics, IncrementalAlterConfigs) override them, as in Kafka.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventplatform.log.replica.selector import parse_selector
from eventplatform.log.security.listeners import (
    DEFAULT_PROTOCOL_MAP,
    Endpoint,
    SecurityProtocol,
    format_endpoints,
    format_protocol_map,
    parse_endpoints,
    parse_listener_names,
    parse_protocol_map,
)
from eventplatform.log.storage import InvalidConfigError, LogConfig
from eventplatform.log.storage.config import SEGMENT_BYTES_MIN, boolean, integer_between

LISTEN_PORT_DEFAULT = 9092
SOCKET_REQUEST_BYTES_MAX_DEFAULT = 100 * 1024 * 1024
IN_FLIGHT_REQUESTS_MAX_DEFAULT = 32
QUEUED_REQUEST_BYTES_MAX_DEFAULT = 256 * 1024 * 1024
"""``queued.max.request.bytes``: request bytes all connections together may hold; two
frames of the largest size fit at once."""
CONNECTIONS_MAX_DEFAULT = 1000
"""``max.connections``: with ``max.connections.per.ip`` it bounds descriptors and the
per-connection read-ahead; Kafka's default is unbounded."""
CONNECTIONS_PER_IP_MAX_DEFAULT = 2**31 - 1
CONNECTIONS_MAX_IDLE_MS_DEFAULT = 10 * 60 * 1000
RETENTION_CHECK_INTERVAL_MS_DEFAULT = 5 * 60 * 1000
CLEANER_BACKOFF_MS_DEFAULT = 15_000
GROUP_SESSION_TIMEOUT_MS_MIN_DEFAULT = 6_000
GROUP_SESSION_TIMEOUT_MS_MAX_DEFAULT = 30 * 60 * 1000
GROUP_INITIAL_REBALANCE_DELAY_MS_DEFAULT = 3_000
GROUP_SIZE_MAX_DEFAULT = 2**31 - 1
OFFSETS_TOPIC_PARTITIONS_DEFAULT = 50
OFFSETS_TOPIC_SEGMENT_BYTES_DEFAULT = 100 * 1024 * 1024
OFFSETS_RETENTION_MINUTES_DEFAULT = 7 * 24 * 60
OFFSETS_COMMIT_TIMEOUT_MS_DEFAULT = 5_000
"""How long an offset commit waits for the ISR of its ``__consumer_offsets`` partition."""
PRODUCER_ID_EXPIRATION_MS_DEFAULT = 24 * 60 * 60 * 1000
SHUTDOWN_GRACE_MS_DEFAULT = 5_000
FAILED_AUTHENTICATION_DELAY_MS_DEFAULT = 100
"""``connection.failed.authentication.delay.ms``: how long a failed authentication waits
before its answer and the close (Kafka's default), so guessing costs time."""
FAILED_AUTHENTICATIONS_PER_IP_MAX_DEFAULT = 20
"""``failed.authentication.max.per.ip``: failed authentications an address may have in
the last minute before its attempts are refused without a look at the credentials."""
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_MECHANISMS_DEFAULT = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SSL_CLIENT_AUTH_MODES = ("none", "requested", "required")
AUTHORIZER_NAMES = (
    "",
    "StandardAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)
"""``authorizer.class.name``: empty for none, or a name Kafka gives its ACL authorizer
(every one of them means this broker's ACLs)."""

# Broker-level names of the topic-level log configs.
LOG_KEYS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "message.max.bytes": "max.message.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.preallocate": "preallocate",
    "log.local.retention.ms": "local.retention.ms",
    "log.local.retention.bytes": "local.retention.bytes",
}
_LOG_ALIASES = {
    "log.retention.hours": ("retention.ms", 3_600_000),
    "log.retention.minutes": ("retention.ms", 60_000),
    "log.roll.hours": ("segment.ms", 3_600_000),
}


class BrokerConfigError(InvalidConfigError):
    """A broker config key is unknown or its value is malformed."""


def _text(raw: Any) -> str:
    return str(raw)


RACK_CHARS_MAX = 255
"""The longest ``broker.rack`` (the controller's registration request takes no more)."""


def _rack(raw: Any) -> str:
    """``broker.rack``: the broker's rack or zone, printable, at most RACK_CHARS_MAX
    characters; empty for none (Kafka's null)."""
    rack = str(raw).strip()
    if len(rack) > RACK_CHARS_MAX or not rack.isprintable():
        raise ValueError(f"must be printable and at most {RACK_CHARS_MAX} characters")
    return rack


PROCESS_ROLES = ("broker", "controller")


def _roles(raw: Any) -> frozenset[str]:
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    roles = frozenset(str(item).strip() for item in items if str(item).strip())
    if not roles <= set(PROCESS_ROLES):
        raise ValueError(f"expected a comma-separated subset of {', '.join(PROCESS_ROLES)}")
    return roles


Voter = tuple[int, str, int]


def parse_voters(raw: Any) -> tuple[Voter, ...]:
    """``1@host:port,2@host:port``: each controller's id and quorum address."""
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    voters = []
    for item in (str(item).strip() for item in items):
        if not item:
            continue
        node, at, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not colon or not node.isdigit() or not port.isdigit() or not host:
            raise ValueError(f"{item!r} is not id@host:port")
        voters.append((int(node), host.strip("[]"), int(port)))
    if len({node for node, _, _ in voters}) != len(voters):
        raise ValueError("a controller id appears twice")
    return tuple(sorted(voters))


def parse_connection_overrides(raw: Any) -> tuple[tuple[str, int], ...]:
    """``host:count,host:count``: ``max.connections.per.ip`` for the named addresses."""
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    overrides: dict[str, int] = {}
    for item in (str(item).strip() for item in items):
        if not item:
            continue
        host, colon, count = item.rpartition(":")
        if not colon or not host.strip() or not count.strip().isdigit():
            raise ValueError(f"{item!r} is not host:count")
        overrides[host.strip().strip("[]")] = int(count)
    return tuple(sorted(overrides.items()))


def _mechanisms(raw: Any) -> tuple[str, ...]:
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    mechanisms = tuple(str(item).strip().upper() for item in items if str(item).strip())
    unknown = [name for name in mechanisms if name not in SASL_MECHANISMS]
    if unknown or not mechanisms:
        raise ValueError(f"expected a comma-separated subset of {', '.join(SASL_MECHANISMS)}")
    return mechanisms


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        value = str(raw).strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value

    return parse


def _keystore_type(raw: Any) -> str:
    if str(raw).strip().upper() != "PEM":
        raise ValueError("only PEM keystores and truststores are read (ssl.keystore.type=PEM)")
    return "PEM"


def _authorizer(raw: Any) -> str:
    name = str(raw).strip()
    if name not in AUTHORIZER_NAMES:
        raise ValueError(f"expected one of {', '.join(repr(n) for n in AUTHORIZER_NAMES)}")
    return name


def _principals(raw: Any) -> frozenset[str]:
    """``super.users``: ``User:alice;User:bob``, as Kafka separates them."""
    items = raw if isinstance(raw, list | tuple) else str(raw).split(";")
    principals = frozenset(str(item).strip() for item in items if str(item).strip())
    for principal in principals:
        kind, colon, name = principal.partition(":")
        if not colon or not kind or not name:
            raise ValueError(f"{principal!r} is not Type:name")
    return principals


def format_voters(voters: Iterable[Voter]) -> str:
    return ",".join(f"{node}@{host}:{port}" for node, host, port in voters)


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "node.id": integer_between(0, 2**31 - 1),
    "cluster.id": _text,
    "broker.rack": _rack,
    "replica.selector.class": parse_selector,
    "auto.create.topics.enable": boolean,
    "delete.topic.enable": boolean,
    "num.partitions": integer_between(1, 100_000),
    "default.replication.factor": integer_between(1, 32_767),
    "socket.request.max.bytes": integer_between(1024, 2**31 - 1),
    "max.in.flight.requests.per.connection": integer_between(1, 10_000),
    "queued.max.request.bytes": integer_between(1024, 2**63 - 1),
    "max.connections": integer_between(1, 2**31 - 1),
    "max.connections.per.ip": integer_between(1, 2**31 - 1),
    "max.connections.per.ip.overrides": parse_connection_overrides,
    "connections.max.idle.ms": integer_between(1),
    "log.retention.check.interval.ms": integer_between(1),
    "log.cleaner.backoff.ms": integer_between(1),
    "group.min.session.timeout.ms": integer_between(1),
    "group.max.session.timeout.ms": integer_between(1),
    "group.initial.rebalance.delay.ms": integer_between(0),
    "group.max.size": integer_between(1, 2**31 - 1),
    "group.share.record.lock.duration.ms": integer_between(1_000, 3_600_000),
    "group.share.min.record.lock.duration.ms": integer_between(1_000, 30_000),
    "group.share.max.record.lock.duration.ms": integer_between(30_000, 3_600_000),
    "group.share.delivery.count.limit": integer_between(2, 10),
    "group.share.partition.max.record.locks": integer_between(100, 10_000),
    "group.share.max.size": integer_between(1, 1_000),
    "group.share.max.share.sessions": integer_between(1, 100_000),
    "offsets.topic.num.partitions": integer_between(1, 10_000),
    "offsets.topic.segment.bytes": integer_between(1024, 2**31 - 1),
    "offsets.retention.minutes": integer_between(1),
    "offsets.commit.timeout.ms": integer_between(1),
    "transaction.state.log.num.partitions": integer_between(1, 10_000),
    "transaction.state.log.replication.factor": integer_between(1, 32_767),
    "transaction.state.log.segment.bytes": integer_between(1024, 2**31 - 1),
    "transaction.max.timeout.ms": integer_between(1),
    "transactional.id.expiration.ms": integer_between(1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": integer_between(1),
    "producer.id.expiration.ms": integer_between(1),
    "shutdown.grace.ms": integer_between(0),
    "process.roles": _roles,
    "controller.quorum.voters": parse_voters,
    "controller.quorum.election.timeout.ms": integer_between(10),
    "controller.quorum.fetch.timeout.ms": integer_between(10),
    "metadata.log.max.record.bytes.between.snapshots": integer_between(1),
    "metadata.log.segment.bytes": integer_between(SEGMENT_BYTES_MIN, 2**31 - 1),
    "broker.session.timeout.ms": integer_between(100),
    "broker.heartbeat.interval.ms": integer_between(10),
    "replica.lag.time.max.ms": integer_between(10),
    "replica.fetch.wait.max.ms": integer_between(0),
    "offsets.topic.replication.factor": integer_between(1, 32_767),
    "auto.leader.rebalance.enable": boolean,
    "leader.imbalance.check.interval.seconds": integer_between(1),
    "listeners": parse_endpoints,
    "advertised.listeners": parse_endpoints,
    "listener.security.protocol.map": parse_protocol_map,
    "inter.broker.listener.name": lambda raw: (parse_listener_names(raw) or ("",))[0],
    "controller.listener.names": parse_listener_names,
    "sasl.enabled.mechanisms": _mechanisms,
    "ssl.keystore.location": _text,
    "ssl.keystore.type": _keystore_type,
    "ssl.key.password": _text,
    "ssl.truststore.location": _text,
    "ssl.truststore.type": _keystore_type,
    "ssl.client.auth": _choice(*SSL_CLIENT_AUTH_MODES),
    "connections.max.reauth.ms": integer_between(0),
    "connection.failed.authentication.delay.ms": integer_between(0, 60_000),
    "failed.authentication.max.per.ip": integer_between(1, 2**31 - 1),
    "authorizer.class.name": _authorizer,
    "super.users": _principals,
    "allow.everyone.if.no.acl.found": boolean,
}


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Everything the broker reads at start; field names are Kafka's with dots as underscores."""

    data_dir: Path = Path(".eventplatform/data")
    listen_host: str = "127.0.0.1"
    listen_port: int = LISTEN_PORT_DEFAULT
    advertised_host: str | None = None
    node_id: int = 1
    cluster_id: str = ""
    broker_rack: str = ""
    """The rack (or zone) this broker is in, as Metadata tells clients; empty for none."""
    replica_selector_class: str = ""
    """Which replica a consumer reads from (KIP-392): empty for the leader, or
    :data:`~eventplatform.log.replica.selector.RACK_AWARE`."""
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    socket_request_max_bytes: int = SOCKET_REQUEST_BYTES_MAX_DEFAULT
    max_in_flight_requests_per_connection: int = IN_FLIGHT_REQUESTS_MAX_DEFAULT
    queued_max_request_bytes: int = QUEUED_REQUEST_BYTES_MAX_DEFAULT
    max_connections: int = CONNECTIONS_MAX_DEFAULT
    max_connections_per_ip: int = CONNECTIONS_PER_IP_MAX_DEFAULT
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()
    connections_max_idle_ms: int = CONNECTIONS_MAX_IDLE_MS_DEFAULT
    log_retention_check_interval_ms: int = RETENTION_CHECK_INTERVAL_MS_DEFAULT
    log_cleaner_backoff_ms: int = CLEANER_BACKOFF_MS_DEFAULT
    group_min_session_timeout_ms: int = GROUP_SESSION_TIMEOUT_MS_MIN_DEFAULT
    group_max_session_timeout_ms: int = GROUP_SESSION_TIMEOUT_MS_MAX_DEFAULT
    group_initial_rebalance_delay_ms: int = GROUP_INITIAL_REBALANCE_DELAY_MS_DEFAULT
    group_max_size: int = GROUP_SIZE_MAX_DEFAULT
    group_share_record_lock_duration_ms: int = 30_000
    group_share_min_record_lock_duration_ms: int = 15_000
    group_share_max_record_lock_duration_ms: int = 60_000
    group_share_delivery_count_limit: int = 5
    group_share_partition_max_record_locks: int = 2_000
    group_share_max_size: int = 200
    group_share_max_share_sessions: int = 2_000
    offsets_topic_num_partitions: int = OFFSETS_TOPIC_PARTITIONS_DEFAULT
    offsets_topic_segment_bytes: int = OFFSETS_TOPIC_SEGMENT_BYTES_DEFAULT
    offsets_retention_minutes: int = OFFSETS_RETENTION_MINUTES_DEFAULT
    offsets_commit_timeout_ms: int = OFFSETS_COMMIT_TIMEOUT_MS_DEFAULT
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT
    shutdown_grace_ms: int = SHUTDOWN_GRACE_MS_DEFAULT
    process_roles: frozenset[str] = frozenset()
    """Empty for a standalone broker (no quorum); else ``broker``, ``controller`` or both."""
    controller_quorum_voters: tuple[Voter, ...] = ()
    controller_quorum_election_timeout_ms: int = 1_000
    controller_quorum_fetch_timeout_ms: int = 2_000
    metadata_log_max_record_bytes_between_snapshots: int = 20 * 1024 * 1024
    metadata_log_segment_bytes: int = 8 * 1024 * 1024
    broker_session_timeout_ms: int = 9_000
    broker_heartbeat_interval_ms: int = 500
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    offsets_topic_replication_factor: int = 3
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    listeners: tuple[Endpoint, ...] = ()
    """Where to bind, by listener name; empty for one PLAINTEXT listener on
    ``listen_host:listen_port`` (see :mod:`eventplatform.log.security.listeners`)."""
    advertised_listeners: tuple[Endpoint, ...] = ()
    listener_security_protocol_map: tuple[tuple[str, SecurityProtocol], ...] = DEFAULT_PROTOCOL_MAP
    inter_broker_listener_name: str = ""
    """The listener brokers use with one another; empty for the first listener."""
    controller_listener_names: tuple[str, ...] = ()
    """The name the quorum ports (``controller.quorum.voters``) go by in
    ``listener.security.protocol.map``: PLAINTEXT, or SSL with client certificates."""
    sasl_enabled_mechanisms: tuple[str, ...] = SASL_MECHANISMS_DEFAULT
    ssl_keystore_location: str = ""
    """A PEM file with this broker's private key and its certificate chain."""
    ssl_keystore_type: str = "PEM"
    ssl_key_password: str = ""
    ssl_truststore_location: str = ""
    """A PEM file of the certificate authorities client certificates are checked against."""
    ssl_truststore_type: str = "PEM"
    ssl_client_auth: str = "none"
    connections_max_reauth_ms: int = 0
    """How long a SASL session lasts before the client must authenticate again on the
    same connection (KIP-368); 0: for the connection's life."""
    connection_failed_authentication_delay_ms: int = FAILED_AUTHENTICATION_DELAY_MS_DEFAULT
    failed_authentication_max_per_ip: int = FAILED_AUTHENTICATIONS_PER_IP_MAX_DEFAULT
    authorizer_class_name: str = ""
    """Set, the broker's ACLs decide every request; empty, everything is allowed."""
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    log_defaults: LogConfig = field(default_factory=LogConfig)

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.listen_host

    @property
    def bound_listeners(self) -> tuple[Endpoint, ...]:
        """The listeners to bind: ``listeners``, or PLAINTEXT on ``listen_host:listen_port``."""
        if self.listeners:
            return self.listeners
        return (Endpoint(SecurityProtocol.PLAINTEXT.value, self.listen_host, self.listen_port),)

    def security_protocol(self, listener: str) -> SecurityProtocol:
        return dict(self.listener_security_protocol_map)[listener]

    @property
    def inter_broker_listener(self) -> str:
        return self.inter_broker_listener_name or self.bound_listeners[0].name

    def advertised_endpoint(self, listener: str, bound_port: int) -> tuple[str, int]:
        """What clients of ``listener`` are told: its ``advertised.listeners`` entry, else
        its bind address (``advertised_host`` for an empty or wildcard host) with the
        port it bound."""
        for endpoint in self.advertised_listeners:
            if endpoint.name == listener:
                return endpoint.host or self.advertised, endpoint.port or bound_port
        for endpoint in self.bound_listeners:
            if endpoint.name == listener and endpoint.host not in ("", "0.0.0.0", "::"):
                return self.advertised_host or endpoint.host, bound_port
        return self.advertised, bound_port

    def check_listeners(self) -> None:
        """Raise BrokerConfigError when the listener settings contradict each other, or
        the share groups' lock duration its bounds."""
        protocols = dict(self.listener_security_protocol_map)
        names = {endpoint.name for endpoint in self.bound_listeners}
        for endpoint in self.bound_listeners:
            if endpoint.name not in protocols:
                raise BrokerConfigError(
                    f"listener {endpoint.name} has no entry in listener.security.protocol.map"
                )
        for endpoint in self.advertised_listeners:
            if endpoint.name not in names:
                raise BrokerConfigError(
                    f"advertised.listeners names {endpoint.name}, which is not in listeners"
                )
        if self.inter_broker_listener_name and self.inter_broker_listener_name not in names:
            raise BrokerConfigError(
                f"inter.broker.listener.name {self.inter_broker_listener_name} is not in listeners"
            )
        ports = [endpoint.port for endpoint in self.bound_listeners if endpoint.port]
        if len(set(ports)) != len(ports):
            raise BrokerConfigError("two listeners bind the same port")
        used = {protocols[name] for name in names}
        if any(protocol.tls for protocol in used) and not self.ssl_keystore_location:
            raise BrokerConfigError("an SSL or SASL_SSL listener needs ssl.keystore.location")
        if self.ssl_client_auth != "none" and not self.ssl_truststore_location:
            raise BrokerConfigError(
                f"ssl.client.auth={self.ssl_client_auth} needs ssl.truststore.location"
            )
        if self.clustered:
            self._check_cluster_security(protocols)
        low = self.group_share_min_record_lock_duration_ms
        high = self.group_share_max_record_lock_duration_ms
        if not low <= self.group_share_record_lock_duration_ms <= high:
            raise BrokerConfigError(
                "group.share.record.lock.duration.ms must be within "
                f"group.share.min.record.lock.duration.ms ({low}) and "
                f"group.share.max.record.lock.duration.ms ({high})"
            )

    @property
    def cluster_tls(self) -> bool:
        """Whether the cluster's own traffic (replication, the controller, the quorum) goes
        over mutual TLS: the inter-broker listener is SSL."""
        protocol = dict(self.listener_security_protocol_map).get(self.inter_broker_listener)
        return self.clustered and protocol is SecurityProtocol.SSL

    def _check_cluster_security(self, protocols: dict[str, SecurityProtocol]) -> None:
        inter_broker = protocols[self.inter_broker_listener]
        if inter_broker not in (SecurityProtocol.PLAINTEXT, SecurityProtocol.SSL):
            raise BrokerConfigError(
                f"the inter-broker listener {self.inter_broker_listener} speaks "
                f"{inter_broker.value}; brokers and controllers authenticate one another "
                "with client certificates: make it SSL (or PLAINTEXT on a trusted network)"
            )
        for name in self.controller_listener_names:
            if protocols.get(name, inter_broker) is not inter_broker:
                raise BrokerConfigError(
                    f"controller listener {name} must speak what the inter-broker "
                    f"listener does ({inter_broker.value}): the quorum and replication "
                    "share one cluster network"
                )
        used = {protocols[endpoint.name] for endpoint in self.bound_listeners}
        secured = used != {SecurityProtocol.PLAINTEXT} or bool(self.authorizer_class_name)
        if secured and inter_broker is SecurityProtocol.PLAINTEXT:
            raise BrokerConfigError(
                "a cluster with SASL, TLS or ACLs needs an SSL inter-broker listener, so "
                "that replication and the quorum are authenticated too"
            )
        if inter_broker is SecurityProtocol.SSL and not self.ssl_truststore_location:
            raise BrokerConfigError(
                "an SSL inter-broker listener needs ssl.truststore.location: brokers and "
                "controllers check one another's certificates against it"
            )

    def connections_max_for(self, host: str) -> int:
        """``max.connections.per.ip`` for ``host``, with its override if it has one."""
        return dict(self.max_connections_per_ip_overrides).get(host, self.max_connections_per_ip)

    @property
    def clustered(self) -> bool:
        """Whether the node belongs to a quorum-managed cluster (``process.roles`` is set)."""
        return bool(self.process_roles)

    def check_cluster(self) -> None:
        """Raise BrokerConfigError when the cluster settings contradict each other."""
        if not self.process_roles:
            if self.default_replication_factor > 1:
                raise BrokerConfigError(
                    "default.replication.factor above 1 needs a cluster (process.roles)"
                )
            return
        voters = {node for node, _, _ in self.controller_quorum_voters}
        if not voters:
            raise BrokerConfigError(
                "process.roles needs controller.quorum.voters (id@host:port,...)"
            )
        if "controller" in self.process_roles and self.node_id not in voters:
            raise BrokerConfigError(
                f"node.id {self.node_id} runs a controller but is not in controller.quorum.voters"
            )
        if "controller" not in self.process_roles and self.node_id in voters:
            raise BrokerConfigError(
                f"node.id {self.node_id} is a voter in controller.quorum.voters; "
                "add controller to process.roles"
            )

    @classmethod
    def load(
        cls,
        path: Path | None = None,
        overrides: Iterable[str] = (),
        **fields: Any,
    ) -> BrokerConfig:
        """Read ``path`` (TOML), apply ``key=value`` overrides, then the given fields."""
        properties: dict[str, Any] = {}
        if path is not None:
            try:
                document = tomllib.loads(Path(path).read_text())
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise BrokerConfigError(f"cannot read config file {path}: {exc}") from exc
            properties.update(_flatten(document))
        for item in overrides:
            key, separator, value = item.partition("=")
            if not separator or not key.strip():
                raise BrokerConfigError(f"override {item!r} is not key=value")
            properties[key.strip()] = value.strip()
        config = dataclasses.replace(cls.from_properties(properties), **fields)
        config.check_cluster()
        config.check_listeners()
        return config

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> BrokerConfig:
        changes: dict[str, Any] = {}
        log_properties: dict[str, Any] = {}
        for key, raw in properties.items():
            if key in LOG_KEYS:
                try:
                    LogConfig.from_properties({LOG_KEYS[key]: raw})
                except InvalidConfigError as exc:
                    message = str(exc).replace(LOG_KEYS[key], key)
                    raise BrokerConfigError(message) from None
                log_properties[LOG_KEYS[key]] = raw
            elif key in _LOG_ALIASES:
                target, scale = _LOG_ALIASES[key]
                log_properties[target] = _parse(key, integer_between(-1), raw) * scale
            elif key in _PARSERS:
                changes[key.replace(".", "_")] = _parse(key, _PARSERS[key], raw)
            else:
                known = ", ".join(sorted([*_PARSERS, *LOG_KEYS, *_LOG_ALIASES]))
                raise BrokerConfigError(f"unknown broker config {key!r}; known: {known}")
        try:
            changes["log_defaults"] = LogConfig.from_properties(log_properties)
        except InvalidConfigError as exc:
            raise BrokerConfigError(str(exc)) from exc
        return cls(**changes)

    def to_properties(self) -> dict[str, str]:
        """Kafka-named string values of every broker-level key."""
        out = {}
        for key in _PARSERS:
            value = getattr(self, key.replace(".", "_"))
            if isinstance(value, bool):
                out[key] = str(value).lower()
            elif key == "process.roles":
                out[key] = ",".join(sorted(value))
            elif key == "controller.quorum.voters":
                out[key] = format_voters(value)
            elif key == "max.connections.per.ip.overrides":
                out[key] = ",".join(f"{host}:{count}" for host, count in value)
            elif key in ("listeners", "advertised.listeners"):
                out[key] = format_endpoints(value)
            elif key == "listener.security.protocol.map":
                out[key] = format_protocol_map(value)
            elif key in ("sasl.enabled.mechanisms", "controller.listener.names"):
                out[key] = ",".join(value)
            elif key == "super.users":
                out[key] = ";".join(sorted(value))
            else:
                out[key] = str(value)
        topic_values = self.log_defaults.to_properties()
        for broker_key, topic_key in LOG_KEYS.items():
            out[broker_key] = topic_values[topic_key]
        return out


def _parse(key: str, parse: Callable[[Any], Any], raw: Any) -> Any:
    try:
        return parse(raw)
    except (TypeError, ValueError) as exc:
        raise BrokerConfigError(f"invalid value {raw!r} for {key}: {exc}") from None


def _flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in document.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out
