"""The controller quorum's trio shell: sockets, timers and one owner for a :class:`RaftNode`.

A :class:`QuorumServer` runs one voter over a :class:`Transport`. Over TCP
(:class:`TcpTransport`) voters send frames of a 4-byte big-endian length and
a JSON body (:func:`encode_message` / :func:`decode_message`): every Raft
message is one-way, and an answer is a message of its own, so each voter
keeps one outgoing connection per peer (reconnecting with a delay) and
accepts the peers' connections. A frame over :data:`FRAME_BYTES_MAX`, one
that does not decode, or one that breaks its message's table
(:data:`TABLES`: an epoch or offset out of its range, an id that is not
another voter's, a field missing or unexpected) closes that connection
before the node sees it, so nothing from it is persisted; nothing else
notices. A simulation plugs in a network of its own.

One task owns the node: it takes inbound messages from a channel, ticks
every :data:`TICK_MS`, and queues what the node sends. :meth:`propose`
appends through the leader and waits until the entries are committed, and
every committed entry is handed to ``on_commit`` in log order, exactly once
per process.

Snapshots: with ``snapshot_bytes`` set, once that many bytes of entries have
been applied since the last snapshot, the owner asks ``take_snapshot`` for
the state the applied entries built and keeps it at the applied offset
(:meth:`~.raft.RaftNode.snapshot`). When the node's latest snapshot is past
what was applied (at start, or after the leader sent one), ``restore`` gets
its data and applying goes on from its end.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import trio

from eventplatform.log.cluster.frames import (
    EPOCH,
    INT64_MAX,
    OFFSET,
    VOTER,
    Body,
    Boolean,
    Field,
    FrameError,
    Hex,
    Integer,
    ListOf,
    Record,
    Table,
    Text,
    Tuple,
    check,
    check_kind,
    frame,
    parse,
    split_frames,
)
from eventplatform.log.cluster.network import TCP, Network
from eventplatform.log.cluster.network import refused as connection_refused
from eventplatform.log.cluster.raft import (
    BeginQuorumEpoch,
    DivergingEpoch,
    Entry,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    NotLeaderError,
    QuorumStorage,
    RaftConfig,
    RaftNode,
    Role,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from eventplatform.log.invariants import require

log = logging.getLogger(__name__)

TICK_MS = 10
RECONNECT_DELAY_S = 0.2
CLOSED_READ_BYTES = 4096
"""What a read of an outgoing connection takes at once (the peer writes nothing on it)."""
CONNECT_TIMEOUT_S = 2.0
SEND_QUEUE_MESSAGES = 10_000
PROPOSE_TIMEOUT_S = 10.0
BODIES: dict[str, type[Any]] = {
    "vote_request": VoteRequest,
    "vote_response": VoteResponse,
    "begin_quorum_epoch": BeginQuorumEpoch,
    "fetch_request": FetchRequest,
    "fetch_response": FetchResponse,
    "fetch_snapshot_request": FetchSnapshotRequest,
    "fetch_snapshot_response": FetchSnapshotResponse,
}
BODY_NAMES = {body: name for name, body in BODIES.items()}

SNAPSHOT_ID = Record(Field("end_offset", OFFSET), Field("epoch", EPOCH))
ENVELOPE: Table = (
    Field("sender", VOTER),
    Field("receiver", VOTER),
    Field("type", Text(64)),
    Field("body", Body()),
)
TABLES: dict[str, Table] = {
    "vote_request": (
        Field("epoch", EPOCH),
        Field("candidate", VOTER),
        Field("last_epoch", EPOCH),
        Field("end_offset", OFFSET),
    ),
    "vote_response": (Field("epoch", EPOCH), Field("granted", Boolean())),
    "begin_quorum_epoch": (Field("epoch", EPOCH), Field("leader", VOTER)),
    "fetch_request": (Field("epoch", EPOCH), Field("offset", OFFSET), Field("last_epoch", EPOCH)),
    "fetch_response": (
        Field("epoch", EPOCH),
        Field("leader", VOTER, nullable=True),
        Field("offset", OFFSET),
        Field("entries", ListOf(Tuple(EPOCH, Hex()))),
        Field("high_watermark", OFFSET),
        Field("diverging", Record(Field("epoch", EPOCH), Field("end_offset", OFFSET)), True),
        Field("snapshot", SNAPSHOT_ID, nullable=True),
    ),
    "fetch_snapshot_request": (
        Field("epoch", EPOCH),
        Field("snapshot", SNAPSHOT_ID),
        Field("position", OFFSET),
    ),
    "fetch_snapshot_response": (
        Field("epoch", EPOCH),
        Field("leader", VOTER, nullable=True),
        Field("snapshot", SNAPSHOT_ID),
        Field("position", OFFSET),
        Field("data", Hex()),
        Field("size", Integer(-1, INT64_MAX)),
    ),
}
"""What each quorum message holds, by its ``type`` (:func:`~.frames.check`)."""
require(TABLES.keys() == BODIES.keys(), "every quorum message kind has a table")


RequestHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""Answers a request frame (one with a ``method``) that arrives on a voter's port."""

