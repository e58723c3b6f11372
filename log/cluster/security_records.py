"""Credentials and ACL bindings as the cluster's metadata records carry them.

A cluster keeps its users' SCRAM credentials and its ACL bindings in the
metadata the controller quorum commits (:class:`~.metadata.ScramChange`,
:class:`~.metadata.AclChange`), so every broker checks the same ones. These
functions turn the security layer's values into records and back, and load a
broker's stores from the image it applied.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

from eventplatform.log.cluster.metadata import (
    AclChange,
    AclEntry,
    MetadataImage,
    QuotaChangeRecord,
    QuotaEntry,
    ScramChange,
    StoredScram,
)
from eventplatform.log.security.acls import (
    AclBinding,
    AclOperation,
    AclPermission,
    AclResourceType,
    AclStore,
    PatternType,
)
from eventplatform.log.security.credentials import CredentialStore, Deletion
from eventplatform.log.security.quotas import Entity, QuotaChange, QuotaStore
from eventplatform.log.security.scram import ScramCredential, ScramMechanism


def scram_change(
    upsertions: Iterable[tuple[str, ScramCredential]], deletions: Iterable[Deletion]
) -> ScramChange:
    return ScramChange(
        tuple(_stored(user, credential) for user, credential in upsertions),
        tuple((d.user, d.mechanism.sasl_name) for d in deletions),
    )


def acl_change(added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> AclChange:
    return AclChange(tuple(_entry(b) for b in added), tuple(_entry(b) for b in removed))


def quota_change(changes: Iterable[QuotaChange]) -> QuotaChangeRecord:
    return QuotaChangeRecord(tuple(QuotaEntry(c.entity, c.key, c.value) for c in changes))


def load_security(
    image: MetadataImage, credentials: CredentialStore, acls: AclStore, quotas: QuotaStore
) -> None:
    """Make the broker's stores hold what ``image`` holds."""
    credentials.replace_all(_credential(stored) for stored in image.scram.values())
    acls.replace_all(_binding(entry) for entry in image.acls)
    by_entity: dict[Entity, dict[str, float]] = {}
    for entry in image.quotas:
        if entry.value is not None:
            by_entity.setdefault(entry.entity, {})[entry.key] = entry.value
    quotas.replace_all(by_entity)


def _stored(user: str, credential: ScramCredential) -> StoredScram:
    return StoredScram(
        user,
        credential.mechanism.sasl_name,
        base64.b64encode(credential.salt).decode(),
        credential.iterations,
        base64.b64encode(credential.stored_key).decode(),
        base64.b64encode(credential.server_key).decode(),
    )


def _credential(stored: StoredScram) -> tuple[str, ScramCredential]:
    mechanism = ScramMechanism.from_sasl_name(stored.mechanism)
    if mechanism is None:
        raise ValueError(f"unknown SCRAM mechanism {stored.mechanism!r} in the metadata")
    return stored.user, ScramCredential(
        mechanism,
        base64.b64decode(stored.salt),
        stored.iterations,
        base64.b64decode(stored.stored_key),
        base64.b64decode(stored.server_key),
    )


def _entry(binding: AclBinding) -> AclEntry:
    return AclEntry(
        int(binding.resource_type),
        binding.resource_name,
        int(binding.pattern_type),
        binding.principal,
        binding.host,
        int(binding.operation),
        int(binding.permission),
    )


def _binding(entry: AclEntry) -> AclBinding:
    return AclBinding(
        AclResourceType(entry.resource_type),
        entry.resource_name,
        PatternType(entry.pattern_type),
        entry.principal,
        entry.host,
        AclOperation(entry.operation),
        AclPermission(entry.permission),
    )
