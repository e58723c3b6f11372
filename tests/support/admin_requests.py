"""Request helpers of the broker's admin tests: topics, configs, offsets, through the codec."""

from __future__ import annotations

from typing import Any

from eventplatform.log.protocol.apis import (
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_OFFSETS,
)

TOPIC = "admin"
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
RETENTION_MS_DEFAULT = str(7 * 24 * 60 * 60 * 1000)


def new_topic(
    name: str,
    partitions: int = 1,
    replication_factor: int = 1,
    configs: dict[str, str | None] | None = None,
    assignments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": replication_factor,
        "assignments": assignments or [],
        "configs": [{"name": key, "value": value} for key, value in (configs or {}).items()],
    }


def create_topics_body(*topics: dict[str, Any], validate_only: bool = False) -> dict[str, Any]:
    return {"topics": list(topics), "timeout_ms": 1000, "validate_only": validate_only}


async def create_topics(
    client: Any, *topics: dict[str, Any], validate_only: bool = False
) -> dict[str, int]:
    response = await client.request(
        CREATE_TOPICS, 4, create_topics_body(*topics, validate_only=validate_only)
    )
    return {entry["name"]: entry["error_code"] for entry in response["topics"]}


async def existing_topics(client: Any) -> dict[str, int]:
    """Every topic the broker reports, with its partition count."""
    response = await client.metadata(None)
    return {topic["name"]: len(topic["partitions"]) for topic in response["topics"]}


async def describe_topic(
    client: Any, name: str, keys: list[str] | None = None, *, version: int = 3
) -> dict[str, Any]:
    body = {
        "resources": [
            {"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": keys}
        ],
        "include_synonyms": True,
    }
    response = await client.request(DESCRIBE_CONFIGS, version, body)
    return response["results"][0]


async def topic_configs(client: Any, name: str) -> dict[str, str | None]:
    result = await describe_topic(client, name)
    assert result["error_code"] == 0, result
    return {entry["name"]: entry["value"] for entry in result["configs"]}


async def incremental_alter(
    client: Any,
    name: str,
    operations: list[tuple[str, int, str | None]],
    *,
    validate_only: bool = False,
    resource_type: int = TOPIC_RESOURCE,
) -> int:
    body = {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [
                    {"name": key, "config_operation": operation, "value": value}
                    for key, operation, value in operations
                ],
            }
        ],
        "validate_only": validate_only,
    }
    response = await client.request(INCREMENTAL_ALTER_CONFIGS, 0, body)
    return int(response["responses"][0]["error_code"])


async def delete_topics(client: Any, *names: str) -> dict[str, int]:
    body = {"topic_names": list(names), "timeout_ms": 1000}
    response = await client.request(DELETE_TOPICS, 3, body)
    return {entry["name"]: entry["error_code"] for entry in response["responses"]}


async def list_offset(
    client: Any, timestamp: int, *, partition: int = 0, current_leader_epoch: int = -1
) -> dict[str, Any]:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {
                        "partition_index": partition,
                        "current_leader_epoch": current_leader_epoch,
                        "timestamp": timestamp,
                    }
                ],
            }
        ],
    }
    response = await client.request(LIST_OFFSETS, 5, body)
    return dict(response["topics"][0]["partitions"][0])
