"""DescribeConfigs (key 32), v0-3.

Topic resources (type 2) list every topic-level config with its effective
value and where it came from (v1+ ``config_source`` and, when asked,
``synonyms``: the topic override, the broker's ``log.*`` setting, the
default). Broker resources (type 4) list the broker's static settings; the
resource name must be this node's id or empty. Group resources (type 32)
list Kafka 4's group configs with their defaults (:mod:`..group_configs`).
Other types get INVALID_REQUEST.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker import config_resources, group_configs
from eventplatform.log.broker.authorizer import (
    AclOperation,
    AclResourceType,
    authorize,
    authorize_cluster,
)
from eventplatform.log.broker.config_resources import ResourceType
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_CONFIGS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError

API = DESCRIBE_CONFIGS
VERSIONS = Versions.parse("0-3")


def _check_permission(context: RequestContext, kind: int, name: str) -> None:
    """DESCRIBE_CONFIGS on the topic, the group, or the cluster for a broker's configs."""
    operation = AclOperation.DESCRIBE_CONFIGS
    if kind == ResourceType.TOPIC:
        if not authorize(context, operation, AclResourceType.TOPIC, name):
            raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "DESCRIBE_CONFIGS")
    elif kind == group_configs.GROUP_RESOURCE_TYPE:
        if not authorize(context, operation, AclResourceType.GROUP, name):
            raise TopicError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "DESCRIBE_CONFIGS")
    elif not authorize_cluster(context, operation):
        raise TopicError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE_CONFIGS")


async def handle(context: RequestContext, request: Body) -> Body:
    broker = context.broker
    synonyms = bool(request["include_synonyms"])
    results = []
    for resource in request["resources"]:
        kind, name, keys = (
            resource["resource_type"],
            resource["resource_name"],
            resource["configuration_keys"],
        )
        result: Body = {"resource_type": kind, "resource_name": name, "error_message": None}
        try:
            _check_permission(context, kind, name)
            if kind == ResourceType.TOPIC:
                result["configs"] = config_resources.describe_topic(
                    broker, name, keys, synonyms=synonyms
                )
            elif kind == ResourceType.BROKER and name in ("", str(broker.node_id)):
                result["configs"] = config_resources.describe_broker(
                    broker.config, keys, synonyms=synonyms
                )
            elif kind == group_configs.GROUP_RESOURCE_TYPE:
                result["configs"] = broker.group_configs.describe(name, keys, synonyms=synonyms)
            else:
                raise TopicError(ErrorCode.INVALID_REQUEST, f"no config resource {kind}/{name!r}")
        except TopicError as exc:
            result.update(error_code=exc.code, error_message=str(exc), configs=[])
        results.append(result)
        await trio.lowlevel.checkpoint()
    return {"results": results}
