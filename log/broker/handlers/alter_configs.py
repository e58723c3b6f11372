"""AlterConfigs (key 33), v0-1.

Replaces all of a topic's config overrides with the given set (Kafka's
non-incremental semantics: a key left out returns to its default). Values
are validated like CreateTopics configs; ``validate_only`` changes nothing.
Broker configs are static and answer INVALID_REQUEST.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, may_group, topic_permission
from eventplatform.log.broker.config_resources import apply_alter_request
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol.apis import ALTER_CONFIGS
from eventplatform.log.protocol.schema import Versions

API = ALTER_CONFIGS
VERSIONS = Versions.parse("0-1")


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    allowed = topic_permission(context, AclOperation.ALTER_CONFIGS)
    return {
        "responses": await apply_alter_request(
            context.broker,
            request,
            incremental=False,
            allowed=allowed,
            group_allowed=lambda name: may_group(context, AclOperation.ALTER_CONFIGS, name),
        )
    }
