"""Hostile receipts, time claims, deeply nested values and query-string credentials: each a 4xx
problem (or a masked log line), never a 500, and nothing reaches the store.

Each hostile test prints one summary line with the number of cases tried and their outcomes (``-s``
shows them).
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from gateway.app import app_with_services
from gateway.auth.errors import Unauthenticated
from gateway.auth.keys import hash_api_key
from gateway.auth.tokens import JwtSettings, JwtVerifier
from gateway.cli import access_log_options
from gateway.delivery.pull import Puller
from gateway.delivery.receipts import RECEIPT_SLACK_MS, Receipt, ReceiptSigner, signer_for
from gateway.errors import WS_CLOSE_UNAUTHENTICATED, Problem
from gateway.observe.access_log import MASK, ScrubbingAccessLogger, scrub_query
from gateway.observe.metrics import GatewayMetrics
from gateway.publish.publisher import Publisher
from gateway.services import Services
from gateway.settings import GatewaySettings, settings_from_env
from gateway.workers import with_receipt_secret
from partitioner.cache import TopicCache
from partitioner.registry import InMemoryTopicRegistry
from partitioner.topics import TopicSettings
from storage.models import Delivery, PendingEntry, StoredEntry, ValueFormat
from tests.unit.gateway.memory_store import InMemoryStreamStore

Client = TestClient[Any, Any]
SECRET = "s" * 40
APP_KEY, PEER_KEY = "sgk_unit-receipts-app", "sgk_unit-receipts-peer"
APP, PEER = {"X-API-Key": APP_KEY}, {"X-API-Key": PEER_KEY}
AUTH = f'''
[jwt]
algorithms = ["HS256"]
hmac_secret_env = "TEST_JWT_SECRET"
leeway_s = 0

[[api_keys]]
principal = "app"
sha256 = "{hash_api_key(APP_KEY)}"

[[api_keys]]
principal = "peer"
sha256 = "{hash_api_key(PEER_KEY)}"

[[rules]]
principals = ["app", "peer", "jwt-user"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]
'''


class RecordingGroupStore:
    """A group store holding one pending entry per partition of "orders"; records every settling
    call."""

    def __init__(self) -> None:
        self.settled: list[tuple[str, ...]] = []

    async def ensure_group(self, topic: str, partition: int, group: str, start: str) -> None:
        return None

    async def read_new(self, topic: str, partition: int, group: str, consumer: str, *, count: int,
                       block_ms: int, until: str | None = None, last_read: str | None = None,
                       lost: bool = False) -> list[StoredEntry]:
        return [
            StoredEntry(partition, f"{1000 + partition}-0", b"1", ValueFormat.JSON, None, {}, 1000)
        ]

    async def expired(self, topic: str, partition: int, group: str, *, min_idle_ms: int, count: int,
                      after: str | None = None, consumer: str | None = None) -> list[PendingEntry]:
        return []

    async def claim(
        self, topic: str, partition: int, group: str, consumer: str,
        pending: Sequence[PendingEntry], *, min_idle_ms: int
    ) -> list[Delivery]:
        return []

    async def ack(self, topic: str, partition: int, group: str, offsets: Sequence[str]) -> int:
        self.settled.append(("ack", topic, str(partition), group, *offsets))
        return len(offsets)

    async def set_idle(
        self, topic: str, partition: int, group: str, consumer: str, offsets: Sequence[str],
        idle_ms: int
    ) -> None:
        self.settled.append(("set_idle", topic, str(partition), group, str(idle_ms), *offsets))


async def no_dead_letters(topic: str, group: str, delivery: Delivery, reason: str) -> None:
    raise AssertionError("no dead letters here")


@pytest.fixture
def groups() -> RecordingGroupStore:
    return RecordingGroupStore()


@pytest.fixture
def signer() -> ReceiptSigner:
    return ReceiptSigner(b"k" * 32)


@pytest.fixture
def store() -> InMemoryStreamStore:
    return InMemoryStreamStore()


async def secured_app(tmp_path: Path, groups: RecordingGroupStore, signer: ReceiptSigner,
                      store: InMemoryStreamStore) -> web.Application:
    (tmp_path / "auth.toml").write_text(AUTH)
    settings = GatewaySettings(auth_config_path=str(tmp_path / "auth.toml"), auth_frame_timeout_s=2,
                               max_value_bytes=1024 * 1024)
    metrics = GatewayMetrics.create()
    registry = InMemoryTopicRegistry()
    await registry.create(TopicSettings("orders", 2), owner="app")
    publisher = Publisher(store, store, metrics, settings.dedup_ttl_ms, 4, settings.retry_after_s)
    await publisher.__aenter__()
    services = Services(
        settings=settings, store=store, registry=registry, cache=TopicCache(), publisher=publisher,
        metrics=metrics,
        puller=Puller(groups, no_dead_letters, metrics, signer),  # type: ignore[arg-type]
    )
    app = app_with_services(services, {"TEST_JWT_SECRET": SECRET})

    async def close_publisher(_: web.Application) -> None:
        await publisher.aclose()

    app.on_cleanup.append(close_publisher)
    return app


@pytest.fixture
async def secured(
    aiohttp_client: Any, tmp_path: Path, groups: RecordingGroupStore, signer: ReceiptSigner,
    store: InMemoryStreamStore
) -> Client:
    client: Client = await aiohttp_client(await secured_app(tmp_path, groups, signer, store))
    return client


async def pulled_receipts(
    client: Client, group: str = "g1", headers: dict[str, str] = APP
) -> list[str]:
    response = await client.post(
        f"/v1/groups/{group}/pull", json={"topic": "orders", "max_messages": 2}, headers=headers
    )
    assert response.status == 200, await response.text()
    return [m["receipt"] for m in (await response.json())["messages"]]


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def problem_of(response_status: int, doc: dict[str, Any]) -> tuple[int, str]:
    assert doc["status"] == response_status
    return response_status, doc["type"].rsplit("/", 1)[-1]


# ----------------------------------------------------------------------------------------- receipts

def test_signed_receipt_opens_only_for_its_holder_until_expiry(signer: ReceiptSigner) -> None:
    receipt = Receipt("orders", 1, "5-0", 1000, issued_ms=1_000_000)
    token = signer.issue(receipt, "app", "g1")
    sealed = signer.read(token, "/receipts/0")
    assert signer.verify(sealed, "app", "g1", now_ms=1_000_000) == receipt
    assert signer.verify(sealed, "app", "g1", now_ms=receipt.expires_ms) == receipt
    for principal, group, now_ms, status in (
        ("peer", "g1", 1_000_000, 422), ("app", "g2", 1_000_000, 422),
        ("app", "g1", 1_000_000 + 1000 + RECEIPT_SLACK_MS + 1, 410)
    ):
        with pytest.raises(Problem) as refused:
            signer.verify(sealed, principal, group, now_ms)
        assert (refused.value.status, refused.value.pointer) == (status, "/receipts/0")
    with pytest.raises(Problem):
        ReceiptSigner(b"x" * 32).verify(sealed, "app", "g1", 1_000_000)


def test_a_receipt_out_of_range_is_refused_even_when_signed(signer: ReceiptSigner) -> None:
    cases = [
        Receipt("orders", 0, "1" * 21 + "-0", 1000, 1),
        Receipt("orders", 0, "1-" + "9" * 20, 1000, 1),
        Receipt("orders", 0, "18446744073709551616-0", 1000, 1),
        Receipt("orders", 0, "a-0", 1000, 1), Receipt("orders", -1, "1-0", 1000, 1),
        Receipt("orders", 4096, "1-0", 1000, 1), Receipt("orders", 0, "1-0", 99, 1),
        Receipt("orders", 0, "1-0", 3_600_001, 1), Receipt("orders", 0, "1-0", 1000, -1)
    ]
    for receipt in cases:
        with pytest.raises(Problem) as refused:
            signer.read(signer.issue(receipt, "app", "g1"), "/receipts/3")
        assert (refused.value.status, refused.value.pointer) == (422, "/receipts/3"), receipt


def test_receipt_secret_comes_from_env_and_must_be_long_enough(
        caplog: pytest.LogCaptureFixture) -> None:
    assert settings_from_env({}).receipt_secret is None
    assert settings_from_env({"STREAMGATE_RECEIPT_SECRET": "r" * 32}).receipt_secret == "r" * 32
    token = signer_for("r" * 32).issue(Receipt("t", 0, "1-0", 1000, 1), "p", "g")
    assert (
        signer_for("r" * 32).verify(signer_for("r" * 32).read(token, "/r"), "p", "g", 1) is not None
    )
    with pytest.raises(ValueError, match="at least 32 bytes"):
        signer_for("short")
    with caplog.at_level(logging.WARNING):
        signer_for(None)
    assert "STREAMGATE_RECEIPT_SECRET" in caplog.text


def test_workers_of_one_serve_share_a_receipt_secret() -> None:
    drawn = with_receipt_secret({"PATH": "/bin"})
    assert len(drawn["STREAMGATE_RECEIPT_SECRET"].encode()) >= 32
    assert drawn["PATH"] == "/bin"
    assert (
        with_receipt_secret({"STREAMGATE_RECEIPT_SECRET": "r" * 32})["STREAMGATE_RECEIPT_SECRET"]
        == "r" * 32
    )


def hostile_receipts(good: str, signer: ReceiptSigner) -> dict[str, object]:
    """Receipt handles a caller could make up, each of which must be refused with a 4xx."""
    payload, tag = good.split(".")
    data = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    # the old unsigned format: [topic, partition, offset, ack_timeout_ms]
    unsigned = b64(orjson.dumps(data[:4]))
    cases: dict[str, object] = {
        "unsigned (old format)": unsigned,
        "unsigned with 21-digit offset": b64(orjson.dumps(["orders", 0, "1" * 21 + "-0", 30_000])),
        "no tag": payload, "empty tag": payload + ".",
        "tag of another key": payload + "." + b64(b"x" * 32), "two dots": good + ".x", "empty": "",
        "number": 5, "null": None, "list": [good], "object": {"r": good}, "huge": "A" * 10_000,
        "not base64": "!!!.???", "unicode": "ré.çu",
    }
    for name, index, value in (
        ("offset 21 digits", 2, "1" * 21 + "-0"), ("offset ms > u64", 2, f"{2**64}-0"),
        ("offset seq > u64", 2, f"1-{2**64}"), ("ack timeout forged", 3, 3_600_000),
        ("ack timeout tiny", 3, 1), ("issued in the future", 4, 2**62), ("partition forged", 1, 1),
        ("partition huge", 1, 10**30), ("topic forged", 0, "x"),
        ("offset 10^400", 2, "1" * 400 + "-0")
    ):
        forged = list(data)
        forged[index] = value
        # json: big ints too
        cases[f"tampered: {name}"] = b64(json.dumps(forged).encode()) + "." + tag
    cases["tampered: expired"] = signer.issue(Receipt("orders", 0, "1000-0", 100, 1), "app", "g1")
    cases["tampered: extra field"] = b64(orjson.dumps([*data, 1])) + "." + tag
    return cases


async def test_hostile_receipts_are_4xx_problems_and_settle_nothing(
        secured: Client, groups: RecordingGroupStore, signer: ReceiptSigner) -> None:
    good = (await pulled_receipts(secured))[0]
    cases = hostile_receipts(good, signer)
    cases["another principal's receipt"] = (await pulled_receipts(secured, "g1", PEER))[0]
    cases["another group's receipt"] = (await pulled_receipts(secured, "g2"))[0]
    outcomes: collections.Counter[tuple[int, str]] = collections.Counter()
    for name, token in cases.items():
        for action in ("ack", "nack", "extend"):
            for receipts in ([token], [good, token]):  # alone, and after a good one: all or nothing
                response = await secured.post(
                    f"/v1/groups/g1/{action}", json={"receipts": receipts}, headers=APP
                )
                assert 400 <= response.status < 500, (
                    name, action, response.status, await response.text()
                )
                assert response.content_type == "application/problem+json", (name, action)
                doc = await response.json()
                assert doc.get("pointer") == f"/receipts/{len(receipts) - 1}", (name, action, doc)
                outcomes[problem_of(response.status, doc)] += 1
    assert groups.settled == [], f"a refused receipt reached the store: {groups.settled[:3]}"
    assert outcomes[(410, "receipt-expired")] == 6
    print(
        f"\nhostile receipts: {len(cases)} handles x 3 actions x 2 batches = "
        f"{sum(outcomes.values())} tried -> "
        f"{dict(sorted(outcomes.items()))}; 0 settled"
    )


async def test_pulled_receipt_settles_and_extend_hands_out_fresh_ones(
        secured: Client, groups: RecordingGroupStore) -> None:
    first, second = await pulled_receipts(secured)
    response = await secured.post("/v1/groups/g1/extend", json={"receipts": [first]}, headers=APP)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["extended"] == 1
    assert len(body["receipts"]) == 1
    response = await secured.post(
        "/v1/groups/g1/nack", json={"receipts": [second], "delay_ms": 10}, headers=APP
    )
    assert (response.status, await response.json()) == (200, {"nacked": 1})
    response = await secured.post(
        "/v1/groups/g1/ack", json={"receipts": body["receipts"]}, headers=APP
    )
    assert (response.status, await response.json()) == (200, {"acked": 1})
    actions = [call[0] for call in groups.settled]
    assert actions == ["set_idle", "set_idle", "ack"]
    nack = groups.settled[1]
    assert nack[4] == str(30_000 - 10), "the nack delay comes from the signed ack timeout"


# -------------------------------------------------------------------------------------- time claims

def raw_token(claims_json: str, secret: str = SECRET) -> str:
    """An HS256 token whose claims are the given JSON text, as written (numbers JSON libraries
    refuse)."""
    signing_input = b64(b'{"alg":"HS256","typ":"JWT"}') + "." + b64(claims_json.encode())
    tag = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + b64(tag)


def hostile_time_claims() -> dict[str, str]:
    """Tokens, validly signed, whose exp / nbf / iat is not a usable time."""
    now = int(time.time())
    bad_values = {
        "10^400": "1" + "0" * 400, "1e400": "1e400", "NaN": "NaN", "-Infinity": "-Infinity",
        "1e308": "1e308", "2^64": str(2**64), "year 10000": "253402300800", "negative": "-1",
        "string of digits": '"9999999999"', "string": '"soon"', "true": "true", "null": "null",
        "list": "[1]", "object": '{"a": 1}', "empty string": '""'
    }
    cases: dict[str, str] = {}
    for claim in ("exp", "nbf", "iat"):
        for name, value in bad_values.items():
            others = {"sub": '"jwt-user"', "exp": str(now + 300)}
            others[claim] = value
            cases[f"{claim} {name}"] = raw_token(
                "{" + ", ".join(f'"{k}": {v}' for k, v in others.items()) + "}"
            )
    return cases


def test_time_claims_must_be_numbers_in_a_real_range() -> None:
    verifier = JwtVerifier(
        JwtSettings(algorithms=("HS256",), hmac_secret=SECRET.encode(), leeway_s=0)
    )
    for name, token in hostile_time_claims().items():
        with pytest.raises(Unauthenticated) as refused:
            verifier.verify(token)
        assert refused.value.credentials_given, name
    fine = verifier.verify(
        raw_token(f'{{"sub": "jwt-user", "exp": {time.time() + 300.5}, "iat": 1, "nbf": 0}}')
    )
    assert fine.expires_at_s is not None


async def test_hostile_time_claims_are_401_over_http_and_4401_on_ws(secured: Client) -> None:
    cases = hostile_time_claims()
    outcomes: collections.Counter[str] = collections.Counter()
    for name, token in cases.items():
        bearer = {"Authorization": f"Bearer {token}"}
        response = await secured.get("/v1/topics", headers=bearer)
        assert response.status == 401, (name, response.status, await response.text())
        assert response.content_type == "application/problem+json"
        outcomes["http 401"] += 1
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await secured.ws_connect("/v1/subscribe?topic=orders", headers=bearer)
        assert refused.value.status == 401, name
        outcomes["upgrade 401"] += 1
        async with secured.ws_connect("/v1/subscribe?topic=orders") as ws:
            await ws.send_str(json.dumps({"type": "auth", "token": token}))
            message = await ws.receive(timeout=5)
            # nothing but a close may follow a bad auth frame
            while message.type is aiohttp.WSMsgType.TEXT:
                raise AssertionError(f"{name}: {message.data}")
            assert ws.close_code == WS_CLOSE_UNAUTHENTICATED, (name, message)
        outcomes["auth frame 4401"] += 1
    good = raw_token(f'{{"sub": "jwt-user", "exp": {int(time.time()) + 300}}}')
    assert (
        await secured.get("/v1/topics", headers={"Authorization": f"Bearer {good}"})
    ).status == 200
    print(f"\nhostile time claims: {len(cases)} tokens x 3 paths -> {dict(outcomes)}")


# ------------------------------------------------------------------------------------ nesting depth

def nested(depth: int, shape: str) -> str:
    if shape == "arrays":
        return "[" * depth + "]" * depth
    if shape == "objects":
        return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)
    # not plain: escapes, exponent
    return "[" * (depth - 1) + '{"k":"v\\n","n":1.5e3}' + "]" * (depth - 1)


async def test_values_nested_too_deep_are_422_and_write_nothing(
        secured: Client, store: InMemoryStreamStore) -> None:
    outcomes: collections.Counter[int] = collections.Counter()
    tried = 0
    for depth in (255, 256, 300, 512, 1000, 1023):
        for shape in ("arrays", "objects", "mixed"):
            for extra, headers in (
                ("", {}), (', "headers": {"h": "v"}', {}), ("", {"Idempotency-Key": "k1"}),
                (', "key": "k\\u0041"', {})
            ):
                body = (
                    f'{{"messages": [{{"value": 1}}, {{"value": {nested(depth, shape)}{extra}}}]}}'
                )
                response = await secured.post(
                    "/v1/topics/orders/messages", data=body,
                    headers={**APP, **headers, "Content-Type": "application/json"}
                )
                text = await response.text()
                assert response.status in (400, 422), (
                    depth, shape, extra, response.status, text[:300]
                )
                assert response.content_type == "application/problem+json"
                if response.status == 422:
                    assert (await response.json())["pointer"] == "/messages/1/value", text
                outcomes[response.status] += 1
                tried += 1
    assert store.total_entries() == 0, "a refused publish wrote something"
    shallow = f'{{"messages": [{{"value": {nested(254, "arrays")}}}]}}'
    response = await secured.post("/v1/topics/orders/messages", data=shallow,
                                  headers={**APP, "Content-Type": "application/json"})
    assert response.status == 200, await response.text()
    print(f"\ndeeply nested values: {tried} tried -> {dict(sorted(outcomes.items()))}; 0 written")


# --------------------------------------------------------------------------------------- access log

def test_scrub_query_masks_credential_parameters_only() -> None:
    assert scrub_query("GET /v1/subscribe?topic=t&token=abc&api_key=k1 HTTP/1.1") == \
        f"GET /v1/subscribe?topic=t&token={MASK}&api_key={MASK} HTTP/1.1"
    assert (
        scrub_query(
            "/x?Access_Token=a&APIKEY=b&api%5Fkey=c&X-Api-Key=d&password=e&from=earliest#frag"
        )
        == f"/x?Access_Token={MASK}&APIKEY={MASK}&api%5Fkey={MASK}&X-Api-Key={MASK}"
        f"&password={MASK}&from=earliest#frag"
    )
    assert scrub_query("GET /v1/topics HTTP/1.1") == "GET /v1/topics HTTP/1.1"
    assert scrub_query("/x?token&topic=a") == "/x?token&topic=a"


def test_access_logger_masks_request_line_and_referer(caplog: pytest.LogCaptureFixture) -> None:
    logger = ScrubbingAccessLogger(
        logging.getLogger("test.access"), ScrubbingAccessLogger.LOG_FORMAT
    )
    request = make_mocked_request("GET", "/v1/subscribe?topic=t&access_token=tok123&apikey=key456",
                                  headers={"Referer": "https://app.example/?token=ref789"})
    with caplog.at_level(logging.INFO, logger="test.access"):
        logger.log(request, web.Response(), 0.01)
    assert "/v1/subscribe?topic=t&access_token=***&apikey=***" in caplog.text
    assert "token=***" in caplog.text
    assert not {"tok123", "key456", "ref789"} & set(
        caplog.text.replace("=", " ").replace("&", " ").split()
    )


async def test_query_string_credentials_never_reach_the_access_log(
        aiohttp_client: Any, tmp_path: Path, groups: RecordingGroupStore, signer: ReceiptSigner,
        store: InMemoryStreamStore, caplog: pytest.LogCaptureFixture) -> None:
    options = access_log_options(GatewaySettings(access_log=True))
    server = TestServer(await secured_app(tmp_path, groups, signer, store))
    # the runner takes the access-log options the CLI gives run_app
    await server.start_server(**options)
    client: Client = await aiohttp_client(server)
    secrets_sent = [f"secret-{i}-value" for i in range(6)]
    names = ("token", "api_key", "access_token", "apikey", "X-API-Key", "jwt")
    with caplog.at_level(logging.INFO, logger="aiohttp.access"):
        for name, secret in zip(names, secrets_sent, strict=True):
            await client.get(f"/v1/topics?{name}={secret}&topic=orders", headers=APP)
            await client.get(f"/v1/subscribe?topic=orders&{name}={secret}")
    lines = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert len(lines) == 2 * len(names), lines
    assert all(MASK in line for line in lines), lines
    leaked = [line for line in lines if any(secret in line for secret in secrets_sent)]
    assert not leaked, leaked
    print(
        f"\naccess log: {len(lines)} requests with query-string credentials logged, "
        f"{len(leaked)} leaked"
    )
