"""The topics a classic consumer group's members subscribe to, read from their join metadata.

Members of a group with protocol type ``consumer`` send a
ConsumerProtocolSubscription as their protocol metadata: an int16 version,
then (every version) the subscribed topic names as an array of strings,
then fields this module does not need. Only that common prefix is read, with
the project codec, so every subscription version parses alike.

OffsetDelete needs the answer: a committed offset of a topic some member
subscribes to may not be deleted (Kafka's GROUP_SUBSCRIBED_TO_TOPIC). When
a member's metadata cannot be read, the group's subscriptions are unknown
(None), and every topic counts as subscribed, as in Kafka.
"""

from __future__ import annotations

import struct

from eventplatform.log.groups.group import Group, GroupState
from eventplatform.log.protocol.codec import Reader, compile_struct
from eventplatform.log.protocol.errors import ProtocolError
from eventplatform.log.protocol.schema import STRING, Array, F

CONSUMER_PROTOCOL_TYPE = "consumer"
_VERSION = struct.Struct(">h")
_TOPICS = compile_struct((F("topics", Array(STRING)),), 0, flexible=False)


def subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """The topic names of one ConsumerProtocolSubscription, or None if it does not parse."""
    reader = Reader(metadata)
    try:
        version = reader.unpack(_VERSION)
        if version < 0:
            return None
        topics: list[str] = _TOPICS.read(reader)["topics"]
    except ProtocolError:
        return None
    return frozenset(topics)


def subscribed_topics(group: Group) -> frozenset[str] | None:
    """Every topic some member of ``group`` subscribes to; None when unknown.

    An Empty group subscribes to nothing. A group whose protocol type is not
    ``consumer``, or whose members' metadata does not parse, has unknown
    subscriptions.
    """
    if group.is_(GroupState.EMPTY):
        return frozenset()
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        try:
            member_topics = subscription_topics(member.metadata(group.protocol_name))
        except KeyError:
            return None
        if member_topics is None:
            return None
        topics |= member_topics
    return frozenset(topics)
