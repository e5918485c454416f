"""The gateway with auth on that the hostile-input tests with auth share: API keys, HS256 JWTs,
ACL rules and a tenant filter, and the credentials good and bad they are tried with."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import jwt
from aiohttp.test_utils import TestClient
from hostile import PARTITIONS

from gateway.app import create_app
from gateway.auth.keys import hash_api_key
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
OPENAPI = Path(__file__).resolve().parents[3] / "gateway" / "openapi.json"
SECRET = "h" * 40
WRITER_KEY, OUTSIDER_KEY = "sgk_hostile-writer-key", "sgk_hostile-outsider-key"
GROUP = "writers-g1"
CONFIG = f'''
[jwt]
algorithms = ["HS256"]
hmac_secret_env = "TEST_JWT_SECRET"
audience = "streamgate"
leeway_s = 0

[[api_keys]]
principal = "writer"
sha256 = "{hash_api_key(WRITER_KEY)}"

[[api_keys]]
principal = "outsider"
sha256 = "{hash_api_key(OUTSIDER_KEY)}"

[[rules]]
principals = ["writer"]
topics = ["it-*"]
actions = ["publish", "subscribe", "admin"]

[[rules]]
principals = ["outsider"]
topics = ["outsider-*"]
actions = ["publish", "subscribe", "admin"]

[[rules]]
principals = ["claim:tenant=a"]
topics = ["it-*"]
actions = ["publish", "subscribe"]
groups = ["a-*"]

[[rules]]
principals = ["claim:tenant=b"]
topics = ["it-*"]
actions = ["publish", "subscribe"]
groups = ["b-*"]

[[filters]]
principals = ["claim:tenant=a"]
headers = {{ tenant = "a" }}

[[filters]]
principals = ["claim:tenant=b"]
headers = {{ tenant = "b" }}
'''


def token(tenant: str, ttl_s: float = 300, secret: str = SECRET) -> str:
    claims = {
        "sub": f"app-{tenant}",
        "tenant": tenant,
        "aud": "streamgate",
        "exp": int(time.time() + ttl_s),
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def unsigned_token(tenant: str) -> str:
    """``alg: none`` with a valid-looking body: must never be accepted."""
    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
    claims = {"sub": "writer", "tenant": tenant, "aud": "streamgate", "exp": int(time.time() + 300)}
    return f'{part({"alg": "none", "typ": "JWT"})}.{part(claims)}.'


WRITER = {"X-API-Key": WRITER_KEY}
OUTSIDER = {"Authorization": f"ApiKey {OUTSIDER_KEY}"}


def as_tenant(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(tenant)}"}


def bad_credentials() -> dict[str, dict[str, str]]:
    """Requests that must be 401: nothing, or credentials that prove nothing."""
    return {
        "none": {},
        "unknown API key": {"X-API-Key": "sgk_" + "x" * 43},
        "wrong scheme": {"Authorization": f"Basic {base64.b64encode(b'writer:x').decode()}"},
        "expired JWT": {"Authorization": f"Bearer {token('a', ttl_s=-120)}"},
        "JWT signed with another key": {"Authorization": f"Bearer {token('a', secret='z' * 40)}"},
        "unsigned JWT (alg none)": {"Authorization": f"Bearer {unsigned_token('a')}"},
    }


def bad_auth_frames() -> dict[str, dict[str, Any] | None]:
    """First frames that must close the socket with 4401 (None: send nothing and wait for the
    timeout)."""
    return {
        "no frame": None,
        "unknown API key": {"type": "auth", "api_key": "sgk_" + "x" * 43},
        "expired JWT": {"type": "auth", "token": token("a", ttl_s=-120)},
        "JWT signed with another key": {"type": "auth", "token": token("a", secret="z" * 40)},
        "unsigned JWT (alg none)": {"type": "auth", "token": unsigned_token("a")},
        "not an auth frame": {"type": "ack", "messages": []},
    }


async def secured_app(aiohttp_client: Any, gateway_settings: GatewaySettings,
                      tmp_path: Path) -> Client:
    """The gateway app with auth on (CONFIG, the JWT secret), under the test's client."""
    (tmp_path / "auth.toml").write_text(CONFIG)
    settings = dataclasses.replace(gateway_settings, auth_mode="required", auth_frame_timeout_s=0.5,
                                   auth_config_path=str(tmp_path / "auth.toml"))
    client: Client = await aiohttp_client(create_app(settings, {"TEST_JWT_SECRET": SECRET}))
    return client


async def create_topic(client: Client, name: str) -> None:
    response = await client.post(
        "/v1/topics", json={"name": name, "partitions": PARTITIONS}, headers=WRITER
    )
    assert response.status == 201, await response.text()


async def publish(
    client: Client, topic: str, messages: list[dict[str, Any]], headers: dict[str, str]
) -> None:
    response = await client.post(
        f"/v1/topics/{topic}/messages", json={"messages": messages}, headers=headers
    )
    assert response.status == 200, await response.text()


async def seed_topic_with_a_group(client: Client, topic: str) -> str:
    """Messages in every partition and a group holding one pending delivery; its receipt."""
    await create_topic(client, topic)
    await publish(
        client,
        topic,
        [{"value": i, "partition": i % PARTITIONS, "headers": {"tenant": "a"}} for i in range(12)],
        WRITER,
    )
    pulled = await client.post(f"/v1/groups/{GROUP}/pull", json={"topic": topic, "max_messages": 1},
                               headers=WRITER)
    assert pulled.status == 200, await pulled.text()
    receipt: str = (await pulled.json())["messages"][0]["receipt"]
    return receipt


ModeQuery = Callable[[str], str]
MODES: dict[str, ModeQuery] = {
    "broadcast from earliest": lambda tag: "mode=broadcast&from=earliest",
    "broadcast from time 0": lambda tag: "mode=broadcast&from_time_ms=0",
    "broadcast from a cursor": lambda tag: (
        "mode=broadcast&from=" + ",".join(f"{p}:0-0" for p in range(PARTITIONS))
    ),
    "shared group": lambda tag: f"group=b-shared-{tag}&mode=shared&from=earliest",
    "exclusive group": lambda tag: f"group=b-excl-{tag}&mode=exclusive&from=earliest",
    "shared, at-most-once": lambda tag: (
        f"group=b-auto-{tag}&mode=shared&auto_ack=true&from=earliest"
    ),
}


async def closed_with(ws: aiohttp.ClientWebSocketResponse) -> int | None:
    message = await ws.receive(timeout=5)
    assert message.type is aiohttp.WSMsgType.CLOSE, (
        f"expected a close, got {message.type} {message.data!r}"
    )
    code: int | None = ws.close_code
    return code
