"""Every node runs the handlers' one code path: no handler asks what kind of node it
runs on. What differs between a broker on its own and a cluster member is behind
:class:`~eventplatform.log.cluster.membership.Membership` (and, for one partition,
inside :class:`~eventplatform.log.replica.partition.Partition`); ``make lint`` keeps
the handlers from importing either implementation, and this test keeps them from
reading the attributes that tell the two apart."""

from __future__ import annotations

import ast
from pathlib import Path

HANDLERS = Path(__file__).resolve().parents[3] / "log" / "broker" / "handlers"
# What would tell a handler the kind of node: the settings that choose it, the
# partition's replication flag, the implementations of the port.
TELLING_NAMES = frozenset(
    {"clustered", "process_roles", "SoloNode", "BrokerMember", "controller_quorum_voters"}
)


def node_kind_checks(source: str) -> list[str]:
    """The names of ``source`` that tell the kind of node, with their lines."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Name):
            name = node.id
        if name in TELLING_NAMES or (name == "member" and _of_broker(node)):
            found.append((node.lineno, name))
    return [f"{name} (line {line})" for line, name in sorted(found)]


def _of_broker(node: ast.AST) -> bool:
    """``<...>.broker.member`` or ``broker.member``: the broker's cluster role (a group's
    members are no concern here)."""
    if not isinstance(node, ast.Attribute):
        return False
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id == "broker") or (
        isinstance(owner, ast.Attribute) and owner.attr == "broker"
    )


def test_no_handler_asks_what_kind_of_node_it_runs_on() -> None:
    modules = sorted(HANDLERS.glob("*.py"))
    assert len(modules) > 20
    asked = {
        module.name: checks
        for module in modules
        if (checks := node_kind_checks(module.read_text()))
    }
    assert asked == {}


def test_the_check_finds_a_branch_on_the_kind_of_node() -> None:
    source = (
        "async def handle(context, request):\n"
        "    if context.broker.config.clustered:\n"
        "        return isinstance(context.broker.membership, SoloNode)\n"
        "    if broker.member is None:\n"
        "        return group.member\n"
    )
    assert node_kind_checks(source) == [
        "clustered (line 2)",
        "SoloNode (line 3)",
        "member (line 4)",
    ]
