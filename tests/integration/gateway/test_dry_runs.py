"""Dry runs on the real cluster: each destructive call with ``?dry_run=true`` reports what it would
do per group and leaves Redis and etcd exactly as they were; the real call then does just that."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from auth_config import api_keys, rule, secured_client
from group_readings import group_partitions, metric

from gateway.app import create_app
from gateway.cli import main
from gateway.settings import GatewaySettings
from partitioner.etcd.connection import EtcdConnection
from streamgate_client import Admin
from streamgate_client.admin_types import PurgeDryRun, SeekDryRun, TopicDryRun
from streamgate_devstack.etcd import EtcdProcess
from streamgate_devstack.redis_cluster import RedisClusterProcess

Client = TestClient[Any, Any]
DRY = {"dry_run": "true"}
LONG_ACK_MS = 600_000  # no sweep redelivers what the tests hold pending


@pytest.fixture
async def trimming(aiohttp_client: Any, gateway_settings: GatewaySettings) -> Client:
    """A gateway whose retention duty runs often, so a real retention change shows soon."""
    settings = dataclasses.replace(gateway_settings, retention_interval_s=0.2)
    client: Client = await aiohttp_client(create_app(settings))
    return client


class Stack:
    """Reads the whole stored state of one topic: its Redis keys byte for byte (DUMP) and its
    etcd keys with their revisions."""

    def __init__(self, redis: RedisClusterProcess, etcd: EtcdProcess, prefix: str) -> None:
        self.redis, self.etcd, self.prefix = redis, etcd, prefix

    def redis_state(self, topic: str, partitions: int) -> dict[bytes, bytes]:
        state: dict[bytes, bytes] = {}
        for partition in range(partitions):
            tag = f"sg:{{{topic}/{partition}}}"
            node = self.redis.primary_for_key(f"{tag}:log").client(decode_responses=False)
            with node:
                # the verdict board is the verdict duty's own, rewritten on its schedule
                state |= {key: node.dump(key) for key in node.scan_iter(match=f"{tag}:*")
                          if not key.endswith(b":verdicts")}
        return state

    async def etcd_state(self, topic: str) -> dict[bytes, tuple[bytes, int]]:
        async with EtcdConnection([self.etcd.endpoint], timeout_s=3) as conn:
            snapshot = await conn.get_prefix(self.prefix.encode())
        return {v.key: (v.value, v.mod_revision) for v in snapshot.values
                if topic.encode() in v.key and b"owner" not in v.key}

    def groups(self, topic: str, partitions: int) -> set[str]:
        names = set()
        for partition in range(partitions):
            log = f"sg:{{{topic}/{partition}}}:log"
            with self.redis.primary_for_key(log).client() as node:
                if node.exists(log):
                    names |= {row["name"] for row in node.xinfo_groups(log)}
        return names

    async def policies_written(self, topic: str, partitions: int) -> None:
        """Wait for the group policies a pull writes to etcd in the background."""
        root = f"{self.prefix.rstrip('/')}/grouppolicies/{topic}/".encode()
        wanted = self.groups(topic, partitions)
        for _ in range(400):
            async with EtcdConnection([self.etcd.endpoint], timeout_s=3) as conn:
                written = {v.key[len(root):].decode() for v in (await conn.get_prefix(root)).values}
            if wanted <= written:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the policies of {wanted - written} were never written")

    async def unchanged(self, topics: dict[str, int], act: Any) -> Any:
        """``act()``'s result, asserting that it changed nothing stored for ``topics``."""
        for topic, partitions in topics.items():
            await self.policies_written(topic, partitions)
        before = [(self.redis_state(t, n), await self.etcd_state(t)) for t, n in topics.items()]
        assert all(redis and etcd for redis, etcd in before)  # something to compare
        result = await act()
        after = [(self.redis_state(t, n), await self.etcd_state(t)) for t, n in topics.items()]
        assert after == before
        return result


@pytest.fixture
def stack(redis_cluster: RedisClusterProcess, etcd_server: EtcdProcess,
          gateway_settings: GatewaySettings) -> Stack:
    return Stack(redis_cluster, etcd_server, gateway_settings.etcd_prefix)


async def new_topic(gateway: Client, partitions: int = 1) -> str:
    topic = f"dry-{uuid.uuid4().hex[:8]}"
    created = await gateway.post("/v1/topics", json={"name": topic, "partitions": partitions})
    assert created.status == 201, await created.text()
    return topic


