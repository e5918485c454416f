"""``streamgate quotas`` and ``Admin.quotas()`` as a user runs them: a gateway process whose
principals may each retain a capped number of bytes, the CLI as subprocesses."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from served import serve_gateway
from test_client_cli_status import run_cli, user_env
from typed_records import assert_typed

from streamgate_client.admin import Admin
from streamgate_client.cli_quotas import human_bytes

pytestmark = pytest.mark.integration
CAP = 5 * 1024 * 1024
WAIT_S = 30.0


@pytest.fixture(scope="module")
def capped_gateway(redis_cluster: Any, etcd_server: Any) -> Iterator[str]:
    """A gateway (auth off: the caller is ``anonymous``) capping each principal's retained bytes
    at CAP, with no cap on messages in flight, syncing its counts often."""
    yield from serve_gateway(redis_cluster, etcd_server, {
        "STREAMGATE_MAX_RETAINED_BYTES_PER_PRINCIPAL": str(CAP),
        "STREAMGATE_QUOTA_SYNC_INTERVAL_S": "0.1"})


def quotas_json(env: dict[str, str]) -> dict[str, Any]:
    done = run_cli(env, "quotas", "-o", "json")
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = orjson.loads(done.stdout)
    return document


def used_after(env: dict[str, str], floor: int) -> int:
    """The retained bytes ``quotas -o json`` reports once they reach ``floor`` (or the last
    reading at the deadline)."""
    deadline = time.monotonic() + WAIT_S
    used = retained(env)
    while used < floor and time.monotonic() < deadline:
        time.sleep(0.2)
        used = retained(env)
    return used


def retained(env: dict[str, str]) -> int:
    return int(quotas_json(env)["quotas"]["retained_bytes"]["used"] or 0)


def test_quotas_prints_the_callers_subject_its_caps_and_the_use_a_publish_adds(
        capped_gateway: str, tmp_path: Path) -> None:
    env = user_env(tmp_path, STREAMGATE_URL=capped_gateway)
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    assert run_cli(env, "topics", "create", topic, "--partitions", "1").returncode == 0
    before = quotas_json(env)
    assert before["subject"] == "principal:anonymous"
    assert before["quotas"]["retained_bytes"]["limit"] == CAP
    assert before["quotas"]["in_flight_messages"] == {"limit": None, "used": None}
    start = before["quotas"]["retained_bytes"]["used"] or 0
    produced = run_cli(env, "produce", topic, "x" * 2000)
    assert produced.returncode == 0, produced.stderr
    assert used_after(env, start + 2000) >= start + 2000
    table = run_cli(env, "quotas")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "subject  principal:anonymous"
    assert lines[1].split()[0] == "retained_bytes"
    assert "of 5.0 MiB" in lines[1]
    assert lines[2].split() == ["in_flight_messages", "no", "cap"]


def test_admin_quotas_is_a_typed_record_of_the_callers_quotas(capped_gateway: str) -> None:
    async def read() -> Any:
        async with Admin(capped_gateway) as admin:
            return await admin.quotas()

    answer = asyncio.run(read())
    assert_typed(answer)
    assert answer.subject == "principal:anonymous"
    assert answer.quotas.retained_bytes.limit == CAP
    assert answer.quotas.in_flight_messages.limit is None
    assert answer.to_dict()["quotas"]["in_flight_messages"] == {"limit": None, "used": None}


def test_sizes_are_written_in_binary_units() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1024, 7_340_032, 10_000_000_000)] == [
        "0 B", "1023 B", "1.0 KiB", "7.0 MiB", "9.3 GiB"]
