"""How the platform's Kafka clients reach a cluster: its brokers and its security.

Every client the platform makes (the SDK's producer, registry and entity store, the
projection runners, the ``platform`` tools, Spark replay's Kafka read path, the apps)
takes its librdkafka settings from :func:`kafka_settings`, so one configuration
secures all of them. ``docs/security.md`` documents the settings for users.

Sources, each overriding the one before:

1. a client properties file, Kafka's format (``key=value`` lines, ``#`` or ``!``
   comments), named by ``--client-config PATH`` or ``$EVENTPLATFORM_CLIENT_CONFIG``;
2. environment variables ``EVENTPLATFORM_KAFKA_<KEY>``, the key upper-cased with
   dots as underscores (``EVENTPLATFORM_KAFKA_SASL_USERNAME`` sets ``sasl.username``);
3. explicit arguments.

The brokers come from the explicit argument (``--bootstrap``), else
``$EVENTPLATFORM_BOOTSTRAP``, else the file's ``bootstrap.servers``, else
:data:`BOOTSTRAP_DEFAULT`.

Only the keys in :data:`KNOWN_KEYS` are accepted, since a misspelt security key
that librdkafka ignored would silently connect in plaintext, or not at all. A bad
key or value raises :class:`ClientConfigError` naming the key and where it came
from (``file:line`` or the variable). So does a combination that cannot work, such
as SASL settings without a SASL protocol. Secrets (:data:`SECRET_KEYS`) are never
part of a message or a ``repr``.

Every client also logs through :data:`KAFKA_LOG` (``eventplatform.kafka``), at
warning level and above, instead of librdkafka's own lines on standard error; a
line that repeats (a broker that stays unreachable is reported by every connection
attempt) is logged once per :data:`KAFKA_LOG_REPEAT_QUIET_S` (see :class:`RepeatsFilter`).

This module reads files and the environment but imports no client, so the SDK's
pure model, the command line and Spark's driver can all use it.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BOOTSTRAP_DEFAULT",
    "BOOTSTRAP_ENV",
    "CLIENT_CONFIG_ENV",
    "ENV_PREFIX",
    "KAFKA_LOG",
    "KNOWN_KEYS",
    "SECRET_KEYS",
    "ClientConfig",
    "ClientConfigError",
    "KafkaConnection",
    "RepeatsFilter",
    "client_config_of",
    "environment_name",
    "kafka_settings",
    "load_client_config",
]

BOOTSTRAP_ENV = "EVENTPLATFORM_BOOTSTRAP"
BOOTSTRAP_DEFAULT = "127.0.0.1:9092"
CLIENT_CONFIG_ENV = "EVENTPLATFORM_CLIENT_CONFIG"
ENV_PREFIX = "EVENTPLATFORM_KAFKA_"
KAFKA_LOG_REPEAT_QUIET_S = 300.0
"""How long a librdkafka line, once logged, is not logged again (the same line with
other timings counts as the same)."""
KAFKA_LOG_REPEATS_REMEMBERED = 256
"""Distinct lines :class:`RepeatsFilter` remembers; the oldest is forgotten first."""
ARGUMENT_SOURCE = "argument"
DEFAULT_SOURCE = "default"
CONFIG_FILE_BYTES_MAX = 1024 * 1024
"""A client properties file larger than this is refused rather than read."""
PORT_MAX = 65535
MASK = "********"

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ENDPOINT_IDENTIFICATION_ALGORITHMS = ("https", "none")
PROTOCOL_DEFAULT = "PLAINTEXT"
SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password"})
ALIASES = {"sasl.mechanisms": "sasl.mechanism"}
"""librdkafka's other spellings, stored under the one name."""
SASL_REQUIRED_KEYS = ("sasl.mechanism", "sasl.username", "sasl.password")


class ClientConfigError(ValueError):
    """A client setting that is unknown, malformed, or inconsistent with another; the
    message names the key and its source, never a secret's value."""


