"""DescribeCluster (key 60), v0-1.

The cluster as admin clients see it: its id, the controller this broker
forwards admin requests to (itself, as Metadata says), and the brokers
clients may connect to, the same list Metadata gives. When asked
(``include_cluster_authorized_operations``) the answer carries the
operations the caller may perform on the cluster, from :mod:`..authorizer`;
otherwise ``-2147483648``. v1 adds ``endpoint_type``: this broker serves
the broker endpoints (1) only; a request for the controller endpoints (2)
gets UNSUPPORTED_ENDPOINT_TYPE, as a Kafka broker answers.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    AclResourceType,
    authorize_cluster,
    authorized_operations,
)
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.handlers.metadata import live_brokers
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_CLUSTER
from eventplatform.log.protocol.schema import Versions

API = DESCRIBE_CLUSTER
VERSIONS = Versions.parse("0-1")
ENDPOINT_TYPE_BROKERS = 1


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    endpoint_type = request["endpoint_type"]
    if endpoint_type != ENDPOINT_TYPE_BROKERS:
        return {
            "error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            "error_message": f"this broker serves endpoint type {ENDPOINT_TYPE_BROKERS} only",
            "endpoint_type": endpoint_type,
            "cluster_id": context.broker.cluster_id,
        }
    if not authorize_cluster(context, AclOperation.DESCRIBE):
        return {
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "DESCRIBE on the cluster is needed",
            "endpoint_type": endpoint_type,
            "cluster_id": context.broker.cluster_id,
        }
    brokers = [
        {"broker_id": entry["node_id"], **{k: v for k, v in entry.items() if k != "node_id"}}
        for entry in live_brokers(context)
    ]
    return {
        "error_code": ErrorCode.NONE,
        "endpoint_type": endpoint_type,
        "cluster_id": context.broker.cluster_id,
        "controller_id": context.broker.node_id,
        "brokers": brokers,
        "cluster_authorized_operations": authorized_operations(
            context,
            AclResourceType.CLUSTER,
            CLUSTER_NAME,
            requested=bool(request["include_cluster_authorized_operations"]),
        ),
    }
