"""The Kafka wire protocol: declarative tables and the generic codec that walks them."""

from eventplatform.log.protocol.apis import APIS
from eventplatform.log.protocol.codec import Chunk, FileRegion, chunks_length, flatten
from eventplatform.log.protocol.errors import ErrorCode, ProtocolError
from eventplatform.log.protocol.frames import (
    FRAME_SIZE,
    RequestHeader,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
)
from eventplatform.log.protocol.schema import Api

__all__ = [
    "APIS",
    "FRAME_SIZE",
    "Api",
    "Chunk",
    "ErrorCode",
    "FileRegion",
    "ProtocolError",
    "RequestHeader",
    "chunks_length",
    "decode_request_body",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "flatten",
]
