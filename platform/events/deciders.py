"""The decision side of an event-sourced entity, as pure functions: a decider.

An entity's state is a fold of its events, and a command is decided against that
state::

    @dataclass(frozen=True)
    class Account:
        opened: bool = False
        balance: int = 0

    def evolve(state: Account, event: Event) -> Account:
        match event:
            case AccountOpened():
                return Account(opened=True)
            case Deposited(amount=amount):
                return replace(state, balance=state.balance + amount)
            case Withdrawn(amount=amount):
                return replace(state, balance=state.balance - amount)
        return state

    def decide(command: Command, state: Account) -> list[Event]:
        match command:
            case Withdraw(account_id=account, amount=amount):
                if amount > state.balance:
                    raise CommandRejectedError(f"account {account} holds {state.balance}")
                return [Withdrawn(account_id=account, amount=amount)]
        ...

    bank = Decider(initial=Account(), decide=decide, evolve=evolve)

:func:`decide_on` folds an entity's history (its envelopes, in log order) and decides
a command against it. A command carries an id; the events it causes carry that id as
their causation id, so a retried command that already took effect is recognised in the
history and answered with the events it appended the first time, never applied twice.
The events of one decision are appended together, at the version the history had (the
number of its records, erased ones included): the log refuses them if another decision
got there first, and the caller decides again on the new history (see
``docs/entities.md``).

This module is pure: no client, no clock, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from eventplatform.events.errors import EventError
from eventplatform.events.history import EntityHistory
from eventplatform.events.ids import uuid7
from eventplatform.events.model import Envelope, Event

S = TypeVar("S")
C = TypeVar("C")


class CommandRejectedError(EventError):
    """A command the entity's state does not allow; nothing is appended."""


class ConcurrencyError(EventError):
    """Other decisions kept getting to an entity first: the last try expected
    ``expected`` events and the entity had ``actual``."""

    def __init__(self, entity: str, expected: int, actual: int, attempts: int) -> None:
        super().__init__(
            f"entity {entity!r} changed under {attempts} decisions in a row: the last "
            f"expected version {expected} and found {actual}"
        )
        self.entity = entity
        self.expected = expected
        self.actual = actual
        self.attempts = attempts


@dataclass(frozen=True)
class Command:
    """Base of commands: each has an id, which its events carry as causation id."""

    command_id: uuid.UUID = field(default_factory=uuid7, kw_only=True)


@dataclass(frozen=True)
class Decider(Generic[C, S]):
    """An entity's rules: its state before any event, how an event changes the state,
    and which events a command causes in a state (raising :class:`CommandRejectedError` when none
    may)."""

    initial: S
    decide: Callable[[C, S], Sequence[Event]]
    evolve: Callable[[S, Event], S]

    def fold(self, events: Iterable[Event], state: S | None = None) -> S:
        """The state after ``events``, from ``state`` (the initial one by default)."""
        current = self.initial if state is None else state
        for event in events:
            current = self.evolve(current, event)
        return current


@dataclass(frozen=True)
class Decision(Generic[S]):
    """What a command came to: the events to append (or already appended, when
    ``repeated``), the version the history had before them, and the state after them."""

    events: Sequence[Event]
    expected_version: int
    state: S
    repeated: bool = False


def decide_on(
    decider: Decider[Any, S],
    history: EntityHistory | Sequence[Envelope[Any]],
    command: Command,
    *,
    state: S | None = None,
) -> Decision[S]:
    """Decide ``command`` against the entity whose events, in log order, are ``history``
    (an :class:`~eventplatform.events.history.EntityHistory`, whose corrected events are
    folded, or the envelopes themselves), from ``state`` (the state before the history:
    a snapshot's; the decider's initial one by default).

    When some of them already carry the command's id as causation id, the command took
    effect before (a retry after a lost answer): those events are its answer again, and
    nothing new is decided."""
    if isinstance(history, EntityHistory):
        envelopes, folded = history.envelopes, history.corrected
    else:
        envelopes, folded = history, history
    earlier = [i for i, e in enumerate(envelopes) if e.causation_id == command.command_id]
    current = decider.fold((e.event for e in folded), state)
    if earlier:
        events = [envelopes[i].event for i in earlier]
        return Decision(events, _version_before(history, earlier[0]), current, repeated=True)
    events = list(decider.decide(command, current))
    version = history.version if isinstance(history, EntityHistory) else len(history)
    return Decision(events, version, decider.fold(events, current))


def _version_before(history: EntityHistory | Sequence[Envelope[Any]], index: int) -> int:
    if isinstance(history, EntityHistory):
        return history.version_before(index)
    return index
