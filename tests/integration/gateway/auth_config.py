"""Auth configs for the suites that run the gateway with authentication on: the TOML an operator
would write, built from API keys, rules and tenant filters, and a test client of a gateway that
reads it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.auth.keys import hash_api_key
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
JWT_SECRET_ENV = "TEST_JWT_SECRET"


def _strings(items: Iterable[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def api_keys(keys: Mapping[str, str]) -> str:
    """``[[api_keys]]`` entries for principal -> raw key."""
    return "".join(f'[[api_keys]]\nprincipal = "{principal}"\nsha256 = "{hash_api_key(key)}"\n\n'
                   for principal, key in keys.items())


def rule(principals: Iterable[str], topics: Iterable[str], actions: Iterable[str]) -> str:
    """One ``[[rules]]`` entry."""
    return (f"[[rules]]\nprincipals = {_strings(principals)}\ntopics = {_strings(topics)}\n"
            f"actions = {_strings(actions)}\n\n")


def tenant_filters(*tenants: str) -> str:
    """A forced ``tenant`` header filter for the JWT principals of each tenant (claim
    ``tenant``)."""
    return "".join(
        f'[[filters]]\nprincipals = ["claim:tenant={t}"]\nheaders = {{ tenant = "{t}" }}\n\n'
        for t in tenants
    )


def hs256_jwt(audience: str = "streamgate") -> str:
    """``[jwt]`` checking HS256 tokens signed with the secret in ``$TEST_JWT_SECRET``."""
    return (
        f'[jwt]\nalgorithms = ["HS256"]\nhmac_secret_env = "{JWT_SECRET_ENV}"\n'
        f'audience = "{audience}"\n\n'
    )


async def secured_client(
    aiohttp_client: Any, settings: GatewaySettings, tmp_path: Path, config: str,
    env: Mapping[str, str] | None = None, **changes: Any,
) -> Client:
    """A test client of a gateway with auth required by ``config`` (written under ``tmp_path``)."""
    path = tmp_path / f"auth-{settings.node_id}.toml"
    path.write_text(config)
    secured = dataclasses.replace(
        settings, auth_mode="required", auth_config_path=str(path), **changes
    )
    client: Client = await aiohttp_client(create_app(secured, dict(env or {})))
    return client
