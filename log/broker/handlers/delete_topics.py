"""DeleteTopics (key 20), v0-3.

Removes each topic: its partitions are closed and their directories deleted
(fetch responses already on their way keep reading through their own file
descriptors). Errors per topic: UNKNOWN_TOPIC_OR_PARTITION,
TOPIC_DELETION_DISABLED (``delete.topic.enable=false``) and
INVALID_TOPIC_EXCEPTION for the internal ``__consumer_offsets``. The
committed offsets of a deleted topic are removed from every group.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DELETE_TOPICS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError

API = DELETE_TOPICS
VERSIONS = Versions.parse("0-3")


async def handle(context: RequestContext, request: Body) -> Body:
    broker = context.broker
    responses = []
    for name in request["topic_names"]:
        try:
            if not authorize(context, AclOperation.DELETE, AclResourceType.TOPIC, name):
                raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "DELETE on the topic")
            if not broker.config.delete_topic_enable:
                raise TopicError(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false")
            topic = broker.topics.get(name)
            if topic is not None and topic.internal:
                raise TopicError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION, f"internal topic {name!r} cannot be deleted"
                )
            await broker.delete_topic(name)
            responses.append({"name": name, "error_code": 0})
        except TopicError as exc:
            responses.append({"name": name, "error_code": exc.code})
        await trio.lowlevel.checkpoint()
    return {"responses": responses}
