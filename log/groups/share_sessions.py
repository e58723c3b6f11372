"""Share sessions: what a share consumer fetches from one broker (KIP-932).

A share consumer keeps one session with each partition leader it reads from,
identified by its group and member id. ShareFetch at epoch 0 opens it (a
session that member had is replaced, and what it held is released), naming the
partitions to fetch; each later ShareFetch or ShareAcknowledge carries the
next epoch (1, 2, ..., wrapping from 2^31-1 to 1) and may add partitions or
forget them. A request at another epoch is INVALID_SHARE_SESSION_EPOCH, one
for a session the broker does not have SHARE_SESSION_NOT_FOUND (the client
opens a new one). Epoch -1 closes the session: its acknowledgements are
applied and everything its member still holds is released.

A session belongs to the connection that opened it: when that connection
closes, the session ends and its records are released at once, rather than
when their locks run out. At most ``max_sessions`` are open on a broker
(SHARE_SESSION_LIMIT_REACHED past that).

Sans-I/O; one caller at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eventplatform.log.protocol import ErrorCode

OPEN_EPOCH = 0
CLOSE_EPOCH = -1
EPOCH_MAX = 2**31 - 1
MAX_SHARE_SESSIONS = 2_000
"""Kafka's ``group.share.max.share.sessions``."""

TopicPartitionKey = tuple[str, int]


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    connection: int
    next_epoch: int = 1
    partitions: set[TopicPartitionKey] = field(default_factory=set)

    def step(self) -> None:
        self.next_epoch = 1 if self.next_epoch == EPOCH_MAX else self.next_epoch + 1


class ShareSessions:
    """Every share session of one broker; see the module docstring."""

    def __init__(self, max_sessions: int = MAX_SHARE_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def open(
        self, group_id: str, member_id: str, connection: int
    ) -> tuple[ShareSession | None, ShareSession | None, ErrorCode]:
        """Open a session at epoch 0: (the new session, the one it replaced, error)."""
        key = (group_id, member_id)
        replaced = self._sessions.pop(key, None)
        if len(self._sessions) >= self.max_sessions:
            if replaced is not None:
                self._sessions[key] = replaced
            return None, None, ErrorCode.SHARE_SESSION_LIMIT_REACHED
        session = self._sessions[key] = ShareSession(group_id, member_id, connection)
        return session, replaced, ErrorCode.NONE

    def resume(
        self, group_id: str, member_id: str, epoch: int
    ) -> tuple[ShareSession | None, ErrorCode]:
        """The session a request at ``epoch`` (> 0, or -1 to close) continues. A request
        at the right positive epoch moves the session on; -1 removes it."""
        session = self._sessions.get((group_id, member_id))
        if session is None:
            return None, ErrorCode.SHARE_SESSION_NOT_FOUND
        if epoch == CLOSE_EPOCH:
            del self._sessions[(group_id, member_id)]
            return session, ErrorCode.NONE
        if epoch != session.next_epoch:
            return None, ErrorCode.INVALID_SHARE_SESSION_EPOCH
        session.step()
        return session, ErrorCode.NONE

    def connection_closed(self, connection: int) -> list[ShareSession]:
        """End every session ``connection`` opened; the sessions ended."""
        ended = [s for s in self._sessions.values() if s.connection == connection]
        for session in ended:
            del self._sessions[(session.group_id, session.member_id)]
        return ended

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())
