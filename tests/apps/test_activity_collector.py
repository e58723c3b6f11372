"""The beacon collector over real HTTP, into a real broker: 202 with positions for good
beacons, 400 naming every bad one, and nothing lost under concurrent load."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import activity_dataset as data
import orjson
import pytest
import trio
from confluent_kafka import Consumer, TopicPartition

from eventplatform.apps.activity_tracking.collector import BEACONS_PATH, Collector
from eventplatform.apps.activity_tracking.events import TOPIC
from eventplatform.events import EventProducer
from eventplatform.testing import BrokerProcess, running_broker

START_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 30.0
CLIENTS = 8
REQUESTS_PER_CLIENT = 25
BEACONS_PER_REQUEST = 20
SHOP_KEY = "shop-write-key"
SHOP_ORIGIN = "https://shop.example"
BACKEND_KEY = "backend-write-key"
BACKEND_SECRET = b"backend-signing-secret"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker"), data.BROKER_OVERRIDES) as process:
        yield process


@pytest.fixture(scope="module")
def collector(broker: BrokerProcess) -> Iterator[tuple[Collector, int]]:
    """A collector serving on a free port, in a trio loop of its own thread."""
    with serving(broker) as found:
        yield found


@pytest.fixture(scope="module")
def guarded(broker: BrokerProcess) -> Iterator[tuple[Collector, int]]:
    """A collector with a site's write key and an allowed origin."""
    with serving(
        broker,
        write_keys={SHOP_KEY: "shop", BACKEND_KEY: "backend"},
        signing_secrets={"backend": BACKEND_SECRET},
        allowed_origins=[SHOP_ORIGIN],
    ) as found:
        yield found


@contextmanager
def serving(broker: BrokerProcess, **options: Any) -> Iterator[tuple[Collector, int]]:
    started = threading.Event()
    found: dict[str, Any] = {}

    async def run() -> None:
        with EventProducer(broker.bootstrap) as producer:
            found["collector"] = Collector(producer, max_body_bytes=64 * 1024, **options)
            async with trio.open_nursery() as nursery:
                found["port"] = await nursery.start(found["collector"].serve, "127.0.0.1", 0)
                found["cancel"] = nursery.cancel_scope
                found["token"] = trio.lowlevel.current_trio_token()
                started.set()

    thread = threading.Thread(target=trio.run, args=(run,), daemon=True)
    thread.start()
    assert started.wait(START_TIMEOUT_S), "the collector did not start"
    yield found["collector"], found["port"]
    trio.from_thread.run_sync(found["cancel"].cancel, trio_token=found["token"])
    thread.join(START_TIMEOUT_S)


def post(port: int, body: bytes, path: str = BEACONS_PATH, method: str = "POST") -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
    try:
        connection.request(method, path, body=body, headers={"content-type": "application/json"})
        response = connection.getresponse()
        return response.status, orjson.loads(response.read())
    finally:
        connection.close()


def beacon(n: int, **changes: Any) -> dict[str, Any]:
    return {
        "type": "page_viewed",
        "url": f"https://shop.example/page-{n % 7}",
        "session_id": f"s{n % 11}",
        "anonymous_id": f"a{n % 5}",
        "at": "2026-11-20T10:00:00Z",
        **changes,
    }


def values_at(bootstrap: str, positions: list[dict[str, Any]]) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "collector-test"})
    values = []
    try:
        for position in positions:
            consumer.assign([TopicPartition(TOPIC, position["partition"], position["offset"])])
            message = consumer.poll(HTTP_TIMEOUT_S)
            assert message is not None and message.error() is None
            assert message.offset() == position["offset"]
            values.append(message.value())
    finally:
        consumer.close()
    return values


