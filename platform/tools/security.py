"""``platform users`` and ``platform acls``: SCRAM users and ACL bindings, through the
admin API as Kafka's own tools manage them (``kafka-configs --alter --add-config
SCRAM-...``, ``kafka-acls``).

A user's password is salted and hashed on the client: the broker receives the salt
and the salted password, and keeps only the keys derived from them. A broker on
its own that is not running yet can be given its first user offline
(:func:`add_user_offline`), the way ``kafka-storage format --add-scram`` seeds a
new cluster: that is how an operator gets in once ``authorizer.class.name`` is set.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from eventplatform.client_config import load_client_config
from eventplatform.events.errors import EventError
from eventplatform.events.log_connection import open_connection, round_trip
from eventplatform.log.protocol import ErrorCode, ProtocolError
from eventplatform.log.protocol.apis import DESCRIBE_ACLS
from eventplatform.log.security.credentials import CREDENTIALS_FILE, CredentialStore
from eventplatform.log.security.scram import (
    ScramMechanism as StoredMechanism,
)
from eventplatform.log.security.scram import (
    credential_from_password,
)
from eventplatform.tools.arguments import ClusterSettings
from eventplatform.tools.errors import InvalidInputError, KafkaRequestError
from eventplatform.tools.kafka_clients import CLIENT_ID, admin_client, wait_for
from eventplatform.tools.tables import format_table

Echo = Callable[[str], Any]
MECHANISMS = {
    "SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
    "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512,
}
MECHANISM_NAMES = {code: name for name, code in MECHANISMS.items()}
SALT_BYTES = 32
OPERATIONS = {
    name: operation
    for name, operation in AclOperation.__members__.items()
    if name not in ("UNKNOWN", "ANY")
}
RESOURCE_NAMES = {
    ResourceType.TOPIC: "topic",
    ResourceType.GROUP: "group",
    ResourceType.BROKER: "cluster",
    ResourceType.TRANSACTIONAL_ID: "transactional-id",
}
CLUSTER_NAME = "kafka-cluster"
BINDING_HEADERS = ["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]


# ------------------------------------------------------------------ users


def add_user(
    cluster: ClusterSettings,
    user: str,
    password: str,
    *,
    mechanisms: Sequence[str],
    iterations: int,
    echo: Echo,
) -> None:
    """Create or replace ``user``'s credentials for each mechanism."""
    upsertions: list[Any] = [
        UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(MECHANISMS[name], iterations),
            password.encode(),
            secrets.token_bytes(SALT_BYTES),
        )
        for name in mechanisms
    ]
    admin = admin_client(cluster)
    futures = admin.alter_user_scram_credentials(
        upsertions, request_timeout=cluster.request_timeout_s
    )
    wait_for(futures[user], cluster, f"cannot store the credentials of {user!r}")
    echo(f"user {user}: {', '.join(mechanisms)} credentials stored ({iterations} iterations)")


def add_user_offline(
    data_dir: Path, user: str, password: str, *, mechanisms: Sequence[str], iterations: int
) -> Path:
    """Store ``user``'s credentials in a stopped broker's data directory (a broker on its
    own); the file the broker reads at its next start."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / CREDENTIALS_FILE
    store = CredentialStore(path)
    credentials = [
        (user, credential_from_password(_stored(name), password, iterations=iterations))
        for name in mechanisms
    ]
    store.apply(credentials, [])
    return path


def delete_user(
    cluster: ClusterSettings, user: str, *, mechanisms: Sequence[str] | None, echo: Echo
) -> None:
    """Remove ``user``'s credentials (every mechanism it has, by default)."""
    admin = admin_client(cluster)
    if mechanisms is None:
        mechanisms = [name for name, _ in _describe(admin, cluster, [user]).get(user, [])]
        if not mechanisms:
            raise KafkaRequestError(f"user {user!r} has no credentials", code="RESOURCE_NOT_FOUND")
    deletions: list[Any] = [UserScramCredentialDeletion(user, MECHANISMS[n]) for n in mechanisms]
    futures = admin.alter_user_scram_credentials(
        deletions, request_timeout=cluster.request_timeout_s
    )
    wait_for(futures[user], cluster, f"cannot delete the credentials of {user!r}")
    echo(f"user {user}: {', '.join(mechanisms)} credentials deleted")