@dataclass(frozen=True)
class _Value:
    """A setting as given, and where it was given (``file:line``, ``$NAME``)."""

    text: str
    source: str


def _text(key: str, value: _Value) -> str:
    if not value.text:
        raise ClientConfigError(f"{key} (from {value.source}) is empty")
    return value.text


def _choice(choices: tuple[str, ...], *, upper: bool) -> Callable[[str, _Value], str]:
    def check(key: str, value: _Value) -> str:
        text = value.text.strip()
        normal = text.upper() if upper else text.lower()
        if normal not in choices:
            raise ClientConfigError(
                f"{key} (from {value.source}) is {text!r}; expected one of {', '.join(choices)}"
            )
        return normal

    return check


def _existing_file(key: str, value: _Value) -> str:
    """An absolute path, so that a client started elsewhere (a Spark worker) finds it."""
    path = Path(_text(key, value)).expanduser()
    if not path.is_file():
        raise ClientConfigError(f"{key} (from {value.source}): no file at {path}")
    return str(path.resolve())


def _bootstrap(key: str, value: _Value) -> str:
    addresses = [address.strip() for address in _text(key, value).split(",")]
    for address in addresses:
        host, separator, port = address.rpartition(":")
        if not separator or not host or not port.isdigit() or not 0 < int(port) <= PORT_MAX:
            raise ClientConfigError(
                f"{key} (from {value.source}): {address!r} is not host:port "
                "(for example 127.0.0.1:9092)"
            )
    return ",".join(addresses)


KNOWN_KEYS: Mapping[str, Callable[[str, _Value], str]] = {
    "bootstrap.servers": _bootstrap,
    "client.id": _text,
    "security.protocol": _choice(SECURITY_PROTOCOLS, upper=True),
    "sasl.mechanism": _choice(SASL_MECHANISMS, upper=True),
    "sasl.username": _text,
    "sasl.password": _text,
    "ssl.ca.location": _existing_file,
    "ssl.certificate.location": _existing_file,
    "ssl.key.location": _existing_file,
    "ssl.key.password": _text,
    "ssl.endpoint.identification.algorithm": _choice(
        ENDPOINT_IDENTIFICATION_ALGORITHMS, upper=False
    ),
}
"""Each accepted key with the check that turns its text into the value librdkafka gets."""


def environment_name(key: str) -> str:
    """The variable that sets ``key`` (``sasl.username``: ``EVENTPLATFORM_KAFKA_SASL_USERNAME``)."""
    return ENV_PREFIX + key.upper().replace(".", "_")


_KEYS_BY_ENVIRONMENT_NAME = {
    environment_name(key): key for key in KNOWN_KEYS if key != "bootstrap.servers"
}


@dataclass(frozen=True, repr=False)
class ClientConfig:
    """Resolved client settings: the brokers, and the security and connection keys.

    ``settings`` holds librdkafka names and checked values; ``sources`` says where
    each came from. ``repr`` and ``str`` mask the secrets, so the object may be
    logged. Build it with :func:`load_client_config`.
    """

    bootstrap: str = BOOTSTRAP_DEFAULT
    settings: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def security_protocol(self) -> str:
        return self.settings.get("security.protocol", PROTOCOL_DEFAULT)

    def librdkafka(self) -> dict[str, Any]:
        """The settings a confluent-kafka Producer, Consumer or AdminClient takes: the
        brokers, the security keys, and :data:`KAFKA_LOG` for librdkafka's log."""
        return {"bootstrap.servers": self.bootstrap, **self.settings, "logger": KAFKA_LOG}

    def spark_options(self) -> dict[str, str]:
        """The ``eventlog`` source's options for the brokers, security as ``kafka.*``."""
        options = {"bootstrap.servers": self.bootstrap}
        options.update({f"kafka.{key}": value for key, value in self.settings.items()})
        return options

    def masked(self) -> dict[str, str]:
        """The settings with every secret replaced, for messages and logs."""
        return {key: MASK if key in SECRET_KEYS else value for key, value in self.settings.items()}

    def __repr__(self) -> str:
        return f"ClientConfig(bootstrap={self.bootstrap!r}, settings={self.masked()!r})"

    __str__ = __repr__


