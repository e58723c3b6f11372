"""Brokers' requests to the active controller, and its answers.

A request is a frame (:mod:`.frames`) ``{"method": ..., "params": {...}}``
sent to a controller's quorum port; the answer, on the same connection, is
``{"result": {...}}`` or ``{"error": code, "message": ..., "leader": id}``.
A controller that is not active answers :data:`NOT_CONTROLLER` with the
active one it knows, and :class:`ControllerClient` follows it there, or
tries the voters in turn while none is known, until its deadline.

:func:`answer` checks the params against the method's table
(:data:`~.requests.REQUESTS`) before the method sees them: a request that
breaks it is answered ``invalid_request`` (and logged). It then turns the
method's outcome into the answer: an :class:`RpcError` becomes its code.
With the params checked up front, any other exception raised inside the
controller is the controller's own fault, never the caller's: it is
answered ``internal`` and logged, and never reported as bad params.
A broken invariant (:class:`~eventplatform.log.invariants.InvariantError`,
not an ``Exception``) is never answered: it stops the node.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from eventplatform.log.cluster.frames import FrameError, check_kind, frame, split_frames
from eventplatform.log.cluster.network import TCP, Network
from eventplatform.log.cluster.requests import REQUESTS

log = logging.getLogger(__name__)

NOT_CONTROLLER = "not_controller"
INVALID_REQUEST = "invalid_request"
INTERNAL = "internal"
CALL_TIMEOUT_S = 10.0
RETRY_DELAY_S = 0.05
CONNECT_TIMEOUT_S = 1.0

Params = dict[str, Any]
Method = Callable[[Params], Awaitable[Params]]


class RpcError(Exception):
    """A request the controller refused; ``code`` says why."""

    def __init__(self, code: str, message: str, leader: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.leader = leader


async def answer(methods: Mapping[str, Method], document: Mapping[str, Any]) -> Params:
    """Run the request ``document`` names against ``methods``; the answer frame's document."""
    name = document.get("method")
    params: Any = document.get("params")  # an object once checked below
    try:
        method = methods.get(name) if isinstance(name, str) else None
        if method is None:
            raise RpcError(INVALID_REQUEST, f"unknown method {str(name)[:80]!r}")
        try:
            check_kind(REQUESTS, name, params, where="params")
        except FrameError as exc:
            log.warning("refusing a %s request: %s", name, exc)
            raise RpcError(INVALID_REQUEST, f"{name}: {exc}") from exc
        return {"result": await method(params)}
    except RpcError as exc:
        return {"error": exc.code, "message": str(exc), "leader": exc.leader}
    except Exception as exc:
        log.exception("request %s failed", name)
        return {"error": INTERNAL, "message": f"{name} failed: {exc!r}"}


class ControllerClient:
    """Calls the active controller among ``voters`` (id → (host, port))."""

    def __init__(self, voters: Mapping[int, tuple[str, int]], network: Network = TCP) -> None:
        self.voters = dict(voters)
        self.network = network
        self.leader: int | None = None
        self._order = sorted(self.voters)
        self._next = 0
        self._idle: dict[int, list[trio.abc.Stream]] = {}

    async def call(
        self, method: str, params: Params, *, timeout_s: float = CALL_TIMEOUT_S
    ) -> Params:
        """The active controller's result; raises RpcError (not NOT_CONTROLLER) as it
        answered, or trio.TooSlowError when no controller answered in ``timeout_s``. A
        controller that did not answer in time is forgotten as the active one, and the
        next call tries the voter after it: a stopped process does not refuse."""
        node: int | None = None
        try:
            with trio.fail_after(timeout_s):
                while True:
                    node = self._target()
                    try:
                        return await self._call(node, method, params)
                    except RpcError as exc:
                        if exc.code != NOT_CONTROLLER:
                            raise
                        self.leader = exc.leader if exc.leader in self.voters else None
                        if self.leader == node:
                            self.leader = None
                    except (
                        OSError,
                        trio.BrokenResourceError,
                        trio.ClosedResourceError,
                        FrameError,
                    ):
                        self.leader = None
                    if self.leader is None:
                        await trio.sleep(RETRY_DELAY_S)
        except trio.TooSlowError:
            self.leader = None
            if node is not None:
                self._next = self._order.index(node) + 1
            raise

    def _target(self) -> int:
        if self.leader is not None:
            return self.leader
        node = self._order[self._next % len(self._order)]
        self._next += 1
        return node

    async def _call(self, node: int, method: str, params: Params) -> Params:
        """One request to ``node`` over a kept connection, or a new one. A kept connection
        may have outlived the process it reached (killed and started again at the same
        address): when it fails, every connection kept for ``node`` goes, and the request
        is sent again over a new one before the node is given up for another voter, which
        may be a stopped former controller that takes the request and never answers."""
        idle = self._idle.setdefault(node, [])
        if idle:
            try:
                return await self._exchange(node, idle.pop(), method, params)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                while idle:
                    await trio.aclose_forcefully(idle.pop())
        host, port = self.voters[node]
        stream: trio.abc.Stream | None = None
        with trio.move_on_after(CONNECT_TIMEOUT_S):
            stream = await self.network.connect(host, port)
        if stream is None:
            raise OSError(f"connecting to controller {node} timed out")
        return await self._exchange(node, stream, method, params)

    async def _exchange(
        self, node: int, stream: trio.abc.Stream, method: str, params: Params
    ) -> Params:
        """Send the request on ``stream`` and read its answer; the stream is kept for the
        next call once answered, and closed when anything fails."""
        idle = self._idle.setdefault(node, [])
        try:
            await stream.send_all(frame({"method": method, "params": params}))
            document = await _receive_one(stream)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        idle.append(stream)
        if "error" in document:
            message, leader = str(document.get("message")), document.get("leader")
            raise RpcError(str(document["error"]), message, leader)
        result: Params = document["result"]
        return result

    async def aclose(self) -> None:
        for streams in self._idle.values():
            for stream in streams:
                await trio.aclose_forcefully(stream)
        self._idle.clear()


async def _receive_one(stream: trio.abc.Stream) -> dict[str, Any]:
    buffer = bytearray()
    while True:
        data = await stream.receive_some(65_536)
        if not data:
            raise trio.BrokenResourceError("the controller closed the connection")
        buffer += data
        documents = split_frames(buffer)
        if documents:
            if len(documents) > 1 or buffer:
                raise FrameError("more than one answer to one request")
            return documents[0]
