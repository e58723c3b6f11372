"""Who may do what: the one seam every handler asks about operations on a resource.

Kafka reports "authorized operations" as a 32-bit field with bit ``code`` set
for each ACL operation (``AclOperation``) the caller may perform on a
resource; the field is ``OPERATIONS_NOT_REQUESTED`` when the client did not
ask. Which operations a resource type has at all is fixed by Kafka
(``SUPPORTED_OPERATIONS``: a topic can be read, written, created, deleted,
altered, described and have its configs described and altered; a group can
be read, described and deleted; the cluster can be created in, altered,
described, acted on by brokers, configured and written to idempotently).

This broker has no ACLs yet: :func:`authorize` allows every operation, as
Kafka does without an authorizer, so a client that asks is told every
supported operation. Handlers call :func:`authorized_operations` and never
build the bit field themselves, so access control replaces one function.
"""

from __future__ import annotations

from enum import IntEnum

from eventplatform.log.broker.context import RequestContext

OPERATIONS_NOT_REQUESTED = -(2**31)
"""The bit field's value when the request did not ask for authorized operations."""


class AclOperation(IntEnum):
    """Kafka's ACL operation codes; each is a bit position in the authorized-operations field."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclResourceType(IntEnum):
    """Kafka's ACL resource type codes (not the config resource types of DescribeConfigs)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


CLUSTER_NAME = "kafka-cluster"
"""The one cluster resource's name, as Kafka spells it."""

SUPPORTED_OPERATIONS: dict[AclResourceType, frozenset[AclOperation]] = {
    AclResourceType.TOPIC: frozenset(
        {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }
    ),
    AclResourceType.GROUP: frozenset(
        {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}
    ),
    AclResourceType.CLUSTER: frozenset(
        {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
        }
    ),
    AclResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    AclResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    AclResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}
"""Every operation that applies to each resource type, as Kafka's ACL entries define them."""


def authorize(
    context: RequestContext, operation: AclOperation, resource_type: AclResourceType, name: str
) -> bool:
    """Whether the caller of ``context`` may perform ``operation`` on the resource.

    Every operation is allowed: the broker has no ACLs, as Kafka without an
    authorizer.
    """
    del context, operation, resource_type, name
    return True


def authorized_operations(
    context: RequestContext, resource_type: AclResourceType, name: str, *, requested: bool
) -> int:
    """The authorized-operations bit field for one resource, or ``OPERATIONS_NOT_REQUESTED``
    when the request did not ask for it."""
    if not requested:
        return OPERATIONS_NOT_REQUESTED
    field = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if authorize(context, operation, resource_type, name):
            field |= 1 << operation
    return field
