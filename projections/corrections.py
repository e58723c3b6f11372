"""Applying one correction inside a batch's transaction.

The correction names an event by id and position. The runner walks the
chain back to its root (the first, non-correction event), reading each link
from the log and checking that the id at the named position is the one the
correction names and that it sits earlier in the same partition. Then:

1. the root's previous content is its last correction's outcome, or the
   root itself (nothing, if the root was parked as poison and never corrected);
2. the new content is this correction's replacement (nothing if it retracts);
3. the root's new content is recorded, so later recomputations see it;
4. invertible tables get the previous contributions negated and the new
   ones applied;
5. the event index moves the root from its previous rows to its new ones,
   and every affected row of a non-invertible table is recomputed from the
   events indexed for it.

The result equals a fold of the corrected history, whatever was applied
before.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import select

from eventplatform.events import Correction, Envelope, Event, Position
from eventplatform.projections import schema
from eventplatform.projections.errors import HandlerError
from eventplatform.projections.fold import link_problem as link_problem
from eventplatform.projections.fold import replacement_event
from eventplatform.projections.store import StoreTransaction

CHAIN_LENGTH_MAX = 10_000


class InvalidCorrectionError(HandlerError):
    """A correction names an event that is not where it says, or not before it."""


def apply_correction(transaction: StoreTransaction, correction: Envelope[Correction]) -> None:
    """Apply ``correction`` in ``transaction`` (raises HandlerError for a poison correction)."""
    root = find_root(transaction, correction)
    previous_content: Event | None = transaction.effective([root])[_at(root)]
    if not transaction.is_corrected(root) and is_parked(transaction, root):
        previous_content = None  # a parked event never contributed
    new_content = replacement_event(correction.event, transaction.store.catalog)
    transaction.record_correction(root, correction)
    removed = transaction.contributions_of(root, previous_content)
    added = transaction.contributions_of(root, new_content)
    affected = transaction.retract_and_apply(removed, added)
    transaction.reindex(root, removed, added)
    by_table: dict[str, set[tuple[Any, ...]]] = defaultdict(set)
    for table_name, key in affected:
        by_table[table_name].add(key)
    for table_name, keys in sorted(by_table.items()):
        transaction.recompute(transaction.projection.plans[table_name], keys)


def find_root(transaction: StoreTransaction, correction: Envelope[Correction]) -> Envelope[Any]:
    """The first event of the correction's chain, read back from the log."""
    current: Envelope[Any] = correction
    for _ in range(CHAIN_LENGTH_MAX):
        if not isinstance(current.event, Correction):
            return current
        target = current.event.of
        position = target.position
        here = _at(current)
        problem = link_problem(here, position)
        if problem is not None:
            raise InvalidCorrectionError(f"{here}: names {position}, {problem}")
        found = transaction.read_envelopes([position]).get(position)
        if found is None or found.event_id != target.event_id:
            raise InvalidCorrectionError(
                f"{here}: names event {target.event_id} at {position}, which holds "
                f"{'nothing' if found is None else found.event_id}"
            )
        current = found
    raise InvalidCorrectionError(f"{_at(correction)}: the chain is longer than {CHAIN_LENGTH_MAX}")


def is_parked(transaction: StoreTransaction, root: Envelope[Any]) -> bool:
    position = _at(root)
    table = schema.dead_letters
    query = select(table.c.id).where(
        table.c.projection == transaction.projection.name,
        table.c.topic == position.topic,
        table.c.partition == position.partition,
        table.c.offset == position.offset,
        table.c.status == schema.DEAD_LETTER_PARKED,
    )
    return transaction.connection.execute(query.limit(1)).first() is not None


def _at(envelope: Envelope[Any]) -> Position:
    assert envelope.position is not None, "a correction's chain is read from the log"
    return envelope.position
