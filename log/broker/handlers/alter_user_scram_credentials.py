"""AlterUserScramCredentials (key 51), v0.

Creates, replaces and deletes users' SCRAM credentials; the answer has one result
per user named. A client sends the salt and the salted password, never the
password; the broker keeps only the keys derived from them. Per user, Kafka's
checks: a user named twice for one mechanism is DUPLICATE_RESOURCE, an unknown
mechanism UNSUPPORTED_SASL_MECHANISM, iterations outside [4096, 16384] or an empty
name or salt UNACCEPTABLE_CREDENTIAL, deleting a credential that does not exist
RESOURCE_NOT_FOUND. The users without errors change together, in one write.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from eventplatform.log.broker.authorizer import AclOperation, authorize_cluster
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import ALTER_USER_SCRAM_CREDENTIALS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError
from eventplatform.log.security.credentials import Deletion
from eventplatform.log.security.scram import (
    SCRAM_MECHANISMS,
    CredentialError,
    ScramCredential,
    ScramMechanism,
    check_user_name,
    credential_from_salted_password,
)

API = ALTER_USER_SCRAM_CREDENTIALS
VERSIONS = Versions.parse("0")


async def handle(context: RequestContext, request: Body) -> Body:
    store = context.broker.credentials
    errors: dict[str, tuple[ErrorCode, str]] = {}
    entries = [("delete", entry) for entry in request["deletions"]] + [
        ("upsert", entry) for entry in request["upsertions"]
    ]
    users = dict.fromkeys(entry["name"] for _, entry in entries)
    if not authorize_cluster(context, AclOperation.ALTER):
        refusal = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER on the cluster is needed")
        errors = {entry["name"]: refusal for _, entry in entries}
        entries = []
    named = Counter((entry["name"], entry["mechanism"]) for _, entry in entries)
    upsertions: list[tuple[str, ScramCredential]] = []
    deletions: list[Deletion] = []
    for kind, entry in entries:
        user = entry["name"]
        try:
            if named[(user, entry["mechanism"])] > 1:
                raise _RefusedError(ErrorCode.DUPLICATE_RESOURCE, "a mechanism is named twice")
            mechanism = _mechanism(entry["mechanism"])
            if kind == "delete":
                if user not in store.for_mechanism(mechanism):
                    raise _RefusedError(
                        ErrorCode.RESOURCE_NOT_FOUND,
                        f"no {mechanism.sasl_name} credential to delete",
                    )
                deletions.append(Deletion(user, mechanism))
            else:
                upsertions.append((user, _credential(user, mechanism, entry)))
        except _RefusedError as refusal:
            errors.setdefault(user, (refusal.code, str(refusal)))
    accepted = [(user, c) for user, c in upsertions if user not in errors]
    removed = [d for d in deletions if d.user not in errors]
    changed = {user for user, _ in accepted} | {d.user for d in removed}
    try:
        if changed:
            await context.broker.membership.alter_scram_credentials(accepted, removed)
    except CredentialError as exc:
        errors.update(dict.fromkeys(changed, (ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc))))
    except TopicError as exc:
        errors.update(dict.fromkeys(changed, (exc.code, str(exc))))
    return {
        "throttle_time_ms": 0,
        "results": [
            {
                "user": user,
                "error_code": errors.get(user, (ErrorCode.NONE, ""))[0],
                "error_message": errors[user][1] if user in errors else None,
            }
            for user in users
        ],
    }


class _RefusedError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _mechanism(code: int) -> ScramMechanism:
    if code not in {int(m) for m in SCRAM_MECHANISMS}:
        raise _RefusedError(ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {code}")
    return ScramMechanism(code)


def _credential(user: str, mechanism: ScramMechanism, entry: dict[str, Any]) -> ScramCredential:
    try:
        check_user_name(user)
        return credential_from_salted_password(
            mechanism, bytes(entry["salt"]), entry["iterations"], bytes(entry["salted_password"])
        )
    except CredentialError as exc:
        raise _RefusedError(ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc)) from exc
