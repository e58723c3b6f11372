"""Kafka's access control lists: bindings, filters, the store, and the decision.

An ACL binding says that a principal, from a host, is allowed or denied one
operation on the resources a pattern names::

    (TOPIC, "orders", LITERAL)  User:alice  *  READ  ALLOW

A pattern is LITERAL (the name, or ``*`` for every resource of the type) or
PREFIXED (every name that starts with it). The principal ``User:*`` and the host
``*`` match anyone and anywhere.

:class:`AclAuthorizer` decides as Kafka's standard authorizer does:

* a principal in ``super.users`` may do anything;
* a DENY that matches (the operation itself, or ALL) wins over every ALLOW;
* an ALLOW matches the operation itself or ALL, and some operations imply
  others: READ, WRITE, DELETE and ALTER each imply DESCRIBE, and ALTER_CONFIGS
  implies DESCRIBE_CONFIGS;
* a resource no binding names at all is allowed only when
  ``allow.everyone.if.no.acl.found`` is set.

Filters (DescribeAcls, DeleteAcls) take ANY for every field, a null name,
principal or host for any, and the pattern type MATCH for every pattern that
would apply to the named resource.

A broker on its own keeps its bindings in ``acls.json`` in its data directory,
replaced atomically on each change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import orjson

from eventplatform.log.storage.files import write_atomically

ACLS_FILE = "acls.json"
ACLS_MAX = 100_000
"""The most bindings one store holds; each decision reads those of one resource type."""
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
"""The one cluster resource's name, as Kafka spells it."""


class AclOperation(IntEnum):
    """Kafka's ACL operation codes; each is a bit position in the authorized-operations field."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclResourceType(IntEnum):
    """Kafka's ACL resource type codes (not the config resource types of DescribeConfigs)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}
"""The ALLOW operations that grant an operation besides itself and ALL."""


