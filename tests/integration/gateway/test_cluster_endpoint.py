"""GET /v1/cluster on real gateways: two processes list each other (with the URL each announces)
and agree on every partition's owner, the survivor of a kill takes every partition, and only admins
may ask."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from auth_config import api_keys, rule, secured_client
from processes import GatewayProcess, until_ready

from gateway.app import create_app
from gateway.services import SERVICES
from gateway.settings import GatewaySettings
from streamgate_client.admin import Admin
from streamgate_client.cli_status import parse_metrics

pytestmark = pytest.mark.integration
ADMIN_KEY, OPS_KEY, READER_KEY = "sgk_cluster-admin", "sgk_cluster-ops", "sgk_cluster-reader"
ADVERTISED = "https://gw-typed.example.com:8443"
CONFIG = (api_keys({"admin": ADMIN_KEY, "ops": OPS_KEY, "reader": READER_KEY})
          + rule(["admin"], ["*"], ["publish", "subscribe", "admin"])
          + rule(["ops"], ["ops-*"], ["admin"])
          + rule(["reader"], ["*"], ["subscribe"]))


async def cluster_of(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/v1/cluster") as response:
        assert response.status == 200, await response.text()
        document: dict[str, Any] = await response.json()
        return document


def owners_of(document: dict[str, Any], topic: str) -> dict[int, str | None]:
    [row] = [row for row in document["topics"] if row["name"] == topic]
    return {p["partition"]: p["owner"] for p in row["partitions"]}


async def owned_here(http: aiohttp.ClientSession, url: str, topic: str) -> int:
    """The partitions of ``topic`` the gateway at ``url`` runs the duties of, by its own metrics."""
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    return sum(int(value) for name, labels, value in parse_metrics(text)
               if name == "streamgate_topic_owned_partitions" and labels.get("topic") == topic)


async def settled(http: aiohttp.ClientSession, urls: list[str], topic: str,
                  nodes: int) -> list[dict[str, Any]]:
    """Every gateway's /v1/cluster once each lists ``nodes`` nodes, owns every partition of
    ``topic`` and agrees with the others and with each owner's own count."""
    deadline = time.monotonic() + 30
    while True:
        documents = [await cluster_of(http, url) for url in urls]
        owners = [owners_of(document, topic) for document in documents]
        counts = {d["node_id"]: await owned_here(http, url, topic)
                  for d, url in zip(documents, urls, strict=True)}
        agreed = (all(len(d["nodes"]) == nodes for d in documents)
                  and all(o == owners[0] and None not in o.values() for o in owners)
                  and all(list(owners[0].values()).count(node) == count
                          for node, count in counts.items()))
        if agreed or time.monotonic() > deadline:
            return documents
        await asyncio.sleep(0.2)


async def test_cluster_lists_both_gateways_and_moves_every_partition_to_the_survivor(
        gateway_processes: list[GatewayProcess], topic_name: str) -> None:
    survivor, doomed = gateway_processes
    urls = [survivor.url, doomed.url]
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{survivor.url}/v1/topics",
                             json={"name": topic_name, "partitions": 6}) as response:
            assert response.status == 201
        first, second = await settled(http, urls, topic_name, nodes=2)
        node_ids = {first["node_id"], second["node_id"]}
        assert len(node_ids) == 2
        assert {node["node_id"] for node in first["nodes"]} == node_ids
        assert first["nodes"] == second["nodes"]
        assert all(node["started_at_ms"] > 0 for node in first["nodes"])
        # each announces its listener: the URL it was reached at here
        assert {node["address"] for node in first["nodes"]} == set(urls)
        owners = owners_of(first, topic_name)
        assert sorted(owners) == list(range(6))
        assert set(owners.values()) == node_ids
        assert owners_of(second, topic_name) == owners
        assert next(row for row in first["topics"] if row["name"] == topic_name)["unowned"] == []
        for document, url in ((first, survivor.url), (second, doomed.url)):
            mine = [p for p, owner in owners.items() if owner == document["node_id"]]
            assert len(mine) == await owned_here(http, url, topic_name)
        doomed.process.send_signal(signal.SIGKILL)
        doomed.process.wait()
        [alone] = await settled(http, [survivor.url], topic_name, nodes=1)
    assert [node["node_id"] for node in alone["nodes"]] == [first["node_id"]]
    assert set(owners_of(alone, topic_name).values()) == {first["node_id"]}


async def test_cluster_answers_admins_only_with_the_topics_they_administer(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> None:
    client = await secured_client(aiohttp_client, gateway_settings, tmp_path, CONFIG)
    admin, ops = {"X-API-Key": ADMIN_KEY}, {"X-API-Key": OPS_KEY}
    for name in ("ops-cluster", "app-cluster"):
        response = await client.post("/v1/topics", json={"name": name, "partitions": 2},
                                     headers=admin)
        assert response.status == 201, await response.text()
    response = await client.get("/v1/cluster", headers=admin)
    assert response.status == 200, await response.text()
    everything = await response.json()
    assert everything["node_id"] == gateway_settings.node_id
    assert [node["node_id"] for node in everything["nodes"]] == [gateway_settings.node_id]
    assert [row["name"] for row in everything["topics"]] == ["app-cluster", "ops-cluster"]
    response = await client.get("/v1/cluster", headers=ops)
    assert [row["name"] for row in (await response.json())["topics"]] == ["ops-cluster"]
    response = await client.get("/v1/cluster", headers={"X-API-Key": READER_KEY})
    assert response.status == 403
    assert response.content_type == "application/problem+json"
    assert (await client.get("/v1/cluster")).status == 401


async def owned_in_process(client: Any, topic: str) -> dict[str, Any]:
    """An in-process gateway's /v1/cluster once every partition of ``topic`` has an owner."""
    deadline = time.monotonic() + 30
    while True:
        document: dict[str, Any] = await (await client.get("/v1/cluster")).json()
        if None not in owners_of(document, topic).values() or time.monotonic() > deadline:
            return document
        await asyncio.sleep(0.1)


async def test_cluster_is_typed_for_admin_and_read_from_etcd_when_the_mirror_is_not_at_hand(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    settings = gateway_settings.with_overrides(advertise_url=ADVERTISED)
    client = await aiohttp_client(create_app(settings))
    await until_ready(client)
    response = await client.post("/v1/topics", json={"name": topic_name, "partitions": 3})
    assert response.status == 201
    mirrored = await owned_in_process(client, topic_name)
    async with Admin(str(client.make_url(""))) as admin:
        typed = await admin.cluster()
    assert typed.node_id == settings.node_id
    assert [(node.node_id, node.address) for node in typed.nodes] == [
        (settings.node_id, ADVERTISED)]
    [row] = [row for row in typed.topics if row.name == topic_name]
    assert [p.owner for p in row.partitions] == [settings.node_id] * 3
    client.app[SERVICES].ownership = None
    response = await client.get("/v1/cluster")
    assert response.status == 200
    assert await response.json() == mirrored
    assert set(owners_of(mirrored, topic_name).values()) == {settings.node_id}
