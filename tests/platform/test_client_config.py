"""The client settings: a properties file, then the environment, then arguments; unknown
keys, bad values and settings the protocol would ignore are refused, naming the key and
where it came from; secrets never show."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from eventplatform.cli import main
from eventplatform.client_config import (
    BOOTSTRAP_DEFAULT,
    KAFKA_LOG,
    ClientConfig,
    ClientConfigError,
    RepeatsFilter,
    environment_name,
    kafka_settings,
    load_client_config,
)

SECRET = "not-for-any-log"


@pytest.fixture
def authority(tmp_path: Path) -> Path:
    """A file standing for the CA: the settings only check that it exists."""
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return path


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def sasl_ssl_file(tmp_path: Path, authority: Path) -> Path:
    return write(
        tmp_path,
        "# the cluster's SASL_SSL listener\n"
        "\n"
        "bootstrap.servers = broker-1:9094,broker-2:9094\n"
        "security.protocol=sasl_ssl\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "! a Java-style comment\n"
        "sasl.username=alice\n"
        f"sasl.password={SECRET}\n"
        f"ssl.ca.location={authority}\n",
    )


def test_a_properties_file_gives_brokers_and_security(tmp_path: Path, authority: Path) -> None:
    config = load_client_config(config_file=sasl_ssl_file(tmp_path, authority), environ={})
    assert config.librdkafka() == {
        "bootstrap.servers": "broker-1:9094,broker-2:9094",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": SECRET,
        "ssl.ca.location": str(authority),
        "logger": KAFKA_LOG,
    }
    assert config.sources["sasl.username"] == f"{tmp_path / 'client.properties'}:7"


def test_nothing_configured_is_plaintext_to_the_default_broker() -> None:
    config = load_client_config(environ={})
    assert config.librdkafka() == {"bootstrap.servers": BOOTSTRAP_DEFAULT, "logger": KAFKA_LOG}
    assert config.security_protocol == "PLAINTEXT"
    assert kafka_settings(ClientConfig("h:1")) == {"bootstrap.servers": "h:1", "logger": KAFKA_LOG}


def test_the_environment_overrides_the_file_and_arguments_override_both(
    tmp_path: Path, authority: Path
) -> None:
    environ = {
        "EVENTPLATFORM_CLIENT_CONFIG": str(sasl_ssl_file(tmp_path, authority)),
        "EVENTPLATFORM_KAFKA_SASL_USERNAME": "bob",
        "EVENTPLATFORM_KAFKA_SASL_MECHANISM": "scram-sha-256",
        "EVENTPLATFORM_BOOTSTRAP": "from-env:9094",
    }
    config = load_client_config(environ=environ, settings={"sasl.mechanism": "PLAIN"})
    assert config.settings["sasl.username"] == "bob"
    assert config.sources["sasl.username"] == "$EVENTPLATFORM_KAFKA_SASL_USERNAME"
    assert config.settings["sasl.mechanism"] == "PLAIN"
    assert config.bootstrap == "from-env:9094"
    assert load_client_config(bootstrap="given:1", environ=environ).bootstrap == "given:1"


def test_the_flag_names_the_file_before_the_variable(tmp_path: Path, authority: Path) -> None:
    other = tmp_path / "other.properties"
    other.write_text("security.protocol=PLAINTEXT\n")
    environ = {"EVENTPLATFORM_CLIENT_CONFIG": str(other)}
    config = load_client_config(config_file=sasl_ssl_file(tmp_path, authority), environ=environ)
    assert config.security_protocol == "SASL_SSL"


def test_the_environment_alone_can_secure_a_client(authority: Path) -> None:
    environ = {
        environment_name("security.protocol"): "SSL",
        environment_name("ssl.ca.location"): str(authority),
    }
    assert environment_name("ssl.ca.location") == "EVENTPLATFORM_KAFKA_SSL_CA_LOCATION"
    config = load_client_config(bootstrap="b:9093", environ=environ)
    assert config.librdkafka() == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SSL",
        "ssl.ca.location": str(authority),
        "logger": KAFKA_LOG,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sasl.jaas.config=x\n", "'sasl.jaas.config' (from {file}:1) is not a client setting"),
        ("security.protocol=TLS\n", "security.protocol (from {file}:1) is 'TLS'; expected one"),
        ("# fine\nsecurity.protocol\n", "{file}:2: expected key=value"),
        ("client.id=a\nclient.id=b\n", "{file}:2: client.id is set already at {file}:1"),
        ("bootstrap.servers=nohost\n", "bootstrap.servers (from {file}:1): 'nohost' is not"),
        ("security.protocol=SSL\nssl.ca.location=/no/such.pem\n", "no file at /no/such.pem"),
        (
            "security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n",
            "sasl.mechanism (from {file}:2) is 'GSSAPI'; expected one of PLAIN, SCRAM-SHA-256",
        ),
        (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=a\n",
            "security.protocol SASL_PLAINTEXT (from {file}:1) needs sasl.password "
            "(or $EVENTPLATFORM_KAFKA_SASL_PASSWORD)",
        ),
        (
            "sasl.username=alice\n",
            "sasl.username (from {file}:1) is set, but security.protocol is PLAINTEXT "
            "(from default)",
        ),
        (
            "security.protocol=SASL_PLAINTEXT\nssl.endpoint.identification.algorithm=none\n",
            "ssl.endpoint.identification.algorithm (from {file}:2) is set, but "
            "security.protocol is SASL_PLAINTEXT",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_the_key_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ClientConfigError) as refused:
        load_client_config(config_file=path, environ={})
    assert message.format(file=path) in str(refused.value)


def test_a_certificate_needs_its_key(tmp_path: Path, authority: Path) -> None:
    path = write(
        tmp_path,
        f"security.protocol=SSL\nssl.certificate.location={authority}\n",
    )
    with pytest.raises(ClientConfigError, match=r"needs ssl.key.location as well"):
        load_client_config(config_file=path, environ={})


def test_an_unknown_variable_is_refused_by_name() -> None:
    environ = {"EVENTPLATFORM_KAFKA_SASL_USER": "alice"}
    with pytest.raises(ClientConfigError, match=r"\$EVENTPLATFORM_KAFKA_SASL_USER names no"):
        load_client_config(environ=environ)


def test_a_missing_file_is_refused_naming_its_source(tmp_path: Path) -> None:
    environ = {"EVENTPLATFORM_CLIENT_CONFIG": str(tmp_path / "absent.properties")}
    with pytest.raises(ClientConfigError, match=r"absent.properties \(from \$EVENTPLATFORM_CLIENT"):
        load_client_config(environ=environ)


def test_an_unknown_argument_is_refused() -> None:
    with pytest.raises(ClientConfigError, match=r"'acks' \(from argument\)"):
        load_client_config(settings={"acks": "all"}, environ={})


def test_secrets_never_show(tmp_path: Path, authority: Path) -> None:
    config = load_client_config(config_file=sasl_ssl_file(tmp_path, authority), environ={})
    for shown in (repr(config), str(config), f"{config}", str(config.masked())):
        assert SECRET not in shown
        assert "sasl.username" in shown
    no_equals = write(tmp_path, f"security.protocol=SASL_SSL\nsasl.password {SECRET}\n")
    with pytest.raises(ClientConfigError) as refused:
        load_client_config(config_file=no_equals, environ={})
    assert SECRET not in str(refused.value)


def test_spark_options_carry_the_security_as_kafka_settings(
    tmp_path: Path, authority: Path
) -> None:
    config = load_client_config(config_file=sasl_ssl_file(tmp_path, authority), environ={})
    options = config.spark_options()
    assert options["bootstrap.servers"] == "broker-1:9094,broker-2:9094"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.username"] == "alice"


def test_the_command_line_refuses_a_bad_config_before_connecting(tmp_path: Path) -> None:
    path = write(tmp_path, "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    result = CliRunner().invoke(main, ["topics", "list", "--client-config", str(path)])
    assert result.exit_code == 2
    assert "needs sasl.username" in result.stderr
    result = CliRunner().invoke(
        main, ["groups", "list"], env={"EVENTPLATFORM_KAFKA_SASL_MECHANISMS_X": "PLAIN"}
    )
    assert result.exit_code == 2
    assert "$EVENTPLATFORM_KAFKA_SASL_MECHANISMS_X names no client setting" in result.stderr


def test_the_tools_take_the_brokers_from_the_environment(tmp_path: Path) -> None:
    """Nothing listens on port 1: the error names the brokers the variable gave."""
    result = CliRunner().invoke(
        main,
        ["topics", "list", "--request-timeout", "1"],
        env={"EVENTPLATFORM_BOOTSTRAP": "127.0.0.1:1"},
    )
    assert result.exit_code == 1
    assert "127.0.0.1:1" in result.stderr


def _librdkafka_record(client: str, text: str) -> logging.LogRecord:
    return logging.LogRecord(
        "eventplatform.kafka", logging.ERROR, "", 0, "%s [%s] %s", ("FAIL", client, text), None
    )


def test_a_repeated_librdkafka_line_is_logged_once_per_quiet_period() -> None:
    now = [0.0]
    repeats = RepeatsFilter(quiet_s=300, clock=lambda: now[0])
    refused = "[thrd:h:1/bootstrap]: h:1/bootstrap: Connect to ipv4#h:1 failed: Connection refused"
    assert repeats.filter(
        _librdkafka_record("rdkafka#consumer-1", refused + " (after 0ms in state CONNECT)")
    )
    now[0] = 10.0
    assert not repeats.filter(
        _librdkafka_record("rdkafka#consumer-2", refused + " (after 3ms in state CONNECT)")
    )
    assert repeats.filter(_librdkafka_record("rdkafka#consumer-1", "[thrd:main]: other trouble"))
    now[0] = 301.0
    assert repeats.filter(_librdkafka_record("rdkafka#consumer-1", refused))


def test_every_client_logs_librdkafka_at_warning_and_above_through_one_logger() -> None:
    assert kafka_settings("h:1")["logger"] is KAFKA_LOG
    assert KAFKA_LOG.getEffectiveLevel() == logging.WARNING
    assert any(isinstance(f, RepeatsFilter) for f in KAFKA_LOG.filters)