KafkaConnection = str | ClientConfig
"""What a platform client is given: a bootstrap list, whose security then comes from
the file and environment, or a :class:`ClientConfig` resolved already."""


def load_client_config(
    *,
    bootstrap: str | None = None,
    config_file: str | Path | None = None,
    settings: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ClientConfig:
    """Resolve the client settings from the file, the environment, then ``settings``.

    ``config_file`` overrides ``$EVENTPLATFORM_CLIENT_CONFIG``; ``bootstrap``
    overrides ``$EVENTPLATFORM_BOOTSTRAP`` and the file's ``bootstrap.servers``.
    ``environ`` defaults to ``os.environ``. Raises :class:`ClientConfigError`.
    """
    environment = os.environ if environ is None else environ
    given = _given(config_file, settings or {}, environment)
    if bootstrap:
        given["bootstrap.servers"] = _Value(bootstrap, ARGUMENT_SOURCE)
    checked = {key: KNOWN_KEYS[key](key, value) for key, value in given.items()}
    sources = {key: value.source for key, value in given.items()}
    _check_combination(checked, sources)
    brokers = checked.pop("bootstrap.servers", BOOTSTRAP_DEFAULT)
    sources.pop("bootstrap.servers", None)
    return ClientConfig(brokers, checked, sources)


def _given(
    config_file: str | Path | None, settings: Mapping[str, str], environment: Mapping[str, str]
) -> dict[str, _Value]:
    """Every setting as given, the later sources replacing the earlier ones."""
    given: dict[str, _Value] = {}
    path = config_file or environment.get(CLIENT_CONFIG_ENV) or None
    if path is not None:
        source = "--client-config" if config_file else f"${CLIENT_CONFIG_ENV}"
        given.update(_read_file(Path(path), source))
    given.update(_read_environment(environment))
    brokers = environment.get(BOOTSTRAP_ENV)
    if brokers:
        given["bootstrap.servers"] = _Value(brokers, f"${BOOTSTRAP_ENV}")
    for key, text in settings.items():
        given[_known(key, ARGUMENT_SOURCE)] = _Value(str(text), ARGUMENT_SOURCE)
    return given


def _known(key: str, source: str) -> str:
    """The key's one name; an unknown key is refused with the keys accepted."""
    name = ALIASES.get(key.strip(), key.strip())
    if name not in KNOWN_KEYS:
        raise ClientConfigError(
            f"{key!r} (from {source}) is not a client setting the platform takes; "
            f"known: {', '.join(sorted(KNOWN_KEYS))} (see docs/security.md)"
        )
    return name


def _read_file(path: Path, source: str) -> dict[str, _Value]:
    """The file's settings; a key given twice is refused rather than silently replaced."""
    try:
        if path.stat().st_size > CONFIG_FILE_BYTES_MAX:
            raise ClientConfigError(f"{path} (from {source}) is over {CONFIG_FILE_BYTES_MAX} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientConfigError(
            f"cannot read the client config {path} (from {source}): {exc}"
        ) from exc
    found: dict[str, _Value] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        where = f"{path}:{number}"
        key, separator, value = stripped.partition("=")
        if not separator or not key.strip():
            raise ClientConfigError(f"{where}: expected key=value, not {_quoted_line(stripped)}")
        name = _known(key, where)
        if name in found:
            raise ClientConfigError(f"{where}: {name} is set already at {found[name].source}")
        found[name] = _Value(value.strip(), where)
    return found


def _quoted_line(line: str) -> str:
    """The line in a message, unless it may hold a secret (a key written without ``=``)."""
    lowered = line.lower()
    return "a line naming a secret" if "password" in lowered else repr(line)


def _read_environment(environment: Mapping[str, str]) -> dict[str, _Value]:
    found: dict[str, _Value] = {}
    for name in sorted(environment):
        if not name.startswith(ENV_PREFIX):
            continue
        key = _KEYS_BY_ENVIRONMENT_NAME.get(name)
        if key is None:
            known = ", ".join(sorted(_KEYS_BY_ENVIRONMENT_NAME))
            raise ClientConfigError(
                f"${name} names no client setting the platform takes; known: {known} "
                f"(the brokers are ${BOOTSTRAP_ENV})"
            )
        found[key] = _Value(environment[name], f"${name}")
    return found


def _check_combination(settings: Mapping[str, str], sources: Mapping[str, str]) -> None:
    """Refuse settings that the protocol would ignore or that it lacks."""
    protocol = settings.get("security.protocol", PROTOCOL_DEFAULT)
    protocol_source = sources.get("security.protocol", DEFAULT_SOURCE)
    uses_sasl = protocol.startswith("SASL_")
    uses_tls = protocol in ("SSL", "SASL_SSL")
    for key in settings:
        if (key.startswith("sasl.") and not uses_sasl) or (key.startswith("ssl.") and not uses_tls):
            raise ClientConfigError(
                f"{key} (from {sources[key]}) is set, but security.protocol is {protocol} "
                f"(from {protocol_source}), which does not use it"
            )
    if uses_sasl:
        for key in SASL_REQUIRED_KEYS:
            if key not in settings:
                raise ClientConfigError(
                    f"security.protocol {protocol} (from {protocol_source}) needs {key} "
                    f"(or ${environment_name(key)})"
                )
    has_certificate = "ssl.certificate.location" in settings
    if has_certificate != ("ssl.key.location" in settings):
        present = "ssl.certificate.location" if has_certificate else "ssl.key.location"
        missing = "ssl.key.location" if has_certificate else "ssl.certificate.location"
        raise ClientConfigError(f"{present} (from {sources[present]}) needs {missing} as well")


class RepeatsFilter(logging.Filter):
    """Lets a librdkafka line through once per ``quiet_s``.

    librdkafka reports each failed attempt: an unreachable broker gives a line per
    connection attempt per client, dozens a second. Lines that differ only in the
    client's name, the thread and the timings count as one. ``clock`` is for tests.
    """

    _VARYING = re.compile(r"rdkafka#\w+-\d+|\[thrd:[^\]]*\]:?\s*|\(after \d+ms[^)]*\)")

    def __init__(
        self,
        quiet_s: float = KAFKA_LOG_REPEAT_QUIET_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.quiet_s = quiet_s
        self._clock = clock
        self._logged_at: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = self._VARYING.sub("", record.getMessage())
        now = self._clock()
        with self._lock:
            logged_at = self._logged_at.get(key)
            if logged_at is not None and now - logged_at < self.quiet_s:
                return False
            self._logged_at.pop(key, None)
            self._logged_at[key] = now
            while len(self._logged_at) > KAFKA_LOG_REPEATS_REMEMBERED:
                del self._logged_at[next(iter(self._logged_at))]
        return True


KAFKA_LOG = logging.getLogger("eventplatform.kafka")
"""The logger every platform client hands librdkafka (its ``logger`` setting)."""
KAFKA_LOG.setLevel(logging.WARNING)
KAFKA_LOG.addFilter(RepeatsFilter())


def client_config_of(connection: KafkaConnection) -> ClientConfig:
    """A :class:`ClientConfig` as is; a bootstrap list with the file's and environment's
    security (what the SDK does when it is given only brokers)."""
    if isinstance(connection, ClientConfig):
        return connection
    return load_client_config(bootstrap=connection)


def kafka_settings(connection: KafkaConnection) -> dict[str, Any]:
    """The librdkafka settings of ``connection``: brokers, then security."""
    return dict(client_config_of(connection).librdkafka())
