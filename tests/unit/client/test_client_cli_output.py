"""The CLI's output formats (-o json|raw|table, kcat-like -f templates) and its import boundary:
client commands, --help and --version start without the server or the client's network stack."""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys
from typing import Any

import orjson
import pytest

from streamgate_client.output import (
    MessageTable,
    compile_format,
    format_writer,
    write_listing,
    write_raw,
)

MESSAGE = {"topic": "orders", "partition": 2, "offset": "1795418703164-0", "key": "alice",
           "value": {"total": 42}, "headers": {"tag": "a", "source": "cli"},
           "timestamp_ms": 1795418703164, "delivery_count": 1}
BINARY = MESSAGE | {"value_b64": base64.b64encode(b"\x00\x01\xff").decode()}
del BINARY["value"]


def printed(capsysbinary: pytest.CaptureFixture[bytes], write: Any, *messages: Any) -> bytes:
    for message in messages:
        write(message)
    return capsysbinary.readouterr().out


def test_format_template_prints_every_field_and_escape(
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    write = format_writer(compile_format(r"%t/%p@%o %k=%s [%h] %T 100%%\t|\n"))
    assert printed(capsysbinary, write, MESSAGE) == (
        b'orders/2@1795418703164-0 alice={"total":42} [tag=a,source=cli] 1795418703164 100%\t|\n')


def test_format_template_adds_no_newline_and_prints_a_missing_key_as_nothing(
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    write = format_writer(compile_format("%k:%s;"))
    assert printed(capsysbinary, write, MESSAGE | {"key": None, "value": "hi"}, BINARY) == (
        b":hi;alice:\x00\x01\xff;")


def test_format_template_names_the_topic_read_when_the_message_does_not(
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    write = format_writer(compile_format(r"%t:%o\n"), "orders.dlq")
    page_message = {name: item for name, item in MESSAGE.items() if name != "topic"}
    assert printed(capsysbinary, write, page_message, MESSAGE) == (
        b"orders.dlq:1795418703164-0\norders:1795418703164-0\n")


def test_unknown_format_field_is_a_usage_error() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="%x"):
        compile_format("%k %x")


def test_raw_output_is_the_value_alone(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert printed(capsysbinary, write_raw, MESSAGE | {"value": "plain text"}, MESSAGE,
                   BINARY) == b'plain text\n{"total":42}\n\x00\x01\xff\n'


def test_message_table_aligns_columns_under_a_header(
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    lines = printed(capsysbinary, MessageTable(), MESSAGE,
                    MESSAGE | {"partition": 10, "key": None, "value": "x"}).decode().splitlines()
    assert lines[0].split() == ["PARTITION", "OFFSET", "KEY", "TIME", "VALUE"]
    assert lines[1].split() == ["2", "1795418703164-0", "alice", "2026-11-23T07:25:03.164Z",
                                '{"total":42}']
    assert lines[2].split() == ["10", "1795418703164-0", "2026-11-23T07:25:03.164Z", "x"]
    assert {line.index("TIME") if i == 0 else line.index("2026") for i, line in
            enumerate(lines)} == {lines[0].index("TIME")}


def test_listing_table_sizes_each_column_to_its_widest_cell(
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    write_listing([{"name": "orders", "partitions": 3},
                   {"name": "a-much-longer-name", "partitions": 12, "compact": True}], "table")
    assert capsysbinary.readouterr().out.decode().splitlines() == [
        "NAME                PARTITIONS  COMPACT",
        "orders              3",
        "a-much-longer-name  12          true",
    ]


def test_listing_json_is_one_line_per_row(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    write_listing([{"topic": "t", "group": "g"}], "json")
    assert orjson.loads(capsysbinary.readouterr().out) == {"topic": "t", "group": "g"}



def test_listing_names_are_each_distinct_name_or_group_on_a_line(
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    write_listing([{"name": "orders"}, {"name": "payments"}], "names")
    write_listing([{"topic": "t", "group": "g"}, {"topic": "u", "group": "g"},
                   {"topic": "t", "group": "h"}], "names")
    assert capsysbinary.readouterr().out == b"orders\npayments\ng\nh\n"


SERVER_SIDE = ("gateway.app", "storage", "partitioner", "pyarrow", "pyspark", "aiohttp", "redis",
               "streamgate_devstack")
BOUNDARY = """
import sys
from {module} import main
try:
    main({argv!r})
except SystemExit as exit:
    assert exit.code in (0, None), exit.code
loaded = sorted(m for m in sys.modules
                if any(m == name or m.startswith(name + ".") for name in {forbidden!r}))
print(",".join(loaded))
"""


@pytest.mark.parametrize(("module", "argv"), [
    ("gateway.cli", ["--version"]),
    ("gateway.cli", ["topics", "--help"]),
    ("gateway.cli", ["produce", "--help"]),
    ("gateway.cli", ["consume", "--help"]),
    ("gateway.cli", ["completion", "bash"]),
    ("gateway.cli", ["context", "list"]),
    ("gateway.cli", ["status", "--help"]),
    ("streamgate_client.cli", ["--version"]),
])
def test_cli_parses_without_importing_the_server_or_the_network_stack(
        module: str, argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", BOUNDARY.format(module=module, argv=argv, forbidden=SERVER_SIDE)],
        capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.splitlines()[-1] == ""


def test_version_needs_neither_the_client_nor_the_gateway_modules() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BOUNDARY.format(module="gateway.cli", argv=["--version"],
                                               forbidden=("streamgate_client.cli_commands",
                                                          "streamgate_client.admin",
                                                          "gateway.settings", "asyncio"))],
        capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.splitlines()[-1] == ""