async def publish(gateway: Client, topic: str, count: int) -> list[str]:
    response = await gateway.post(f"/v1/topics/{topic}/messages", json={
        "acks": "all", "messages": [{"value": i, "partition": 0} for i in range(count)]})
    assert response.status == 200, await response.text()
    return [r["offset"] for r in (await response.json())["results"]]


async def pull(gateway: Client, topic: str, group: str, count: int) -> list[dict[str, Any]]:
    response = await gateway.post(f"/v1/groups/{group}/pull", json={
        "topic": topic, "max_messages": count, "wait_ms": 1000, "ack_timeout_ms": LONG_ACK_MS})
    assert response.status == 200, await response.text()
    return list((await response.json())["messages"])


async def two_groups(gateway: Client, topic: str) -> list[str]:
    """Five messages; group ``behind`` holds two pending and three unread, ``done`` acked all."""
    offsets = await publish(gateway, topic, 5)
    assert len(await pull(gateway, topic, "behind", 2)) == 2
    taken = await pull(gateway, topic, "done", 5)
    acked = await gateway.post("/v1/groups/done/ack",
                               json={"receipts": [m["receipt"] for m in taken]})
    assert (await acked.json()) == {"acked": 5}
    return offsets


async def ok(response: Any) -> dict[str, Any]:
    answer = await response
    assert answer.status == 200, await answer.text()
    return dict(await answer.json())


async def test_purge_dry_run_counts_each_groups_losses_and_changes_nothing(
        gateway: Client, stack: Stack) -> None:
    topic = await new_topic(gateway)
    offsets = await two_groups(gateway, topic)
    metrics_before = await (await gateway.get("/metrics")).text()

    dry = await stack.unchanged({topic: 1}, lambda: ok(
        gateway.post(f"/v1/topics/{topic}/purge", params=DRY)))

    assert (dry["dry_run"], dry["purged"], dry["scheduled"]) == (True, 5, 0)
    assert dry["partitions"][0]["cut"] == offsets[-1]
    assert dry["groups"] == [
        {"group": "behind", "pending_dropped": 2, "unread_dropped": 3, "parked_keys": 0},
        {"group": "done", "pending_dropped": 0, "unread_dropped": 0, "parked_keys": 0}]
    metrics_after = await (await gateway.get("/metrics")).text()
    assert (metric(metrics_after, "streamgate_purges_total", f'topic="{topic}"')
            == metric(metrics_before, "streamgate_purges_total", f'topic="{topic}"') == 0)
    real = await ok(gateway.post(f"/v1/topics/{topic}/purge"))
    assert (real["purged"], "dry_run" in real) == (dry["purged"], False)
    [state] = await group_partitions(gateway, "behind", topic)
    assert (state["pending"], state["lag"]) == (0, 0)


async def test_seek_dry_run_tells_what_is_skipped_or_delivered_again(
        gateway: Client, stack: Stack) -> None:
    topic = await new_topic(gateway)
    offsets = await two_groups(gateway, topic)

    async def dry_seek(to: Any) -> Any:
        return await stack.unchanged({topic: 1}, lambda: ok(gateway.post(
            "/v1/groups/behind/seek", params=DRY, json={"topic": topic, "to": to})))

    latest = (await dry_seek("latest"))["partitions"][0]
    assert (latest["from"], latest["to"], latest["skipped"], latest["redelivered"],
            latest["pending_kept"], latest["exact"]) == (offsets[1], offsets[4], 3, 0, 2, True)
    earliest = (await dry_seek("earliest"))["partitions"][0]
    assert (earliest["skipped"], earliest["redelivered"]) == (0, 2)
    one = await dry_seek(f"0:{offsets[3]}")
    assert (one["dry_run"], one["positions"], one["partitions"][0]["skipped"]) == (
        True, {"0": offsets[3]}, 2)
    fresh = await stack.unchanged({topic: 1}, lambda: ok(gateway.post(
        "/v1/groups/newcomer/seek", params=DRY, json={"topic": topic, "to": f"0:{offsets[0]}"})))
    assert (fresh["partitions"][0]["created"], fresh["partitions"][0]["skipped"]) == (True, 1)

    await ok(gateway.post("/v1/groups/behind/seek", json={"topic": topic, "to": "latest"}))
    [state] = await group_partitions(gateway, "behind", topic)
    assert (state["last_delivered_offset"], state["lag"], state["pending"]) == (offsets[4], 0, 2)