class AclError(ValueError):
    """A binding or filter that cannot be stored or used; Kafka answers INVALID_REQUEST."""


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: AclResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def check(self) -> None:
        """Raise AclError unless this binding can be stored (Kafka's checks)."""
        if self.resource_type in (AclResourceType.UNKNOWN, AclResourceType.ANY):
            raise AclError("the resource type must be a concrete one")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError("the pattern type must be LITERAL or PREFIXED")
        if not self.resource_name:
            raise AclError("the resource name is empty")
        if self.resource_type is AclResourceType.CLUSTER and (
            self.resource_name != CLUSTER_NAME or self.pattern_type is not PatternType.LITERAL
        ):
            raise AclError(f"the cluster resource is the literal name {CLUSTER_NAME!r}")
        kind, colon, name = self.principal.partition(":")
        if not colon or not kind or not name:
            raise AclError(f"the principal {self.principal!r} is not Type:name")
        if not self.host:
            raise AclError("the host is empty (use '*' for any host)")
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise AclError("the operation must be a concrete one")
        if self.permission not in (AclPermission.ALLOW, AclPermission.DENY):
            raise AclError("the permission must be ALLOW or DENY")

    def applies_to(self, resource_type: AclResourceType, name: str) -> bool:
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which bindings DescribeAcls lists or DeleteAcls removes; None fields match any."""

    resource_type: AclResourceType = AclResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def check(self) -> None:
        if (
            self.resource_type is AclResourceType.UNKNOWN
            or self.pattern_type is PatternType.UNKNOWN
        ):
            raise AclError("the filter names an unknown resource or pattern type")
        if self.operation is AclOperation.UNKNOWN or self.permission is AclPermission.UNKNOWN:
            raise AclError("the filter names an unknown operation or permission")

    def matches(self, binding: AclBinding) -> bool:
        return (
            self.resource_type in (AclResourceType.ANY, binding.resource_type)
            and self._matches_pattern(binding)
            and self.principal in (None, binding.principal)
            and self.host in (None, binding.host)
            and self.operation in (AclOperation.ANY, binding.operation)
            and self.permission in (AclPermission.ANY, binding.permission)
        )

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.pattern_type is PatternType.MATCH:
            if self.resource_name is None:
                return True
            return binding.applies_to(binding.resource_type, self.resource_name)
        if self.pattern_type not in (PatternType.ANY, binding.pattern_type):
            return False
        return self.resource_name in (None, binding.resource_name)


class AclStore:
    """The bindings, in a file of a broker on its own (``path`` None: in memory only).

    They are indexed by resource type, literal name and prefix, so a decision reads the
    bindings of its own resource and the prefixes, not every binding."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._bindings: frozenset[AclBinding] = frozenset()
        self._literal: dict[tuple[AclResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[AclResourceType, list[AclBinding]] = {}
        if path is not None and path.exists():
            document = orjson.loads(path.read_bytes())
            self._replace(frozenset(_decode(entry) for entry in document.get("acls", [])))

    def bindings(self) -> list[AclBinding]:
        return sorted(self._bindings)

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [binding for binding in sorted(self._bindings) if acl_filter.matches(binding)]

    def applying(self, resource_type: AclResourceType, name: str) -> list[AclBinding]:
        """The bindings whose pattern names this resource."""
        found = [
            *self._literal.get((resource_type, name), ()),
            *self._literal.get((resource_type, WILDCARD), ()),
        ]
        found.extend(
            binding
            for binding in self._prefixed.get(resource_type, ())
            if name.startswith(binding.resource_name)
        )
        return found

    def of_type(self, resource_type: AclResourceType) -> list[AclBinding]:
        return [b for b in sorted(self._bindings) if b.resource_type is resource_type]

    def change(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> None:
        """Add and remove bindings, then write the file once."""
        bindings = (self._bindings - set(removed)) | set(added)
        if len(bindings) > ACLS_MAX:
            raise AclError(f"a broker keeps at most {ACLS_MAX} ACL bindings")
        if self.path is not None:
            entries = [_encode(binding) for binding in sorted(bindings)]
            write_atomically(self.path, orjson.dumps({"version": 1, "acls": entries}))
        self._replace(bindings)

    def replace_all(self, bindings: Iterable[AclBinding]) -> None:
        """Hold exactly ``bindings`` (a cluster member's copy of the metadata's)."""
        self._replace(frozenset(bindings))

    def _replace(self, bindings: frozenset[AclBinding]) -> None:
        literal: dict[tuple[AclResourceType, str], list[AclBinding]] = {}
        prefixed: dict[AclResourceType, list[AclBinding]] = {}
        for binding in sorted(bindings):
            if binding.pattern_type is PatternType.PREFIXED:
                prefixed.setdefault(binding.resource_type, []).append(binding)
            else:
                literal.setdefault((binding.resource_type, binding.resource_name), []).append(
                    binding
                )
        self._bindings, self._literal, self._prefixed = bindings, literal, prefixed


@dataclass(frozen=True, slots=True)
class AclAuthorizer:
    """The decision; see the module docstring."""

    store: AclStore
    super_users: frozenset[str] = frozenset()
    allow_if_no_acl: bool = False

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: AclResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        applying = self.store.applying(resource_type, name)
        if not applying:
            return self.allow_if_no_acl
        granting = IMPLIED_BY.get(operation, frozenset({operation})) | {AclOperation.ALL}
        allowed = False
        for binding in applying:
            if binding.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if binding.host not in (host, WILDCARD):
                continue
            if binding.permission is AclPermission.DENY:
                if binding.operation in (operation, AclOperation.ALL):
                    return False
            elif binding.operation in granting:
                allowed = True
        return allowed

    def authorize_any(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: AclResourceType,
    ) -> bool:
        """Whether some resource of ``resource_type`` allows ``operation``: an ALLOW binding
        for the principal that no DENY on every resource of the type (literal ``*`` or the
        empty prefix) takes back."""
        if principal in self.super_users:
            return True
        granting = IMPLIED_BY.get(operation, frozenset({operation})) | {AclOperation.ALL}
        allowed = False
        for binding in self.store.of_type(resource_type):
            if binding.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if binding.host not in (host, WILDCARD):
                continue
            if binding.permission is AclPermission.DENY:
                covers_all = binding.resource_name == WILDCARD or (
                    binding.pattern_type is PatternType.PREFIXED and not binding.resource_name
                )
                if covers_all and binding.operation in (operation, AclOperation.ALL):
                    return False
            elif binding.operation in granting:
                allowed = True
        return allowed or (self.allow_if_no_acl and not self.store.of_type(resource_type))


def _encode(binding: AclBinding) -> dict[str, Any]:
    return {field.name: getattr(binding, field.name) for field in dataclasses.fields(binding)}


def _decode(entry: dict[str, Any]) -> AclBinding:
    return AclBinding(
        AclResourceType(entry["resource_type"]),
        str(entry["resource_name"]),
        PatternType(entry["pattern_type"]),
        str(entry["principal"]),
        str(entry["host"]),
        AclOperation(entry["operation"]),
        AclPermission(entry["permission"]),
    )