def list_users(cluster: ClusterSettings, users: Sequence[str], *, echo: Echo) -> None:
    """Every user (or those named) with its mechanisms and iterations; never a secret."""
    described = _describe(admin_client(cluster), cluster, list(users))
    rows = [
        (user, name, iterations)
        for user, credentials in sorted(described.items())
        for name, iterations in credentials
    ]
    for line in format_table(["USER", "MECHANISM", "ITERATIONS"], rows):
        echo(line)


def _describe(
    admin: Any, cluster: ClusterSettings, users: list[str]
) -> dict[str, list[tuple[str, int]]]:
    action = "cannot describe users"
    if not users:
        descriptions = wait_for(
            admin.describe_user_scram_credentials(request_timeout=cluster.request_timeout_s),
            cluster,
            action,
        )
    else:
        futures = admin.describe_user_scram_credentials(
            users, request_timeout=cluster.request_timeout_s
        )
        descriptions = {}
        for user, future in futures.items():
            try:
                descriptions[user] = wait_for(future, cluster, f"{action} ({user})")
            except KafkaRequestError as error:
                if error.code != "RESOURCE_NOT_FOUND":
                    raise
    return {
        user: [
            (MECHANISM_NAMES.get(info.mechanism, str(info.mechanism)), info.iterations)
            for info in description.scram_credential_infos
        ]
        for user, description in descriptions.items()
    }


def _stored(name: str) -> StoredMechanism:
    mechanism = StoredMechanism.from_sasl_name(name)
    if mechanism is None:
        raise InvalidInputError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS)}")
    return mechanism


# ------------------------------------------------------------------ ACLs


@dataclass(frozen=True)
class AclTarget:
    """The resources a command names: a type, a name, literal or prefixed."""

    resource_type: ResourceType
    name: str
    pattern: ResourcePatternType


def acl_target(
    *,
    topic: str | None,
    group: str | None,
    transactional_id: str | None,
    cluster: bool,
    prefixed: bool,
) -> AclTarget | None:
    """The one resource named by the options, or None when none is (a filter for all)."""
    named = [
        (kind, name)
        for kind, name in (
            (ResourceType.TOPIC, topic),
            (ResourceType.GROUP, group),
            (ResourceType.TRANSACTIONAL_ID, transactional_id),
            (ResourceType.BROKER, CLUSTER_NAME if cluster else None),
        )
        if name is not None
    ]
    if len(named) > 1:
        raise InvalidInputError(
            "name one resource: --topic, --group, --transactional-id or --cluster"
        )
    if not named:
        return None
    kind, name = named[0]
    if prefixed and kind is ResourceType.BROKER:
        raise InvalidInputError("--prefixed does not apply to --cluster")
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    return AclTarget(kind, name, pattern)


def parse_operations(names: Sequence[str]) -> list[AclOperation]:
    operations = []
    for name in names:
        key = name.strip().upper().replace("-", "_")
        if key not in OPERATIONS:
            known = ", ".join(n.lower().replace("_", "-") for n in OPERATIONS)
            raise InvalidInputError(f"unknown operation {name!r}; known: {known}")
        operations.append(OPERATIONS[key])
    return operations


def check_principal(principal: str) -> str:
    kind, colon, name = principal.partition(":")
    if not colon or not kind or not name:
        raise InvalidInputError(f"a principal is Type:name (User:alice), not {principal!r}")
    return principal


def add_acls(
    cluster: ClusterSettings,
    target: AclTarget,
    principals: Sequence[str],
    operations: Sequence[AclOperation],
    *,
    deny: bool,
    host: str,
    echo: Echo,
) -> None:
    permission = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
    bindings = [
        AclBinding(
            target.resource_type,
            target.name,
            target.pattern,
            principal,
            host,
            operation,
            permission,
        )
        for principal in principals
        for operation in operations
    ]
    admin = admin_client(cluster)
    futures = admin.create_acls(bindings, request_timeout=cluster.request_timeout_s)
    for binding in bindings:
        wait_for(futures[binding], cluster, "cannot create the ACL")
    for line in _binding_table(bindings):
        echo(line)


DESCRIBE_ACLS_VERSION = 3