async def test_retention_dry_run_counts_what_the_new_length_would_trim(
        trimming: Client, stack: Stack) -> None:
    topic = await new_topic(trimming)
    await two_groups(trimming, topic)

    dry = await stack.unchanged({topic: 1}, lambda: ok(trimming.patch(
        f"/v1/topics/{topic}", params=DRY, json={"max_length": 2})))

    assert (dry["dry_run"], dry["max_length"], dry["impact"]["growth"]) == (True, 2, None)
    retention = dry["impact"]["retention"]
    assert (retention["trimmed"], retention["estimate"]) == (3, False)
    assert retention["groups"] == [{"group": "behind", "unacked_dropped": 3}]
    assert (await ok(trimming.get(f"/v1/topics/{topic}")))["max_length"] is None

    await ok(trimming.patch(f"/v1/topics/{topic}", json={"max_length": 2}))
    for _ in range(200):
        text = await (await trimming.get("/metrics")).text()
        if metric(text, "streamgate_retention_unacked_dropped_total", f'topic="{topic}"'):
            break
        await asyncio.sleep(0.05)
    # group labels are hashed: only "behind" lost anything
    assert metric(text, "streamgate_retention_unacked_dropped_total", f'topic="{topic}"') == 3
    assert metric(text, "streamgate_retention_trimmed_entries_total", f'topic="{topic}"') == 3


async def test_growth_dry_run_describes_the_cut_and_changes_nothing(
        gateway: Client, stack: Stack) -> None:
    topic = await new_topic(gateway, partitions=2)
    await two_groups(gateway, topic)

    dry = await stack.unchanged({topic: 4}, lambda: ok(gateway.patch(
        f"/v1/topics/{topic}", params=DRY, json={"partitions": 4})))

    growth = dry["impact"]["growth"]
    assert (dry["partitions"], dry["growing_to"], dry["impact"]["retention"]) == (4, None, None)
    assert (growth["from"], growth["to"], growth["added"], growth["keys_staying"]) == (
        2, 4, [2, 3], 0.5)
    assert growth["sources"] == {"0": [], "1": [], "2": [0], "3": [1]}
    behind = next(g for g in growth["groups"] if g["group"] == "behind")
    assert behind["partitions"] == [{"partition": 0, "unread": 3, "pending": 2},
                                    {"partition": 1, "unread": 0, "pending": 0}]
    shrink = await gateway.patch(f"/v1/topics/{topic}", params=DRY, json={"partitions": 1})
    real_shrink = await gateway.patch(f"/v1/topics/{topic}", json={"partitions": 1})
    assert shrink.status == real_shrink.status == 422
    assert (await gateway.patch(f"/v1/topics/{topic}", params={"dry_run": "yes"},
                                json={"partitions": 4})).status == 422
    assert (await ok(gateway.get(f"/v1/topics/{topic}")))["partitions"] == 2

    assert (await ok(gateway.patch(f"/v1/topics/{topic}", json={"partitions": 4})))[
        "partitions"] == 4


async def dead_letters(gateway: Client, topic: str, count: int) -> None:
    """``count`` messages rejected by group ``g`` into ``<topic>.dlq``."""
    await publish(gateway, topic, count)
    taken = await pull(gateway, topic, "g", count)
    rejected = await gateway.post("/v1/groups/g/reject",
                                  json={"receipts": [m["receipt"] for m in taken]})
    assert (await rejected.json()) == {"rejected": count}


