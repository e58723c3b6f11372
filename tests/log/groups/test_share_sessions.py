"""Share sessions: epochs, closing, replacement, connections and the bound."""

from __future__ import annotations

from eventplatform.log.groups.share_sessions import EPOCH_MAX, ShareSessions
from eventplatform.log.protocol import ErrorCode


def test_a_session_moves_on_one_epoch_at_a_time() -> None:
    sessions = ShareSessions()
    session, replaced, error = sessions.open("g", "m", connection=1)
    assert error is ErrorCode.NONE and replaced is None and session is not None
    assert sessions.resume("g", "m", 1) == (session, ErrorCode.NONE)
    assert sessions.resume("g", "m", 1) == (None, ErrorCode.INVALID_SHARE_SESSION_EPOCH)
    assert sessions.resume("g", "m", 2)[1] is ErrorCode.NONE
    assert sessions.resume("g", "other", 1) == (None, ErrorCode.SHARE_SESSION_NOT_FOUND)


def test_the_epoch_wraps_to_one() -> None:
    sessions = ShareSessions()
    session, _, _ = sessions.open("g", "m", connection=1)
    assert session is not None
    session.next_epoch = EPOCH_MAX
    sessions.resume("g", "m", EPOCH_MAX)
    assert session.next_epoch == 1


def test_closing_opening_again_and_a_closed_connection_end_sessions() -> None:
    sessions = ShareSessions()
    first, _, _ = sessions.open("g", "m", connection=1)
    second, replaced, _ = sessions.open("g", "m", connection=2)
    assert replaced is first and len(sessions) == 1
    assert sessions.connection_closed(1) == []
    assert sessions.connection_closed(2) == [second]
    sessions.open("g", "m", connection=3)
    assert sessions.resume("g", "m", -1)[1] is ErrorCode.NONE
    assert len(sessions) == 0


def test_at_most_max_sessions_are_open() -> None:
    sessions = ShareSessions(max_sessions=2)
    sessions.open("g", "a", 1)
    sessions.open("g", "b", 1)
    assert sessions.open("g", "c", 1)[2] is ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert sessions.open("g", "a", 2)[2] is ErrorCode.NONE  # replacing is not more
