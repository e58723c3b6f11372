"""Listener settings as Kafka names them, and the contradictions refused before a start."""

from __future__ import annotations

import pytest

from eventplatform.log.broker.config_resources import describe_broker
from eventplatform.log.config import BrokerConfig, BrokerConfigError
from eventplatform.log.security.listeners import Endpoint, SecurityProtocol


def test_listeners_parse_with_their_protocols_and_advertised_addresses() -> None:
    config = BrokerConfig.load(
        overrides=[
            "listeners=INTERNAL://127.0.0.1:9092,EXTERNAL://:9093",
            "advertised.listeners=EXTERNAL://kafka.example.com:443",
            "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
            "inter.broker.listener.name=INTERNAL",
            "ssl.keystore.location=/dev/null",
        ]
    )
    assert config.bound_listeners == (
        Endpoint("INTERNAL", "127.0.0.1", 9092),
        Endpoint("EXTERNAL", "", 9093),
    )
    assert config.security_protocol("EXTERNAL") is SecurityProtocol.SASL_SSL
    assert config.advertised_endpoint("EXTERNAL", 9093) == ("kafka.example.com", 443)
    assert config.advertised_endpoint("INTERNAL", 9092) == ("127.0.0.1", 9092)
    assert config.inter_broker_listener == "INTERNAL"
    properties = config.to_properties()
    assert properties["listeners"] == "INTERNAL://127.0.0.1:9092,EXTERNAL://:9093"
    assert properties["listener.security.protocol.map"] == "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL"


def test_without_listeners_the_broker_binds_one_plaintext_listener() -> None:
    config = BrokerConfig.load(listen_host="127.0.0.2", listen_port=19092)
    assert config.bound_listeners == (Endpoint("PLAINTEXT", "127.0.0.2", 19092),)
    assert config.inter_broker_listener == "PLAINTEXT"


CLUSTER = ["process.roles=broker,controller", "controller.quorum.voters=1@127.0.0.1:9093"]
MAP = "listener.security.protocol.map=INTERNAL:PLAINTEXT,OUTSIDE:SASL_SSL"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["listeners=PLAINTEXT:9092"], "NAME://host:port"),
        (["listeners=A://h:1,A://h:2"], "appears twice"),
        (["listeners=SECRET://h:1"], "no entry in listener.security.protocol.map"),
        (["listener.security.protocol.map=X:KERBEROS"], "not a security protocol"),
        (["listeners=PLAINTEXT://h:1", "advertised.listeners=SSL://h:2"], "not in listeners"),
        (["listeners=PLAINTEXT://h:1", "inter.broker.listener.name=SSL"], "not in listeners"),
        (["listeners=PLAINTEXT://h:1,SSL://h:1"], "same port"),
        (["listeners=SSL://h:1"], "needs ssl.keystore.location"),
        (["ssl.client.auth=required"], "needs ssl.truststore.location"),
        (["ssl.client.auth=sometimes"], "expected one of none, requested, required"),
        (["ssl.keystore.type=JKS"], "only PEM"),
        (["sasl.enabled.mechanisms=GSSAPI"], "subset of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
        (
            [*CLUSTER, "listeners=SASL_PLAINTEXT://h:1"],
            "make it SSL",
        ),
        (
            [*CLUSTER, "listeners=INTERNAL://h:1,OUTSIDE://h:2", MAP, "ssl.keystore.location=k"],
            "needs an SSL inter-broker listener",
        ),
        (
            [*CLUSTER, "listeners=INTERNAL://h:1", MAP, "authorizer.class.name=StandardAuthorizer"],
            "needs an SSL inter-broker listener",
        ),
        (
            [
                *CLUSTER,
                "listeners=OUTSIDE://h:2,INTERNAL://h:1",
                MAP.replace("INTERNAL:PLAINTEXT", "INTERNAL:SSL"),
                "inter.broker.listener.name=INTERNAL",
                "ssl.keystore.location=k",
            ],
            "needs ssl.truststore.location",
        ),
        (
            [
                *CLUSTER,
                "listeners=INTERNAL://h:1",
                MAP.replace("INTERNAL:PLAINTEXT", "INTERNAL:SSL") + ",CONTROLLER:PLAINTEXT",
                "controller.listener.names=CONTROLLER",
                "ssl.keystore.location=k",
                "ssl.truststore.location=t",
            ],
            "must speak what the inter-broker listener does",
        ),
    ],
)
def test_contradictory_listener_settings_are_refused(overrides: list[str], message: str) -> None:
    with pytest.raises(BrokerConfigError, match=message):
        BrokerConfig.load(overrides=overrides)


def test_describe_configs_never_shows_the_key_password() -> None:
    config = BrokerConfig.load(overrides=["ssl.key.password=hunter2"])
    (entry,) = describe_broker(config, ["ssl.key.password"], synonyms=True)
    assert entry["value"] is None
    assert entry["is_sensitive"] is True
    assert all(synonym["value"] is None for synonym in entry["synonyms"])


def test_a_cluster_with_an_ssl_inter_broker_listener_secures_its_own_traffic() -> None:
    config = BrokerConfig.load(
        overrides=[
            *CLUSTER,
            "listeners=INTERNAL://127.0.0.1:1,OUTSIDE://127.0.0.1:2",
            "listener.security.protocol.map=INTERNAL:SSL,OUTSIDE:SASL_SSL,CONTROLLER:SSL",
            "inter.broker.listener.name=INTERNAL",
            "controller.listener.names=CONTROLLER",
            "ssl.keystore.location=k",
            "ssl.truststore.location=t",
            "authorizer.class.name=StandardAuthorizer",
        ]
    )
    assert config.cluster_tls
    assert not BrokerConfig.load(overrides=CLUSTER).cluster_tls
