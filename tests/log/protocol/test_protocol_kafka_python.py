"""Cross-checks with kafka-python's independent protocol implementation.

kafka-python 3.x builds its request and response classes from Kafka's JSON
message definitions and encodes them with its own generated code. For every
API both sides know, at every version both declare, a drawn value is encoded
by each side and decoded by the other, and the two encodings must be the
same bytes.

Value conventions differ in three places, and the converters below bridge
them: kafka-python holds UUIDs as ``uuid.UUID`` (``None`` for the zero UUID),
authorized-operations fields as a set of bit positions (``None`` for
``-2**31``), and an absent tagged struct as ``None``.
"""

from __future__ import annotations

import importlib
import inspect
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import ProduceRequest

from eventplatform.log.protocol import (
    APIS,
    Api,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    flatten,
)
from eventplatform.log.protocol.codec import compile_struct
from eventplatform.log.protocol.schema import F

EXAMPLES_PER_VERSION = 8
BITFIELD_NULL = -(2**31)
"""The int32 Kafka sends for "authorized operations not requested": only bit 31."""

# kafka-python renames these int32 fields to ``authorized_operations`` (a bit set).
RENAMED = {
    "cluster_authorized_operations": "authorized_operations",
    "topic_authorized_operations": "authorized_operations",
}

NAMED_APIS = {
    "Metadata",
    "Produce",
    "Fetch",
    "ListOffsets",
    "JoinGroup",
    "SyncGroup",
    "OffsetCommit",
    "OffsetFetch",
    "CreateTopics",
    "DescribeConfigs",
    "ApiVersions",
}


def _kafka_python_classes() -> dict[int, dict[str, type[ApiMessage]]]:
    found: dict[int, dict[str, type[ApiMessage]]] = {}
    for module_name in ("metadata", "consumer", "producer", "admin", "sasl"):
        module = importlib.import_module(f"kafka.protocol.{module_name}")
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, ApiMessage) and value is not ApiMessage:
                message: Any = value
                found.setdefault(message.API_KEY, {})[message.type] = message
    return found


KAFKA_PYTHON = _kafka_python_classes()


def _shared_versions() -> list[Any]:
    params = []
    for api in APIS.values():
        classes = KAFKA_PYTHON.get(api.key)
        if classes is None:
            continue
        # kafka-python's JSON may drop versions older brokers used; its declared
        # minimum is where its field definitions are still complete.
        low, high = classes["request"].valid_versions
        for version in range(max(low, api.versions.low), min(high, api.versions.high) + 1):
            params.append(pytest.param(api, version, id=f"{api.name}-v{version}"))
    return params


SHARED_VERSIONS = _shared_versions()


# ---------------------------------------------------------------- converters


def _kp_name(field: F, kp_fields: dict[str, Any]) -> str | None:
    if field.name in kp_fields:
        return field.name
    renamed = RENAMED.get(field.name)
    return renamed if renamed is not None and renamed in kp_fields else None


def _in_version(field: F, version: int, flexible: bool) -> bool:
    return version in field.versions and (field.tag is None or flexible)


def _to_bits(value: int) -> set[int] | None:
    bits = {bit for bit in range(32) if (value & 0xFFFFFFFF) >> bit & 1}
    return None if bits == {31} else bits


def _from_bits(bits: set[int] | None) -> int:
    if bits is None:
        return BITFIELD_NULL
    value = sum(1 << bit for bit in bits)
    return value - (1 << 32) if value >= 1 << 31 else value


def to_kafka_python(
    fields: tuple[F, ...],
    kp_struct: Any,
    factory: Any,
    value: dict[str, Any],
    version: int,
    *,
    flexible: bool,
) -> Any:
    """Our decoded dict as a kafka-python data object of ``factory``."""
    kp_fields = kp_struct.fields
    kwargs: dict[str, Any] = {}
    for field in fields:
        if not _in_version(field, version, flexible):
            continue
        name = _kp_name(field, kp_fields)
        assert name is not None, f"kafka-python has no field {field.name}"
        kwargs[name] = _value_to_kp(field, kp_fields[name], value[field.name], version, flexible)
    return factory(version=version, **kwargs)


