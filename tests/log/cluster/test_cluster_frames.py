"""Forged frames on a controller's port, over real loopback sockets: every quorum message
and every controller request is checked against its table where it is decoded, so an
epoch out of its range, an id that is no voter's, an absurd offset, a field of the wrong
type or one that should not be there is refused, nothing of it is persisted, and the
quorum goes on committing."""

from __future__ import annotations

import json
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
from loopback_quorum import ELECTION_TIMEOUT_S, LoopbackQuorum

from eventplatform.log.cluster.controller import Controller
from eventplatform.log.cluster.controller_methods import controller_methods
from eventplatform.log.cluster.quorum import QuorumServer
from eventplatform.log.cluster.rpc import INTERNAL, INVALID_REQUEST, answer

SESSION_MS = 60_000
EPOCH_AHEAD = 1_000
"""The epoch of forged messages whose other fields are wrong: had one been taken, the
voters' epoch would have jumped to it."""


class AnsweringCluster(LoopbackQuorum):
    """Three voters, each with a controller that answers requests on its port."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.controllers: dict[int, Controller] = {}

    def requests(self, node: int) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
        async def handle(document: dict[str, Any]) -> dict[str, Any]:
            return await answer(controller_methods(self.controllers[node]), document)

        return handle

    def created(self, node: int, server: QuorumServer) -> None:
        self.controllers[node] = Controller(server, session_timeout_ms=SESSION_MS)

    def started(self, node: int, nursery: trio.Nursery) -> None:
        nursery.start_soon(self.controllers[node].run)

    async def active(self) -> Controller:
        with trio.fail_after(ELECTION_TIMEOUT_S):
            while True:
                controller = self.controllers[(await self.leader()).id]
                if controller.active:
                    return controller
                await trio.sleep(0.01)


def forged(document: object) -> bytes:
    """A frame built with the standard library's JSON, which writes integers of any size."""
    payload = json.dumps(document).encode()
    return struct.pack(">I", len(payload)) + payload


async def exchange(address: tuple[str, int], frame: bytes) -> dict[str, Any] | None:
    """Send ``frame``; the answer frame's document, or None when the voter closed the
    connection without one."""
    stream = await trio.open_tcp_stream(*address)
    buffer = b""
    try:
        await stream.send_all(frame)
        with trio.fail_after(ELECTION_TIMEOUT_S):
            while True:
                data = await stream.receive_some(65_536)
                if not data:
                    return None
                buffer += data
                if len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">I", buffer[:4])[0]:
                    document: dict[str, Any] = json.loads(buffer[4:])
                    return document
    finally:
        await stream.aclose()


def message(kind: str, body: dict[str, Any], sender: object = 2, receiver: object = 1) -> object:
    return {"sender": sender, "receiver": receiver, "type": kind, "body": body}


