"""A seeded nemesis for a real cluster: which node to hurt, how, and for how long.

:func:`schedule` turns a seed into a list of :class:`Fault` rounds, so a run
that found something runs again the same way (the victims are chosen when
the round starts, by role, since leaders move). The kinds:

kill-leader
    SIGKILL the leader of a partition, restart it after the hold;
pause-leader
    SIGSTOP the leader of a partition, SIGCONT after the hold (a hold past the
    broker session gets it fenced and replaced while it sleeps);
kill-controller, pause-controller
    the same for the active controller (every node here is broker and
    controller, so it leads partitions too);
kill-two
    SIGKILL two nodes at once: the quorum and min.insync.replicas are both
    lost until they come back;
pause-then-kill
    pause a partition's leader past its session, resume it, then kill the
    node that replaced it (a stale leader comes back while another fails).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

KINDS = (
    "kill-leader",
    "pause-leader",
    "kill-controller",
    "pause-controller",
    "kill-two",
    "pause-then-kill",
)
HOLD_S_MIN = 1.0
HOLD_S_MAX = 7.0


@dataclass(frozen=True)
class Fault:
    kind: str
    partition: int
    """The partition whose leader is the victim (leader kinds)."""
    hold_s: float
    """How long the victims stay down or paused."""
    pick: int
    """A seeded number for choices made at the time (the second victim of kill-two)."""

    def __str__(self) -> str:
        return f"{self.kind} (partition {self.partition}, {self.hold_s:.1f} s)"


def schedule(seed: int, rounds: int, partitions: int) -> list[Fault]:
    """The faults of ``rounds`` rounds for ``seed``."""
    chooser = random.Random(seed)
    return [
        Fault(
            kind=chooser.choice(KINDS),
            partition=chooser.randrange(partitions),
            hold_s=round(chooser.uniform(HOLD_S_MIN, HOLD_S_MAX), 1),
            pick=chooser.randrange(1 << 30),
        )
        for _ in range(rounds)
    ]


@dataclass
class NemesisTarget:
    """What the nemesis needs of a cluster: its nodes and roles, and the signals."""

    nodes: list[int]
    leader_of: Callable[[int], int]
    """The current leader of a partition (-1 if none)."""
    active_controller: Callable[[], int]
    kill: Callable[[int], None]
    pause: Callable[[int], None]
    resume: Callable[[int], None]
    restart: Callable[[list[int]], None]
    sleep: Callable[[float], None]


def apply(fault: Fault, cluster: NemesisTarget) -> list[int]:
    """Inflict ``fault`` and heal it (restart or resume every victim); the victims."""
    kind = fault.kind
    if kind in ("kill-leader", "pause-leader", "pause-then-kill"):
        victim = cluster.leader_of(fault.partition)
    elif kind in ("kill-controller", "pause-controller"):
        victim = cluster.active_controller()
    else:
        victim = cluster.nodes[fault.pick % len(cluster.nodes)]
    if victim not in cluster.nodes:
        victim = cluster.nodes[fault.pick % len(cluster.nodes)]
    if kind.startswith("kill-") and kind != "kill-two":
        cluster.kill(victim)
        cluster.sleep(fault.hold_s)
        cluster.restart([victim])
        return [victim]
    if kind.startswith("pause-") and kind != "pause-then-kill":
        cluster.pause(victim)
        cluster.sleep(fault.hold_s)
        cluster.resume(victim)
        return [victim]
    if kind == "kill-two":
        others = [node for node in cluster.nodes if node != victim]
        second = others[fault.pick % len(others)]
        cluster.kill(victim)
        cluster.kill(second)
        cluster.sleep(fault.hold_s)
        cluster.restart([victim, second])
        return [victim, second]
    return _pause_then_kill(fault, victim, cluster)


def _pause_then_kill(fault: Fault, victim: int, cluster: NemesisTarget) -> list[int]:
    cluster.pause(victim)
    cluster.sleep(max(fault.hold_s, PAUSE_PAST_SESSION_S))
    cluster.resume(victim)
    replacement = cluster.leader_of(fault.partition)
    if replacement not in cluster.nodes or replacement == victim:
        return [victim]
    cluster.kill(replacement)
    cluster.sleep(HOLD_S_MIN)
    cluster.restart([replacement])
    return [victim, replacement]


PAUSE_PAST_SESSION_S = 5.0
"""pause-then-kill's least pause: past the 3 s broker session of a local cluster."""