def _value_to_kp(field: F, kp_field: Any, value: Any, version: int, flexible: bool) -> Any:
    if value is None:
        return None
    if kp_field.is_struct_array():
        return [
            to_kafka_python(
                field.fields,
                kp_field.array_of,
                kp_field.data_class,
                item,
                version,
                flexible=flexible,
            )
            for item in value
        ]
    if kp_field.is_struct():
        if field.tag is not None and value == field.default_value():
            return None
        return to_kafka_python(
            field.fields, kp_field, kp_field.data_class, value, version, flexible=flexible
        )
    if kp_field.is_array():
        return list(value)
    if kp_field.type_str == "uuid":
        return None if value == bytes(16) else uuid.UUID(bytes=value)
    if kp_field.type_str == "bitfield":
        return _to_bits(value)
    return value


def from_kafka_python(
    fields: tuple[F, ...], kp_struct: Any, obj: Any, version: int, *, flexible: bool
) -> dict[str, Any]:
    """A kafka-python data object as the dict our decoder would produce."""
    kp_fields = kp_struct.fields
    out: dict[str, Any] = {}
    for field in fields:
        if not _in_version(field, version, flexible):
            out[field.name] = field.default_value()
            continue
        name = _kp_name(field, kp_fields)
        assert name is not None, f"kafka-python has no field {field.name}"
        out[field.name] = _value_from_kp(
            field, kp_fields[name], getattr(obj, name), version, flexible
        )
    return out


def _value_from_kp(field: F, kp_field: Any, value: Any, version: int, flexible: bool) -> Any:
    if kp_field.is_struct_array():
        if value is None:
            return None
        return [
            from_kafka_python(field.fields, kp_field.array_of, item, version, flexible=flexible)
            for item in value
        ]
    if kp_field.is_struct():
        if value is None:
            return field.default_value()
        return from_kafka_python(field.fields, kp_field, value, version, flexible=flexible)
    if kp_field.is_array():
        return None if value is None else list(value)
    if kp_field.type_str == "uuid":
        return bytes(16) if value is None else value.bytes
    if kp_field.type_str == "bitfield":
        return _from_bits(value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize(("api", "version"), SHARED_VERSIONS)
@settings(max_examples=EXAMPLES_PER_VERSION, deadline=None)
@given(data=st.data())
def test_requests_agree_with_kafka_python(
    api: Api, version: int, table_values: Any, data: st.DataObject
) -> None:
    kp_class = KAFKA_PYTHON[api.key]["request"]
    flexible = api.is_flexible(version)
    body = data.draw(table_values.request(api, version), label="body")
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1), label="correlation_id")
    client_id = data.draw(st.text(max_size=10), label="client_id")

    kp_request = to_kafka_python(
        api.request, kp_class._struct, kp_class, body, version, flexible=flexible
    )
    kp_request.with_header(correlation_id=correlation_id, client_id=client_id)
    theirs = bytes(kp_request.encode(header=True, framed=True))
    ours = encode_request(api, version, body, correlation_id=correlation_id, client_id=client_id)
    assert ours == theirs

    # Theirs decoded by us.
    header, position = decode_request_header(theirs[4:])
    assert (header.api_key, header.api_version) == (api.key, version)
    assert (header.correlation_id, header.client_id) == (correlation_id, client_id)
    assert decode_request_body(api, version, theirs[4:], position) == body

    # Ours decoded by them.
    decoded = kp_class.decode(ours, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == correlation_id
    assert decoded.header.client_id == client_id
    assert (
        from_kafka_python(api.request, kp_class._struct, decoded, version, flexible=flexible)
        == body
    )


@pytest.mark.parametrize(("api", "version"), SHARED_VERSIONS)
@settings(max_examples=EXAMPLES_PER_VERSION, deadline=None)
@given(data=st.data())
def test_responses_agree_with_kafka_python(
    api: Api, version: int, table_values: Any, data: st.DataObject
) -> None:
    kp_class = KAFKA_PYTHON[api.key]["response"]
    flexible = api.is_flexible(version)
    body = data.draw(table_values.response(api, version), label="body")
    if api.name == "ApiVersions":
        # kafka-python decodes an ApiVersions body with a non-zero error as v0.
        body["error_code"] = 0
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1), label="correlation_id")

    kp_response = to_kafka_python(
        api.response, kp_class._struct, kp_class, body, version, flexible=flexible
    )
    kp_response.with_header(correlation_id=correlation_id)
    theirs = bytes(kp_response.encode(header=True))
    ours = flatten(encode_response(api, version, correlation_id, body))
    assert ours == theirs

    assert decode_response(api, version, theirs) == (correlation_id, body)

    decoded = kp_class.decode(ours, version=version, header=True)
    assert decoded.header.correlation_id == correlation_id
    assert (
        from_kafka_python(api.response, kp_class._struct, decoded, version, flexible=flexible)
        == body
    )


