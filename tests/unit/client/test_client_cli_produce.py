"""``streamgate produce``'s input options against a recording gateway: key delimiter, partition,
binary lines and value files."""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.cli import main


async def recording_gateway(aiohttp_server: Any, published: list[dict[str, Any]]) -> str:
    """A gateway that keeps every published message and answers partition 0, offsets 1-0..."""
    written = itertools.count(1)

    async def publish(request: web.Request) -> web.Response:
        body = await request.json()
        published.extend(body["messages"])
        return web.json_response({"results": [
            {"partition": 0, "offset": f"{next(written)}-0", "duplicate": False}
            for _ in body["messages"]]})

    app = web.Application()
    app.router.add_post("/v1/topics/{topic}/messages", publish)
    server: TestServer = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


def stdin_of(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))


async def produce(url: str, *argv: str) -> int:
    return await asyncio.to_thread(main, ["produce", "orders", "--url", url, *argv])


async def test_key_delimiter_splits_each_stdin_line_into_key_and_value(
        aiohttp_server: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    published: list[dict[str, Any]] = []
    url = await recording_gateway(aiohttp_server, published)
    stdin_of(monkeypatch, b'alice:{"total":42}\nbob:hello:world\nno delimiter\n')
    assert await produce(url, "-K", ":", "--key", "anon") == 0
    assert sorted((m.get("key"), m["value"]) for m in published) == sorted([
        ("alice", {"total": 42}), ("bob", "hello:world"), ("anon", "no delimiter")])
    assert len(capsys.readouterr().out.splitlines()) == 3


async def test_partition_is_sent_with_every_message(
        aiohttp_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    published: list[dict[str, Any]] = []
    url = await recording_gateway(aiohttp_server, published)
    stdin_of(monkeypatch, b"1\n2\n")
    assert await produce(url, "--partition", "2") == 0
    assert sorted((m["partition"], m["value"]) for m in published) == [(2, 1), (2, 2)]


async def test_binary_lines_and_value_files_go_as_bytes_never_parsed(
        aiohttp_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    published: list[dict[str, Any]] = []
    url = await recording_gateway(aiohttp_server, published)
    stdin_of(monkeypatch, b'{"not":"parsed"}\n\xff\xfe\n')
    assert await produce(url, "--binary") == 0
    image = tmp_path / "image.bin"
    image.write_bytes(b"\x00line one\nline two\x00")
    assert await produce(url, "--value-file", str(image), "--key", "img") == 0
    sent = [(m.get("key"), base64.b64decode(m["value_b64"])) for m in published]
    assert all("value" not in m for m in published)
    assert sorted(sent[:2]) == sorted([(None, b'{"not":"parsed"}'), (None, b"\xff\xfe")])
    assert sent[2] == ("img", b"\x00line one\nline two\x00")


async def test_a_missing_value_file_is_reported_on_stderr(
        aiohttp_server: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = await recording_gateway(aiohttp_server, [])
    assert await produce(url, "--value-file", str(tmp_path / "absent")) == 1
    assert "streamgate produce:" in capsys.readouterr().err