async def test_redrive_dry_run_counts_the_letters_without_moving_them(
        gateway: Client, stack: Stack) -> None:
    topic = await new_topic(gateway)
    await dead_letters(gateway, topic, 3)
    dlq = (await ok(gateway.get(f"/v1/topics/{topic}.dlq")))
    sizes = {topic: 1, f"{topic}.dlq": dlq["partitions"]}
    letter = (await ok(gateway.get(f"/v1/topics/{topic}.dlq/partitions/0/messages")))[
        "messages"][0]

    dry = await stack.unchanged(sizes, lambda: ok(gateway.post(
        f"/v1/topics/{topic}/dlq/redrive", params=DRY, json={"max_messages": 2})))
    one = await stack.unchanged(sizes, lambda: ok(gateway.post(
        f"/v1/topics/{topic}/dlq/redrive", params=DRY,
        json={"partition": 0, "offset": letter["offset"]})))
    missing = await gateway.post(f"/v1/topics/{topic}/dlq/redrive", params=DRY,
                                 json={"partition": 0, "offset": "1-0"})

    assert (dry["dry_run"], dry["redriven"]) == (True, 2)
    assert sum(p["waiting"] for p in dry["partitions"]) == 3
    assert one == {"redriven": 1, "dry_run": True}
    assert missing.status == 404
    real = await ok(gateway.post(f"/v1/topics/{topic}/dlq/redrive", json={"max_messages": 2}))
    assert real == {"redriven": dry["redriven"]}
    after = await ok(gateway.post(f"/v1/topics/{topic}/dlq/redrive", params=DRY))
    assert after["redriven"] == 1


async def test_a_dry_run_asks_the_grants_of_the_real_call(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> None:
    config = (api_keys({"admin": "sgk_admin-for-dry-runs", "reader": "sgk_reader-for-dry-runs"})
              + rule(["admin"], ["*"], ["admin", "publish", "subscribe"])
              + rule(["reader"], ["*"], ["subscribe"]))
    secured = await secured_client(aiohttp_client, gateway_settings, tmp_path, config)
    admin = {"X-API-Key": "sgk_admin-for-dry-runs"}
    reader = {"X-API-Key": "sgk_reader-for-dry-runs"}
    topic = await new_topic_as(secured, admin)
    for method, path, body in (
            ("POST", f"/v1/topics/{topic}/purge", None),
            ("PATCH", f"/v1/topics/{topic}", {"max_length": 1}),
            ("POST", "/v1/groups/g/seek", {"topic": topic, "to": "latest"}),
            ("POST", f"/v1/topics/{topic}/dlq/redrive", None)):
        refused = await secured.request(method, path, params=DRY, json=body, headers=reader)
        assert refused.status == 403, (method, path, await refused.text())
        assert "purged" not in await refused.text()
    assert (await secured.post(f"/v1/topics/{topic}/purge", params=DRY,
                               headers=admin)).status == 200


async def new_topic_as(client: Client, headers: dict[str, str]) -> str:
    topic = f"dry-{uuid.uuid4().hex[:8]}"
    created = await client.post("/v1/topics", json={"name": topic, "partitions": 1},
                                headers=headers)
    assert created.status == 201, await created.text()
    return topic


async def streamgate(capsys: pytest.CaptureFixture[str], *args: str) -> list[Any]:
    """``streamgate args...`` as a user runs it, in a thread: this loop serves its gateway (and a
    fork of a process running gRPC threads may crash before it execs)."""
    capsys.readouterr()
    assert await asyncio.to_thread(main, list(args)) == 0
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]


async def test_the_client_and_the_cli_ask_for_dry_runs(
        gateway: Client, stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    topic = await new_topic(gateway)
    await two_groups(gateway, topic)
    url = str(gateway.make_url("")).rstrip("/")

    async def previews() -> tuple[Any, ...]:
        async with Admin(url) as admin:
            purge = await admin.purge(topic, dry_run=True)
            seek = await admin.seek("behind", topic, "latest", dry_run=True)
            grow = await admin.grow_topic(topic, 3, dry_run=True)
            trim = await admin.update_topic(topic, max_length=4, dry_run=True)
        [cli_purge] = await streamgate(capsys, "topics", "purge", topic, "--dry-run", "--url", url)
        [cli_seek] = await streamgate(capsys, "groups", "seek", "behind", "--topic", topic,
                                      "--to", "latest", "--dry-run", "--url", url)
        return purge, seek, grow, trim, cli_purge, cli_seek

    purge, seek, grow, trim, cli_purge, cli_seek = await stack.unchanged({topic: 1}, previews)

    assert [type(answer) for answer in (purge, seek, grow, trim)] == [
        PurgeDryRun, SeekDryRun, TopicDryRun, TopicDryRun]
    assert [(g.group, g.pending_dropped) for g in purge.groups] == [("behind", 2), ("done", 0)]
    assert (seek.partitions[0].skipped, grow.partitions) == (3, 3)
    assert trim.impact.retention.trimmed == 1
    assert (cli_purge["dry_run"], cli_purge["purged"]) == (True, 5)
    assert cli_seek["partitions"][0]["skipped"] == 3
