"""Fuzzing the decoders: random and mutated frames either decode or raise ProtocolError.

Any other exception (IndexError, struct.error, UnicodeDecodeError,
OverflowError, MemoryError, ...) escapes ``pytest`` as a failure, because
only ``ProtocolError`` is caught here.
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.log.protocol import (
    APIS,
    ProtocolError,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    flatten,
)

EVERY_VERSION = [
    (api.key, version)
    for api in APIS.values()
    for version in range(api.versions.low, api.versions.high + 1)
]
api_versions = st.sampled_from(EVERY_VERSION)
"""(api key, version) pairs; keys rather than tables keep failure reports short."""


def decode_request(payload: bytes) -> Any:
    """What the broker does with a frame: the header, then the body of a known API."""
    try:
        header, position = decode_request_header(payload)
        api = APIS.get(header.api_key)
        if api is None:
            return None
        return decode_request_body(api, header.api_version, payload, position)
    except ProtocolError:
        return None


def try_decode_response(api: Any, version: int, frame: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_response(api, version, frame)


def request_header(api_key: int, version: int, client_id: bytes | None) -> bytes:
    header = struct.pack(">hhi", api_key, version, 7)
    if client_id is None:
        return header + struct.pack(">h", -1)
    return header + struct.pack(">h", len(client_id)) + client_id


@st.composite
def mutated(draw: st.DrawFn, frame: bytes) -> bytes:
    """Apply one to four mutations: bit flips, byte overwrites, truncation, splices."""
    data = bytearray(frame)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "byte", "truncate", "insert", "delete", "copy"]))
        if not data:
            data += draw(st.binary(min_size=1, max_size=8))
            continue
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        else:
            end = draw(st.integers(at, len(data)))
            target = draw(st.integers(0, len(data)))
            data[target:target] = data[at:end]
    return bytes(data)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=256))
def test_random_bytes_as_a_request(payload: bytes) -> None:
    decode_request(payload)


@settings(max_examples=400, deadline=None)
@given(
    target=api_versions,
    client_id=st.none() | st.binary(max_size=8),
    header_tags=st.binary(max_size=4),
    body=st.binary(max_size=256),
)
def test_random_body_behind_a_valid_header(
    target: tuple[int, int], client_id: bytes | None, header_tags: bytes, body: bytes
) -> None:
    key, version = target
    decode_request(request_header(key, version, client_id) + header_tags + body)


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_mutated_valid_requests(table_values: Any, data: st.DataObject) -> None:
    key, version = data.draw(api_versions, label="api key/version")
    api = APIS[key]
    body = data.draw(table_values.request(api, version), label="body")
    payload = encode_request(api, version, body, correlation_id=1, client_id="fuzz")[4:]
    decode_request(data.draw(mutated(payload), label="mutated"))


@settings(max_examples=300, deadline=None)
@given(target=api_versions, frame=st.binary(max_size=256))
def test_random_bytes_as_a_response(target: tuple[int, int], frame: bytes) -> None:
    key, version = target
    try_decode_response(APIS[key], version, frame)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_mutated_valid_responses(table_values: Any, data: st.DataObject) -> None:
    key, version = data.draw(api_versions, label="api key/version")
    api = APIS[key]
    body = data.draw(table_values.response(api, version), label="body")
    frame = flatten(encode_response(api, version, 1, body))
    try_decode_response(api, version, data.draw(mutated(frame), label="mutated"))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_request_decoded_as_a_different_version(table_values: Any, data: st.DataObject) -> None:
    # A client that lies about its version sends well-formed bytes of another shape.
    key, version = data.draw(api_versions, label="api key/version")
    api = APIS[key]
    other = data.draw(st.integers(api.versions.low, api.versions.high), label="claimed")
    body = data.draw(table_values.request(api, version), label="body")
    payload = bytearray(encode_request(api, version, body, correlation_id=1)[4:])
    payload[2:4] = struct.pack(">h", other)
    decode_request(bytes(payload))