def test_shared_versions_cover_the_named_apis_and_flexible_versions() -> None:
    covered = {(param.values[0].name, param.values[1]) for param in SHARED_VERSIONS}
    assert {name for name, _ in covered} >= NAMED_APIS
    for name in NAMED_APIS:
        api = next(api for api in APIS.values() if api.name == name)
        versions = {version for api_name, version in covered if api_name == name}
        assert len(versions) >= 3, name
        assert any(api.is_flexible(version) for version in versions), name
        assert any(not api.is_flexible(version) for version in versions), name


# ---------------------------------------------------------------- fixed examples


def test_api_versions_v3_request_matches_kafka_python_bytes() -> None:
    request = ApiVersionsRequest(
        version=3, client_software_name="eventplatform", client_software_version="1.0"
    )
    request.with_header(correlation_id=11, client_id="client")
    body = {"client_software_name": "eventplatform", "client_software_version": "1.0"}

    assert encode_request(APIS[18], 3, body, correlation_id=11, client_id="client") == bytes(
        request.encode(header=True, framed=True)
    )


def test_api_versions_response_from_kafka_python_with_tagged_fields() -> None:
    response = ApiVersionsResponse(
        version=3,
        error_code=0,
        api_keys=[
            ApiVersionsResponse.ApiVersion(version=3, api_key=1, min_version=4, max_version=17)
        ],
        throttle_time_ms=3,
        finalized_features_epoch=9,
        zk_migration_ready=True,
    )
    response.with_header(correlation_id=77)

    correlation_id, body = decode_response(APIS[18], 3, bytes(response.encode(header=True)))

    assert correlation_id == 77
    assert body["api_keys"] == [{"api_key": 1, "min_version": 4, "max_version": 17}]
    assert body["finalized_features_epoch"] == 9
    assert body["zk_migration_ready"] is True
    assert body["supported_features"] == []


def test_metadata_authorized_operations_bits() -> None:
    body = compile_struct(APIS[3].response, 8, flexible=False).decode(
        bytes(
            MetadataResponse(
                version=8,
                throttle_time_ms=0,
                brokers=[],
                cluster_id=None,
                controller_id=1,
                topics=[],
                authorized_operations={3, 4, 31},
            ).encode()
        )
    )
    assert body["cluster_authorized_operations"] == (1 << 3) + (1 << 4) - (1 << 31)


def test_produce_request_with_records_from_kafka_python() -> None:
    blob = b"\x00" * 12 + b"batch-bytes"
    request = ProduceRequest(
        version=3,
        transactional_id=None,
        acks=-1,
        timeout_ms=1_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                version=3,
                name="events",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        version=3, index=5, records=blob
                    )
                ],
            )
        ],
    )
    request.with_header(correlation_id=1, client_id="kp")
    frame = bytes(request.encode(header=True, framed=True))[4:]

    header, position = decode_request_header(frame)
    body = decode_request_body(APIS[0], header.api_version, frame, position)

    assert body["topic_data"] == [
        {"name": "events", "partition_data": [{"index": 5, "records": blob}]}
    ]


def test_fetch_request_v12_with_cluster_id_tag_from_kafka_python() -> None:
    request = FetchRequest(
        version=12,
        cluster_id="cluster-a",
        replica_id=-1,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1_000,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[],
        forgotten_topics_data=[],
        rack_id="rack-1",
    )
    request.with_header(correlation_id=4, client_id=None)
    frame = bytes(request.encode(header=True, framed=True))[4:]

    header, position = decode_request_header(frame)
    body = decode_request_body(APIS[1], 12, frame, position)

    assert header.client_id is None
    assert body["cluster_id"] == "cluster-a"
    assert body["rack_id"] == "rack-1"
    assert body["isolation_level"] == 1
