"""The CLI as kcat users expect it, against a served gateway: quiet exit when the reader of stdout
goes away, -o/-f output, keyed and binary input, consume from a time."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from served import json_lines, streamgate

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "gateway.cli", "--log-level", "warning"]


def new_topic(url: str, partitions: int = 1) -> str:
    topic = f"habits-{uuid.uuid4().hex[:8]}"
    created = streamgate("topics", "create", topic, "--partitions", str(partitions), "--url", url)
    assert created.returncode == 0, created.stderr
    return topic


def piped_into_head(*argv: str) -> tuple[int, bytes, bytes]:
    """``streamgate ARGV | head -1``: the command's status and stderr, and what head printed."""
    command = subprocess.Popen([*CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert command.stdout is not None
    assert command.stderr is not None
    head = subprocess.Popen(["head", "-1"], stdin=command.stdout, stdout=subprocess.PIPE)
    command.stdout.close()  # head alone reads the pipe: its exit closes it
    printed, _ = head.communicate(timeout=60)
    errors = command.stderr.read()
    command.stderr.close()
    return command.wait(timeout=60), errors, printed


@pytest.mark.parametrize("reader", ["consume", "replay"])
def test_a_closed_stdout_ends_the_command_quietly_as_sigpipe_would(served_gateway: str,
                                                                   reader: str) -> None:
    topic = new_topic(served_gateway)
    # more than a pipe buffer holds: the command is still writing when head exits
    lines = "".join(f'{{"n": {n}, "pad": "{"x" * 100}"}}\n' for n in range(5000))
    assert streamgate("produce", topic, "--url", served_gateway, stdin=lines).returncode == 0
    argv = ([reader, topic, "--from", "earliest", "--url", served_gateway, "-o", "raw"]
            + (["--timeout-s", "30"] if reader == "consume" else []))
    status, errors, printed = piped_into_head(*argv)
    assert printed == b'{"n":0,"pad":"' + b"x" * 100 + b'"}\n'
    assert (status, errors) == (141, b"")


def test_keyed_lines_print_through_a_format_template(served_gateway: str) -> None:
    topic = new_topic(served_gateway)
    produced = streamgate("produce", topic, "-K", "=", "--url", served_gateway,
                          stdin='alice={"total":42}\nbob=hello\n')
    assert produced.returncode == 0, produced.stderr
    consumed = streamgate("consume", topic, "--from", "earliest", "--max-messages", "2",
                          "--timeout-s", "20", "-f", r"%p %k=%s\n", "--url", served_gateway)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == '0 alice={"total":42}\n0 bob=hello\n'
    replayed = streamgate("replay", topic, "-f", r"%t/%k\n", "--url", served_gateway)
    assert replayed.stdout == f"{topic}/alice\n{topic}/bob\n"
    table = streamgate("replay", topic, "-o", "table", "--url", served_gateway)
    rows = table.stdout.splitlines()
    assert rows[0].split() == ["PARTITION", "OFFSET", "KEY", "TIME", "VALUE"]
    assert [row.split()[2] for row in rows[1:]] == ["alice", "bob"]


def test_a_binary_value_file_comes_back_byte_for_byte(served_gateway: str,
                                                      tmp_path: Path) -> None:
    topic = new_topic(served_gateway)
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)) + b"\nsecond line\r\n")
    produced = streamgate("produce", topic, "--value-file", str(blob), "--partition", "0",
                          "--url", served_gateway)
    assert produced.returncode == 0, produced.stderr
    raw = subprocess.run([*CLI, "replay", topic, "-o", "raw", "--url", served_gateway],
                         capture_output=True, timeout=60, check=True).stdout
    assert raw == blob.read_bytes() + b"\n"


def test_consume_from_a_time_starts_at_the_first_message_written_since(
        served_gateway: str) -> None:
    topic = new_topic(served_gateway)
    for value in ("before", "after", "later"):
        assert streamgate("produce", topic, value, "--url", served_gateway).returncode == 0
    stored = json_lines(streamgate("replay", topic, "--url", served_gateway).stdout)
    assert stored[0]["timestamp_ms"] < stored[1]["timestamp_ms"]
    consumed = streamgate("consume", topic, "--from-time-ms", str(stored[1]["timestamp_ms"]),
                          "--max-messages", "2", "--timeout-s", "20", "-o", "raw",
                          "--url", served_gateway)
    assert (consumed.returncode, consumed.stdout) == (0, "after\nlater\n"), consumed.stderr


def test_listings_print_as_tables(served_gateway: str) -> None:
    topic = new_topic(served_gateway, partitions=3)
    listed = streamgate("topics", "list", "-o", "table", "--url", served_gateway)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:2] == ["NAME", "PARTITIONS"]
    assert [row.split()[:2] for row in rows if row.startswith(topic)] == [[topic, "3"]]