__all__ = ["FrameError", "QuorumServer", "TcpTransport", "decode_message", "encode_message"]


def encode_message(message: Message) -> bytes:
    body = asdict(message.body)
    if isinstance(message.body, FetchResponse):
        body["entries"] = [[entry.epoch, entry.payload.hex()] for entry in message.body.entries]
    if isinstance(message.body, FetchSnapshotResponse):
        body["data"] = message.body.data.hex()
    document = {
        "sender": message.sender,
        "receiver": message.receiver,
        "type": BODY_NAMES[type(message.body)],
        "body": body,
    }
    return frame(document)


def decode_message(payload: bytes, node: int, voters: Collection[int]) -> Message:
    """The message in a frame's ``payload`` sent to ``node``; raises FrameError."""
    return message_from(parse(payload), node, voters)


def message_from(document: dict[str, Any], node: int, voters: Collection[int]) -> Message:
    """The message a decoded frame holds, once its table (:data:`TABLES`) says it may
    reach the node: every field of its type and range, sent by another of the ``voters``
    to ``node``. Raises FrameError for anything else."""
    check(ENVELOPE, document, voters=voters)
    fields = document["body"]
    check_kind(TABLES, document["type"], fields, voters=voters, where="body")
    body_type = BODIES[document["type"]]
    sender, receiver = document["sender"], document["receiver"]
    if receiver != node or sender == node:
        raise FrameError(f"a message from {sender} to {receiver} reached voter {node}")
    fields = dict(fields)
    if body_type is FetchResponse:
        fields["entries"] = tuple(
            Entry(epoch, bytes.fromhex(data)) for epoch, data in fields["entries"]
        )
        if fields["diverging"] is not None:
            fields["diverging"] = DivergingEpoch(**fields["diverging"])
    if fields.get("snapshot") is not None:
        fields["snapshot"] = SnapshotId(**fields["snapshot"])
    if body_type is FetchSnapshotResponse:
        fields["data"] = bytes.fromhex(fields["data"])
    return Message(sender, receiver, body_type(**fields))


@dataclass(frozen=True, slots=True)
class Refused:
    """For the owner task: a connection to voter ``peer`` was refused."""

    peer: int


