"""How the controller's request runner answers what its methods raise.

A refusal (``RpcError``) is answered with its code; a fault in the controller's
own code is an internal error, not the caller's bad parameters; a broken
invariant stops the node instead of becoming an answer.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from eventplatform.log.cluster.rpc import INTERNAL, INVALID_REQUEST, RpcError, answer
from eventplatform.log.invariants import InvariantError, require


async def _refuses(params: dict[str, Any]) -> dict[str, Any]:
    raise RpcError("topic_exists", "topic t already exists")


async def _faulty(params: dict[str, Any]) -> dict[str, Any]:
    image: dict[str, int] = {}
    return {"leader": image["missing-partition"]}  # a bug in the controller, not in params


async def _broken(params: dict[str, Any]) -> dict[str, Any]:
    require(False, "a partition epoch went back")
    return {}


METHODS = {"refuses": _refuses, "faulty": _faulty, "broken": _broken}


def _answer(method: str) -> dict[str, Any]:
    """Answer a ``describe`` request (its params table is empty) with ``method``'s body."""
    chosen = METHODS.get(method)
    methods = {} if chosen is None else {"describe": chosen}
    return trio.run(answer, methods, {"method": "describe", "params": {}})


def test_a_refusal_is_answered_with_its_code() -> None:
    assert _answer("refuses")["error"] == "topic_exists"


def test_an_unknown_method_is_the_callers_invalid_request() -> None:
    assert _answer("nonexistent")["error"] == INVALID_REQUEST


def test_a_key_error_inside_controller_code_is_an_internal_error_not_bad_params() -> None:
    reply = _answer("faulty")
    assert reply["error"] == INTERNAL, reply


def test_a_broken_invariant_inside_controller_code_is_raised_not_answered() -> None:
    with pytest.raises(InvariantError, match="epoch went back"):
        _answer("broken")
