"""Who is on the other end of one connection, and how far its authentication has gone.

A connection on a PLAINTEXT or SSL listener is authenticated when it opens (as
``User:ANONYMOUS``, or as its certificate's subject). On a SASL listener it is not,
and Kafka's order holds::

    ApiVersions* -> SaslHandshake(mechanism) -> SaslAuthenticate+ -> any request

Any other request before the exchange completes closes the connection. A failed
exchange is answered (SASL_AUTHENTICATION_FAILED) and then the connection closes.

With ``connections.max.reauth.ms`` set, a SASL session lasts that long (KIP-368):
SaslAuthenticate tells the client, and the client authenticates again on the same
connection before the session ends, as the same user; a request that arrives after
the end, other than the re-authentication itself, closes the connection.

PLAIN (one message) is checked against the user's SCRAM credential
(:func:`~eventplatform.log.security.scram.verify_password`); SCRAM takes two.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from eventplatform.log.security.credentials import CredentialStore
from eventplatform.log.security.listeners import SecurityProtocol
from eventplatform.log.security.scram import (
    ScramError,
    ScramExchange,
    ScramMechanism,
    parse_plain,
    verify_password,
)
from eventplatform.log.security.tls import ANONYMOUS

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
_BEFORE_HANDSHAKE = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY})
_DURING_EXCHANGE = frozenset({SASL_AUTHENTICATE_KEY})


class AuthenticationError(Exception):
    """A failed or out-of-order authentication; the text is safe to send to the client."""


class SaslStage(enum.Enum):
    HANDSHAKE = "handshake"
    EXCHANGE = "exchange"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SaslSettings:
    mechanisms: tuple[str, ...]
    credentials: CredentialStore
    secret: bytes
    """Keys the decoy salts of unknown users (see :class:`ScramExchange`)."""
    reauth_ms: int = 0


@dataclass(slots=True)
class Session:
    """See the module docstring. ``now`` arguments are seconds on one monotonic clock."""

    listener: str
    protocol: SecurityProtocol
    sasl: SaslSettings | None = None
    principal: str | None = ANONYMOUS
    """``User:<name>``; None while a SASL listener's connection has not authenticated."""
    stage: SaslStage = SaslStage.COMPLETE
    expires_at: float | None = None
    bare_tokens: bool = False
    """After a SaslHandshake v0: the exchange's tokens come without Kafka's framing."""
    muted_until: float = 0.0
    """Until when the connection reads no request: a quota's throttle time."""
    _mechanism: str = ""
    _exchange: ScramExchange | None = field(default=None, repr=False)
    _reauthenticating: bool = False

    @classmethod
    def open(
        cls,
        listener: str,
        protocol: SecurityProtocol,
        sasl: SaslSettings | None,
        certificate_principal: str | None = None,
    ) -> Session:
        if protocol.sasl:
            if sasl is None:
                raise ValueError("a SASL listener needs SASL settings")
            return cls(listener, protocol, sasl, None, SaslStage.HANDSHAKE)
        return cls(listener, protocol, None, certificate_principal or ANONYMOUS)

    @property
    def authenticated(self) -> bool:
        return self.principal is not None and not self._reauthenticating

    def permits(self, api_key: int, now: float) -> str | None:
        """None when a request of ``api_key`` may be served now, else why the connection
        must close."""
        if self.stage is SaslStage.FAILED:
            return "its authentication failed"
        if self.stage is SaslStage.HANDSHAKE and self.principal is None:
            if api_key not in _BEFORE_HANDSHAKE:
                return f"API key {api_key} came before the SASL handshake"
            return None
        if self.stage is SaslStage.EXCHANGE:
            if api_key not in _DURING_EXCHANGE:
                return f"API key {api_key} came during the SASL exchange"
            return None
        if (
            self.expires_at is not None
            and now >= self.expires_at
            and api_key
            not in (
                SASL_HANDSHAKE_KEY,
                SASL_AUTHENTICATE_KEY,
            )
        ):
            return "its SASL session expired without re-authentication"
        return None

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return self.sasl.mechanisms if self.sasl is not None else ()

    def handshake(self, mechanism: str, *, bare_tokens: bool = False) -> bool:
        """Choose ``mechanism``; False when it is not enabled here (the client is told the
        enabled ones and may try again)."""
        if self.sasl is None:
            raise AuthenticationError("this listener does not speak SASL")
        if self.stage is SaslStage.EXCHANGE:
            raise AuthenticationError("a SASL handshake came during the exchange")
        if mechanism not in self.sasl.mechanisms:
            return False
        self._mechanism = mechanism
        self.bare_tokens = bare_tokens
        self._reauthenticating = self.principal is not None
        self.stage = SaslStage.EXCHANGE
        scram = ScramMechanism.from_sasl_name(mechanism)
        self._exchange = (
            None
            if scram is None
            else ScramExchange(scram, self.sasl.credentials.for_mechanism(scram), self.sasl.secret)
        )
        return True

    def authenticate(self, token: bytes, now: float) -> bytes:
        """One SaslAuthenticate step: the server's answer, and the session complete once
        the mechanism says so. Raises AuthenticationError, after which the stage is FAILED."""
        if self.stage is not SaslStage.EXCHANGE or self.sasl is None:
            raise AuthenticationError("SaslAuthenticate came before SaslHandshake")
        try:
            answer, user = self._step(token)
        except ScramError as exc:
            self.stage = SaslStage.FAILED
            raise AuthenticationError(str(exc)) from exc
        if user is not None:
            principal = f"User:{user}"
            if self._reauthenticating and principal != self.principal:
                self.stage = SaslStage.FAILED
                raise AuthenticationError("re-authentication must be as the same user")
            self.principal = principal
            self._reauthenticating = False
            self.stage = SaslStage.COMPLETE
            self.bare_tokens = False
            self._exchange = None
            reauth_s = self.sasl.reauth_ms / 1000
            self.expires_at = now + reauth_s if reauth_s else None
        return answer

    @property
    def reads_bare_tokens(self) -> bool:
        """Whether the next frame is a bare SASL token (after a v0 handshake)."""
        return self.bare_tokens and self.stage is SaslStage.EXCHANGE

    @property
    def checks_a_password(self) -> bool:
        """Whether the next step hashes a password (PLAIN): thousands of rounds, worth a
        worker thread."""
        return self.stage is SaslStage.EXCHANGE and self._exchange is None

    def fail(self) -> None:
        self.stage = SaslStage.FAILED

    def _step(self, token: bytes) -> tuple[bytes, str | None]:
        assert self.sasl is not None
        exchange = self._exchange
        if exchange is None:
            _, user, password = parse_plain(token)
            credential = self.sasl.credentials.password_credential(user)
            if credential is None or not verify_password(credential, password):
                raise ScramError("Authentication failed: invalid username or password")
            return b"", user
        if not exchange.started:
            return exchange.first(token), None
        answer = exchange.final(token)
        return answer, exchange.user

    def session_lifetime_ms(self, now: float) -> int:
        if self.expires_at is None:
            return 0
        return max(0, int((self.expires_at - now) * 1000))
