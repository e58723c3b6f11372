"""Maps API keys to handler modules and answers what no handler takes.

A request for an API the broker knows but at a version it does not accept is
answered in that version's layout with UNSUPPORTED_VERSION in its top-level
``error_code`` (ApiVersions answers with a v0 body listing the supported
versions, so the client can retry). A layout without a top-level error code,
or an API key the codec has no table for, cannot carry that answer in a form
the client would parse; that connection is closed and the event logged, as
Kafka does.
"""

from __future__ import annotations

from types import ModuleType

from eventplatform.log.broker.context import Body, Handler
from eventplatform.log.broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_user_scram_credentials,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    end_txn,
    entity_read,
    erase_records,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    read_share_group_state,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
    txn_offset_commit,
    write_share_group_state,
    write_txn_markers,
)
from eventplatform.log.protocol import APIS, Api, ErrorCode

HANDLER_MODULES: list[ModuleType] = [
    produce,
    fetch,
    list_offsets,
    metadata,
    api_versions,
    create_topics,
    delete_topics,
    delete_records,
    init_producer_id,
    offset_for_leader_epoch,
    describe_configs,
    alter_configs,
    create_partitions,
    incremental_alter_configs,
    offset_commit,
    offset_fetch,
    find_coordinator,
    join_group,
    heartbeat,
    leave_group,
    sync_group,
    describe_groups,
    list_groups,
    delete_groups,
    describe_cluster,
    offset_delete,
    describe_topic_partitions,
    describe_log_dirs,
    entity_read,
    erase_records,
    sasl_handshake,
    sasl_authenticate,
    describe_user_scram_credentials,
    alter_user_scram_credentials,
    describe_acls,
    create_acls,
    delete_acls,
    describe_client_quotas,
    alter_client_quotas,
    share_group_heartbeat,
    share_group_describe,
    share_fetch,
    share_acknowledge,
    read_share_group_state,
    write_share_group_state,
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    write_txn_markers,
    txn_offset_commit,
    describe_transactions,
    list_transactions,
    describe_producers,
]


def build_handlers(modules: list[ModuleType]) -> dict[int, Handler]:
    handlers = {}
    for module in modules:
        inter_broker = getattr(module, "INTER_BROKER_VERSIONS", None)
        advertised = getattr(module, "ADVERTISED", True)
        handler = Handler(module.API, module.VERSIONS, module.handle, inter_broker, advertised)
        handlers[handler.api.key] = handler
    return handlers


def unsupported_version_response(api: Api, version: int) -> Body | None:
    """A body in ``api``'s layout at ``version`` whose top-level error code says 35.

    None when that layout has no top-level error code: an answer without one
    would read as success, so the connection is closed instead, as Kafka does.
    """
    for field in api.response:
        if field.name == "error_code" and version in field.versions and field.tag is None:
            return {"error_code": ErrorCode.UNSUPPORTED_VERSION}
    return None


def known_api(key: int) -> Api | None:
    return APIS.get(key)
