"""The active controller's requests over the network: one method per request name.

A broker or a tool sends ``{"method": ..., "params": {...}}`` (:mod:`.rpc`); the
params were checked against the method's table (:mod:`.requests`) before they
reach here, so each method only reads them into the :class:`~.controller.Controller`'s
arguments and its result into an answer. What a request may change is decided
by the controller against its committed image, never here.

A topic or security change is answered once every live broker has applied it
(:meth:`~.controller.Controller.wait_propagated`), so a client that makes a change
and asks any broker next finds it. A refusal travels as an
:class:`~.rpc.RpcError` with one of the controller's codes; a controller that is
not active, or a proposal that did not commit in time, is ``NOT_CONTROLLER``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import trio

from eventplatform.log.cluster.answers import (
    assignment_param,
    describe_document,
    reassignment_documents,
)
from eventplatform.log.cluster.controller import (
    INVALID_REPLICATION_FACTOR,
    TOPIC_EXISTS,
    Controller,
)
from eventplatform.log.cluster.metadata import (
    AclChange,
    Erasure,
    MetadataError,
    QuotaChangeRecord,
    ScramChange,
    decode_document,
)
from eventplatform.log.cluster.raft import NotLeaderError
from eventplatform.log.cluster.rpc import NOT_CONTROLLER, Method, Params, RpcError


def controller_methods(controller: Controller) -> dict[str, Method]:
    """The requests brokers and tools send to ``controller``, by name."""
    return _Methods(controller).by_name()


class _Methods:
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def by_name(self) -> dict[str, Method]:
        return {
            "register_broker": self.register,
            "heartbeat": self.heartbeat,
            "create_topic": self.create_topic,
            "add_partitions": self.add_partitions,
            "topic_configs": self.topic_configs,
            "group_configs": self.group_configs,
            "delete_topic": self.delete_topic,
            "alter_partition": self.alter_partition,
            "controlled_shutdown": self.controlled_shutdown,
            "describe": self.describe,
            "allocate_producer_ids": self.allocate_producer_ids,
            "reassign_partitions": self.reassign_partitions,
            "cancel_reassignments": self.cancel_reassignments,
            "list_reassignments": self.list_reassignments,
            "scram_change": self.scram_change,
            "acl_change": self.acl_change,
            "quota_change": self.quota_change,
            "erasure": self.erasure,
        }

    # ------------------------------------------------------------ brokers

    async def register(self, params: Params) -> Params:
        with _refusals():
            endpoints = tuple(
                (str(name), str(host), int(port))
                for name, host, port in params.get("endpoints") or ()
            )
            epoch = await self.controller.register(
                int(params["broker"]),
                str(params["host"]),
                int(params["port"]),
                params.get("rack"),
                endpoints,
            )
            return {"epoch": epoch, "controller": self.controller.quorum.id}

    async def heartbeat(self, params: Params) -> Params:
        """Keep the broker alive; answer with the committed records after its ``offset``,
        waiting up to ``wait_ms`` for some when there are none yet."""
        with _refusals():
            return await self.controller.answer_heartbeat(
                int(params["broker"]),
                int(params["epoch"]),
                int(params["offset"]),
                int(params.get("wait_ms", 0)),
            )

    async def allocate_producer_ids(self, params: Params) -> Params:
        with _refusals():
            block = await self.controller.allocate_producer_ids(
                int(params["broker"]), int(params["epoch"])
            )
            return {"start": block.start, "size": block.size}

    async def alter_partition(self, params: Params) -> Params:
        with _refusals():
            topic, partition = str(params["topic"]), int(params["partition"])
            change = await self.controller.alter_partition(
                topic,
                partition,
                broker=int(params["broker"]),
                leader_epoch=int(params["leader_epoch"]),
                partition_epoch=int(params["partition_epoch"]),
                isr=[int(r) for r in params["isr"]],
            )
            state = self.controller.image.partition(topic, partition)
            return {"changed": change is not None, "partition_epoch": state.partition_epoch}

    async def controlled_shutdown(self, params: Params) -> Params:
        with _refusals():
            await self.controller.controlled_shutdown(int(params["broker"]), int(params["epoch"]))
            return {}

    async def describe(self, params: Params) -> Params:
        with _refusals():
            self.controller.require_active()
            return describe_document(self.controller.quorum, self.controller.image)

    # ------------------------------------------------------------ topics and groups

    async def create_topic(self, params: Params) -> Params:
        with _refusals():
            name = str(params["name"])
            if name in self.controller.image.topics:
                raise RpcError(TOPIC_EXISTS, f"topic {name} already exists")
            try:
                record = await self.controller.create_topic(
                    name,
                    int(params["partitions"]),
                    int(params["replication_factor"]),
                    dict(params.get("configs") or {}),
                    assignment_param(params),
                )
            except MetadataError as exc:
                raise RpcError(INVALID_REPLICATION_FACTOR, str(exc)) from exc
            await self.controller.wait_propagated()
            return {"topic_id": record.topic_id}

    async def add_partitions(self, params: Params) -> Params:
        with _refusals():
            try:
                factor = int(params.get("replication_factor", -1))
                await self.controller.add_partitions(
                    str(params["name"]), int(params["count"]), factor, assignment_param(params)
                )
            except MetadataError as exc:
                raise RpcError(INVALID_REPLICATION_FACTOR, str(exc)) from exc
            await self.controller.wait_propagated()
            return {}

    async def topic_configs(self, params: Params) -> Params:
        with _refusals():
            configs = {str(k): str(v) for k, v in dict(params["configs"]).items()}
            await self.controller.set_topic_configs(str(params["name"]), configs)
            await self.controller.wait_propagated()
            return {}

    async def group_configs(self, params: Params) -> Params:
        with _refusals():
            configs = {str(k): str(v) for k, v in dict(params["configs"]).items()}
            await self.controller.set_group_configs(str(params["group"]), configs)
            await self.controller.wait_propagated()
            return {}

    async def delete_topic(self, params: Params) -> Params:
        with _refusals():
            await self.controller.delete_topic(str(params["name"]))
            await self.controller.wait_propagated()
            return {}

    # ------------------------------------------------------------ reassignments

    async def reassign_partitions(self, params: Params) -> Params:
        """``partitions``: ``[{"topic", "partition", "replicas"}]``, as a plan file has them."""
        with _refusals():
            targets = [
                (str(p["topic"]), int(p["partition"]), [int(r) for r in p["replicas"]])
                for p in params["partitions"]
            ]
            return {"changed": await self.controller.reassign(targets)}

    async def cancel_reassignments(self, params: Params) -> Params:
        """``partitions``: ``[{"topic", "partition"}]``, or null for every one in progress."""
        with _refusals():
            named = params.get("partitions")
            partitions = (
                None if named is None else [(str(p["topic"]), int(p["partition"])) for p in named]
            )
            return {"cancelled": await self.controller.cancel_reassignments(partitions)}

    async def list_reassignments(self, params: Params) -> Params:
        with _refusals():
            self.controller.require_active()
            return {"reassignments": reassignment_documents(self.controller.image)}

    # ------------------------------------------------------------ security and erasure

    async def scram_change(self, params: Params) -> Params:
        with _refusals():
            change = decode_document({"type": "scram_change", **params})
            assert isinstance(change, ScramChange)
            return await self._security_answer(await self.controller.change_scram(change))

    async def quota_change(self, params: Params) -> Params:
        with _refusals():
            change = decode_document({"type": "quota_change", **params})
            assert isinstance(change, QuotaChangeRecord)
            return await self._security_answer(await self.controller.change_quotas(change))

    async def acl_change(self, params: Params) -> Params:
        with _refusals():
            change = decode_document({"type": "acl_change", **params})
            assert isinstance(change, AclChange)
            return await self._security_answer(await self.controller.change_acls(change))

    async def _security_answer(self, version: int) -> Params:
        await self.controller.wait_propagated()
        return {"security_version": version}

    async def erasure(self, params: Params) -> Params:
        with _refusals():
            erasure = decode_document({"type": "erasure", **params})
            assert isinstance(erasure, Erasure)
            return {"erasure_version": await self.controller.erase(erasure)}


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """Turn the controller's refusals into answers: not active, or a proposal that did not
    commit in time (the quorum is changing hands), is NOT_CONTROLLER."""
    try:
        yield
    except NotLeaderError as exc:
        raise RpcError(NOT_CONTROLLER, str(exc), exc.leader) from exc
    except trio.TooSlowError as exc:
        raise RpcError(NOT_CONTROLLER, "the proposal did not commit in time") from exc