SNAPSHOT = {"end_offset": 10, "epoch": 1}
FETCH_RESPONSE = {
    "epoch": EPOCH_AHEAD,
    "leader": 2,
    "offset": 0,
    "entries": [],
    "high_watermark": 0,
    "diverging": None,
    "snapshot": None,
}
SNAPSHOT_RESPONSE = {
    "epoch": EPOCH_AHEAD,
    "leader": 2,
    "snapshot": SNAPSHOT,
    "position": 0,
    "data": "",
    "size": 0,
}
VOTE = {"epoch": EPOCH_AHEAD, "candidate": 2, "last_epoch": 1, "end_offset": 10**6}
FORGED_QUORUM_MESSAGES = {
    "a vote of epoch 2^31": message("vote_request", {**VOTE, "epoch": 2**31}),
    "a vote of epoch 2^64+5": message("vote_request", {**VOTE, "epoch": 2**64 + 5}),
    "a vote of a negative epoch": message("vote_request", {**VOTE, "epoch": -1}),
    "a vote for an unknown candidate": message("vote_request", {**VOTE, "candidate": 99}),
    "a vote with a negative end": message("vote_request", {**VOTE, "end_offset": -1}),
    "a vote with an end past int64": message("vote_request", {**VOTE, "end_offset": 2**63}),
    "a vote as a float": message("vote_request", {**VOTE, "epoch": 1000.0}),
    "a vote from an unknown voter": message("vote_request", VOTE, sender=99),
    "a vote to an unknown voter": message("vote_request", VOTE, receiver=99),
    "a vote from the voter itself": message("vote_request", VOTE, sender=1),
    "a vote with a field more": message("vote_request", {**VOTE, "sneaky": 1}),
    "a vote with a field less": message("vote_request", {"epoch": EPOCH_AHEAD, "candidate": 2}),
    "a vote response not granted nor refused": message(
        "vote_response", {"epoch": EPOCH_AHEAD, "granted": "yes"}
    ),
    "a vote response of epoch 2^32": message("vote_response", {"epoch": 2**32, "granted": True}),
    "an unknown leader's epoch": message("begin_quorum_epoch", {"epoch": EPOCH_AHEAD, "leader": 7}),
    "a leader epoch past int32": message("begin_quorum_epoch", {"epoch": 2**31, "leader": 2}),
    "a fetch past int64": message(
        "fetch_request", {"epoch": EPOCH_AHEAD, "offset": 2**63, "last_epoch": 0}
    ),
    "a fetch from a negative offset": message(
        "fetch_request", {"epoch": EPOCH_AHEAD, "offset": -5, "last_epoch": 0}
    ),
    "a fetch answer from an unknown leader": message(
        "fetch_response", {**FETCH_RESPONSE, "leader": 42}
    ),
    "a fetch answer with an entry of epoch 2^31": message(
        "fetch_response", {**FETCH_RESPONSE, "entries": [[2**31, "00"]]}
    ),
    "a fetch answer with an entry that is not hex": message(
        "fetch_response", {**FETCH_RESPONSE, "entries": [[1, "zz"]]}
    ),
    "a fetch answer with a high watermark of 2^64+5": message(
        "fetch_response", {**FETCH_RESPONSE, "high_watermark": 2**64 + 5}
    ),
    "a fetch answer diverging at a negative offset": message(
        "fetch_response", {**FETCH_RESPONSE, "diverging": {"epoch": 1, "end_offset": -1}}
    ),
    "a fetch answer naming a snapshot of epoch 2^31": message(
        "fetch_response", {**FETCH_RESPONSE, "snapshot": {"end_offset": 5, "epoch": 2**31}}
    ),
    "a snapshot fetch at a negative end": message(
        "fetch_snapshot_request",
        {"epoch": EPOCH_AHEAD, "snapshot": {"end_offset": -1, "epoch": 1}, "position": 0},
    ),
    "a snapshot fetch past int64": message(
        "fetch_snapshot_request", {"epoch": EPOCH_AHEAD, "snapshot": SNAPSHOT, "position": 2**64}
    ),
    "a snapshot answer of size -2": message(
        "fetch_snapshot_response", {**SNAPSHOT_RESPONSE, "size": -2}
    ),
    "a snapshot answer of odd hex": message(
        "fetch_snapshot_response", {**SNAPSHOT_RESPONSE, "data": "0"}
    ),
    "a message of an unknown kind": message("surrender", {"epoch": EPOCH_AHEAD}),
    "a message with no body": {"sender": 2, "receiver": 1, "type": "vote_request"},
}


async def test_forged_quorum_messages_are_refused_and_persist_nothing(tmp_path: Path) -> None:
    cluster = LoopbackQuorum(tmp_path)
    async with trio.open_nursery() as nursery:
        for node in cluster.peers:
            await cluster.start(nursery, node)
        await cluster.propose([b"before"])
        taken = []
        for name, document in FORGED_QUORUM_MESSAGES.items():
            if await exchange(cluster.peers[1], forged(document)) is not None:
                taken.append(name)
        assert taken == [], "answered instead of closing the connection"
        await cluster.propose([b"after"])
        epochs = {node: server.raft.epoch for node, server in cluster.servers.items()}
        assert all(epoch < EPOCH_AHEAD for epoch in epochs.values()), epochs
        for node in cluster.peers:
            state = json.loads((tmp_path / f"voter-{node}" / "quorum-state").read_text())
            assert state["epoch"] == epochs[node]
        nursery.cancel_scope.cancel()
    for storage in cluster.storages.values():
        storage.close()


