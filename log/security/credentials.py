"""Where a broker keeps SCRAM credentials, and the limit on failed authentications.

A broker on its own keeps them in ``scram-credentials.json`` in its data
directory, readable by its owner alone, replaced atomically on each change: a
crash leaves the old file or the new one. The file holds, per user and
mechanism, the salt, the iterations and the two derived keys
(:class:`~eventplatform.log.security.scram.ScramCredential`), base64-encoded;
never a password.
"""

from __future__ import annotations

import base64
import collections
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from eventplatform.log.security.scram import (
    CredentialError,
    ScramCredential,
    ScramMechanism,
    check_user_name,
)
from eventplatform.log.storage.files import write_atomically

CREDENTIALS_FILE = "scram-credentials.json"
USERS_MAX = 100_000
"""The most users one store holds: each credential is a few hundred bytes in memory."""


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: ScramMechanism


class CredentialStore:
    """Users' SCRAM credentials, by mechanism and name; see the module docstring.

    ``path`` None keeps them in memory only (a cluster member's copy of the metadata).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._by_mechanism: dict[ScramMechanism, dict[str, ScramCredential]] = {
            ScramMechanism.SCRAM_SHA_256: {},
            ScramMechanism.SCRAM_SHA_512: {},
        }
        if path is not None and path.exists():
            self._load(path)

    def for_mechanism(self, mechanism: ScramMechanism) -> Mapping[str, ScramCredential]:
        return self._by_mechanism[mechanism]

    def users(self) -> list[str]:
        names: set[str] = set()
        for credentials in self._by_mechanism.values():
            names.update(credentials)
        return sorted(names)

    def of_user(self, user: str) -> list[ScramCredential]:
        return [
            credentials[user]
            for _, credentials in sorted(self._by_mechanism.items())
            if user in credentials
        ]

    def password_credential(self, user: str) -> ScramCredential | None:
        """The credential a PLAIN password is checked against: the strongest one."""
        for mechanism in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):
            credential = self._by_mechanism[mechanism].get(user)
            if credential is not None:
                return credential
        return None

    def replace_all(self, credentials: Iterable[tuple[str, ScramCredential]]) -> None:
        """Hold exactly ``credentials`` (a cluster member's copy of the metadata's)."""
        by_mechanism: dict[ScramMechanism, dict[str, ScramCredential]] = {
            ScramMechanism.SCRAM_SHA_256: {},
            ScramMechanism.SCRAM_SHA_512: {},
        }
        for user, credential in credentials:
            by_mechanism[credential.mechanism][user] = credential
        self._by_mechanism = by_mechanism

    def apply(
        self, upsertions: Iterable[tuple[str, ScramCredential]], deletions: Iterable[Deletion]
    ) -> None:
        """Apply every change, then write the file once; a change that cannot apply
        raises CredentialError before anything changes."""
        upsertions = list(upsertions)
        deletions = list(deletions)
        for user, _ in upsertions:
            check_user_name(user)
        for deletion in deletions:
            if deletion.user not in self._by_mechanism.get(deletion.mechanism, {}):
                raise CredentialError(
                    f"user {deletion.user!r} has no {deletion.mechanism.sasl_name} credential"
                )
        new_users = {user for user, _ in upsertions} - set(self.users())
        if len(self.users()) + len(new_users) > USERS_MAX:
            raise CredentialError(f"a broker keeps at most {USERS_MAX} users")
        for deletion in deletions:
            del self._by_mechanism[deletion.mechanism][deletion.user]
        for user, credential in upsertions:
            self._by_mechanism[credential.mechanism][user] = credential
        if self.path is not None:
            self._save(self.path)

    def _load(self, path: Path) -> None:
        document = orjson.loads(path.read_bytes())
        for user, entries in document.get("users", {}).items():
            for name, entry in entries.items():
                mechanism = ScramMechanism.from_sasl_name(name)
                if mechanism is None:
                    raise CredentialError(f"{path}: unknown mechanism {name!r} for {user!r}")
                self._by_mechanism[mechanism][user] = _decode(mechanism, entry)

    def _save(self, path: Path) -> None:
        users: dict[str, dict[str, Any]] = collections.defaultdict(dict)
        for mechanism, credentials in self._by_mechanism.items():
            for user, credential in credentials.items():
                users[user][mechanism.sasl_name] = _encode(credential)
        data = orjson.dumps({"version": 1, "users": users}, option=orjson.OPT_SORT_KEYS)
        write_atomically(path, data)
        path.chmod(0o600)


def _encode(credential: ScramCredential) -> dict[str, Any]:
    return {
        "salt": base64.b64encode(credential.salt).decode(),
        "iterations": credential.iterations,
        "stored_key": base64.b64encode(credential.stored_key).decode(),
        "server_key": base64.b64encode(credential.server_key).decode(),
    }


def _decode(mechanism: ScramMechanism, entry: Mapping[str, Any]) -> ScramCredential:
    return ScramCredential(
        mechanism,
        base64.b64decode(entry["salt"]),
        int(entry["iterations"]),
        base64.b64decode(entry["stored_key"]),
        base64.b64decode(entry["server_key"]),
    )


FAILURE_WINDOW_S = 60.0
FAILURE_HOSTS_MAX = 10_000
"""The most addresses whose recent failures are remembered; the oldest is forgotten first."""


class FailedAuthentications:
    """Failed authentications per address in the last ``FAILURE_WINDOW_S`` seconds.

    Once an address has ``limit`` of them, :meth:`refused` is true for it until the
    oldest leaves the window, and its attempts fail without a look at the credentials.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._times: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict()
        )

    def record(self, host: str, now: float) -> None:
        times = self._times.pop(host, None) or collections.deque(maxlen=self.limit)
        times.append(now)
        self._times[host] = times
        while len(self._times) > FAILURE_HOSTS_MAX:
            self._times.popitem(last=False)

    def refused(self, host: str, now: float) -> float | None:
        """Seconds until ``host`` may try again, or None when it may now."""
        times = self._times.get(host)
        if times is None:
            return None
        while times and times[0] <= now - FAILURE_WINDOW_S:
            times.popleft()
        if not times:
            del self._times[host]
            return None
        if len(times) < self.limit:
            return None
        return times[0] + FAILURE_WINDOW_S - now
