"""The controller quorum's consensus: Raft as KRaft runs it, without I/O.

A :class:`RaftNode` is one voter's state machine. It does no I/O and reads
no clock: the shell feeds it messages (:meth:`RaftNode.receive`), the time
(:meth:`RaftNode.tick`) and proposals (:meth:`RaftNode.propose`), and sends
the messages these return. So a deterministic simulation can run a whole
quorum in one process, and the trio shell adds only sockets and timers.

It follows KRaft (KIP-595) rather than textbook Raft in how the log moves:

* **Election.** A voter that hears nothing from a leader for
  ``fetch_timeout_ms`` plus a random part of half the election timeout (so
  the followers of one leader, which heard it last at the same moment, do
  not all stand at once), or, with no leader known, for a randomized
  election timeout, becomes a candidate: it bumps the epoch, votes for
  itself and asks the others (:class:`VoteRequest`). A voter that refuses a
  candidate because its own log ends later is the better candidate, and
  stands within a quarter of the election timeout. When the shell finds that no
  process listens at the leader's address any more (a connection refused:
  :meth:`RaftNode.peer_refused`), a follower stands after a randomized part
  of the election timeout instead of the whole fetch timeout; a paused or
  cut-off leader still holds its port and is waited for as before. A voter
  grants one vote per epoch, to a candidate whose log ends at least as late
  as its own, compared by (last epoch, end offset). The winner announces itself
  (:class:`BeginQuorumEpoch`) and appends a leader-change entry of its epoch.
* **Replication is pulled.** Followers send :class:`FetchRequest` (the
  offset they need and the epoch of their last entry); the leader answers
  with entries, or, when the follower's log diverges from its own, with the
  largest epoch they share and where it ends in the leader's log
  (:class:`DivergingEpoch`), and the follower truncates there, or where that
  epoch ends in its own log when that is sooner. Nothing is ever truncated below the high
  watermark.
* **Commitment.** The leader's high watermark is the largest offset that a
  majority of voters have fetched past, once that includes an entry of the
  leader's own epoch; followers learn it from fetch responses.
* **Check quorum.** A leader that no majority has fetched from within
  ``fetch_timeout_ms`` resigns, so a partitioned leader stops answering as
  one.
* **Snapshots.** The shell writes a snapshot of its applied state at a
  committed offset (:meth:`RaftNode.snapshot`); the storage keeps the latest
  few and drops the log below the oldest one kept, so the log starts at a
  snapshot's end offset, whose epoch stands in for the entries before it. A
  follower whose fetch offset is below the leader's log start, or whose log
  diverges below it, is sent the latest snapshot's id instead of entries; it
  fetches the snapshot in chunks (:class:`FetchSnapshotRequest`), installs
  it in place of its log, and fetches on from its end.

What must survive a restart (the epoch, the vote, and the log) lives in a
:class:`QuorumStorage`, written before any message that depends on it
leaves. Epochs never go back, a node votes at most once per epoch, and a
leader never overwrites its own log: :func:`~eventplatform.log.invariants.require`
checks these where they matter.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from eventplatform.log.invariants import require

LEADER_CHANGE = b""
"""The payload of the entry a new leader appends at the start of its epoch."""
EPOCH_MAX = (1 << 31) - 1
"""The last epoch (Kafka's int32). A voter there does not stand for election again, as
its next epoch could not be persisted: it stays up, and follows a leader of this epoch
if one announces itself. Messages with a later epoch are refused where they are decoded."""


@dataclass(frozen=True)
class Entry:
    epoch: int
    payload: bytes


@dataclass(frozen=True, order=True)
class SnapshotId:
    """A snapshot of everything before ``end_offset``, whose last entry has ``epoch``.

    The log start is named the same way: its offset and the epoch of the entry just
    before it (``SnapshotId(0, 0)`` for a log that starts at the beginning)."""

    end_offset: int
    epoch: int


LOG_START = SnapshotId(0, 0)


class SnapshotError(Exception):
    """A snapshot that cannot be read: missing, torn or corrupt; the message names it."""


# ---------------------------------------------------------------- messages


@dataclass(frozen=True)
class VoteRequest:
    epoch: int
    candidate: int
    last_epoch: int
    end_offset: int


@dataclass(frozen=True)
class VoteResponse:
    epoch: int
    granted: bool


@dataclass(frozen=True)
class BeginQuorumEpoch:
    epoch: int
    leader: int


@dataclass(frozen=True)
class FetchRequest:
    epoch: int
    offset: int
    last_epoch: int
    """The epoch of the entry just before ``offset`` (0 at offset 0)."""


@dataclass(frozen=True)
class DivergingEpoch:
    epoch: int
    end_offset: int


@dataclass(frozen=True)
class FetchResponse:
    epoch: int
    leader: int | None
    offset: int
    """The fetch offset this answers."""
    entries: tuple[Entry, ...] = ()
    high_watermark: int = 0
    diverging: DivergingEpoch | None = None
    snapshot: SnapshotId | None = None
    """Set when the leader's log no longer holds what the follower needs: fetch this
    snapshot and install it."""


@dataclass(frozen=True)
class FetchSnapshotRequest:
    epoch: int
    snapshot: SnapshotId
    position: int
    """The byte of the snapshot to send from."""


@dataclass(frozen=True)
class FetchSnapshotResponse:
    epoch: int
    leader: int | None
    snapshot: SnapshotId
    position: int
    data: bytes = b""
    size: int = -1
    """The whole snapshot's bytes; -1: the leader has no such snapshot (any more)."""


Body = (
    VoteRequest
    | VoteResponse
    | BeginQuorumEpoch
    | FetchRequest
    | FetchResponse
    | FetchSnapshotRequest
    | FetchSnapshotResponse
)


@dataclass(frozen=True)
class Message:
    sender: int
    receiver: int
    body: Body


# ---------------------------------------------------------------- storage


class QuorumStorage(Protocol):
    """What a voter keeps across restarts: the quorum state and the log.

    Every method returns only once the change is durable.
    """

    def load_state(self) -> tuple[int, int | None]:
        """The epoch and the vote cast in it (``None``: none)."""
        ...

    def save_state(self, epoch: int, voted_for: int | None) -> None: ...

    def log_start(self) -> SnapshotId:
        """Where the log starts: its first offset and the epoch of the entry before it."""
        ...

    def entries(self) -> list[Entry]:
        """The entries from the log start on."""
        ...

    def append(self, entries: Sequence[Entry]) -> None: ...

    def truncate(self, end_offset: int) -> None:
        """Drop every entry at ``end_offset`` and after."""
        ...

    def snapshots(self) -> list[SnapshotId]:
        """The snapshots kept that can be read, oldest first."""
        ...

    def read_snapshot(self, snapshot: SnapshotId) -> bytes:
        """A kept snapshot's data; raises SnapshotError when it is gone or corrupt."""
        ...

    def write_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        """Keep ``data`` as ``snapshot`` (within the log), drop snapshots beyond the
        newest :data:`SNAPSHOTS_KEPT`, and the log below the oldest one kept."""
        ...

    def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        """Keep ``data`` as ``snapshot`` and restart the log, empty, at its end offset."""
        ...


SNAPSHOTS_KEPT = 2
"""How many snapshots a voter keeps: the log starts at the oldest, so a newest one that
turns out unreadable can be replaced by the one before and the log after it."""


@dataclass
class MemoryStorage:
    """A :class:`QuorumStorage` in memory: for simulations, where a crash keeps it."""

    epoch: int = 0
    voted_for: int | None = None
    log: list[Entry] = field(default_factory=list)
    """The entries from ``start`` on."""
    start: SnapshotId = LOG_START
    kept: dict[SnapshotId, bytes] = field(default_factory=dict)

    def load_state(self) -> tuple[int, int | None]:
        return self.epoch, self.voted_for

    def save_state(self, epoch: int, voted_for: int | None) -> None:
        self.epoch, self.voted_for = epoch, voted_for

    def log_start(self) -> SnapshotId:
        return self.start

    def entries(self) -> list[Entry]:
        return list(self.log)

    def append(self, entries: Sequence[Entry]) -> None:
        self.log.extend(entries)

    def truncate(self, end_offset: int) -> None:
        del self.log[end_offset - self.start.end_offset :]

    def snapshots(self) -> list[SnapshotId]:
        return sorted(self.kept)

    def read_snapshot(self, snapshot: SnapshotId) -> bytes:
        if snapshot not in self.kept:
            raise SnapshotError(f"no snapshot {snapshot}")
        return self.kept[snapshot]

    def write_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        self.kept[snapshot] = data
        for old in sorted(self.kept)[:-SNAPSHOTS_KEPT]:
            del self.kept[old]
        oldest = min(self.kept)
        if oldest.end_offset > self.start.end_offset:
            del self.log[: oldest.end_offset - self.start.end_offset]
            self.start = oldest

    def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        self.kept = {snapshot: data}
        self.log, self.start = [], snapshot


# ---------------------------------------------------------------- the node


class Role(Enum):
    UNATTACHED = "unattached"
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True)
class RaftConfig:
    election_timeout_ms: int = 1000
    """A new election starts between this and twice this after the last one."""
    fetch_timeout_ms: int = 2000
    """A follower with no answer from its leader this long stands for election; a leader
    no majority fetched from this long resigns."""
    fetch_interval_ms: int = 50
    """A follower fetches again this long after an answer that brought nothing."""
    request_timeout_ms: int = 500
    fetch_entries_max: int = 500
    """The most entries one fetch response carries."""
    snapshot_chunk_bytes: int = 1024 * 1024
    """The most snapshot bytes one fetch-snapshot response carries."""
    """A fetch unanswered this long is sent again; a leader announces itself again to a
    voter it has not heard from this long."""


