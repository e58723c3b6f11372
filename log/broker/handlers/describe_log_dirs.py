"""DescribeLogDirs (key 35), v1-4.

Describes this broker's one log directory (``data_dir``, as an absolute
path) and the partitions it holds: each one's size in bytes on disk and its
offset lag, which is how far the log end trails the high watermark (0 for
a current log; this broker has no "future" logs being moved between
directories). A null topic list means every partition held here; a named
partition this broker does not hold is left out, as Kafka does. v3 adds a
top-level error code, v4 the directory's total and usable bytes.
"""

from __future__ import annotations

import shutil

import trio

from eventplatform.log.broker.authorizer import AclOperation, authorize_cluster
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_LOG_DIRS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.partition import Partition

API = DESCRIBE_LOG_DIRS
VERSIONS = Versions.parse("1-4")


async def handle(context: RequestContext, request: Body) -> Body:
    broker = context.broker
    if not authorize_cluster(context, AclOperation.DESCRIBE):
        await trio.lowlevel.checkpoint()
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    log_dir = broker.config.data_dir.resolve()
    wanted: dict[str, set[int]] | None = None
    if request["topics"] is not None:
        wanted = {}
        for entry in request["topics"]:
            wanted.setdefault(entry["topic"], set()).update(entry["partitions"])
    topics = []
    for name, topic in sorted(broker.topics.topics.items()):
        if wanted is not None and name not in wanted:
            continue
        held = [
            _describe(partition)
            for partition in topic.partitions
            if partition is not None and (wanted is None or partition.index in wanted[name])
        ]
        if held:
            topics.append({"name": name, "partitions": held})
    usage = await trio.to_thread.run_sync(shutil.disk_usage, log_dir)
    result = {
        "error_code": ErrorCode.NONE,
        "log_dir": str(log_dir),
        "topics": topics,
        "total_bytes": usage.total,
        "usable_bytes": usage.free,
    }
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": [result]}


def _describe(partition: Partition) -> Body:
    lag = max(partition.high_watermark - partition.log.log_end_offset, 0)
    return {
        "partition_index": partition.index,
        "partition_size": partition.log.size_bytes,
        "offset_lag": lag,
        "is_future_key": False,
    }
