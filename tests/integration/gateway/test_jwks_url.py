"""A gateway reading its JWT keys from an identity provider's JWKS URL (served here on a loopback
port): a key rotation without a restart, an IdP outage, made-up key ids, readiness before the first
key set."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from auth_config import Client, secured_client
from processes import until_ready

from gateway.settings import GatewaySettings
from streamgate_devstack.ports import free_port
from tests.jwks_idp import Idp, serving_jwks

ROUTE = "/v1/topics"


def config(url: str, min_refresh_s: float) -> str:
    return (f'[jwt]\nalgorithms = ["ES256"]\njwks_url = "{url}"\n'
            f"jwks_min_refresh_s = {min_refresh_s}\n\n"
            '[[rules]]\nprincipals = ["*"]\ntopics = ["*"]\nactions = ["admin", "subscribe"]\n')


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def status_of(gateway: Client, token: str) -> tuple[int, str]:
    response = await gateway.get(ROUTE, headers=bearer(token))
    return response.status, await response.text()


async def gateway_of(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
                     idp: Idp, min_refresh_s: float) -> Client:
    return await secured_client(aiohttp_client, gateway_settings, tmp_path,
                                config(idp.url, min_refresh_s))


async def test_a_key_rotation_at_the_idp_needs_no_restart(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> None:
    async with serving_jwks("a") as idp:
        gateway = await gateway_of(aiohttp_client, gateway_settings, tmp_path, idp, 0)
        await until_ready(gateway)
        assert (await status_of(gateway, idp.token("a")))[0] == 200
        idp.publish("b")  # the rotation: a is gone
        assert (await status_of(gateway, idp.token("b")))[0] == 200
        status, problem = await status_of(gateway, idp.token("a"))
        assert status == 401
        assert "no key 'a' for ES256 in the JWKS" in problem


async def test_an_auth_frame_with_a_new_key_id_waits_for_the_refresh(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    async with serving_jwks("a") as idp:
        gateway = await gateway_of(aiohttp_client, gateway_settings, tmp_path, idp, 0)
        await until_ready(gateway)
        created = await gateway.post(ROUTE, json={"name": topic_name, "partitions": 1},
                                     headers=bearer(idp.token("a")))
        assert created.status == 201, await created.text()
        idp.publish("b")
        async with gateway.ws_connect(f"/v1/subscribe?topic={topic_name}") as ws:
            await ws.send_json({"type": "auth", "token": idp.token("b")})
            assert await ws.receive_json(timeout=5) == {"type": "authenticated",
                                                        "principal": "by-b"}


async def test_tokens_keep_working_while_the_idp_is_down(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> None:
    async with serving_jwks("a") as idp:
        gateway = await gateway_of(aiohttp_client, gateway_settings, tmp_path, idp, 0)
        await until_ready(gateway)
        await idp.stop()
        status, problem = await status_of(gateway, idp.token("made-up"))
        assert status == 401
        assert "no key 'made-up'" in problem
        assert (await status_of(gateway, idp.token("a")))[0] == 200
        metrics = await (await gateway.get("/metrics", headers=bearer(idp.token("a")))).text()
        assert "streamgate_jwks_refresh_failures_total 1.0" in metrics
        assert "streamgate_jwks_keys 1.0" in metrics
        assert (await gateway.get("/readyz")).status == 200


async def test_made_up_key_ids_fetch_at_most_once_per_min_refresh_s(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> None:
    async with serving_jwks("a") as idp:
        gateway = await gateway_of(aiohttp_client, gateway_settings, tmp_path, idp, 300)
        await until_ready(gateway)
        idp.publish("a", "b")
        answers = await asyncio.gather(*(status_of(gateway, idp.token(f"kid-{n}"))
                                         for n in range(40)))
        assert {status for status, _ in answers} == {401}
        # the fetch at start was the one this window allows: not even b's key is read yet
        assert (await status_of(gateway, idp.token("b")))[0] == 401
        assert idp.fetches == 1
        assert (await status_of(gateway, idp.token("a")))[0] == 200


async def test_the_gateway_is_not_ready_until_it_has_read_a_key_set(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> None:
    idp = Idp(free_port())
    idp.publish("a")
    gateway = await gateway_of(aiohttp_client, gateway_settings, tmp_path, idp, 0)
    readiness = await (await gateway.get("/readyz")).json()
    assert readiness["checks"]["jwks"].startswith(f"failed: no JWKS read from {idp.url} yet")
    status, problem = await status_of(gateway, idp.token("a"))
    assert status == 401
    assert f"no JWKS read from {idp.url} yet" in problem
    await idp.start()
    try:
        await until_ready(gateway)  # the retry after the failed fetch reads it
        assert (await status_of(gateway, idp.token("a")))[0] == 200
    finally:
        await idp.stop()