class NotLeaderError(Exception):
    """A proposal reached a voter that is not the leader; ``leader`` is the one it knows."""

    def __init__(self, leader: int | None) -> None:
        super().__init__(f"not the leader; the leader is {leader}")
        self.leader = leader


class RaftNode:
    """One voter of a quorum of ``voters`` (ids), as a state machine; see the module."""

    def __init__(
        self,
        node_id: int,
        voters: Sequence[int],
        storage: QuorumStorage,
        now_ms: int,
        *,
        config: RaftConfig | None = None,
        seed: int = 0,
    ) -> None:
        require(node_id in voters, f"node {node_id} is not one of the voters {list(voters)}")
        self.id = node_id
        self.voters = tuple(sorted(voters))
        self.storage = storage
        self.config = config or RaftConfig()
        self.random = random.Random(seed * 1_000_003 + node_id)
        self.epoch, self.voted_for = storage.load_state()
        self.start = storage.log_start()
        self.log = storage.entries()
        kept = storage.snapshots()
        self.latest_snapshot: SnapshotId | None = kept[-1] if kept else None
        require(
            self.start == LOG_START or (kept != [] and kept[-1] >= self.start),
            f"node {self.id}: the log starts at {self.start}, after every snapshot kept",
        )
        self.role = Role.UNATTACHED
        self.leader: int | None = None
        self.high_watermark = self.latest_snapshot.end_offset if self.latest_snapshot else 0
        self._snapshot_cache: tuple[SnapshotId, bytes] | None = None
        self._installing: SnapshotId | None = None
        self._installed = bytearray()
        self._votes: set[int] = set()
        self._fetched: dict[int, int] = {}
        self._fetched_at: dict[int, int] = {}
        self._epoch_start = 0
        self._fetch_due_ms = 0
        self._fetch_in_flight = False
        self._fetch_sent_ms = 0
        self._announced_ms: dict[int, int] = {}
        self._last_heard_ms = now_ms
        self._patience_ms = self.config.fetch_timeout_ms
        """How long this follower waits for its leader: the fetch timeout and a random part."""
        self._refused_in: int | None = None
        """The epoch whose leader's refusal brought this follower's election forward."""
        self._election_due_ms = now_ms + self._election_timeout()

    # ------------------------------------------------------------ the log

    @property
    def log_start(self) -> int:
        """The first offset the log holds; a snapshot stands for everything before it."""
        return self.start.end_offset

    @property
    def end_offset(self) -> int:
        return self.start.end_offset + len(self.log)

    @property
    def last_epoch(self) -> int:
        return self.log[-1].epoch if self.log else self.start.epoch

    def entry(self, offset: int) -> Entry:
        """The entry at ``offset``, which must be within the log."""
        index = offset - self.start.end_offset
        if not 0 <= index < len(self.log):  # the message is built only when it is needed
            require(False, f"node {self.id}: offset {offset} is outside the log")
        return self.log[index]

    def entries(self, start: int, end: int) -> list[Entry]:
        """The entries in ``[start, end)``; ``start`` must be within the log."""
        first = self.start.end_offset
        if start < first:
            require(False, f"node {self.id}: offset {start} is below the log start {first}")
        return self.log[start - first : max(end - first, 0)]

    def epoch_at(self, end_offset: int) -> int:
        """The epoch of the entry just before ``end_offset`` (0 for none); ``end_offset``
        must be at or after the log start."""
        if end_offset == self.log_start:
            return self.start.epoch
        return self.entry(end_offset - 1).epoch

    def end_of_epoch(self, epoch: int) -> DivergingEpoch:
        """The largest epoch at most ``epoch`` in this log, and the offset where it ends.

        When that lies before the log start the answer is ``DivergingEpoch(0, 0)``: below
        the log start, only a snapshot can bring a follower back in line."""
        for index in range(len(self.log) - 1, -1, -1):
            if self.log[index].epoch <= epoch:
                return DivergingEpoch(self.log[index].epoch, self.log_start + index + 1)
        if self.start.epoch <= epoch and self.log_start > 0:
            return DivergingEpoch(self.start.epoch, self.log_start)
        return DivergingEpoch(0, 0)

    def committed(self) -> list[Entry]:
        """The committed entries this log still holds: from the log start on."""
        return self.entries(self.log_start, self.high_watermark)

    def _append(self, entries: Sequence[Entry]) -> None:
        self.storage.append(entries)
        self.log.extend(entries)

    def _truncate(self, end_offset: int) -> None:
        require(
            end_offset >= self.high_watermark,
            f"node {self.id}: truncating to {end_offset}, below the high watermark "
            f"{self.high_watermark}",
        )
        self.storage.truncate(end_offset)
        del self.log[end_offset - self.log_start :]

    # ------------------------------------------------------------ snapshots

    def snapshot(self, end_offset: int, data: bytes) -> SnapshotId:
        """Keep ``data``, the state after applying every entry before ``end_offset`` (a
        committed offset), as a snapshot; the log may then start later."""
        require(
            self.log_start < end_offset <= self.high_watermark,
            f"node {self.id}: a snapshot at {end_offset} outside the committed log "
            f"({self.log_start}, {self.high_watermark}]",
        )
        snapshot = SnapshotId(end_offset, self.epoch_at(end_offset))
        self.storage.write_snapshot(snapshot, data)
        self.latest_snapshot = snapshot
        start = self.storage.log_start()
        del self.log[: start.end_offset - self.log_start]
        self.start = start
        return snapshot

    def read_snapshot(self, snapshot: SnapshotId) -> bytes:
        """The data of a kept snapshot; raises SnapshotError when it cannot be read."""
        if self._snapshot_cache is not None and self._snapshot_cache[0] == snapshot:
            return self._snapshot_cache[1]
        data = self.storage.read_snapshot(snapshot)
        self._snapshot_cache = (snapshot, data)
        return data

    # ------------------------------------------------------------ inputs

    def propose(self, payloads: Sequence[bytes]) -> int:
        """Append ``payloads`` as entries of this epoch; returns the first one's offset.
        They are committed once the high watermark passes them."""
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader)
        first = self.end_offset
        self._append([Entry(self.epoch, payload) for payload in payloads])
        self._fetched[self.id] = self.end_offset
        self._advance_high_watermark()
        return first

    def tick(self, now_ms: int) -> list[Message]:
        """What the passing of time makes this node send."""
        if self.role is Role.LEADER:
            return self._leader_tick(now_ms)
        if self.role is Role.FOLLOWER:
            if now_ms - self._last_heard_ms >= self._patience_ms:
                return self._start_election(now_ms)
            unanswered = now_ms - self._fetch_sent_ms >= self.config.request_timeout_ms
            if (not self._fetch_in_flight and now_ms >= self._fetch_due_ms) or (
                self._fetch_in_flight and unanswered
            ):
                return [self._fetch(now_ms)]
            return []
        if now_ms >= self._election_due_ms:
            return self._start_election(now_ms)
        return []

    def peer_refused(self, peer: int, now_ms: int) -> list[Message]:
        """The shell's connection to ``peer`` was refused: no process listens there. A
        follower of that leader stands for election within a randomized part of the
        election timeout (so the followers of a dead leader do not all stand at once),
        unless an answer from the leader comes first. Only ever brings the election
        forward: a refusal says the leader is gone, never that it is alive."""
        if self.role is Role.FOLLOWER and self.leader == peer and self._refused_in != self.epoch:
            self._refused_in = self.epoch  # the first refusal of this epoch sets the time
            stand_ms = now_ms + self.random.randrange(self.config.election_timeout_ms)
            self._last_heard_ms = min(self._last_heard_ms, stand_ms - self._patience_ms)
        return []

    def receive(self, message: Message, now_ms: int) -> list[Message]:
        """What receiving ``message`` makes this node send."""
        body = message.body
        if body.epoch > self.epoch:
            with_leader = BeginQuorumEpoch | FetchResponse | FetchSnapshotResponse
            leader = body.leader if isinstance(body, with_leader) else None
            self._new_epoch(body.epoch, leader, now_ms)
        if isinstance(body, VoteRequest):
            return self._on_vote_request(message.sender, body, now_ms)
        if isinstance(body, VoteResponse):
            return self._on_vote_response(message.sender, body, now_ms)
        if isinstance(body, BeginQuorumEpoch):
            return self._on_begin(body, now_ms)
        if isinstance(body, FetchRequest):
            return self._on_fetch(message.sender, body, now_ms)
        if isinstance(body, FetchSnapshotRequest):
            return self._on_fetch_snapshot(message.sender, body, now_ms)
        if isinstance(body, FetchSnapshotResponse):
            return self._on_fetch_snapshot_response(body, now_ms)
        return self._on_fetch_response(body, now_ms)

    # ------------------------------------------------------------ epochs and votes

    def _persist(self, epoch: int, voted_for: int | None) -> None:
        require(epoch >= self.epoch, f"node {self.id}: epoch {self.epoch} going back to {epoch}")
        require(
            epoch > self.epoch or self.voted_for in (None, voted_for),
            f"node {self.id}: a second vote in epoch {epoch}",
        )
        self.storage.save_state(epoch, voted_for)
        self.epoch, self.voted_for = epoch, voted_for

    def _new_epoch(self, epoch: int, leader: int | None, now_ms: int) -> None:
        """A message of a later epoch: follow its leader, or wait unattached for one."""
        self._persist(epoch, None)
        self._votes.clear()
        if leader is not None and leader != self.id:
            self._follow(leader, now_ms)
        else:
            self.role, self.leader = Role.UNATTACHED, None
            self._election_due_ms = now_ms + self._election_timeout()

    def _follow(self, leader: int, now_ms: int) -> None:
        self.role, self.leader = Role.FOLLOWER, leader
        self._last_heard_ms = now_ms
        jitter_ms = self.random.randrange(max(1, self.config.election_timeout_ms // 2))
        self._patience_ms = self.config.fetch_timeout_ms + jitter_ms
        self._fetch_due_ms = now_ms
        self._fetch_in_flight = False
        self._installing = None

    def _election_timeout(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self.random.randrange(timeout)

    def _start_election(self, now_ms: int) -> list[Message]:
        if self.epoch >= EPOCH_MAX:
            self._election_due_ms = now_ms + self._election_timeout()
            return []
        self._persist(self.epoch + 1, self.id)
        self.role, self.leader = Role.CANDIDATE, None
        self._votes = {self.id}
        self._election_due_ms = now_ms + self._election_timeout()
        if self._has_majority(self._votes):
            return self._become_leader(now_ms)
        request = VoteRequest(self.epoch, self.id, self.last_epoch, self.end_offset)
        return [Message(self.id, voter, request) for voter in self.voters if voter != self.id]

    def _on_vote_request(self, sender: int, request: VoteRequest, now_ms: int) -> list[Message]:
        granted = False
        if request.epoch == self.epoch and self.role is not Role.LEADER:
            free = self.voted_for in (None, request.candidate)
            theirs = (request.last_epoch, request.end_offset)
            current = theirs >= (self.last_epoch, self.end_offset)
            if free and current and self.role is not Role.FOLLOWER:
                self._persist(self.epoch, request.candidate)
                self._election_due_ms = now_ms + self._election_timeout()
                granted = True
            elif not current and self.role is not Role.FOLLOWER:
                # this log ends later: this voter can win where the candidate cannot
                soon_ms = now_ms + self.random.randrange(
                    max(1, self.config.election_timeout_ms // 4)
                )
                self._election_due_ms = min(self._election_due_ms, soon_ms)
        return [Message(self.id, sender, VoteResponse(self.epoch, granted))]

    def _on_vote_response(self, sender: int, response: VoteResponse, now_ms: int) -> list[Message]:
        if self.role is not Role.CANDIDATE or response.epoch != self.epoch or not response.granted:
            return []
        self._votes.add(sender)
        return self._become_leader(now_ms) if self._has_majority(self._votes) else []

    def _has_majority(self, nodes: set[int]) -> bool:
        return len(nodes & set(self.voters)) * 2 > len(self.voters)

    @property
    def epoch_start(self) -> int:
        """Where this leader's epoch begins: the offset of its leader-change entry."""
        return self._epoch_start

    def _become_leader(self, now_ms: int) -> list[Message]:
        self.role, self.leader = Role.LEADER, self.id
        self._epoch_start = self.end_offset
        self._fetched = {self.id: self.end_offset}
        self._fetched_at = dict.fromkeys(self.voters, now_ms)
        self._append([Entry(self.epoch, LEADER_CHANGE)])
        self._fetched[self.id] = self.end_offset
        self._announced_ms = dict.fromkeys(self.voters, now_ms)
        self._advance_high_watermark()
        begin = BeginQuorumEpoch(self.epoch, self.id)
        return [Message(self.id, voter, begin) for voter in self.voters if voter != self.id]

    def _on_begin(self, begin: BeginQuorumEpoch, now_ms: int) -> list[Message]:
        current = begin.epoch == self.epoch and begin.leader != self.id
        followed = self.role is Role.FOLLOWER and self.leader == begin.leader
        if current and self.role is not Role.LEADER and not followed:
            self._follow(begin.leader, now_ms)
            return [self._fetch(now_ms)]
        return []

    # ------------------------------------------------------------ the leader

    def _leader_tick(self, now_ms: int) -> list[Message]:
        config = self.config
        heard = {v for v, at in self._fetched_at.items() if now_ms - at < config.fetch_timeout_ms}
        if not self._has_majority(heard | {self.id}):
            # check quorum: no majority fetches from this leader any more
            self.role, self.leader = Role.UNATTACHED, None
            self._election_due_ms = now_ms + self._election_timeout()
            return []
        again = []
        for voter in self.voters:
            quiet = now_ms - self._fetched_at[voter] >= config.request_timeout_ms
            due = now_ms - self._announced_ms.get(voter, now_ms) >= config.request_timeout_ms
            if voter != self.id and quiet and due:
                self._announced_ms[voter] = now_ms
                again.append(Message(self.id, voter, BeginQuorumEpoch(self.epoch, self.id)))
        return again

    def _on_fetch(self, sender: int, request: FetchRequest, now_ms: int) -> list[Message]:
        if self.role is not Role.LEADER or request.epoch != self.epoch:
            answer = FetchResponse(self.epoch, self.leader, request.offset)
            return [Message(self.id, sender, answer)]
        self._fetched_at[sender] = now_ms
        if request.offset < self.log_start:
            return [self._send_snapshot(sender, request)]
        if request.offset > self.end_offset or self.epoch_at(request.offset) != request.last_epoch:
            diverging = self.end_of_epoch(request.last_epoch)
            end = min(diverging.end_offset, request.offset)
            if end < self.log_start:
                return [self._send_snapshot(sender, request)]
            answer = FetchResponse(
                self.epoch,
                self.id,
                request.offset,
                high_watermark=self.high_watermark,
                diverging=DivergingEpoch(diverging.epoch, end),
            )
            return [Message(self.id, sender, answer)]
        self._fetched[sender] = request.offset
        self._advance_high_watermark()
        last = request.offset + self.config.fetch_entries_max
        entries = tuple(self.entries(request.offset, last))
        answer = FetchResponse(
            self.epoch, self.id, request.offset, entries, high_watermark=self.high_watermark
        )
        return [Message(self.id, sender, answer)]

    def _send_snapshot(self, sender: int, request: FetchRequest) -> Message:
        """The answer to a fetch that the log no longer covers: the latest snapshot's id."""
        require(self.latest_snapshot is not None, f"node {self.id}: a log start with no snapshot")
        answer = FetchResponse(
            self.epoch,
            self.id,
            request.offset,
            high_watermark=self.high_watermark,
            snapshot=self.latest_snapshot,
        )
        return Message(self.id, sender, answer)

    def _on_fetch_snapshot(
        self, sender: int, request: FetchSnapshotRequest, now_ms: int
    ) -> list[Message]:
        if self.role is not Role.LEADER or request.epoch != self.epoch:
            answer = FetchSnapshotResponse(self.epoch, self.leader, request.snapshot, 0)
            return [Message(self.id, sender, answer)]
        self._fetched_at[sender] = now_ms
        try:
            data = self.read_snapshot(request.snapshot)
        except SnapshotError:
            data = None  # no longer kept (or unreadable): the follower fetches again
        if data is None or not 0 <= request.position <= len(data):
            answer = FetchSnapshotResponse(self.epoch, self.id, request.snapshot, request.position)
            return [Message(self.id, sender, answer)]
        chunk = data[request.position : request.position + self.config.snapshot_chunk_bytes]
        answer = FetchSnapshotResponse(
            self.epoch, self.id, request.snapshot, request.position, chunk, len(data)
        )
        return [Message(self.id, sender, answer)]

    def _advance_high_watermark(self) -> None:
        reached = sorted((self._fetched.get(voter, 0) for voter in self.voters), reverse=True)
        majority = reached[len(self.voters) // 2]
        if majority > self._epoch_start and majority > self.high_watermark:
            self.high_watermark = majority

    # ------------------------------------------------------------ a follower

    def _fetch(self, now_ms: int) -> Message:
        assert self.leader is not None
        self._fetch_in_flight = True
        self._fetch_sent_ms = now_ms
        if self._installing is not None:
            position = len(self._installed)
            snapshot = FetchSnapshotRequest(self.epoch, self._installing, position)
            return Message(self.id, self.leader, snapshot)
        request = FetchRequest(self.epoch, self.end_offset, self.last_epoch)
        return Message(self.id, self.leader, request)

    def _on_fetch_response(self, response: FetchResponse, now_ms: int) -> list[Message]:
        if response.epoch < self.epoch or response.leader is None or response.leader == self.id:
            return []
        if self.role is not Role.FOLLOWER or self.leader != response.leader:
            self._follow(response.leader, now_ms)
        self._last_heard_ms = now_ms
        self._fetch_in_flight = False
        if response.offset != self.end_offset or self._installing is not None:
            return [self._fetch(now_ms)]  # an answer to an earlier request: ask again from here
        if response.snapshot is not None:
            if response.snapshot.end_offset <= self.high_watermark:
                return [self._fetch(now_ms)]  # nothing it holds is new here
            self._installing, self._installed = response.snapshot, bytearray()
            return [self._fetch(now_ms)]
        if response.diverging is not None:
            # the leader's log ends that epoch at diverging.end_offset; this one may end it
            # sooner, and what follows it here is of epochs the leader never had
            own = self.end_of_epoch(response.diverging.epoch)
            self._truncate(min(response.diverging.end_offset, max(own.end_offset, self.log_start)))
            return [self._fetch(now_ms)]
        if response.entries:
            self._append(response.entries)
        known = min(response.high_watermark, self.end_offset)
        self.high_watermark = max(self.high_watermark, known)
        if response.entries:
            return [self._fetch(now_ms)]
        self._fetch_due_ms = now_ms + self.config.fetch_interval_ms
        return []

    def _on_fetch_snapshot_response(
        self, response: FetchSnapshotResponse, now_ms: int
    ) -> list[Message]:
        if response.epoch < self.epoch or response.leader is None or response.leader == self.id:
            return []
        if self.role is not Role.FOLLOWER or self.leader != response.leader:
            self._follow(response.leader, now_ms)
            return [self._fetch(now_ms)]
        self._last_heard_ms = now_ms
        wanted = self._installing
        if wanted != response.snapshot or response.position != len(self._installed):
            return []  # late or repeated: the request in flight (or its resend) answers
        self._fetch_in_flight = False
        if response.size < 0 or len(self._installed) + len(response.data) > response.size:
            self._installing = None  # the leader has moved on: fetch, and hear its latest
            return [self._fetch(now_ms)]
        self._installed += response.data
        if len(self._installed) < response.size:
            return [self._fetch(now_ms)]
        self._install(response.snapshot, bytes(self._installed))
        return [self._fetch(now_ms)]

    def _install(self, snapshot: SnapshotId, data: bytes) -> None:
        """Replace the log by ``snapshot``: everything before its end is committed."""
        require(
            snapshot.end_offset > self.high_watermark,
            f"node {self.id}: installing {snapshot}, not past the high watermark "
            f"{self.high_watermark}",
        )
        self.storage.install_snapshot(snapshot, data)
        self.start, self.log = snapshot, []
        self.latest_snapshot = snapshot
        self.high_watermark = snapshot.end_offset
        self._snapshot_cache = (snapshot, data)
        self._installing, self._installed = None, bytearray()