FORGED_REQUESTS = {
    "a heartbeat of broker epoch 2^64+5": ("heartbeat", {"epoch": 2**64 + 5}),
    "a heartbeat from a negative offset": ("heartbeat", {"offset": -1}),
    "a heartbeat past the metadata's end": ("heartbeat", {"offset": 2**62}),
    "a heartbeat of broker 2^40": ("heartbeat", {"broker": 2**40}),
    "a heartbeat waiting a float": ("heartbeat", {"wait_ms": 1.5}),
    "a heartbeat with a field more": ("heartbeat", {"sneaky": 1}),
    "a registration of broker -7": ("register_broker", {"broker": -7}),
    "a registration on port 70000": ("register_broker", {"port": 70_000}),
    "a registration with a 100 kB host": ("register_broker", {"host": "h" * 100_000}),
    "an ISR change at leader epoch 2^31": ("alter_partition", {"leader_epoch": 2**31}),
    "an ISR of strings": ("alter_partition", {"isr": ["1"]}),
    "a topic with a name of 1000 characters": ("create_topic", {"name": "n" * 1000}),
    "a topic with a config that is a number": ("create_topic", {"configs": {"a": 5}}),
    "a reassignment to broker -1": (
        "reassign_partitions",
        {"partitions": [{"topic": "orders", "partition": 0, "replicas": [-1]}]},
    ),
    "producer ids for an epoch that is a boolean": ("allocate_producer_ids", {"epoch": True}),
    "a controlled shutdown of an epoch that is a string": ("controlled_shutdown", {"epoch": "1"}),
}


def valid_params(broker_epoch: int) -> dict[str, dict[str, Any]]:
    broker = {"broker": 1, "epoch": broker_epoch}
    return {
        "heartbeat": {**broker, "offset": 0, "wait_ms": 0},
        "register_broker": {"broker": 1, "host": "127.0.0.1", "port": 9091, "rack": None},
        "alter_partition": {
            "topic": "orders",
            "partition": 0,
            "broker": 1,
            "leader_epoch": 0,
            "partition_epoch": 0,
            "isr": [1],
        },
        "create_topic": {"name": "audit", "partitions": 1, "replication_factor": 1},
        "reassign_partitions": {"partitions": []},
        "allocate_producer_ids": broker,
        "controlled_shutdown": broker,
    }


async def test_forged_controller_requests_are_refused_and_change_nothing(tmp_path: Path) -> None:
    cluster = AnsweringCluster(tmp_path)
    async with trio.open_nursery() as nursery:
        for node in cluster.peers:
            await cluster.start(nursery, node)
        active = await cluster.active()
        broker_epoch = await active.register(1, "127.0.0.1", 9091)
        await active.create_topic("orders", 1, 1)
        applied, brokers = active.quorum.applied, dict(active.image.brokers)
        address = cluster.peers[active.quorum.id]
        answers = {}
        for name, (method, changes) in FORGED_REQUESTS.items():
            params = {**valid_params(broker_epoch)[method], **changes}
            document = await exchange(address, forged({"method": method, "params": params}))
            answers[name] = None if document is None else document.get("error")
        assert answers == dict.fromkeys(FORGED_REQUESTS, INVALID_REQUEST)
        assert active.active and active.quorum.applied == applied
        assert dict(active.image.brokers) == brokers and set(active.image.topics) == {"orders"}
        good = {"method": "heartbeat", "params": valid_params(broker_epoch)["heartbeat"]}
        document = await exchange(address, forged(good))
        assert document is not None and "result" in document
        nursery.cancel_scope.cancel()
    for storage in cluster.storages.values():
        storage.close()


async def test_a_key_error_inside_the_controller_is_its_own_fault_not_the_caller_s() -> None:
    async def describe(params: dict[str, Any]) -> dict[str, Any]:
        return {"controller": {}["missing"]}  # a defect of the controller's own

    document = await answer({"describe": describe}, {"method": "describe", "params": {}})
    assert document["error"] == INTERNAL
    assert "bad params" not in document["message"]


async def test_params_that_break_the_table_never_reach_the_method() -> None:
    reached = []

    async def heartbeat(params: dict[str, Any]) -> dict[str, Any]:
        reached.append(params)
        return {}

    params = {"broker": 1, "epoch": 1, "offset": -1}
    document = await answer({"heartbeat": heartbeat}, {"method": "heartbeat", "params": params})
    assert document["error"] == INVALID_REQUEST and "params.offset" in document["message"]
    assert reached == []
