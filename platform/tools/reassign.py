"""``platform topics reassign``: move partitions' replicas between brokers, through the
active controller (as ``platform cluster status`` reaches it).

A plan names each partition's new replicas, in order; the first is the
preferred leader. It comes from the command line (one partition) or from a
file in Kafka's reassignment format::

    {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]}

(an optional ``log_dirs`` per entry is accepted and ignored: a broker has one
data directory). :func:`parse_plan` checks the file before anything is sent,
and the controller refuses the whole plan when one entry is wrong, so bad
input changes nothing. A partition already being reassigned is refused a new
target until that one completes or is cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from eventplatform.log.cluster.network import TCP, Network
from eventplatform.tools.cluster_status import call_controller
from eventplatform.tools.errors import InvalidInputError, ToolError

PLAN_VERSION = 1
PLAN_KEYS = frozenset({"topic", "partition", "replicas", "log_dirs"})
WAIT_POLL_S = 0.5

Voters = Mapping[int, tuple[str, int]]
Echo = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    topic: str
    partition: int
    replicas: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.topic}-{self.partition}"


def parse_replicas(text: str) -> tuple[int, ...]:
    """``3,1,2`` as broker ids; raises InvalidInputError for anything else."""
    try:
        replicas = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise InvalidInputError(f"--replicas {text!r}: give broker ids, as 3,1,2") from None
    _check_replicas(replicas, f"--replicas {text}")
    return replicas


def _check_replicas(replicas: Sequence[int], where: str) -> None:
    if not replicas:
        raise InvalidInputError(f"{where}: no replicas")
    if len(set(replicas)) != len(replicas):
        raise InvalidInputError(f"{where}: a broker is named twice")
    if any(replica < 0 for replica in replicas):
        raise InvalidInputError(f"{where}: broker ids are not negative")


def parse_plan(text: bytes | str, *, require_replicas: bool = True) -> list[Target]:
    """A reassignment plan in Kafka's JSON format; raises InvalidInputError, naming the
    entry, for anything that is not one."""
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"the plan is not valid JSON: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise InvalidInputError('the plan must be an object with a "partitions" list')
    if document.get("version", PLAN_VERSION) != PLAN_VERSION:
        raise InvalidInputError(f"plan version {document.get('version')!r} is not 1")
    targets = []
    for number, entry in enumerate(document["partitions"]):
        where = f"plan entry {number}"
        if not isinstance(entry, dict):
            raise InvalidInputError(f"{where} is not an object")
        unknown = sorted(set(entry) - PLAN_KEYS)
        if unknown:
            raise InvalidInputError(f"{where}: unknown fields {unknown}")
        topic, partition = entry.get("topic"), entry.get("partition")
        if not isinstance(topic, str) or not topic:
            raise InvalidInputError(f'{where}: "topic" must be a topic name')
        if type(partition) is not int or partition < 0:
            raise InvalidInputError(f'{where}: "partition" must be a partition number')
        replicas = entry.get("replicas")
        if replicas is None and not require_replicas:
            replicas = []
        if not isinstance(replicas, list) or any(type(r) is not int for r in replicas):
            raise InvalidInputError(f'{where}: "replicas" must be a list of broker ids')
        if require_replicas:
            _check_replicas(replicas, f"{where} ({topic}-{partition})")
        targets.append(Target(topic, partition, tuple(replicas)))
    if not targets:
        raise InvalidInputError("the plan names no partitions")
    labels = [target.label for target in targets]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise InvalidInputError(f"the plan names {', '.join(repeated)} more than once")
    return targets


def read_plan(path: Path, *, require_replicas: bool = True) -> list[Target]:
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"cannot read the plan {path}: {exc.strerror}") from exc
    return parse_plan(text, require_replicas=require_replicas)


def start(voters: Voters, targets: Sequence[Target], *, echo: Echo, network: Network = TCP) -> None:
    """Ask the controller to move every target; all or none start."""
    entries = [
        {"topic": t.topic, "partition": t.partition, "replicas": list(t.replicas)} for t in targets
    ]
    topics = call_controller(voters, "describe", {}, network=network)["topics"]
    call_controller(voters, "reassign_partitions", {"partitions": entries}, network=network)
    for target in targets:
        current = topics[target.topic]["partitions"][target.partition]["replicas"]
        if current == list(target.replicas):
            echo(f"{target.label} already has the replicas {current}")
        else:
            echo(f"reassigning {target.label} from {current} to {list(target.replicas)}")


def cancel(
    voters: Voters, targets: Sequence[Target], *, echo: Echo, network: Network = TCP
) -> None:
    entries = [{"topic": t.topic, "partition": t.partition} for t in targets]
    call_controller(voters, "cancel_reassignments", {"partitions": entries}, network=network)
    for target in targets:
        echo(f"cancelled the reassignment of {target.label}")


def in_progress(voters: Voters, network: Network = TCP) -> list[dict[str, Any]]:
    answer = call_controller(voters, "list_reassignments", {}, network=network)
    reassignments: list[dict[str, Any]] = answer["reassignments"]
    return reassignments


def show(voters: Voters, topic: str | None, *, echo: Echo, network: Network = TCP) -> None:
    """Print the reassignments in progress (of ``topic`` only, when given)."""
    shown = [r for r in in_progress(voters, network) if topic is None or r["topic"] == topic]
    if not shown:
        echo("no reassignments in progress")
    for r in shown:
        echo(
            f"{r['topic']}-{r['partition']}  replicas {r['replicas']}  target {r['target']}"
            f"  adding {r['adding']}  removing {r['removing']}  isr {r['isr']}"
            f"  leader {r['leader']}"
        )


def wait(
    voters: Voters,
    targets: Sequence[Target],
    timeout_s: float,
    *,
    echo: Echo,
    network: Network = TCP,
) -> None:
    """Block until none of ``targets`` is being reassigned; ToolError at the timeout."""
    labels = {target.label for target in targets}
    deadline = time.monotonic() + timeout_s
    while True:
        moving = {f"{r['topic']}-{r['partition']}" for r in in_progress(voters, network)} & labels
        if not moving:
            break
        if time.monotonic() >= deadline:
            raise ToolError(
                f"still reassigning {', '.join(sorted(moving))} after {timeout_s:g} s "
                "(it goes on; --list shows it, --cancel stops it)"
            )
        time.sleep(WAIT_POLL_S)
    describe = call_controller(voters, "describe", {}, network=network)
    for target in targets:
        topic = describe["topics"].get(target.topic)
        if topic is None or target.partition >= len(topic["partitions"]):
            continue
        state = topic["partitions"][target.partition]
        echo(
            f"{target.label}: replicas {state['replicas']}, isr {state['isr']}, "
            f"leader {state['leader']}"
        )
