"""The web console's files: served without credentials under a strict Content-Security-Policy,
nothing outside the console's directory, off by a setting, a clear 503 when not built."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.app import app_with_services
from gateway.auth.keys import hash_api_key
from gateway.routes import console
from gateway.services import Services
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
KEY = "console-test-key-0123456789"


@pytest.fixture
def settings(tmp_path: Path) -> GatewaySettings:
    (tmp_path / "auth.toml").write_text(f'''
[[api_keys]]
principal = "ops"
sha256 = "{hash_api_key(KEY)}"

[[rules]]
principals = ["ops"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]
''')
    return GatewaySettings(auth_config_path=str(tmp_path / "auth.toml"))


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A console directory as ``make console`` leaves it."""
    root = tmp_path / "console"
    (root / "js" / "console").mkdir(parents=True)
    (root / "index.html").write_text('<script type="module" src="js/console/main.js"></script>')
    (root / "console.css").write_text("body { margin: 0 }")
    (root / "js" / "console" / "main.js").write_text("export {};")
    (root / ".hidden.js").write_text("OUTSIDE-CONTENT")
    (root / "notes.py").write_text("print()")
    (tmp_path / "outside.js").write_text("OUTSIDE-CONTENT")
    monkeypatch.setattr(console, "console_files", lambda: root)
    return root


async def test_console_is_public_under_a_strict_csp(client: Client, built: Path) -> None:
    response = await client.get("/console/")
    assert response.status == 200
    assert response.content_type == "text/html"
    assert "js/console/main.js" in await response.text()
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "script-src 'self';" in policy
    assert "'unsafe-inline'" not in policy
    assert "'unsafe-eval'" not in policy
    assert "frame-ancestors 'none'" in policy
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "no-referrer"


async def test_console_scripts_and_styles_carry_their_content_types(
        client: Client, built: Path) -> None:
    script = await client.get("/console/js/console/main.js")
    assert (script.status, script.content_type) == (200, "text/javascript")
    assert await script.text() == "export {};"
    style = await client.get("/console/console.css")
    assert (style.status, style.content_type) == (200, "text/css")
    assert "Content-Security-Policy" in style.headers


async def test_bare_console_path_redirects_to_its_directory(client: Client, built: Path) -> None:
    response = await client.get("/console", allow_redirects=False)
    assert response.status == 308
    assert response.headers["Location"] == "/console/"


@pytest.mark.parametrize("path", [
    "/console/%2e%2e/outside.js", "/console/js/%2e%2e/%2e%2e/%2e%2e/outside.js",
    "/console/.hidden.js", "/console/notes.py", "/console/missing.js", "/console/js//main.js",
])
async def test_console_serves_nothing_outside_its_own_files(
        client: Client, built: Path, path: str) -> None:
    response = await client.get(path)
    assert response.status == 404
    assert response.content_type == "application/problem+json"
    assert "OUTSIDE-CONTENT" not in await response.text()


async def test_api_needs_credentials_beside_the_console(client: Client, built: Path) -> None:
    assert (await client.get("/v1/topics")).status == 401
    assert (await client.get("/console/../v1/topics")).status == 401
    assert (await client.get("/v1/topics", headers={"X-API-Key": KEY})).status == 200


async def test_unbuilt_console_answers_503_naming_the_build_step(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "index.html").write_text("<html></html>")
    monkeypatch.setattr(console, "console_files", lambda: tmp_path / "empty")
    response = await client.get("/console/")
    assert response.status == 503
    problem = await response.json(content_type="application/problem+json")
    assert problem["type"].endswith("/console-not-built")
    assert "make console" in problem["detail"]


async def test_console_can_be_switched_off(aiohttp_client: Any, services: Services,
                                           built: Path) -> None:
    off = dataclasses.replace(services, settings=dataclasses.replace(services.settings,
                                                                    console_enabled=False))
    client: Client = await aiohttp_client(app_with_services(off))
    assert (await client.get("/console/")).status == 404
    assert (await client.get("/console/js/console/main.js")).status == 404


async def test_console_file_fetched_again_with_its_etag_answers_304(
        client: Client, built: Path) -> None:
    first = await client.get("/console/js/console/main.js")
    tag = first.headers["ETag"]
    assert tag.startswith('"')  # strong: no W/ prefix
    assert first.headers["Cache-Control"] == "no-cache"
    again = await client.get("/console/js/console/main.js", headers={"If-None-Match": tag})
    assert again.status == 304
    assert again.headers["ETag"] == tag
    assert await again.read() == b""
    assert (await client.get("/console/js/console/main.js",
                             headers={"If-None-Match": f'"other", W/{tag}'})).status == 304
    assert (await client.get("/console/", headers={"If-None-Match": "*"})).status == 304


async def test_console_files_have_distinct_etags_that_follow_their_content(
        client: Client, built: Path) -> None:
    index = (await client.get("/console/")).headers["ETag"]
    style = (await client.get("/console/console.css")).headers["ETag"]
    assert index != style
    (built / "console.css").write_text("body { margin: 1px }")
    changed = await client.get("/console/console.css", headers={"If-None-Match": style})
    assert changed.status == 200
    assert changed.headers["ETag"] != style
    assert await changed.text() == "body { margin: 1px }"
