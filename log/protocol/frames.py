"""Request and response headers, and whole-frame encoding and decoding.

A frame on the wire is an int32 size followed by that many bytes. Request
header v1 is ``api_key int16, api_version int16, correlation_id int32,
client_id nullable string``; v2 (flexible request versions) adds tagged
fields, and its ``client_id`` keeps the non-compact encoding. Response
header v0 is the correlation id; v1 (flexible response versions) adds tagged
fields, except for ApiVersions, whose response header is always v0 so that a
client can read it before it knows which versions the broker speaks.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eventplatform.log.protocol.apis import API_VERSIONS, APIS
from eventplatform.log.protocol.codec import Chunk, Reader, Writer, compile_struct
from eventplatform.log.protocol.errors import ProtocolError
from eventplatform.log.protocol.schema import Api

FRAME_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def decode_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """Read the header of a request frame (without its size prefix).

    Returns the header and the position where the body starts. The tagged
    fields of header v2 are skipped when the API and version are known to be
    flexible; an unknown API leaves the body position after ``client_id``.
    """
    reader = Reader(frame)
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(
        frame, reader.take(_HEADER_FIXED.size)
    )
    length = reader.unpack(_INT16)
    client_id: str | None = None
    if length >= 0:
        try:
            client_id = bytes(reader.slice(length)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("client_id is not valid UTF-8") from exc
    elif length != -1:
        raise ProtocolError(f"negative client_id length {length}")
    api = APIS.get(api_key)
    if api is not None and api.is_flexible(api_version):
        _skip_header_tags(reader)
    return RequestHeader(api_key, api_version, correlation_id, client_id), reader.position


def _skip_header_tags(reader: Reader) -> None:
    for _ in range(reader.unsigned_varint()):
        reader.unsigned_varint()
        reader.take(reader.unsigned_varint())


def decode_request_body(
    api: Api, version: int, frame: bytes | bytearray | memoryview, position: int
) -> dict[str, Any]:
    """Decode the body of ``api`` at ``version``; the body must fill the frame exactly,
    unless the API ignores the request's tail at this version (see :class:`Api`)."""
    if version not in api.versions:
        raise ProtocolError(f"{api.name} v{version} is not a known version")
    codec = compile_struct(api.request, version, flexible=api.is_flexible(version))
    reader = Reader(frame, position)
    body: dict[str, Any] = codec.read(reader)
    if not api.ignores_request_tail(version):
        reader.finish()
    return body


def encode_request(
    api: Api,
    version: int,
    body: Mapping[str, Any],
    *,
    correlation_id: int,
    client_id: str | None = None,
) -> bytes:
    """A whole request frame, size prefix included (for clients and tests)."""
    writer = Writer()
    writer.buffer += _HEADER_FIXED.pack(api.key, version, correlation_id)
    if client_id is None:
        writer.buffer += _INT16.pack(-1)
    else:
        encoded = client_id.encode("utf-8")
        writer.buffer += _INT16.pack(len(encoded)) + encoded
    flexible = api.is_flexible(version)
    if flexible:
        writer.unsigned_varint(0)
    compile_struct(api.request, version, flexible=flexible).write(writer, body)
    chunks = writer.finish()
    if len(chunks) != 1 or not isinstance(chunks[0], bytes):
        raise ValueError("a request cannot carry file regions")
    return FRAME_SIZE.pack(len(chunks[0])) + chunks[0]


def encode_response(
    api: Api, version: int, correlation_id: int, body: Mapping[str, Any]
) -> list[Chunk]:
    """The response header and body as chunks, without the size prefix."""
    writer = Writer()
    writer.buffer += FRAME_SIZE.pack(correlation_id)
    flexible = api.is_flexible(version)
    if flexible and api is not API_VERSIONS:
        writer.unsigned_varint(0)
    compile_struct(api.response, version, flexible=flexible).write(writer, body)
    return writer.finish()


def decode_response(api: Api, version: int, frame: bytes) -> tuple[int, dict[str, Any]]:
    """Decode a response frame (without size prefix): correlation id and body."""
    reader = Reader(frame)
    correlation_id = reader.unpack(FRAME_SIZE)
    flexible = api.is_flexible(version)
    if flexible and api is not API_VERSIONS:
        _skip_header_tags(reader)
    body: dict[str, Any] = compile_struct(api.response, version, flexible=flexible).read(reader)
    reader.finish()
    return correlation_id, body
