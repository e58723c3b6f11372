"""Every API the broker serves, asked by a principal without the ACL it needs and then
with it: the refusal carries Kafka's authorization code and changes nothing; the grant
lets the same request through.

Each case is the request, the ACL bindings it needs, where its error codes are in the
answer, and a view of the broker state the request could change. The requests run
through the real handlers of a real broker (its files, its group coordinator, its
ACL store and authorizer), as a connection of ``User:mallory`` would run them.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from authorization_admin_cases import ADMIN_CASES
from authorization_cases import (
    AUTHORIZATION_ERRORS,
    DOOMED,
    GROUP,
    NOT_AUTHORIZATION_APIS,
    PRINCIPAL,
    TOPIC,
    Case,
    Kind,
    Op,
    group_grant,
    per_entry,
    top,
    topic_grant,
)
from authorization_data_cases import DATA_CASES

from eventplatform.log.broker.broker import Broker
from eventplatform.log.broker.context import RequestContext
from eventplatform.log.broker.dispatcher import HANDLER_MODULES
from eventplatform.log.broker.erasing import run_erasures
from eventplatform.log.broker.handlers import (
    list_groups,
    metadata,
    offset_commit,
)
from eventplatform.log.config import BrokerConfig
from eventplatform.log.groups.coordinator import GroupCoordinator
from eventplatform.log.protocol import (
    ErrorCode,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    flatten,
)
from eventplatform.log.security.acls import (
    AclBinding,
    AclPermission,
    PatternType,
)
from eventplatform.log.security.listeners import SecurityProtocol
from eventplatform.log.security.session import Session

CASES = DATA_CASES + ADMIN_CASES
_correlation = itertools.count(1)


@pytest.fixture
async def broker(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Broker]:
    config = BrokerConfig(
        data_dir=tmp_path / "data",
        group_initial_rebalance_delay_ms=0,
        offsets_topic_num_partitions=3,
        authorizer_class_name="StandardAuthorizer",
        super_users=frozenset({"User:admin"}),
    )
    opened = Broker.open(config)
    opened.topics.create(TOPIC, 2, {})
    opened.topics.create(DOOMED, 1, {})
    opened.groups = GroupCoordinator(opened.config, opened.topics, opened.clock_ms)
    opened.groups.offsets_topic.ensure_created()
    await nursery.start(opened.groups.run)
    await opened.groups.wait_loaded()
    nursery.start_soon(run_erasures, opened)
    yield opened
    opened.groups.close()
    opened.close()


async def call(broker: Broker, case: Case, principal: str = PRINCIPAL) -> dict[str, Any]:
    api = case.module.API
    correlation_id = next(_correlation)
    body = case.body(broker) if callable(case.body) else case.body
    frame = encode_request(api, case.version, body, correlation_id=correlation_id)
    header, position = decode_request_header(frame[4:])
    request = decode_request_body(api, case.version, frame[4:], position)
    session = Session("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, None, principal)
    context = RequestContext(broker, header, "127.0.0.1", 1, session)
    with trio.fail_after(30):
        answer = await case.module.handle(context, request)
    if not isinstance(answer, dict):
        answer = await answer.body()
    encoded = flatten(encode_response(api, case.version, correlation_id, answer))
    return dict(decode_response(api, case.version, encoded)[1])


async def prepare(broker: Broker) -> None:
    """A group with a committed offset, a record to delete up to, a binding to keep."""
    admin = "User:admin"
    await call(broker, CASES[0], admin)  # a record in events-0
    await call(broker, next(c for c in CASES if c.module is offset_commit), admin)
    broker.acls.change(
        [
            AclBinding(
                Kind.TOPIC,
                "kept",
                PatternType.LITERAL,
                "User:friend",
                "*",
                Op.READ,
                AclPermission.ALLOW,
            )
        ],
        [],
    )


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.name}-v{case.version}")
async def test_a_request_without_its_acl_is_refused_and_changes_nothing_then_granted_it_passes(
    broker: Broker, case: Case
) -> None:
    await prepare(broker)
    before = case.state(broker)
    refused = await call(broker, case)
    assert set(case.errors(refused)) == {case.refusal}, refused
    assert case.state(broker) == before

    broker.acls.change(case.grants, [])
    granted = await call(broker, case)
    codes = case.errors(granted)
    assert codes and not AUTHORIZATION_ERRORS & set(codes), granted


def test_every_api_the_broker_serves_is_in_the_matrix() -> None:
    served = {module.API.name for module in HANDLER_MODULES} - NOT_AUTHORIZATION_APIS
    filtered = {"ListGroups", "ListTransactions"}  # list only what one may describe
    assert served - filtered == {case.name for case in CASES}


async def test_list_groups_shows_only_the_groups_a_principal_may_describe(broker: Broker) -> None:
    await prepare(broker)
    case = Case(list_groups, 4, {"states_filter": []}, [], top, ErrorCode.NONE)
    assert (await call(broker, case))["groups"] == []
    broker.acls.change([group_grant(Op.DESCRIBE)], [])
    assert [g["group_id"] for g in (await call(broker, case))["groups"]] == [GROUP]


async def test_metadata_for_every_topic_lists_only_what_a_principal_may_describe(
    broker: Broker,
) -> None:
    case = Case(metadata, 9, {"topics": None}, [], per_entry("topics"), ErrorCode.NONE)
    assert (await call(broker, case))["topics"] == []
    broker.acls.change([topic_grant(Op.READ)], [])
    assert [t["name"] for t in (await call(broker, case))["topics"]] == [TOPIC]
