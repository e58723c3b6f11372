"""ACL decisions as Kafka's standard authorizer makes them, and the store's file."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventplatform.log.security.acls import (
    ACLS_FILE,
    AclAuthorizer,
    AclBinding,
    AclError,
    AclFilter,
    AclOperation,
    AclPermission,
    AclResourceType,
    AclStore,
    PatternType,
)

TOPIC = AclResourceType.TOPIC
GROUP = AclResourceType.GROUP
ALLOW = AclPermission.ALLOW
DENY = AclPermission.DENY
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
Op = AclOperation


def binding(
    name: str,
    operation: AclOperation,
    permission: AclPermission = ALLOW,
    *,
    principal: str = "User:alice",
    pattern: PatternType = LITERAL,
    host: str = "*",
    kind: AclResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, operation, permission)


def authorizer(*bindings: AclBinding, **settings: object) -> AclAuthorizer:
    store = AclStore(None)
    store.change(bindings, [])
    return AclAuthorizer(store, **settings)  # type: ignore[arg-type]


def allowed(auth: AclAuthorizer, operation: AclOperation, name: str, **who: str) -> bool:
    principal = who.get("principal", "User:alice")
    return auth.authorize(principal, who.get("host", "10.0.0.1"), operation, TOPIC, name)


def test_a_literal_allow_grants_its_operation_on_its_resource_only() -> None:
    auth = authorizer(binding("orders", Op.WRITE))
    assert allowed(auth, Op.WRITE, "orders")
    assert not allowed(auth, Op.READ, "orders")
    assert not allowed(auth, Op.WRITE, "orders-eu")
    assert not allowed(auth, Op.WRITE, "orders", principal="User:bob")


def test_read_write_delete_and_alter_imply_describe_and_alter_configs_describe_configs() -> None:
    for operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed(authorizer(binding("t", operation)), Op.DESCRIBE, "t")
    auth = authorizer(binding("t", Op.ALTER_CONFIGS))
    assert allowed(auth, Op.DESCRIBE_CONFIGS, "t")
    assert not allowed(authorizer(binding("t", Op.CREATE)), Op.DESCRIBE, "t")


def test_a_deny_wins_and_denies_only_what_it_names() -> None:
    auth = authorizer(
        binding("orders", Op.ALL),
        binding("orders", Op.DELETE, DENY),
    )
    assert allowed(auth, Op.WRITE, "orders")
    assert not allowed(auth, Op.DELETE, "orders")
    denied_all = authorizer(binding("orders", Op.READ), binding("orders", Op.ALL, DENY))
    assert not allowed(denied_all, Op.READ, "orders")
    # A denied READ does not take DESCRIBE away when WRITE grants it.
    auth = authorizer(binding("t", Op.WRITE), binding("t", Op.READ, DENY))
    assert allowed(auth, Op.DESCRIBE, "t")


def test_prefixes_wildcards_hosts_and_every_principal() -> None:
    auth = authorizer(
        binding("orders.", Op.READ, pattern=PREFIXED),
        binding("*", Op.DESCRIBE, principal="User:*"),
        binding("audit", Op.WRITE, host="10.0.0.9"),
    )
    assert allowed(auth, Op.READ, "orders.eu")
    assert not allowed(auth, Op.READ, "orders")
    assert allowed(auth, Op.DESCRIBE, "anything", principal="User:bob")
    assert not allowed(auth, Op.WRITE, "audit")
    assert allowed(auth, Op.WRITE, "audit", host="10.0.0.9")


def test_no_binding_for_a_resource_denies_unless_everyone_is_allowed_then() -> None:
    unrelated = binding("other", Op.READ, principal="User:bob")
    assert not allowed(authorizer(unrelated), Op.READ, "orders")
    open_by_default = authorizer(unrelated, allow_if_no_acl=True)
    assert allowed(open_by_default, Op.READ, "orders")
    # Once any binding names the resource, the default no longer applies.
    assert not allowed(open_by_default, Op.READ, "other")


def test_super_users_may_do_anything() -> None:
    auth = authorizer(
        binding("t", Op.ALL, DENY, principal="User:*"), super_users=frozenset({"User:root"})
    )
    assert allowed(auth, Op.DELETE, "t", principal="User:root")
    assert not allowed(auth, Op.DELETE, "t")


def test_write_on_any_topic_is_found_for_idempotent_producers() -> None:
    auth = authorizer(binding("orders.", Op.WRITE, pattern=PREFIXED))
    assert auth.authorize_any("User:alice", "h", Op.WRITE, TOPIC)
    assert not auth.authorize_any("User:bob", "h", Op.WRITE, TOPIC)
    denied = authorizer(binding("t", Op.WRITE), binding("*", Op.WRITE, DENY))
    assert not denied.authorize_any("User:alice", "h", Op.WRITE, TOPIC)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (binding("t", Op.READ, kind=AclResourceType.ANY), "concrete"),
        (AclBinding(TOPIC, "t", PatternType.MATCH, "User:a", "*", Op.READ, ALLOW), "LITERAL"),
        (binding("", Op.READ), "empty"),
        (binding("c", Op.ALTER, kind=AclResourceType.CLUSTER), "kafka-cluster"),
        (binding("t", Op.READ, principal="alice"), "Type:name"),
        (binding("t", Op.ANY), "concrete"),
        (binding("t", Op.READ, AclPermission.ANY), "ALLOW or DENY"),
    ],
)
def test_bindings_kafka_would_refuse_are_refused(bad: AclBinding, reason: str) -> None:
    with pytest.raises(AclError, match=reason):
        bad.check()


def test_filters_match_as_describe_and_delete_use_them(tmp_path: Path) -> None:
    store = AclStore(tmp_path / ACLS_FILE)
    literal = binding("orders.eu", Op.READ)
    prefixed = binding("orders.", Op.WRITE, pattern=PREFIXED, principal="User:bob")
    group = binding("g", Op.READ, kind=GROUP)
    store.change([literal, prefixed, group], [])
    assert store.matching(AclFilter()) == sorted([literal, prefixed, group])
    assert store.matching(AclFilter(TOPIC, "orders.eu", PatternType.MATCH)) == sorted(
        [literal, prefixed]
    )
    assert store.matching(AclFilter(TOPIC, "orders.", PatternType.ANY)) == [prefixed]
    assert store.matching(AclFilter(principal="User:bob")) == [prefixed]
    assert store.matching(AclFilter(operation=Op.READ, resource_type=GROUP)) == [group]

    reopened = AclStore(tmp_path / ACLS_FILE)
    assert reopened.bindings() == store.bindings()
    reopened.change([], [prefixed])
    assert AclStore(tmp_path / ACLS_FILE).bindings() == sorted([literal, group])
