"""SCRAM (RFC 5802, RFC 7677) and PLAIN (RFC 4616) as a broker verifies them, without I/O.

A user's credential for one mechanism is what Kafka keeps: the salt, the iteration
count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``. The password and the salted
password are never stored: ``AlterUserScramCredentials`` sends the salted password,
and :func:`credential_from_salted_password` keeps only the two keys derived from it.

:class:`ScramExchange` is the server side of one authentication, three messages long::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<proof>
    server-final   v=<server signature>

A user with no credential gets a server-first message all the same, with a salt
derived from the name and a secret of this process, so that the exchange fails only
at the proof, the same way as for a wrong password: the answers do not tell which
users exist. :func:`verify_plain` checks a PLAIN password against the same
credential, so one store serves every mechanism and holds no password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum


class ScramMechanism(IntEnum):
    """Kafka's codes for the SCRAM mechanisms in the credential APIs."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def sasl_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def digest(self) -> str:
        return {ScramMechanism.SCRAM_SHA_256: "sha256", ScramMechanism.SCRAM_SHA_512: "sha512"}[
            self
        ]

    @classmethod
    def from_sasl_name(cls, name: str) -> ScramMechanism | None:
        for mechanism in (cls.SCRAM_SHA_256, cls.SCRAM_SHA_512):
            if mechanism.sasl_name == name:
                return mechanism
        return None


