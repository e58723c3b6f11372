"""SCRAM and PLAIN as the broker verifies them: RFC 7677's exchange byte for byte, the
failures, the credential store's file and the limit on failed attempts."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest

from eventplatform.log.security.credentials import (
    CREDENTIALS_FILE,
    FAILURE_WINDOW_S,
    CredentialStore,
    Deletion,
    FailedAuthentications,
)
from eventplatform.log.security.listeners import SecurityProtocol
from eventplatform.log.security.scram import (
    ITERATIONS_MIN,
    CredentialError,
    ScramError,
    ScramExchange,
    ScramMechanism,
    credential_from_password,
    credential_from_salted_password,
    parse_plain,
    salted_password,
    verify_password,
)
from eventplatform.log.security.session import (
    AuthenticationError,
    SaslSettings,
    SaslStage,
    Session,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512

# RFC 7677 section 3: user "user", password "pencil", 4096 iterations.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
SECRET = b"s" * 32


def rfc_exchange(password: str = "pencil") -> ScramExchange:
    credential = credential_from_password(SHA256, password, iterations=4096, salt=RFC_SALT)
    return ScramExchange(SHA256, {"user": credential}, SECRET, nonce=RFC_SERVER_NONCE)


def test_the_rfc_7677_exchange_is_answered_byte_for_byte() -> None:
    exchange = rfc_exchange()
    assert exchange.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert exchange.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert exchange.user == "user"


def test_a_wrong_password_fails_at_the_proof() -> None:
    exchange = rfc_exchange(password="pen")
    exchange.first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match="invalid credentials"):
        exchange.final(RFC_CLIENT_FINAL)
    assert exchange.user is None


def test_an_unknown_user_is_answered_like_a_known_one_and_fails_the_same_way() -> None:
    exchange = ScramExchange(SHA256, {}, SECRET, nonce=RFC_SERVER_NONCE)
    first = exchange.first(RFC_CLIENT_FIRST).decode()
    assert first.startswith("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=")
    assert first.endswith(",i=8192")
    again = ScramExchange(SHA256, {}, SECRET, nonce=RFC_SERVER_NONCE).first(RFC_CLIENT_FIRST)
    assert again.decode() == first  # the decoy salt is stable: no tell between two tries
    with pytest.raises(ScramError, match="invalid credentials"):
        exchange.final(RFC_CLIENT_FINAL)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"y,,n=user,r=abc", "channel binding"),
        (b"p=tls-unique,,n=user,r=abc", "channel binding"),
        (b"n,,r=abc", "'n'"),
        (b"n,,n=user", "'r'"),
        (b"n,,m=ext,n=user,r=abc", "extensions"),
        (b"n,,n=user,r=abc,tokenauth=true", "delegation tokens"),
        (b"n,,n=us=2Xer,r=abc", "escape"),
        (b"n,a=other,n=user,r=abc", "authorization id"),
        (b"\xff\xfe", "UTF-8"),
        (b"n,,n=user,r=" + b"a" * 5000, "too long"),
    ],
)
def test_a_malformed_first_message_is_refused(message: bytes, reason: str) -> None:
    with pytest.raises(ScramError, match=reason):
        rfc_exchange().first(message)


@pytest.mark.parametrize(
    ("final", "reason"),
    [
        (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", "no proof"),
        (RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"), "channel binding"),
        (RFC_CLIENT_FINAL.replace(b"$k0,", b"$k1,"), "nonce"),
        (RFC_CLIENT_FINAL[:-4] + b"!!!=", "base64"),
    ],
)
def test_a_malformed_final_message_is_refused(final: bytes, reason: str) -> None:
    exchange = rfc_exchange()
    exchange.first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match=reason):
        exchange.final(final)


def test_a_final_message_before_the_first_is_refused() -> None:
    with pytest.raises(ScramError, match="before its first"):
        rfc_exchange().final(RFC_CLIENT_FINAL)


def test_escaped_names_are_read_as_rfc_5802_writes_them() -> None:
    credential = credential_from_password(SHA512, "pw", iterations=ITERATIONS_MIN)
    exchange = ScramExchange(SHA512, {"a,b=c": credential}, SECRET)
    server_first = exchange.first(b"n,,n=a=2Cb=3Dc,r=xyz").decode()
    assert f"s={base64.b64encode(credential.salt).decode()}" in server_first


def test_a_credential_keeps_neither_the_password_nor_the_salted_password() -> None:
    salted = salted_password(SHA256, "pencil", RFC_SALT, 4096)
    credential = credential_from_salted_password(SHA256, RFC_SALT, 4096, salted)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert credential.stored_key == hashlib.sha256(client_key).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha256").digest()
    assert salted not in (credential.stored_key, credential.server_key)
    assert verify_password(credential, "pencil")
    assert not verify_password(credential, "pencil ")


@pytest.mark.parametrize(
    ("iterations", "salt", "salted", "reason"),
    [
        (4095, b"salt", b"x" * 32, "iterations"),
        (16385, b"salt", b"x" * 32, "iterations"),
        (4096, b"", b"x" * 32, "salt"),
        (4096, b"salt", b"x" * 31, "digest"),
    ],
)
def test_an_unacceptable_credential_is_refused(
    iterations: int, salt: bytes, salted: bytes, reason: str
) -> None:
    with pytest.raises(CredentialError, match=reason):
        credential_from_salted_password(SHA256, salt, iterations, salted)


def test_plain_messages_are_parsed_and_malformed_ones_refused() -> None:
    assert parse_plain(b"\x00alice\x00secret") == ("", "alice", "secret")
    assert parse_plain(b"alice\x00alice\x00secret") == ("alice", "alice", "secret")
    for message in (b"alice\x00secret", b"\x00\x00secret", b"\x00alice\x00", b"bob\x00alice\x00pw"):
        with pytest.raises(ScramError):
            parse_plain(message)


def test_the_store_file_keeps_keys_not_passwords_and_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / CREDENTIALS_FILE
    store = CredentialStore(path)
    alice = credential_from_password(SHA512, "correct horse", iterations=ITERATIONS_MIN)
    store.apply([("alice", alice)], [])
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    assert "correct horse" not in text
    assert json.loads(text)["users"]["alice"]["SCRAM-SHA-512"]["iterations"] == ITERATIONS_MIN

    reopened = CredentialStore(path)
    assert reopened.for_mechanism(SHA512)["alice"] == alice
    assert reopened.password_credential("alice") == alice
    reopened.apply([], [Deletion("alice", SHA512)])
    assert CredentialStore(path).users() == []


def test_deleting_a_credential_that_does_not_exist_changes_nothing(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / CREDENTIALS_FILE)
    bob = credential_from_password(SHA256, "pw", iterations=ITERATIONS_MIN)
    with pytest.raises(CredentialError, match="no SCRAM-SHA-512"):
        store.apply([("bob", bob)], [Deletion("bob", SHA512)])
    assert store.users() == []


def test_an_address_with_too_many_failures_is_refused_until_the_oldest_leaves_the_window() -> None:
    failures = FailedAuthentications(limit=3)
    for second in (0.0, 1.0, 2.0):
        assert failures.refused("10.0.0.1", second) is None
        failures.record("10.0.0.1", second)
    assert failures.refused("10.0.0.1", 3.0) == pytest.approx(FAILURE_WINDOW_S - 3.0)
    assert failures.refused("10.0.0.2", 3.0) is None
    assert failures.refused("10.0.0.1", FAILURE_WINDOW_S + 0.5) is None


def sasl_session(store: CredentialStore, reauth_ms: int = 0) -> Session:
    settings = SaslSettings(("PLAIN", "SCRAM-SHA-256"), store, SECRET, reauth_ms)
    return Session.open("SASL", SecurityProtocol.SASL_PLAINTEXT, settings)


def test_a_sasl_session_serves_nothing_but_the_handshake_until_it_authenticates(
    tmp_path: Path,
) -> None:
    store = CredentialStore(None)
    store.apply([("alice", credential_from_password(SHA256, "pw", iterations=4096))], [])
    session = sasl_session(store, reauth_ms=10_000)
    assert session.permits(18, 0.0) is None  # ApiVersions
    assert "before the SASL handshake" in (session.permits(3, 0.0) or "")  # Metadata
    assert not session.handshake("SCRAM-SHA-512")  # not enabled on this listener
    assert session.handshake("PLAIN")
    assert "during the SASL exchange" in (session.permits(3, 0.0) or "")
    assert session.authenticate(b"\x00alice\x00pw", now=5.0) == b""
    assert session.principal == "User:alice"
    assert session.permits(3, 6.0) is None
    assert session.session_lifetime_ms(6.0) == 9_000
    assert "expired" in (session.permits(3, 15.0) or "")
    assert session.permits(17, 15.0) is None  # re-authentication may still come


def test_re_authentication_must_be_as_the_same_user(tmp_path: Path) -> None:
    store = CredentialStore(None)
    store.apply(
        [
            ("alice", credential_from_password(SHA256, "pw", iterations=4096)),
            ("mallory", credential_from_password(SHA256, "pw2", iterations=4096)),
        ],
        [],
    )
    session = sasl_session(store, reauth_ms=1_000)
    session.handshake("PLAIN")
    session.authenticate(b"\x00alice\x00pw", now=0.0)
    assert session.handshake("PLAIN")
    with pytest.raises(AuthenticationError, match="same user"):
        session.authenticate(b"\x00mallory\x00pw2", now=0.5)
    assert session.stage is SaslStage.FAILED
    assert session.permits(3, 0.6) == "its authentication failed"


def test_a_wrong_plain_password_fails_the_session() -> None:
    store = CredentialStore(None)
    store.apply([("alice", credential_from_password(SHA256, "pw", iterations=4096))], [])
    session = sasl_session(store)
    session.handshake("PLAIN")
    with pytest.raises(AuthenticationError, match="invalid username or password"):
        session.authenticate(b"\x00alice\x00wrong", now=0.0)
    assert session.principal is None
    assert session.stage is SaslStage.FAILED
