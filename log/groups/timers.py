"""When the groups' deadlines are due: one heap for every group, and the loop that fires them.

``GroupTimers`` keeps, per group, a heap entry for its earliest deadline
(``Group.next_deadline_ms``: sessions, pending members, the join and sync
deadlines of a rebalance), remembered in ``Group.scheduled_ms``. Entries
are never taken out early: one whose group is gone, or whose group has
armed another since, is skipped when it comes up. ``advance`` hands each
due group to the ``fire`` callback, again while firing left something due
at once, then arms the group's next deadline.

What a due deadline means (a member expires, a rebalance completes) is
decided by the callback, ``GroupCoordinatorCore``, which owns this heap and
schedules a group after every change that may move its deadline earlier.
Deadlines are monotonic milliseconds; nothing here reads a clock.

Concurrency: used only from the coordinator's trio thread, through the core.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Mapping

from eventplatform.log.groups.group import Group
from eventplatform.log.invariants import require

TIMER_PASSES_MAX = 16


class GroupTimers:
    """See the module docstring."""

    def __init__(self, groups: Mapping[str, Group], fire: Callable[[Group, int], None]) -> None:
        self._groups = groups
        self._fire = fire
        self._heap: list[tuple[int, int, str]] = []
        self._sequence = itertools.count()

    def next_deadline_ms(self) -> int | None:
        """The earliest armed deadline (possibly one that has since moved later)."""
        return self._heap[0][0] if self._heap else None

    def schedule(self, group: Group) -> None:
        """Arm the group's earliest deadline unless an earlier entry is armed already."""
        deadline_ms = group.next_deadline_ms()
        if deadline_ms is None:
            return
        if group.scheduled_ms is None or deadline_ms < group.scheduled_ms:
            group.scheduled_ms = deadline_ms
            heapq.heappush(self._heap, (deadline_ms, next(self._sequence), group.group_id))

    def advance(self, now_ms: int) -> None:
        """Fire every timer due at ``now_ms``."""
        while self._heap and self._heap[0][0] <= now_ms:
            deadline_ms, _, group_id = heapq.heappop(self._heap)
            group = self._groups.get(group_id)
            if group is None or group.scheduled_ms != deadline_ms:
                continue
            group.scheduled_ms = None
            if self._fire_until_settled(group, now_ms):
                self.schedule(group)

    def clear(self) -> None:
        self._heap.clear()

    def _fire_until_settled(self, group: Group, now_ms: int) -> bool:
        """Fire the group's due timers until none is due; False when the group is gone.

        Firing may arm a timer that is due at once (a rebalance of a group whose
        last member just left waits zero milliseconds), so a few passes may be
        needed. A group that never settles is a bug that would spin the broker.
        """
        for _ in range(TIMER_PASSES_MAX):
            self._fire(group, now_ms)
            if self._groups.get(group.group_id) is not group:
                return False
            due_ms = group.next_deadline_ms()
            if due_ms is None or due_ms > now_ms:
                return True
        require(False, f"group {group.group_id} still has a timer due at {due_ms}")
        return True
