"""The decider model: a bank account decided command by command, in memory."""

from __future__ import annotations

import pytest
from bank.events import Withdrawn
from bank.model import BANK, Account, Deposit, Open, Withdraw

from eventplatform.events import Envelope, Event
from eventplatform.events.deciders import (
    Command,
    CommandRejectedError,
    ConcurrencyError,
    decide_on,
)


def appended(history: list[Envelope[Event]], command: Command) -> list[Envelope[Event]]:
    """``history`` with ``command``'s decision appended, as a repository would."""
    decision = decide_on(BANK, history, command)
    assert decision.expected_version == len(history)
    return history + [Envelope(e, causation_id=command.command_id) for e in decision.events]


def test_an_account_is_opened_deposited_to_and_withdrawn_from() -> None:
    history: list[Envelope[Event]] = []
    for command in (Open("a"), Deposit("a", 30), Withdraw("a", 20)):
        history = appended(history, command)
    assert BANK.fold(e.event for e in history) == Account(opened=True, balance=10)
    decision = decide_on(BANK, history, Deposit("a", 5))
    assert decision.expected_version == 3
    assert decision.state == Account(opened=True, balance=15)
    assert not decision.repeated


def test_an_overdraft_and_a_second_opening_are_rejected() -> None:
    history = appended(appended([], Open("a")), Deposit("a", 10))
    with pytest.raises(CommandRejectedError, match="holds 10, not 11"):
        decide_on(BANK, history, Withdraw("a", 11))
    with pytest.raises(CommandRejectedError, match="open already"):
        decide_on(BANK, history, Open("a"))


def test_a_retried_command_returns_its_first_events_and_decides_nothing() -> None:
    withdrawal = Withdraw("a", 7)
    history = appended(appended(appended([], Open("a")), Deposit("a", 10)), withdrawal)
    history = appended(history, Deposit("a", 1))
    again = decide_on(BANK, history, withdrawal)
    assert again.repeated
    assert again.events == [Withdrawn(account_id="a", amount=7)]
    assert again.expected_version == 2, "the version its events were appended at"
    assert again.state == Account(opened=True, balance=4), "applied once"


def test_the_concurrency_error_names_the_entity_and_both_versions() -> None:
    error = ConcurrencyError("acct-7", expected=3, actual=5, attempts=4)
    assert "'acct-7'" in str(error) and "version 3" in str(error) and "found 5" in str(error)
    assert (error.entity, error.expected, error.actual, error.attempts) == ("acct-7", 3, 5, 4)
