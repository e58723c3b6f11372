"""The compat runner's reading of librdkafka's suite: its catalogue, summaries, failure
reports, the expectations file and the verdict; and the kafka-topics.sh stand-in."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from eventplatform.dev_certificates import make_authority
from tests.compat.librdkafka_suite import (
    FAILED,
    PASSED,
    REASONS,
    SKIPPED,
    Expectation,
    ExpectationsError,
    Result,
    broker_tests,
    first_failures,
    load_expectations,
    parse_summary,
    runs,
    verdicts,
)
from tests.compat.ssl_files import KEY_PASSWORD, write_ssl_files

HERE = Path(__file__).resolve().parent
EXPECTATIONS = HERE / "expectations.toml"

CATALOGUE = """
struct test tests[] = {
    {.name = "<MAIN>", .flags = TEST_F_LOCAL},
    _TEST(0000_unittests, TEST_F_LOCAL, _THRES(.ucpu = 100.0)),
    _TEST(0001_multiobj, 0),
    _TEST(0004_conf, TEST_F_LOCAL),
    _TEST(0045_subscribe_update, 0, TEST_BRKVER(0, 9, 0, 0)),
    _TEST(0045_subscribe_update_topic_remove,
          0,
          TEST_BRKVER(0, 9, 0, 0),
          .scenario = "noautocreate"),
    _TEST(0045_subscribe_update_mock, TEST_F_LOCAL),
    _TEST(0066_plugins, TEST_F_LOCAL | TEST_F_KNOWN_ISSUE_WIN32, .extra = "a, b (c)"),
    _TEST(0103_transactions, 0, TEST_BRKVER(0, 11, 0, 0), .scenario = "default,ak23"),
    _TEST(0150_telemetry_mock, 0),
    _TEST(0151_purge_brokers_mock, TEST_F_LOCAL),
    _TEST(0170_share_consumer_subscription, 0, TEST_BRKVER(4, 2, 0, 0)),
    _TEST(8000_idle, TEST_F_MANUAL),
    {NULL},
};
"""


def test_the_catalogue_is_the_broker_tests_numbered_1_to_150_with_their_scenarios() -> None:
    tests = broker_tests(CATALOGUE)
    assert [(t.name, t.scenario) for t in tests] == [
        ("0001_multiobj", "default"),
        ("0045_subscribe_update", "default"),
        ("0045_subscribe_update_topic_remove", "noautocreate"),
        ("0103_transactions", "default,ak23"),
        ("0150_telemetry_mock", "default"),
    ]
    assert runs(tests) == [
        ("0001", "default"),
        ("0045", "default"),
        ("0045", "noautocreate"),
        ("0103", "default"),
        ("0150", "default"),
    ]


def test_the_summary_table_is_read_through_its_colours() -> None:
    output = (
        "TEST 20261126 (bare, scenario default) SUMMARY\n"
        "|\x1b[32m <MAIN>                                   |     PASSED |   1.002s \x1b[0m|\n"
        "|\x1b[32m 0001_multiobj                            |     PASSED |   1.100s \x1b[0m|\n"
        "|\x1b[31m 0011_produce_batch                       |     FAILED |   6.000s \x1b[0m|"
        "\x1b[31m Test assertion failed\x1b[0m\n"
        "|\x1b[36m 0097_ssl_verify                          |    SKIPPED |   0.000s \x1b[0m|"
        "\x1b[36m Test requires SSL_* env-vars\x1b[0m\n"
    )
    assert parse_summary(output) == [
        Result("0001_multiobj", PASSED, 1.1, ""),
        Result("0011_produce_batch", FAILED, 6.0, "Test assertion failed"),
        Result("0097_ssl_verify", SKIPPED, 0.0, "Test requires SSL_* env-vars"),
    ]


def test_a_runner_aborted_before_its_summary_leaves_each_tests_first_failure() -> None:
    output = (
        '\x1b[31m### Test "0045_subscribe_update_topic_remove (do_test_topic_remove:367: '
        'Topic removal testing)" failed at test.c:5257:test_kafka_topics() at Thu ###\n'
        "\x1b[0msystem(kafka-topics.sh) failed with exit status 1\n"
        '### Test "0045_subscribe_update_topic_remove" failed at later.c:1:f() at Thu ###\n'
        "second\n"
        '### Test "<MAIN>" failed at test.c:1946:test_wait_exit() at Thu ###\n'
        "4 thread(s) still active in librdkafka\n"
    )
    assert first_failures(output) == {
        "0045_subscribe_update_topic_remove": (
            "[do_test_topic_remove:367: Topic removal testing] test.c:5257:test_kafka_topics(): "
            "system(kafka-topics.sh) failed with exit status 1"
        )
    }


def test_the_verdict_flags_unlisted_failures_and_skips_and_listed_passes() -> None:
    expectations = {
        "0103_transactions": Expectation("0103_transactions", "three-brokers", ("single",), "x"),
        "0107_topic_recreate": Expectation(
            "0107_topic_recreate", "three-brokers", ("single",), "x"
        ),
    }
    results = [
        Result("0001_multiobj", PASSED, 1.0),
        Result("0011_produce_batch", FAILED, 1.0),
        Result("0092_mixed_msgver", SKIPPED, 0.0),
        Result("0103_transactions", FAILED, 1.0),
        Result("0107_topic_recreate", PASSED, 1.0),
    ]
    unexpected, stale = verdicts(results, expectations, "single")
    assert [r.name for r in unexpected] == ["0011_produce_batch", "0092_mixed_msgver"]
    assert [r.name for r in stale] == ["0107_topic_recreate"]
    unexpected, stale = verdicts(results, expectations, "cluster")
    assert [r.name for r in unexpected] == [
        "0011_produce_batch",
        "0092_mixed_msgver",
        "0103_transactions",
    ]
    assert stale == []


def test_the_expectations_file_gives_every_entry_a_known_reason_and_a_detail() -> None:
    document = tomllib.loads(EXPECTATIONS.read_text())
    names = [entry["test"] for entry in document["expected"]]
    expectations = load_expectations(EXPECTATIONS, names)
    assert set(expectations) == set(names)
    assert {e.reason for e in expectations.values()} <= set(REASONS)
    quick = document["quick"]["tests"]
    assert quick == sorted(set(quick))
    assert all(len(number) == 4 and number.isdigit() for number in quick)


def test_an_expectation_for_an_unknown_test_or_reason_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "expectations.toml"
    path.write_text('[[expected]]\ntest = "0001_multiobj"\nreason = "flaky"\ndetail = "d"\n')
    with pytest.raises(ExpectationsError, match="reason"):
        load_expectations(path, ["0001_multiobj"])
    with pytest.raises(ExpectationsError, match="not a broker test"):
        load_expectations(path, ["0002_unkpart"])


def _kafka_topics() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kafka_topics", HERE / "kafka_topics.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_kafka_topics_stand_in_translates_to_platform_topics() -> None:
    command = _kafka_topics().command
    platform = str(Path(sys.executable).with_name("platform"))
    created = command(
        [
            "--bootstrap-server",
            "h:1",
            "--create",
            "--topic",
            "t",
            "--replication-factor",
            "1",
            "--partitions",
            "2",
            "--config",
            "cleanup.policy=compact",
            "--config",
            "segment.ms=500",
        ]
    )
    assert created == [
        *(platform, "topics", "create", "t", "--bootstrap", "h:1", "--partitions", "2"),
        *("--replication-factor", "1", "--config", "cleanup.policy=compact"),
        *("--config", "segment.ms=500"),
    ]
    altered = command(["--bootstrap-server", "h:1", "--alter", "--topic", "t", "--partitions", "4"])
    assert altered == [platform, "topics", "alter", "t", "--bootstrap", "h:1", "--partitions", "4"]
    deleted = command(["--bootstrap-server", "h:1", "--delete", "--topic", "t"])
    assert deleted == [platform, "topics", "delete", "t", "--bootstrap", "h:1"]
    with pytest.raises(SystemExit):
        command(["--bootstrap-server", "h:1", "--describe", "--topic", "t"])


def test_the_ssl_files_hold_one_client_identity_in_every_form(tmp_path: Path) -> None:
    """0097 loads the client's certificate, key and CA as PEM, DER and PKCS#12; each file
    must open (with the password where it has one) and name the same certificate."""
    make_authority(tmp_path / "ca")
    files = write_ssl_files(tmp_path / "ca", tmp_path / "ssl")
    paths = {
        name: Path(value) for name, value in files.environment.items() if name != "SSL_password"
    }
    password = files.environment["SSL_password"].encode()
    assert password == KEY_PASSWORD.encode()
    pem = x509.load_pem_x509_certificate(paths["SSL_pub_pem"].read_bytes())
    assert x509.load_der_x509_certificate(paths["SSL_pub_der"].read_bytes()) == pem
    bundle = pkcs12.load_pkcs12(paths["SSL_pkcs"].read_bytes(), password)
    assert bundle.cert is not None and bundle.cert.certificate == pem
    with pytest.raises(TypeError):  # the PEM key is protected
        serialization.load_pem_private_key(paths["SSL_priv_pem"].read_bytes(), None)
    key = serialization.load_pem_private_key(paths["SSL_priv_pem"].read_bytes(), password)
    der_key = serialization.load_der_private_key(paths["SSL_priv_der"].read_bytes(), None)
    assert key.public_key() == der_key.public_key() == pem.public_key()
    ca = x509.load_der_x509_certificate(paths["SSL_ca_der"].read_bytes())
    assert pem.issuer == ca.subject
    assert files.settings["ssl.key.location"] == str(paths["SSL_priv_pem"])
