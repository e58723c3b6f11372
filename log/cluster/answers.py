"""What the active controller answers, as documents: heartbeats, ``describe``, reassignments.

The controller (:mod:`.controller`) decides; these functions only lay out
what it has decided and committed, so they read the quorum and the image and
change neither. The heartbeat's timing bounds live here too, since the
broker's side of the exchange (:mod:`.broker_link`) obeys the same ones.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import orjson

from eventplatform.log.cluster.metadata import MetadataImage, image_document
from eventplatform.log.cluster.quorum import QuorumServer
from eventplatform.log.cluster.raft import LEADER_CHANGE
from eventplatform.log.cluster.reassignment import reassignments
from eventplatform.log.cluster.rpc import Params

HEARTBEAT_ENTRIES_MAX = 5_000
"""The most metadata records one heartbeat answer carries."""
HEARTBEAT_WAIT_MS_MAX = 5_000
HEARTBEATS_PER_SESSION_MIN = 3
"""One heartbeat exchange (its wait at the controller and the answer) takes at most a
third of the session, so a broker whose controller stopped answering gives up on it,
finds the active one (a voter names it) and heartbeats there before its session ends."""


def heartbeat_timeout_ms(session_timeout_ms: int) -> int:
    """The bound on one heartbeat exchange in a session of ``session_timeout_ms``."""
    return session_timeout_ms // HEARTBEATS_PER_SESSION_MIN


def heartbeat_wait_ms(session_timeout_ms: int, requested_ms: int) -> int:
    """How long a heartbeat waits at the controller for new records: as the broker asked
    (its ``broker.heartbeat.interval.ms``), within :data:`HEARTBEAT_WAIT_MS_MAX` and half
    of the exchange's bound, so the answer has the other half. The controller counts a
    broker alive from each heartbeat's arrival; the next one arrives after this wait."""
    bound_ms = min(HEARTBEAT_WAIT_MS_MAX, heartbeat_timeout_ms(session_timeout_ms) // 2)
    return min(max(requested_ms, 0), bound_ms)


def heartbeat_answer(quorum: QuorumServer, image: MetadataImage, offset: int) -> Params:
    """The committed records after ``offset`` (at most :data:`HEARTBEAT_ENTRIES_MAX`), or
    the whole image when the records before the quorum's log start are in a snapshot."""
    raft = quorum.raft
    if offset < raft.log_start:
        return {
            "entries": [],
            "image": image_document(image),
            "end": quorum.applied,
            "applied": quorum.applied,
            "controller": quorum.id,
        }
    end = min(quorum.applied, offset + HEARTBEAT_ENTRIES_MAX)
    entries = [
        None if entry.payload == LEADER_CHANGE else orjson.loads(entry.payload)
        for entry in raft.entries(offset, end)
    ]
    return {"entries": entries, "end": end, "applied": quorum.applied, "controller": quorum.id}


def describe_document(quorum: QuorumServer, image: MetadataImage) -> Params:
    """The ``describe`` answer: the quorum, the brokers, every partition, the moves."""
    return {
        "controller": quorum.id,
        "epoch": quorum.raft.epoch,
        "voters": list(quorum.voters),
        "metadata_offset": quorum.applied,
        "brokers": [asdict(b) for b in image.brokers.values()],
        "reassignments": reassignment_documents(image),
        "topics": {
            name: {
                "topic_id": topic.topic_id,
                "configs": topic.configs,
                "partitions": [asdict(p) for p in topic.partitions],
            }
            for name, topic in image.topics.items()
        },
    }


def reassignment_documents(image: MetadataImage) -> list[dict[str, Any]]:
    """The reassignments in progress, as the controller answers them."""
    return [
        {
            "topic": name,
            "partition": number,
            "replicas": list(state.replicas),
            "target": list(state.target),
            "adding": list(state.adding),
            "removing": list(state.removing),
            "isr": list(state.isr),
            "leader": state.leader,
        }
        for name, number, state in reassignments(image)
    ]


def assignment_param(params: Params) -> list[list[int]] | None:
    """The optional explicit replica assignment of a topic request: one list of broker ids
    per partition."""
    assignment = params.get("assignment")
    if assignment is None:
        return None
    return [[int(broker) for broker in replicas] for replicas in assignment]