def test_a_beacon_and_a_batch_are_appended(
    broker: BrokerProcess, collector: tuple[Any, int]
) -> None:
    _, port = collector
    status, one = post(port, orjson.dumps(beacon(1, title="Home")))
    assert status == 202 and one["accepted"] == 1
    batch = [beacon(n) for n in range(5)] + [
        {
            "type": "searched",
            "url": "https://shop.example/docs",
            "session_id": "s1",
            "user_id": "u1",
            "query": "api",
            "results": 0,
        },
    ]
    status, many = post(port, orjson.dumps(batch))
    assert status == 202 and many["accepted"] == 6
    values = values_at(broker.bootstrap, one["positions"] + many["positions"])
    envelopes = [orjson.loads(value) for value in values]
    assert [e["type"] for e in envelopes] == ["activity.page_viewed"] * 6 + ["activity.searched"]
    assert envelopes[0]["data"]["title"] == "Home"
    assert envelopes[-1]["data"]["query"] == "api"
    assert envelopes[-1]["data"]["at"]  # the collector stamped the time it got it


@pytest.mark.parametrize(
    ("body", "wanted"),
    [
        (b"{not json", "the body is not JSON"),
        (b"[]", "the batch is empty"),
        (b"[1]", "a beacon is a JSON object"),
        (orjson.dumps({"type": "teleported", "url": "x"}), "type must be one of"),
        (orjson.dumps(beacon(1, anonymous_id=None)), "give user_id (signed in) or anonymous_id"),
        (orjson.dumps(beacon(1, url="")), "url: String should have at least 1 character"),
        (orjson.dumps(beacon(1, at="yesterday")), "at: "),
    ],
)
def test_bad_beacons_get_400_and_nothing_is_appended(
    collector: tuple[Collector, int], body: bytes, wanted: str
) -> None:
    instance, port = collector
    before = instance.stats.accepted
    status, answer = post(port, body)
    assert status == 400
    assert wanted in orjson.dumps(answer).decode()
    assert instance.stats.accepted == before


def test_one_bad_beacon_in_a_batch_names_its_index(collector: tuple[Collector, int]) -> None:
    _, port = collector
    status, answer = post(port, orjson.dumps([beacon(1), beacon(2, session_id=""), beacon(3)]))
    assert status == 400
    assert [item["index"] for item in answer["beacons"]] == [1]
    assert "session_id" in answer["beacons"][0]["errors"][0]


def test_other_requests_get_their_status(collector: tuple[Collector, int]) -> None:
    _, port = collector
    assert post(port, b"", "/health", "GET")[0] == 200
    assert post(port, b"{}", "/nowhere")[0] == 404
    assert post(port, b"", BEACONS_PATH, "GET")[0] == 405
    assert post(port, b"[" + b"0," * 40_000 + b"0]")[0] == 413


def test_concurrent_clients_lose_nothing(broker: BrokerProcess, collector: tuple[Any, int]) -> None:
    _, port = collector

    def client(number: int) -> list[dict[str, Any]]:
        positions = []
        for request in range(REQUESTS_PER_CLIENT):
            beacons = [
                beacon(number * 10_000 + request * 100 + n) for n in range(BEACONS_PER_REQUEST)
            ]
            status, answer = post(port, orjson.dumps(beacons))
            assert status == 202, answer
            positions += answer["positions"]
        return positions

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(client, range(CLIENTS)))
    positions = [p for result in results for p in result]
    assert len(positions) == CLIENTS * REQUESTS_PER_CLIENT * BEACONS_PER_REQUEST
    assert len({(p["partition"], p["offset"]) for p in positions}) == len(positions)


