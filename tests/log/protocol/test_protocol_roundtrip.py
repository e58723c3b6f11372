"""Round trips of every API at every version, request and response, with drawn values.

The values come from ``TableValues`` (conftest), which walks the same tables
the codec compiles, so every field of every version is exercised with values
across its whole range, nulls where the version allows them, and tagged
fields both at and away from their defaults.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.log.protocol import (
    APIS,
    FRAME_SIZE,
    Api,
    RequestHeader,
    chunks_length,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    flatten,
)
from eventplatform.log.protocol.codec import compile_struct

EXAMPLES_PER_VERSION = 10
DEFAULTS_EXAMPLES_PER_VERSION = 5

EVERY_VERSION = [
    pytest.param(api, version, id=f"{api.name}-v{version}")
    for api in APIS.values()
    for version in range(api.versions.low, api.versions.high + 1)
]

correlation_ids = st.integers(-(2**31), 2**31 - 1)
client_ids = st.none() | st.text(max_size=20)


@pytest.mark.parametrize(("api", "version"), EVERY_VERSION)
@settings(max_examples=EXAMPLES_PER_VERSION, deadline=None)
@given(data=st.data())
def test_request_round_trip(api: Api, version: int, table_values: Any, data: st.DataObject) -> None:
    body = data.draw(table_values.request(api, version), label="body")
    correlation_id = data.draw(correlation_ids, label="correlation_id")
    client_id = data.draw(client_ids, label="client_id")

    frame = encode_request(api, version, body, correlation_id=correlation_id, client_id=client_id)

    (size,) = FRAME_SIZE.unpack_from(frame)
    assert size == len(frame) - FRAME_SIZE.size
    payload = frame[FRAME_SIZE.size :]
    header, position = decode_request_header(payload)
    assert header == RequestHeader(api.key, version, correlation_id, client_id)
    assert decode_request_body(api, version, payload, position) == body
    # A memoryview window into a larger buffer decodes the same (records stay views).
    window = memoryview(b"\xaa" * 3 + payload + b"\xbb")[3:-1]
    assert decode_request_body(api, version, window, position) == body


@pytest.mark.parametrize(("api", "version"), EVERY_VERSION)
@settings(max_examples=EXAMPLES_PER_VERSION, deadline=None)
@given(data=st.data())
def test_response_round_trip(
    api: Api, version: int, table_values: Any, data: st.DataObject
) -> None:
    body = data.draw(table_values.response(api, version), label="body")
    correlation_id = data.draw(correlation_ids, label="correlation_id")

    chunks = encode_response(api, version, correlation_id, body)

    assert all(isinstance(chunk, bytes) for chunk in chunks)
    frame = flatten(chunks)
    assert chunks_length(chunks) == len(frame)
    assert decode_response(api, version, frame) == (correlation_id, body)


@pytest.mark.parametrize(("api", "version"), EVERY_VERSION)
@settings(max_examples=DEFAULTS_EXAMPLES_PER_VERSION, deadline=None)
@given(data=st.data())
def test_absent_top_level_fields_encode_their_defaults(
    api: Api, version: int, table_values: Any, data: st.DataObject
) -> None:
    flexible = api.is_flexible(version)
    for fields, strategy in (
        (api.request, table_values.request(api, version)),
        (api.response, table_values.response(api, version)),
    ):
        body = data.draw(strategy, label="body")
        dropped = data.draw(st.sets(st.sampled_from(sorted(body))), label="dropped")
        partial = {name: value for name, value in body.items() if name not in dropped}
        expected = dict(body)
        for field in fields:
            if field.name in dropped:
                expected[field.name] = field.default_value()

        codec = compile_struct(fields, version, flexible=flexible)
        assert codec.decode(flatten(codec.encode(partial))) == expected


def test_parametrisation_covers_every_api_and_version() -> None:
    assert len(APIS) == 53  # Kafka's 51 and this log's EntityRead and EraseRecords
    assert len({api.name for api in APIS.values()}) == 53
    assert all(api.key == key for key, api in APIS.items())
    assert len(EVERY_VERSION) == sum(
        api.versions.high - api.versions.low + 1 for api in APIS.values()
    )
