"""Client CLI: argument parsing, JSON-lines output and problem details on stderr."""

from __future__ import annotations

import asyncio
import itertools
import shlex
import subprocess
import sys
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.cli import main
from streamgate_client import SendResult
from streamgate_client.cli import main as client_main
from streamgate_client.cli_commands import parse_headers, parse_value, result_lines


def test_values_are_json_or_else_strings() -> None:
    assert parse_value('{"total": 42}') == {"total": 42}
    assert parse_value("17") == 17
    assert parse_value("hello world") == "hello world"


def test_headers_are_key_value_pairs() -> None:
    assert parse_headers(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ValueError, match="K=V"):
        parse_headers(["novalue"])


async def start_fake(aiohttp_server: Any) -> str:
    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        if body["name"] == "taken":
            return web.json_response(
                {
                    "type": "https://streamgate.dev/problems/topic-exists", "status": 409,
                    "title": "Topic already exists", "detail": "topic 'taken' exists"
                },
                status=409,
                content_type="application/problem+json",
            )
        return web.json_response(body | {"owner": "anonymous"}, status=201)

    written = itertools.count(1)

    async def publish(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"results": [
            {"partition": 0, "offset": f"{next(written)}-0", "duplicate": False}
            for _ in body["messages"]]})

    app = web.Application()
    app.router.add_post("/v1/topics", create)
    app.router.add_post("/v1/topics/{topic}/messages", publish)
    server: TestServer = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


async def test_topics_create_prints_the_topic_as_one_json_line(
    aiohttp_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = await start_fake(aiohttp_server)
    code = await asyncio.to_thread(
        main, ["topics", "create", "orders", "--partitions", "3", "--url", url]
    )
    assert code == 0
    assert orjson.loads(capsys.readouterr().out) == {
        "name": "orders", "partitions": 3, "owner": "anonymous"
    }


async def test_problem_prints_detail_and_exits_non_zero(
        aiohttp_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = await start_fake(aiohttp_server)
    code = await asyncio.to_thread(
        main, ["topics", "create", "taken", "--partitions", "1", "--url", url]
    )
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert "409 Topic already exists: topic 'taken' exists" in captured.err


async def test_produce_prints_one_result_per_value(
    aiohttp_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = await start_fake(aiohttp_server)
    code = await asyncio.to_thread(
        main, ["produce", "orders", '{"n":1}', "two", "--header", "a=b", "--url", url]
    )
    assert code == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    # keyless values may leave in separate requests side by side: one result each, in any order
    assert sorted(lines, key=lambda line: line["offset"]) == [
        {"partition": 0, "offset": "1-0", "duplicate": False},
        {"partition": 0, "offset": "2-0", "duplicate": False}]


async def test_gateway_url_defaults_to_streamgate_url(
        aiohttp_server: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = await start_fake(aiohttp_server)
    monkeypatch.setenv("STREAMGATE_URL", url)
    code = await asyncio.to_thread(main, ["topics", "create", "orders", "--partitions", "2"])
    assert code == 0
    assert orjson.loads(capsys.readouterr().out)["partitions"] == 2


@pytest.mark.parametrize(("entry", "prog"), [(main, "streamgate"),
                                             (client_main, "streamgate-client")])
def test_version_prints_the_installed_version(entry: Any, prog: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        entry(["--version"])
    assert exited.value.code == 0
    name, version = capsys.readouterr().out.split()
    assert name == prog
    assert version[0].isdigit()


@pytest.mark.parametrize(("typed", "offered"), [
    ("streamgate ta", "tail"),
    ("streamgate topics cr", "create"),
    ("streamgate topics create t --part", "--partitions"),
    ("streamgate dlq ", "--help -h list purge redrive"),
    ("streamgate completion ", "--help -h bash fish zsh"),
    ("streamgate produce t -K", "-K"),
    ("streamgate consume t -f", "-f"),
    ("streamgate topics list -o ", "json table names"),
    ("streamgate serve --w", "--workers"),
])
def test_bash_completion_offers_commands_and_options(typed: str, offered: str) -> None:
    script = subprocess.run([sys.executable, "-m", "gateway.cli", "completion", "bash"],
                            capture_output=True, text=True, check=True).stdout
    words = typed.split(" ")
    probe = (f"{script}\nCOMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); "
             f"COMP_CWORD={len(words) - 1}; _streamgate_complete; echo \"${{COMPREPLY[*]}}\"")
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == offered


def test_zsh_completion_loads_the_bash_script() -> None:
    script = subprocess.run([sys.executable, "-m", "gateway.cli", "completion", "zsh"],
                            capture_output=True, text=True, check=True).stdout
    assert script.startswith("autoload -U +X bashcompinit && bashcompinit\n")
    assert "complete -o default -F _streamgate_complete streamgate" in script


def test_result_lines_are_orjson_output() -> None:
    results = [SendResult(3, "1795418703164-0", False), SendResult(0, "1-12", True),
               SendResult(None, None)]
    assert result_lines(results) == b"".join(
        orjson.dumps({"partition": r.partition, "offset": r.offset, "duplicate": r.duplicate})
        + b"\n" for r in results)