SCRAM_MECHANISMS = (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
ITERATIONS_MIN = 4096
"""Kafka's lower bound for a SCRAM credential's iterations (RFC 7677 asks for 4096)."""
ITERATIONS_MAX = 16384
"""Kafka's upper bound: each PLAIN check and each new credential costs this many rounds."""
ITERATIONS_DEFAULT = 8192
SALT_BYTES = 32
NONCE_BYTES = 24
USER_CHARS_MAX = 256
MESSAGE_BYTES_MAX = 4096
"""The longest SASL message either mechanism accepts: nothing honest comes near it."""


class ScramError(Exception):
    """An authentication that fails: a malformed message or wrong credentials. The text is
    safe to send to the client: it never says whether the user exists."""


class CredentialError(ValueError):
    """A credential that cannot be stored: an unknown mechanism, iterations out of bounds,
    an empty salt or name."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """One user's credential for one mechanism, as stored."""

    mechanism: ScramMechanism
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def check_user_name(name: str) -> None:
    if not name or len(name) > USER_CHARS_MAX or not name.isprintable():
        raise CredentialError(
            f"a user name is 1 to {USER_CHARS_MAX} printable characters, not {name!r}"
        )


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """``Hi(password, salt, i)``: PBKDF2 with the mechanism's hash."""
    return hashlib.pbkdf2_hmac(mechanism.digest, password.encode(), salt, iterations)


def credential_from_salted_password(
    mechanism: ScramMechanism, salt: bytes, iterations: int, salted: bytes
) -> ScramCredential:
    """The credential to store for a salted password (what AlterUserScramCredentials sends)."""
    if mechanism not in SCRAM_MECHANISMS:
        raise CredentialError(f"unknown SCRAM mechanism code {int(mechanism)}")
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise CredentialError(
            f"iterations must be within [{ITERATIONS_MIN}, {ITERATIONS_MAX}], not {iterations}"
        )
    if not salt:
        raise CredentialError("the salt is empty")
    if len(salted) != hashlib.new(mechanism.digest).digest_size:
        raise CredentialError(f"the salted password is not a {mechanism.sasl_name} digest")
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(
        mechanism,
        bytes(salt),
        iterations,
        hashlib.new(mechanism.digest, client_key).digest(),
        _hmac(mechanism, salted, b"Server Key"),
    )


def credential_from_password(
    mechanism: ScramMechanism,
    password: str,
    *,
    iterations: int = ITERATIONS_DEFAULT,
    salt: bytes | None = None,
) -> ScramCredential:
    """A new credential for ``password``, with a random salt unless one is given."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    return credential_from_salted_password(
        mechanism, salt, iterations, salted_password(mechanism, password, salt, iterations)
    )


def verify_password(credential: ScramCredential, password: str) -> bool:
    salted = salted_password(credential.mechanism, password, credential.salt, credential.iterations)
    client_key = _hmac(credential.mechanism, salted, b"Client Key")
    stored = hashlib.new(credential.mechanism.digest, client_key).digest()
    return hmac.compare_digest(stored, credential.stored_key)


def parse_plain(message: bytes) -> tuple[str, str, str]:
    """``authzid NUL authcid NUL passwd`` (RFC 4616): the authorization id (often empty),
    the user and the password."""
    if len(message) > MESSAGE_BYTES_MAX:
        raise ScramError("the PLAIN message is too long")
    parts = message.split(b"\x00")
    if len(parts) != 3:
        raise ScramError("a PLAIN message is authzid NUL user NUL password")
    try:
        authzid, user, password = (part.decode() for part in parts)
    except UnicodeDecodeError as exc:
        raise ScramError("the PLAIN message is not UTF-8") from exc
    if not user or not password:
        raise ScramError("the PLAIN message has no user or no password")
    if authzid and authzid != user:
        raise ScramError("the authorization id must be empty or the user's own")
    return authzid, user, password


class ScramExchange:
    """The server side of one SCRAM authentication; see the module docstring.

    ``credentials`` are the users' credentials for this mechanism, by name. ``secret`` keys the
    salts of users who have none. Call :meth:`first` with the client's first message and
    :meth:`final` with its second; each returns the server's answer or raises ScramError.
    :attr:`user` is set once the exchange succeeded.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        credentials: Mapping[str, ScramCredential],
        secret: bytes,
        *,
        nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._secret = secret
        self._server_nonce = nonce or base64.b64encode(secrets.token_bytes(NONCE_BYTES)).decode()
        self._name = ""
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.user: str | None = None

    @property
    def started(self) -> bool:
        """Whether the client's first message was answered."""
        return bool(self._server_first)

    def first(self, message: bytes) -> bytes:
        text = _text(message)
        header, bare = _split_gs2_header(text)
        attributes = _attributes(bare)
        if "m" in attributes:
            raise ScramError("mandatory SCRAM extensions are not supported")
        if attributes.get("tokenauth", "false").lower() == "true":
            raise ScramError("delegation tokens are not supported")
        name = _unescape_name(_required(attributes, "n"))
        client_nonce = _required(attributes, "r")
        if not client_nonce.isprintable() or "," in client_nonce:
            raise ScramError("the client nonce is not printable")
        authzid = header[2:-1].removeprefix("a=") if header.startswith("n,a=") else ""
        if authzid and _unescape_name(authzid) != name:
            raise ScramError("the authorization id must be empty or the user's own")
        self._gs2_header = header
        self._name = name
        self._credential = self._credentials.get(name)
        salt, iterations = (
            (self._credential.salt, self._credential.iterations)
            if self._credential is not None
            else (self._decoy_salt(name), ITERATIONS_DEFAULT)
        )
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        if not self._server_first:
            raise ScramError("the client's final message came before its first")
        text = _text(message)
        without_proof, separator, proof_part = text.rpartition(",p=")
        if not separator:
            raise ScramError("the client's final message has no proof")
        attributes = _attributes(without_proof)
        if _decode64(_required(attributes, "c")) != self._gs2_header.encode():
            raise ScramError("the channel binding does not match the first message")
        if _required(attributes, "r") != self._nonce:
            raise ScramError("the nonce does not match")
        proof = _decode64(proof_part)
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        if credential is None or not self._proof_holds(credential, auth_message, proof):
            raise ScramError(
                f"Authentication failed: invalid credentials with SASL mechanism "
                f"{self.mechanism.sasl_name}"
            )
        self.user = self._name
        signature = _hmac(self.mechanism, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(signature)

    def _proof_holds(self, credential: ScramCredential, auth_message: bytes, proof: bytes) -> bool:
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            return False
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        stored = hashlib.new(self.mechanism.digest, client_key).digest()
        return hmac.compare_digest(stored, credential.stored_key)

    def _decoy_salt(self, name: str) -> bytes:
        keyed = hmac.new(
            self._secret, self.mechanism.sasl_name.encode() + b"\x00" + name.encode(), "sha256"
        )
        return keyed.digest()


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mechanism.digest).digest()


def _text(message: bytes) -> str:
    if len(message) > MESSAGE_BYTES_MAX:
        raise ScramError("the SCRAM message is too long")
    try:
        return message.decode()
    except UnicodeDecodeError as exc:
        raise ScramError("the SCRAM message is not UTF-8") from exc


def _split_gs2_header(text: str) -> tuple[str, str]:
    """``n,,`` or ``n,a=<authzid>,``; channel binding (``p=``, ``y,``) is refused."""
    flag, comma, rest = text.partition(",")
    if not comma or flag != "n":
        raise ScramError("channel binding is not supported: the message must start with 'n,'")
    authzid, comma, bare = rest.partition(",")
    if not comma or (authzid and not authzid.startswith("a=")):
        raise ScramError("malformed GS2 header")
    return f"n,{authzid},", bare


def _attributes(text: str) -> dict[str, str]:
    attributes: dict[str, str] = {}
    for item in text.split(","):
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ScramError(f"malformed SCRAM attribute {item[:32]!r}")
        attributes.setdefault(key, value)
    return attributes


def _required(attributes: dict[str, str], key: str) -> str:
    value = attributes.get(key)
    if not value:
        raise ScramError(f"the SCRAM message lacks its {key!r} attribute")
    return value


def _unescape_name(name: str) -> str:
    """A saslname: ``=2C`` stands for ``,`` and ``=3D`` for ``=``; any other ``=`` is an error."""
    out = []
    index = 0
    while index < len(name):
        char = name[index]
        if char == "=":
            code = name[index : index + 3]
            if code not in ("=2C", "=3D"):
                raise ScramError("malformed user name escape")
            out.append("," if code == "=2C" else "=")
            index += 3
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _decode64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise ScramError("malformed base64 in the SCRAM message") from exc
