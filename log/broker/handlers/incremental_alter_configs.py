"""IncrementalAlterConfigs (key 44), v0.

Changes a topic's config overrides key by key: SET (0), DELETE (1, back to
the default), APPEND (2) and SUBTRACT (3) for the list config
``cleanup.policy``. The result is validated as a whole and applied to every
partition from its next append; ``validate_only`` changes nothing. Broker
configs are static and answer INVALID_REQUEST.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, may_group, topic_permission
from eventplatform.log.broker.config_resources import apply_alter_request
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol.apis import INCREMENTAL_ALTER_CONFIGS
from eventplatform.log.protocol.schema import Versions

API = INCREMENTAL_ALTER_CONFIGS
VERSIONS = Versions.parse("0")


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    allowed = topic_permission(context, AclOperation.ALTER_CONFIGS)
    return {
        "responses": await apply_alter_request(
            context.broker,
            request,
            incremental=True,
            allowed=allowed,
            group_allowed=lambda name: may_group(context, AclOperation.ALTER_CONFIGS, name),
        )
    }
