"""Who may do what: the one seam every handler asks about operations on a resource.

Kafka reports "authorized operations" as a 32-bit field with bit ``code`` set
for each ACL operation (``AclOperation``) the caller may perform on a
resource; the field is ``OPERATIONS_NOT_REQUESTED`` when the client did not
ask. Which operations a resource type has at all is fixed by Kafka
(``SUPPORTED_OPERATIONS``: a topic can be read, written, created, deleted,
altered, described and have its configs described and altered; a group can
be read, described and deleted; the cluster can be created in, altered,
described, acted on by brokers, configured and written to idempotently).

Every handler asks :func:`authorize` (or :func:`authorize_cluster`) before it
acts, and :func:`authorized_operations` for the bit field; none decides by
itself. With ``authorizer.class.name`` set the broker's ACLs decide; without it
every operation is allowed, as Kafka does without an authorizer.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from eventplatform.log.broker.context import RequestContext
from eventplatform.log.replica.topics import Topic
from eventplatform.log.security.acls import CLUSTER_NAME, AclOperation, AclResourceType

__all__ = [
    "CLUSTER_NAME",
    "OPERATIONS_NOT_REQUESTED",
    "SUPPORTED_OPERATIONS",
    "AclOperation",
    "AclResourceType",
    "authorize",
    "authorize_any",
    "authorize_cluster",
    "authorized_operations",
    "auto_create",
    "cluster_permission",
    "may_create_topic",
    "may_group",
    "topic_permission",
]

OPERATIONS_NOT_REQUESTED = -(2**31)
"""The bit field's value when the request did not ask for authorized operations."""


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
    """Whether the caller of ``context`` may perform ``operation`` on the resource: its
    principal, from its address, by the broker's ACLs (:mod:`~eventplatform.log.security.acls`).
    Without an authorizer (``authorizer.class.name`` unset) every operation is allowed,
    as in Kafka."""
    authorizer = context.broker.authorizer
    if authorizer is None:
        return True
    principal = context.session.principal
    if principal is None:
        return False
    return authorizer.authorize(principal, context.client_host, operation, resource_type, name)


def authorize_cluster(context: RequestContext, operation: AclOperation) -> bool:
    return authorize(context, operation, AclResourceType.CLUSTER, CLUSTER_NAME)


def may_create_topic(context: RequestContext, name: str) -> bool:
    """CREATE on the cluster or on the topic, as Kafka asks of CreateTopics and of
    auto-creation."""
    return authorize_cluster(context, AclOperation.CREATE) or authorize(
        context, AclOperation.CREATE, AclResourceType.TOPIC, name
    )


async def auto_create(context: RequestContext, name: str) -> Topic | None:
    """The topic ``name`` auto-created for this caller, or None (auto-creation off, or no
    CREATE for it)."""
    if not may_create_topic(context, name):
        await trio.lowlevel.checkpoint()
        return None
    return await context.broker.auto_create_topic(name)


def authorize_any(
    context: RequestContext, operation: AclOperation, resource_type: AclResourceType
) -> bool:
    """Whether the caller may perform ``operation`` on some resource of ``resource_type``
    (Kafka's check for idempotent producers: WRITE on any topic)."""
    authorizer = context.broker.authorizer
    if authorizer is None:
        return True
    principal = context.session.principal
    if principal is None:
        return False
    return authorizer.authorize_any(principal, context.client_host, operation, resource_type)


def may_group(context: RequestContext, operation: AclOperation, group_id: str) -> bool:
    return authorize(context, operation, AclResourceType.GROUP, group_id)


def topic_permission(context: RequestContext, operation: AclOperation) -> Callable[[str], bool]:
    """Whether the caller may perform ``operation`` on a topic, by name (for
    :func:`~eventplatform.log.broker.context.answer_partitions`)."""

    def allowed(name: str) -> bool:
        return authorize(context, operation, AclResourceType.TOPIC, name)

    return allowed


def cluster_permission(context: RequestContext, operation: AclOperation) -> Callable[[str], bool]:
    """``operation`` on the cluster, asked once, for every topic of a request (a follower's
    requests need CLUSTER_ACTION whatever the topic)."""
    permitted = authorize_cluster(context, operation)

    def allowed(_name: str) -> bool:
        return permitted

    return allowed


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