def send(
    port: int, method: str, target: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
    try:
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_a_collector_with_write_keys_refuses_beacons_without_a_known_one(
    broker: BrokerProcess, guarded: tuple[Collector, int]
) -> None:
    collector, port = guarded
    body = orjson.dumps(beacon(3))
    json = {"content-type": "application/json"}
    before = collector.stats.accepted
    missing = send(port, "POST", BEACONS_PATH, json, body)
    unknown = send(port, "POST", BEACONS_PATH, {**json, "x-write-key": "guess"}, body)
    unknown_query = send(port, "POST", f"{BEACONS_PATH}?key=guess", json, body)
    assert missing[0] == 401 and b"X-Write-Key" in missing[2]
    assert unknown[0] == 403 and b"unknown write key" in unknown[2]
    assert unknown_query[0] == 403
    assert collector.stats.accepted == before and collector.stats.refused >= 3

    in_header = send(port, "POST", BEACONS_PATH, {**json, "x-write-key": SHOP_KEY}, body)
    in_query = send(port, "POST", f"{BEACONS_PATH}?key={SHOP_KEY}", json, body)
    assert (in_header[0], in_query[0]) == (202, 202)
    positions = [*orjson.loads(in_header[2])["positions"], *orjson.loads(in_query[2])["positions"]]
    assert len(values_at(broker.bootstrap, positions)) == 2


def test_a_collector_with_allowed_origins_refuses_other_browsers(
    guarded: tuple[Collector, int],
) -> None:
    _, port = guarded
    body = orjson.dumps(beacon(4))
    keyed = {"content-type": "application/json", "x-write-key": SHOP_KEY}
    other = send(port, "POST", BEACONS_PATH, {**keyed, "origin": "https://evil.example"}, body)
    assert other[0] == 403 and b"https://evil.example is not allowed" in other[2]
    assert "access-control-allow-origin" not in other[1]

    shop = send(port, "POST", BEACONS_PATH, {**keyed, "origin": SHOP_ORIGIN}, body)
    assert shop[0] == 202
    assert shop[1]["access-control-allow-origin"] == SHOP_ORIGIN

    asking = {"origin": SHOP_ORIGIN, "access-control-request-method": "POST"}
    preflight = send(port, "OPTIONS", BEACONS_PATH, asking)
    assert preflight[0] == 204 and preflight[2] == b""
    assert preflight[1]["access-control-allow-origin"] == SHOP_ORIGIN
    assert "x-write-key" in preflight[1]["access-control-allow-headers"]
    refused = send(port, "OPTIONS", BEACONS_PATH, {**asking, "origin": "https://evil.example"})
    assert refused[0] == 403


def test_a_signing_site_s_beacons_must_be_signed(
    broker: BrokerProcess, guarded: tuple[Collector, int]
) -> None:
    collector, port = guarded
    body = orjson.dumps([beacon(5), beacon(6)])
    keyed = {"content-type": "application/json", "x-write-key": BACKEND_KEY}
    signature = "sha256=" + hmac.new(BACKEND_SECRET, body, hashlib.sha256).hexdigest()
    other = "sha256=" + hmac.new(b"not the secret", body, hashlib.sha256).hexdigest()
    before = collector.stats.accepted

    unsigned = send(port, "POST", BEACONS_PATH, keyed, body)
    forged = send(port, "POST", BEACONS_PATH, {**keyed, "x-signature": other}, body)
    tampered = send(
        port, "POST", BEACONS_PATH, {**keyed, "x-signature": signature}, body.replace(b"s5", b"s9")
    )
    assert unsigned[0] == 401 and b"X-Signature" in unsigned[2]
    assert forged[0] == 403 and tampered[0] == 403
    assert collector.stats.accepted == before

    signed = send(port, "POST", BEACONS_PATH, {**keyed, "x-signature": signature}, body)
    assert signed[0] == 202
    assert len(values_at(broker.bootstrap, orjson.loads(signed[2])["positions"])) == 2


def test_the_collect_command_wants_write_keys_or_open() -> None:
    from click.testing import CliRunner

    from eventplatform.cli import main

    result = CliRunner().invoke(main, ["apps", "activity", "collect", "--listen", "127.0.0.1:0"])
    assert result.exit_code == 2
    assert "--write-key SITE=KEY" in result.output and "--open" in result.output
    malformed = ["apps", "activity", "collect", "--write-key", "no-equals-sign"]
    result = CliRunner().invoke(main, malformed)
    assert result.exit_code == 2 and "is not SITE=KEY" in result.output
    keyless = ["apps", "activity", "collect", "--write-key", "a=k", "--signing-secret", "b=s"]
    result = CliRunner().invoke(main, keyless)
    assert result.exit_code == 2 and "site without a write key: b" in result.output
