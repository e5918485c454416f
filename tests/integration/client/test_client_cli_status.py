"""``status`` and completion's live topic and group names as a user runs them: subprocesses against
a gateway process (conftest's ``served_gateway``), with a temporary config dir."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from streamgate_client.cli import installed_version
from streamgate_devstack.ports import free_port

pytestmark = pytest.mark.integration
VARIABLES = ("STREAMGATE_URL", "STREAMGATE_TOKEN", "STREAMGATE_API_KEY", "STREAMGATE_CA_FILE",
             "STREAMGATE_CERT", "STREAMGATE_KEY")


def user_env(config: Path, **variables: str) -> dict[str, str]:
    """A user's environment: no connection variables but ``variables``, a config dir of its own,
    the venv's ``streamgate`` first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    path = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env | {"XDG_CONFIG_HOME": str(config), "PATH": path} | variables


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "--log-level", "warning", *args],
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def completed(env: dict[str, str], typed: str) -> list[str]:
    """What bash offers for ``typed`` (the last word being completed) with the script sourced."""
    script = run_cli(env, "completion", "bash").stdout
    words = typed.split(" ")
    probe = (f"{script}\nCOMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); "
             f"COMP_CWORD={len(words) - 1}; _streamgate_complete; "
             'printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.split()


def owned_by_one(document: dict[str, Any], topic: str) -> bool:
    """Whether /v1/cluster, as ``status`` shows it, has every partition of ``topic`` owned by the
    one gateway."""
    rows = [row for row in document["owners"] if row["topic"] == topic]
    return bool(rows) and not rows[0]["unowned"] and len(set(rows[0]["owners"].values())) == 1


def status_until(env: dict[str, str], topic: str, partitions: int) -> dict[str, Any]:
    """``status -o json`` once it counts every partition of ``topic`` as this lone gateway's
    (ownership settles after the topic is created)."""
    deadline = time.monotonic() + 30
    while True:
        done = run_cli(env, "status", "-o", "json")
        assert done.returncode == 0, done.stderr
        document: dict[str, Any] = orjson.loads(done.stdout)
        row = {"topic": topic, "partitions": partitions, "owned_here": partitions}
        settled = row in document["topics"] and owned_by_one(document, topic)
        if settled or time.monotonic() > deadline:
            return document
        time.sleep(0.2)


def test_status_shows_version_readiness_backends_and_owned_partitions(
        served_gateway: str, tmp_path: Path) -> None:
    env = user_env(tmp_path, STREAMGATE_URL=served_gateway)
    topic = f"status-{uuid.uuid4().hex[:8]}"
    assert run_cli(env, "topics", "create", topic, "--partitions", "3").returncode == 0
    document = status_until(env, topic, 3)
    assert {"topic": topic, "partitions": 3, "owned_here": 3} in document["topics"]
    assert document["ready"]
    assert document["version"] == installed_version()
    assert document["checks"]["redis"] == "ok"
    assert document["checks"]["etcd"] == "ok"
    assert document["partitions_owned"] >= 3
    assert {node["role"] for node in document["redis_nodes"]} >= {"primary"}
    [gateway] = document["gateways"]
    assert gateway["this"]
    assert gateway["address"] == served_gateway  # what it announces: its listener's URL
    assert gateway["partitions_owned"] >= 3
    owners = next(row for row in document["owners"] if row["topic"] == topic)
    assert owners == {"topic": topic, "unowned": [],
                      "owners": dict.fromkeys(("0", "1", "2"), gateway["node_id"])}
    table = run_cli(env, "status")
    assert table.returncode == 0, table.stderr
    assert f"gateway   {served_gateway}  version {installed_version()}" in table.stdout
    assert "ready     yes\n" in table.stdout
    assert f"  {topic}" in table.stdout
    assert "gateways  1 live\n" in table.stdout
    assert f"  {gateway['node_id']}  {served_gateway}  " in table.stdout
    assert f"  {topic}  {gateway['node_id']}: 0,1,2\n" in table.stdout


def test_status_of_an_unreachable_gateway_fails_with_one_line(tmp_path: Path) -> None:
    done = run_cli(user_env(tmp_path), "status", "--url", f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 1
    assert done.stderr.startswith("streamgate status: http://127.0.0.1:")
    assert "Traceback" not in done.stderr


@pytest.fixture
def topic_and_group(served_gateway: str, tmp_path: Path) -> tuple[str, str]:
    """A topic with one message that a group has consumed."""
    env = user_env(tmp_path, STREAMGATE_URL=served_gateway)
    topic, group = f"complete-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    assert run_cli(env, "topics", "create", topic, "--partitions", "1").returncode == 0
    assert run_cli(env, "produce", topic, "hello").returncode == 0
    consumed = run_cli(env, "consume", topic, "--group", group, "--from", "earliest",
                       "--max-messages", "1", "--timeout-s", "20")
    assert consumed.returncode == 0, consumed.stderr
    return topic, group


def test_completion_offers_the_gateways_topic_and_group_names(
        served_gateway: str, tmp_path: Path, topic_and_group: tuple[str, str]) -> None:
    topic, group = topic_and_group
    env = user_env(tmp_path, STREAMGATE_URL=served_gateway)
    assert topic in completed(env, "streamgate consume ")
    assert completed(env, f"streamgate consume {topic[:-1]}") == [topic]
    assert completed(env, f"streamgate topics describe {topic[:-1]}") == [topic]
    assert group in completed(env, f"streamgate consume {topic} --group ")
    assert completed(env, f"streamgate peek {group[:-1]}") == [group]
    # options are still offered where a name could go
    assert "--max-messages" in completed(env, "streamgate consume --max")


def test_completion_asks_the_gateway_typed_on_the_command_line(
        served_gateway: str, tmp_path: Path, topic_and_group: tuple[str, str]) -> None:
    topic, group = topic_and_group
    env = user_env(tmp_path)
    typed = f"streamgate peek x --url {served_gateway} --topic {topic[:-1]}"
    assert completed(env, typed) == [topic]
    assert run_cli(env, "context", "add", "here", "--url", served_gateway).returncode == 0
    assert completed(env, f"streamgate consume {topic} --group {group[:-1]}") == [group]


def test_completion_offers_nothing_when_the_gateway_is_unreachable(tmp_path: Path) -> None:
    env = user_env(tmp_path, STREAMGATE_URL=f"http://127.0.0.1:{free_port()}")
    assert completed(env, "streamgate consume ") == []
    assert completed(env, "streamgate consume t --group ") == []
