"""ApiVersions (key 18), v0-3.

Lists every API the broker serves with its accepted version range. v3 is the
first flexible version (compact strings, tagged fields in the body) but its
response header stays v0. A request at an unknown version is answered by the
connection with a v0 body carrying UNSUPPORTED_VERSION and the same list.
"""

from __future__ import annotations

from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol.apis import API_VERSIONS
from eventplatform.log.protocol.schema import Versions

API = API_VERSIONS
VERSIONS = Versions.parse("0-3")


async def handle(context: RequestContext, request: Body) -> Body:
    return {"error_code": 0, "api_keys": context.broker.api_versions, "throttle_time_ms": 0}