class Transport(Protocol):
    """How a voter's messages travel: TCP (:class:`TcpTransport`), or a simulated network."""

    async def run(
        self,
        node: int,
        deliver: Callable[[Message], None],
        outboxes: Mapping[int, trio.MemoryReceiveChannel[Message]],
        refused: Callable[[int], None],
        *,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Until cancelled: hand inbound messages to ``deliver``, send what ``outboxes``
        (one per peer) hold, tell ``refused`` of a peer whose address refused a
        connection (no process of it runs); reports the bound port (or None) through
        ``task_status``."""
        ...


class TcpTransport:
    """Voters over TCP: length-prefixed frames, one outgoing connection per peer.

    The same port takes requests (frames with a ``method``, :mod:`.rpc`) when
    ``requests`` is given: each is answered on its connection, in order.
    """

    def __init__(
        self,
        peers: Mapping[int, tuple[str, int]],
        requests: RequestHandler | None = None,
        network: Network = TCP,
    ) -> None:
        self.peers = dict(peers)
        self.requests = requests
        self.network = network

    async def run(
        self,
        node: int,
        deliver: Callable[[Message], None],
        outboxes: Mapping[int, trio.MemoryReceiveChannel[Message]],
        refused: Callable[[int], None],
        *,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        host, port = self.peers[node]
        listeners, bound = await self.network.listen(host, port)

        async def inbound(stream: trio.abc.Stream) -> None:
            await self._inbound(node, stream, deliver)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, inbound, listeners)
            for peer, outbox in outboxes.items():
                nursery.start_soon(self._outbound, peer, outbox, refused)
            task_status.started(bound)

    async def _outbound(
        self,
        peer: int,
        outbox: trio.MemoryReceiveChannel[Message],
        refused: Callable[[int], None],
    ) -> None:
        host, port = self.peers[peer]
        while True:
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    stream = await self.network.connect(host, port)
            except (OSError, trio.TooSlowError) as exc:
                if isinstance(exc, OSError) and connection_refused(exc):
                    refused(peer)
                await trio.sleep(RECONNECT_DELAY_S)
                continue
            try:
                async with stream, trio.open_nursery() as link:
                    link.start_soon(_until_closed, stream, link.cancel_scope)
                    while True:
                        await stream.send_all(encode_message(await outbox.receive()))
            except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            await trio.sleep(RECONNECT_DELAY_S)

    async def _inbound(
        self, node: int, stream: trio.abc.Stream, deliver: Callable[[Message], None]
    ) -> None:
        buffer = bytearray()
        try:
            async with stream:
                while True:
                    data = await stream.receive_some(65_536)
                    if not data:
                        return
                    buffer += data
                    for document in split_frames(buffer):
                        if "method" in document:
                            await self._answer(stream, document)
                            continue
                        deliver(message_from(document, node, self.peers))
        except FrameError as exc:
            log.warning("voter %d: closing a connection: %s", node, exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return

    async def _answer(self, stream: trio.abc.Stream, document: dict[str, Any]) -> None:
        if self.requests is None:
            raise FrameError("this port takes no requests")
        await stream.send_all(frame(await self.requests(document)))


async def _until_closed(stream: trio.abc.Stream, link: trio.CancelScope) -> None:
    """Read the outgoing connection to a voter, which that voter never writes on, until it
    closes it; then cancel ``link``, so the sender connects again at once. Without this, a
    connection that is seldom written on (a follower's to another follower) outlives the
    process it reached, and the next message on it, a vote request, is lost in the kernel's
    buffer: that cost an election round after a restart."""
    try:
        while await stream.receive_some(CLOSED_READ_BYTES):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    link.cancel()


class QuorumServer:
    """One voter of the quorum ``voters``, talking through ``transport``."""

    def __init__(
        self,
        node_id: int,
        voters: Sequence[int],
        storage: QuorumStorage,
        transport: Transport,
        *,
        config: RaftConfig | None = None,
        on_commit: Callable[[int, Entry], None] | None = None,
        snapshot_bytes: int | None = None,
        take_snapshot: Callable[[], bytes] | None = None,
        restore: Callable[[bytes], None] | None = None,
    ) -> None:
        self.id = node_id
        self.voters = tuple(voters)
        self.storage = storage
        self.transport = transport
        self.config = config
        self.node: RaftNode | None = None
        self.on_commit = on_commit
        self.snapshot_bytes = snapshot_bytes
        self.take_snapshot = take_snapshot
        self.restore = restore
        self.applied = 0
        self._applied_bytes = 0
        """Bytes of entries applied since the last snapshot."""
        self._inbox_send, self._inbox = trio.open_memory_channel[Message | Refused](math.inf)
        self._outboxes = {
            peer: trio.open_memory_channel[Message](SEND_QUEUE_MESSAGES)
            for peer in voters
            if peer != node_id
        }
        self._committed = trio.Condition()

    @classmethod
    def over_tcp(
        cls,
        node_id: int,
        peers: Mapping[int, tuple[str, int]],
        storage: QuorumStorage,
        requests: RequestHandler | None = None,
        network: Network = TCP,
        **options: Any,
    ) -> QuorumServer:
        """A voter of ``peers`` (id → (host, port), itself included) over TCP."""
        transport = TcpTransport(peers, requests, network)
        return cls(node_id, list(peers), storage, transport, **options)

    @property
    def raft(self) -> RaftNode:
        """The voter's state machine (there once :meth:`serve` has started)."""
        if self.node is None:
            raise RuntimeError("the quorum server has not started")
        return self.node

    @property
    def is_leader(self) -> bool:
        return self.node is not None and self.node.role is Role.LEADER

    @property
    def leads_caught_up(self) -> bool:
        """Leading, with every entry before this epoch's leader-change entry committed and
        applied here: a state machine on ``on_commit`` is current, and may decide."""
        return self.is_leader and self.node is not None and self.applied > self.node.epoch_start

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; reports what the transport bound (a port, or None)."""
        self.node = RaftNode(self.id, self.voters, self.storage, _now_ms(), config=self.config)
        receivers = {peer: channel[1] for peer, channel in self._outboxes.items()}
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(
                self.transport.run,
                self.id,
                self._inbox_send.send_nowait,
                receivers,
                lambda peer: self._inbox_send.send_nowait(Refused(peer)),
            )
            nursery.start_soon(self._drive)
            task_status.started(bound)

    async def propose(self, payloads: Sequence[bytes]) -> int:
        """Append ``payloads`` and wait until they are committed; their first offset.
        Raises NotLeaderError here, or TooSlowError if they do not commit in time."""
        raft = self.raft
        first = raft.propose(payloads)
        last = first + len(payloads)
        epoch = raft.epoch
        with trio.fail_after(PROPOSE_TIMEOUT_S):
            async with self._committed:
                while raft.high_watermark < last:
                    if raft.epoch != epoch or raft.role is not Role.LEADER:
                        raise NotLeaderError(raft.leader)
                    await self._committed.wait()
        return first

    async def wait_applied(self, beyond: int, deadline: float) -> None:
        """Return once more than ``beyond`` entries are applied, or at ``deadline``."""
        with trio.move_on_at(deadline):
            async with self._committed:
                while self.applied <= beyond:
                    await self._committed.wait()

    # ------------------------------------------------------------ the owner

    async def _drive(self) -> None:
        """The node's one owner: messages as they come, and a tick every TICK_MS (a
        receive past the tick's deadline is cancelled, so ticks never starve)."""
        raft = self.raft
        next_tick = trio.current_time()
        seen = (raft.role, raft.epoch, raft.leader)
        while True:
            if (raft.role, raft.epoch, raft.leader) != seen:
                seen = (raft.role, raft.epoch, raft.leader)
                log.info(
                    "voter %d: %s at epoch %d%s",
                    self.id,
                    raft.role.value,
                    raft.epoch,
                    f" (leader {raft.leader})" if raft.role is Role.FOLLOWER else "",
                )
            with trio.move_on_at(next_tick):
                item = await self._inbox.receive()
                if isinstance(item, Refused):
                    self._send(raft.peer_refused(item.peer, _now_ms()))
                    continue
                self._send(raft.receive(item, _now_ms()))
                await self._apply_committed()
                continue
            self._send(raft.tick(_now_ms()))
            await self._apply_committed()
            next_tick = trio.current_time() + TICK_MS / 1000

    async def _apply_committed(self) -> None:
        raft = self.raft
        snapshot = raft.latest_snapshot
        if snapshot is not None and snapshot.end_offset > self.applied:
            self._restore(snapshot)
        while self.applied < raft.high_watermark:
            entry = raft.entry(self.applied)
            if self.on_commit is not None:
                self.on_commit(self.applied, entry)
            self.applied += 1
            self._applied_bytes += len(entry.payload)
        if (
            self.snapshot_bytes is not None
            and self.take_snapshot is not None
            and self._applied_bytes >= self.snapshot_bytes
        ):
            self._applied_bytes = 0
            try:
                raft.snapshot(self.applied, self.take_snapshot())
            except OSError as exc:
                # the log still holds everything: go on, and try again an interval later
                log.error("voter %d: writing a snapshot failed: %s", self.id, exc)
        async with self._committed:
            self._committed.notify_all()

    def _restore(self, snapshot: SnapshotId) -> None:
        """Take the state of ``snapshot``, which is past what was applied here."""
        data = self.raft.read_snapshot(snapshot)
        if self.restore is not None:
            self.restore(data)
        log.info("voter %d: state restored from snapshot %s", self.id, snapshot)
        self.applied = snapshot.end_offset
        self._applied_bytes = 0

    def _send(self, messages: list[Message]) -> None:
        for message in messages:
            outbox = self._outboxes.get(message.receiver)
            if outbox is None:
                continue
            try:
                outbox[0].send_nowait(message)
            except trio.WouldBlock:
                log.warning("voter %d: the queue to %d is full", self.id, message.receiver)


def _now_ms() -> int:
    return int(trio.current_time() * 1000)
