"""CreatePartitions (key 37), v0-1.

Raises a topic's partition count; the count can only grow. The new
partitions are placed as a new topic's are, or by an explicit assignment:
one replica list per new partition, checked as CreateTopics checks one, each
as long as the topic's existing replica lists (INVALID_REPLICA_ASSIGNMENT
otherwise). ``validate_only`` checks and changes nothing. Errors per topic:
UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT,
INVALID_REQUEST (a topic given twice), POLICY_VIOLATION (the broker's file
descriptors would not cover the new partitions and its connections),
KAFKA_STORAGE_ERROR (their files could not be created).
"""

from __future__ import annotations

from collections import Counter

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import CREATE_PARTITIONS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError

API = CREATE_PARTITIONS
VERSIONS = Versions.parse("0-1")


async def handle(context: RequestContext, request: Body) -> Body:
    broker = context.broker
    counts = Counter(topic["name"] for topic in request["topics"])
    results = []
    for topic in request["topics"]:
        name = topic["name"]
        try:
            if counts[name] > 1:
                raise TopicError(ErrorCode.INVALID_REQUEST, f"topic {name!r} is listed twice")
            if not authorize(context, AclOperation.ALTER, AclResourceType.TOPIC, name):
                raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "ALTER on the topic")
            assignment = [list(entry["broker_ids"]) for entry in topic["assignments"] or []]
            if request["validate_only"]:
                broker.check_new_partitions(name, topic["count"], assignment)
            else:
                await broker.add_partitions(name, topic["count"], assignment)
            results.append({"name": name, "error_code": 0})
        except TopicError as exc:
            results.append({"name": name, "error_code": exc.code, "error_message": str(exc)})
        await trio.lowlevel.checkpoint()
    return {"results": results}
