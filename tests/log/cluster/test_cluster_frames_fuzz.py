"""Fuzzing the cluster's frame decoders: whatever arrives on a controller's port, as bytes
or as JSON of any shape, becomes a quorum message within its ranges, a checked request,
or a clean refusal (FrameError, or an ``invalid_request`` answer).

Any other exception (KeyError, TypeError, OverflowError, RecursionError, ...) escapes
as a failure, because only FrameError is caught here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.log.cluster.frames import INT32_MAX, INT64_MAX, FrameError, split_frames
from eventplatform.log.cluster.quorum import TABLES, decode_message, encode_message
from eventplatform.log.cluster.raft import (
    BeginQuorumEpoch,
    Entry,
    FetchResponse,
    FetchSnapshotRequest,
    Message,
    SnapshotId,
    VoteRequest,
)
from eventplatform.log.cluster.requests import REQUESTS
from eventplatform.log.cluster.rpc import INVALID_REQUEST, answer

VOTERS = (1, 2, 3)
EPOCH_FIELDS = {"epoch", "last_epoch"}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON value, integers far past 64 bits included."""

SAMPLES = [
    Message(2, 1, VoteRequest(3, 2, 2, 10)),
    Message(2, 1, BeginQuorumEpoch(4, 2)),
    Message(2, 1, FetchResponse(4, 2, 7, (Entry(4, b"\x00\xff"),), 6)),
    Message(3, 1, FetchSnapshotRequest(4, SnapshotId(30, 3), 1024)),
]


def document_of(message: Message) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(encode_message(message)[4:])
    return document


def assert_within_ranges(message: Message) -> None:
    """A decoded message holds nothing a voter could not persist or send on."""
    assert message.sender in VOTERS and message.receiver == 1 and message.sender != 1
    for name, value in dataclasses.asdict(message.body).items():
        if isinstance(value, int) and not isinstance(value, bool):
            high = INT32_MAX if name in EPOCH_FIELDS else INT64_MAX
            assert -1 <= value <= high, (name, value)


def decode_frames(data: bytes) -> None:
    buffer = bytearray(data)
    with contextlib.suppress(FrameError):
        for document in split_frames(buffer):
            with contextlib.suppress(FrameError):
                assert_within_ranges(decode_message(json.dumps(document).encode(), 1, VOTERS))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=256))
def test_any_bytes_decode_or_are_refused(data: bytes) -> None:
    decode_frames(data)
    decode_frames(len(data).to_bytes(4, "big") + data)
    with contextlib.suppress(FrameError):
        assert_within_ranges(decode_message(data, 1, VOTERS))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_json_in_a_message_s_fields_decodes_within_range_or_is_refused(data: Any) -> None:
    document = document_of(data.draw(st.sampled_from(SAMPLES)))
    target = data.draw(st.sampled_from(["envelope", "body"]))
    fields = document if target == "envelope" else document["body"]
    name = data.draw(st.sampled_from([*sorted(fields), "unexpected"]))
    if data.draw(st.booleans()):
        fields[name] = data.draw(json_values)
    else:
        fields.pop(name, None)
    with contextlib.suppress(FrameError):
        assert_within_ranges(decode_message(json.dumps(document).encode(), 1, VOTERS))


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(sorted(TABLES)), body=json_values)
def test_any_json_body_of_any_kind_is_refused_or_within_range(kind: str, body: Any) -> None:
    document = {"sender": 2, "receiver": 1, "type": kind, "body": body}
    with contextlib.suppress(FrameError):
        assert_within_ranges(decode_message(json.dumps(document).encode(), 1, VOTERS))


@settings(max_examples=150, deadline=None)
@given(
    method=st.sampled_from(sorted(REQUESTS)),
    params=st.dictionaries(
        st.sampled_from(["broker", "epoch", "offset", "name", "isr"]), json_values
    )
    | json_values,
)
def test_any_request_params_are_answered_never_raised(method: str, params: Any) -> None:
    reached = []

    async def record(checked: dict[str, Any]) -> dict[str, Any]:
        reached.append(checked)
        return {}

    document = trio.run(answer, {method: record}, {"method": method, "params": params})
    assert ("result" in document) == bool(reached)
    if not reached:
        assert document["error"] == INVALID_REQUEST