def list_acls(
    cluster: ClusterSettings,
    target: AclTarget | None,
    principal: str | None,
    *,
    echo: Echo,
) -> None:
    """The bindings a filter matches. Asked over the platform's own connection, since
    librdkafka drops DescribeAcls' error and would show a refused caller an empty list."""
    acl_filter = {
        "resource_type_filter": (target.resource_type if target else ResourceType.ANY).value,
        "resource_name_filter": target.name if target else None,
        "pattern_type_filter": (target.pattern if target else ResourcePatternType.ANY).value,
        "principal_filter": principal,
        "host_filter": None,
        "operation": AclOperation.ANY.value,
        "permission_type": AclPermissionType.ANY.value,
    }
    answer = _ask_any_broker(cluster, DESCRIBE_ACLS, DESCRIBE_ACLS_VERSION, acl_filter)
    if answer["error_code"]:
        name = ErrorCode(answer["error_code"]).name
        message = answer["error_message"] or name
        raise KafkaRequestError(f"cannot list ACLs: {message} ({name})", code=name)
    rows = [
        (
            RESOURCE_NAMES.get(ResourceType(resource["resource_type"]), "?"),
            resource["resource_name"],
            ResourcePatternType(resource["pattern_type"]).name.lower(),
            acl["principal"],
            acl["host"],
            AclOperation(acl["operation"]).name.lower().replace("_", "-"),
            AclPermissionType(acl["permission_type"]).name.lower(),
        )
        for resource in answer["resources"]
        for acl in resource["acls"]
    ]
    for line in format_table(BINDING_HEADERS, sorted(rows)):
        echo(line)


def _ask_any_broker(
    cluster: ClusterSettings, api: Any, version: int, body: dict[str, Any]
) -> dict[str, Any]:
    """One request to the first broker of the bootstrap list that answers."""
    client = cluster.client or load_client_config(bootstrap=cluster.bootstrap)
    failures = []
    for address in cluster.bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            connection = open_connection(
                (host, int(port)), client, timeout_s=cluster.request_timeout_s, client_id=CLIENT_ID
            )
            with connection:
                return round_trip(
                    connection, api, version, body, correlation_id=1, client_id=CLIENT_ID
                )
        except (OSError, ProtocolError, EventError) as exc:
            failures.append(f"{address}: {exc}")
    raise KafkaRequestError(
        f"no answer from the cluster at {cluster.bootstrap} ({'; '.join(failures)})",
        code="_TRANSPORT",
    )


def remove_acls(
    cluster: ClusterSettings,
    target: AclTarget | None,
    principal: str | None,
    operations: Sequence[AclOperation],
    *,
    echo: Echo,
) -> None:
    if target is None and principal is None:
        raise InvalidInputError(
            "name what to remove: a resource (--topic, --group, ...) or a --principal"
        )
    chosen: list[AclOperation | None] = list(operations) or [None]
    filters = [_filter(target, principal, operation) for operation in chosen]
    admin = admin_client(cluster)
    futures = admin.delete_acls(filters, request_timeout=cluster.request_timeout_s)
    removed = []
    for acl_filter in filters:
        removed.extend(wait_for(futures[acl_filter], cluster, "cannot remove ACLs"))
    echo(f"removed {len(removed)} ACL binding{'s' if len(removed) != 1 else ''}")
    for line in _binding_table(removed) if removed else []:
        echo(line)


def _filter(
    target: AclTarget | None, principal: str | None, operation: AclOperation | None = None
) -> AclBindingFilter:
    make: Any = AclBindingFilter  # its annotations refuse the None its filters take
    return make(  # type: ignore[no-any-return]
        target.resource_type if target else ResourceType.ANY,
        target.name if target else None,
        target.pattern if target else ResourcePatternType.ANY,
        principal,
        None,
        operation or AclOperation.ANY,
        AclPermissionType.ANY,
    )


def _binding_table(bindings: Sequence[AclBinding]) -> list[str]:
    rows = [
        (
            RESOURCE_NAMES.get(ResourceType(b.restype_int), str(b.restype)),
            b.name,
            _enum_name(b.resource_pattern_type),
            b.principal,
            b.host,
            _enum_name(b.operation).replace("_", "-"),
            _enum_name(b.permission_type),
        )
        for b in bindings
    ]
    return format_table(BINDING_HEADERS, sorted(rows))


def _enum_name(value: object) -> str:
    return str(getattr(value, "name", value)).lower()
