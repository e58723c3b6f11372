"""The schema registry: its pure catalog, and the registry over a real broker's topic."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import orjson
import pytest

from eventplatform.events import Event, IncompatibleSchemaError, RegistryError
from eventplatform.events.compatibility import Compatibility
from eventplatform.events.registry import (
    SCHEMAS_TOPIC,
    RegisteredSchema,
    SchemaCatalog,
    SchemaRegistry,
    config_key,
    config_record,
    fingerprint,
    schema_key,
    schema_record,
)

if TYPE_CHECKING:
    from conftest import Log

    from eventplatform.testing import BrokerProcess

REGISTERED_AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)
TIMEOUT_S = 10.0


class PageViewedV1(Event, type="activity.page_viewed", version=1, key="user_id"):
    user_id: str
    url: str


class PageViewedV2(Event, type="activity.page_viewed", version=2, key="user_id"):
    """Adds an optional referrer: compatible in every mode."""

    user_id: str
    url: str
    referrer: str | None = None


class PageViewedV2Other(Event, type="activity.page_viewed", version=2, key="user_id"):
    """Another schema under v2: the duration changes what v2 means."""

    user_id: str
    url: str
    referrer: str | None = None
    duration_ms: int = 0


class PageViewedV3Required(Event, type="activity.page_viewed", version=3, key="user_id"):
    """Adds a required referrer: breaks BACKWARD."""

    user_id: str
    url: str
    referrer: str


class PageViewedV3WithoutUrl(Event, type="activity.page_viewed", version=3, key="user_id"):
    """Drops the required url: breaks FORWARD."""

    user_id: str
    referrer: str | None = None


class PageViewedV3Documented(Event, type="activity.page_viewed", version=3, key="user_id"):
    """A page view. Same fields as v2, only documented."""

    user_id: str
    url: str
    referrer: str | None = None


class SignedUp(Event, type="accounts.signed_up", key="account_id"):
    account_id: str


# ------------------------------------------------------------------ the pure catalog


def registered(event_class: type[Event]) -> RegisteredSchema:
    schema = event_class.model_json_schema()
    return RegisteredSchema(
        event_class.event_type,
        event_class.event_version,
        schema,
        fingerprint(schema),
        REGISTERED_AT,
    )


def catalog_of(*records: tuple[bytes, bytes | None]) -> SchemaCatalog:
    catalog = SchemaCatalog()
    for offset, (key, value) in enumerate(records):
        catalog.apply(offset, key, value)
    return catalog


def test_the_catalog_applies_schema_and_config_records() -> None:
    catalog = catalog_of(
        schema_record(registered(PageViewedV1)),
        schema_record(registered(PageViewedV2)),
        schema_record(registered(SignedUp)),
        config_record("activity.page_viewed", Compatibility.FULL, updated_at=REGISTERED_AT),
    )
    assert catalog.types() == ["accounts.signed_up", "activity.page_viewed"]
    assert catalog.versions("activity.page_viewed") == [1, 2]
    entry = catalog.get("activity.page_viewed", 2)
    assert entry == registered(PageViewedV2)
    assert catalog.compatibility("activity.page_viewed") is Compatibility.FULL
    assert catalog.compatibility("accounts.signed_up") is Compatibility.BACKWARD
    assert catalog.next_offset == 4


def test_tombstones_remove_versions_and_reset_the_mode() -> None:
    catalog = catalog_of(
        schema_record(registered(PageViewedV1)),
        config_record("activity.page_viewed", Compatibility.NONE, updated_at=REGISTERED_AT),
        (schema_key("activity.page_viewed", 1), None),
        (config_key("activity.page_viewed"), None),
    )
    assert catalog.versions("activity.page_viewed") == []
    assert catalog.types() == []
    assert catalog.compatibility("activity.page_viewed") is Compatibility.BACKWARD


def test_malformed_records_are_skipped_and_listed() -> None:
    mismatched = orjson.loads(schema_record(registered(PageViewedV1))[1])
    catalog = catalog_of(
        (schema_key("activity.page_viewed", 1), b"not json"),
        (schema_key("activity.page_viewed", 2), orjson.dumps(mismatched)),
        (config_key("activity.page_viewed"), b'{"type": "activity.page_viewed"}'),
        (b"future-kind:activity.page_viewed", b"whatever"),
        schema_record(registered(SignedUp)),
    )
    assert [offset for offset, _ in catalog.skipped] == [0, 1, 2]
    assert catalog.types() == ["accounts.signed_up"]
    assert catalog.next_offset == 5


def test_the_catalog_refuses_to_go_back_in_the_log() -> None:
    catalog = catalog_of(schema_record(registered(PageViewedV1)))
    with pytest.raises(ValueError, match="behind"):
        catalog.apply(0, *schema_record(registered(SignedUp)))


def test_admit_is_idempotent_and_checks_against_the_latest_lower_version() -> None:
    catalog = catalog_of(schema_record(registered(PageViewedV1)))
    schema_v1 = PageViewedV1.model_json_schema()
    assert catalog.admit("activity.page_viewed", 1, schema_v1, registered_at=REGISTERED_AT) is None
    entry = catalog.admit(
        "activity.page_viewed", 2, PageViewedV2.model_json_schema(), registered_at=REGISTERED_AT
    )
    assert entry == registered(PageViewedV2)
    with pytest.raises(IncompatibleSchemaError) as raised:
        catalog.admit(
            "activity.page_viewed",
            3,
            PageViewedV3Required.model_json_schema(),
            registered_at=REGISTERED_AT,
        )
    assert raised.value.field == "referrer"


def test_fingerprints_ignore_documentation_only() -> None:
    documented = PageViewedV3Documented.model_json_schema()
    assert fingerprint(documented) == fingerprint(PageViewedV2.model_json_schema())
    assert fingerprint(documented) != fingerprint(PageViewedV2Other.model_json_schema())


# ------------------------------------------------------------------ over a real broker


@pytest.fixture
def registry(broker: BrokerProcess, registry_topic: str) -> Iterator[SchemaRegistry]:
    with SchemaRegistry(broker.bootstrap, topic=registry_topic, timeout_s=TIMEOUT_S) as opened:
        yield opened


def test_register_stores_the_schema_under_its_version(registry: SchemaRegistry, log: Log) -> None:
    assert registry.register(PageViewedV1) == 1
    assert registry.register(PageViewedV2) == 2
    assert registry.versions("activity.page_viewed") == [1, 2]
    assert registry.versions(PageViewedV1) == [1, 2]
    assert registry.schema("activity.page_viewed", 1) == PageViewedV1.model_json_schema()
    assert registry.types() == ["activity.page_viewed"]
    records = log.records(registry.topic)
    assert [record.key() for record in records] == [
        b"schema:activity.page_viewed:1",
        b"schema:activity.page_viewed:2",
    ]
    value = orjson.loads(records[1].value() or b"")
    assert value["type"] == "activity.page_viewed"
    assert value["version"] == 2
    assert value["fingerprint"] == fingerprint(PageViewedV2.model_json_schema())
    assert datetime.fromisoformat(value["registered_at"]).tzinfo is not None


def test_registering_again_writes_nothing(
    broker: BrokerProcess, registry: SchemaRegistry, log: Log
) -> None:
    registry.register(PageViewedV1)
    registry.register(PageViewedV1)
    with SchemaRegistry(broker.bootstrap, topic=registry.topic, timeout_s=TIMEOUT_S) as fresh:
        assert fresh.register(PageViewedV1) == 1
        fresh.ensure_registered(PageViewedV1)
    assert log.end_offsets(registry.topic) == {0: 1}


def test_an_incompatible_schema_is_rejected_with_the_field_named(
    registry: SchemaRegistry, log: Log
) -> None:
    registry.register(PageViewedV1)
    registry.register(PageViewedV2)
    with pytest.raises(IncompatibleSchemaError) as raised:
        registry.register(PageViewedV3Required)
    assert raised.value.field == "referrer"
    assert raised.value.event_type == "activity.page_viewed"
    assert str(raised.value).startswith(
        "activity.page_viewed v3 is not BACKWARD compatible with v2: "
        "field 'referrer' is required and has no default"
    )
    assert registry.versions("activity.page_viewed") == [1, 2]
    assert log.end_offsets(registry.topic) == {0: 2}


def test_ensure_registered_raises_the_same_rejection(registry: SchemaRegistry) -> None:
    registry.register(PageViewedV2)
    with pytest.raises(IncompatibleSchemaError, match="'referrer'"):
        registry.ensure_registered(PageViewedV3Required)


def test_a_registered_version_cannot_change_its_schema(registry: SchemaRegistry) -> None:
    registry.register(PageViewedV2)
    with pytest.raises(IncompatibleSchemaError, match="already registered") as raised:
        registry.register(PageViewedV2Other)
    assert raised.value.field == "duration_ms"
    assert "'duration_ms'" in str(raised.value)


def test_a_docstring_change_is_the_same_schema(registry: SchemaRegistry) -> None:
    registry.register(PageViewedV2)
    assert registry.register(PageViewedV3Documented) == 3


def test_versions_must_increase(registry: SchemaRegistry) -> None:
    registry.register(PageViewedV2)
    with pytest.raises(IncompatibleSchemaError, match="versions must increase"):
        registry.register(PageViewedV1)


def test_the_compatibility_mode_is_kept_per_type_and_read_by_a_fresh_registry(
    broker: BrokerProcess, registry: SchemaRegistry
) -> None:
    assert registry.compatibility("activity.page_viewed") is Compatibility.BACKWARD
    registry.set_compatibility("activity.page_viewed", Compatibility.FORWARD)
    registry.set_compatibility(SignedUp, "NONE")
    with SchemaRegistry(broker.bootstrap, topic=registry.topic, timeout_s=TIMEOUT_S) as fresh:
        assert fresh.compatibility("activity.page_viewed") is Compatibility.FORWARD
        assert fresh.compatibility(SignedUp) is Compatibility.NONE
        assert fresh.compatibility("shop.order_placed") is Compatibility.BACKWARD


def test_forward_mode_allows_a_new_required_field_but_not_a_removed_one(
    registry: SchemaRegistry,
) -> None:
    registry.set_compatibility("activity.page_viewed", Compatibility.FORWARD)
    registry.register(PageViewedV2)
    with pytest.raises(IncompatibleSchemaError, match="FORWARD") as raised:
        registry.register(PageViewedV3WithoutUrl)
    assert raised.value.field == "url"
    assert registry.register(PageViewedV3Required) == 3


def test_full_mode_refuses_what_either_direction_refuses(registry: SchemaRegistry) -> None:
    registry.set_compatibility("activity.page_viewed", Compatibility.FULL)
    registry.register(PageViewedV2)
    with pytest.raises(IncompatibleSchemaError, match="FULL") as raised:
        registry.register(PageViewedV3Required)
    assert raised.value.field == "referrer"


def test_none_mode_accepts_any_change(registry: SchemaRegistry) -> None:
    registry.set_compatibility("activity.page_viewed", "NONE")
    registry.register(PageViewedV2)
    assert registry.register(PageViewedV3WithoutUrl) == 3


def test_a_fresh_registry_checks_against_what_others_registered(
    broker: BrokerProcess, registry: SchemaRegistry
) -> None:
    registry.register(PageViewedV2)
    with (
        SchemaRegistry(broker.bootstrap, topic=registry.topic, timeout_s=TIMEOUT_S) as other,
        pytest.raises(IncompatibleSchemaError, match="'referrer'"),
    ):
        other.register(PageViewedV3Required)


def test_queries_answer_from_the_last_refresh(
    broker: BrokerProcess, registry: SchemaRegistry
) -> None:
    assert registry.versions("activity.page_viewed") == []
    with SchemaRegistry(broker.bootstrap, topic=registry.topic, timeout_s=TIMEOUT_S) as other:
        other.register(PageViewedV1)
    assert registry.versions("activity.page_viewed") == []
    registry.refresh()
    assert registry.versions("activity.page_viewed") == [1]


def test_an_unregistered_version_is_a_key_error(registry: SchemaRegistry) -> None:
    registry.register(PageViewedV1)
    with pytest.raises(KeyError, match="v2 is not registered"):
        registry.schema("activity.page_viewed", 2)


def test_the_default_topic_is_created_compacted_with_one_partition(
    broker: BrokerProcess, log: Log
) -> None:
    with SchemaRegistry(broker.bootstrap, timeout_s=TIMEOUT_S) as registry:
        assert registry.topic == SCHEMAS_TOPIC
        registry.register(SignedUp)
        assert "accounts.signed_up" in registry.types()
    assert log.topic_config(SCHEMAS_TOPIC)["cleanup.policy"] == "compact"
    assert log.partition_count(SCHEMAS_TOPIC) == 1


def test_a_topic_that_is_not_compacted_is_refused(
    broker: BrokerProcess, log: Log, registry_topic: str
) -> None:
    log.create_topic(registry_topic, config={"cleanup.policy": "delete"})
    with (
        SchemaRegistry(broker.bootstrap, topic=registry_topic, timeout_s=TIMEOUT_S) as registry,
        pytest.raises(RegistryError, match=r"cleanup\.policy='delete'"),
    ):
        registry.register(SignedUp)


def test_an_unreachable_cluster_is_a_registry_error() -> None:
    with (
        SchemaRegistry("127.0.0.1:1", timeout_s=1.0) as registry,
        pytest.raises(RegistryError, match="_schemas"),
    ):
        registry.register(SignedUp)
