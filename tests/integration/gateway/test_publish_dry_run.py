"""A publish's dry run on the real cluster and etcd: the schema's verdict and the placement a
publish would get, nothing written; the publish's own refusals (422 at the path, 403, 507); one
read charged, never the publish buckets or the retained-bytes quota."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from auth_config import api_keys, rule, secured_client
from test_retained_quota import AS, VALUE, create_topic, quota_gateway
from test_schema_validation import GOOD, create_with_schema, with_a_bad_total

from gateway.settings import GatewaySettings

pytestmark = pytest.mark.integration

Client = TestClient[Any, Any]
PROBLEMS = "https://streamgate.dev/problems/"
STRUCTURED = "application/cloudevents+json"
DRY = {"dry_run": "true"}


@pytest.fixture
async def client(gateway: Client, topic_name: str) -> Client:
    """A gateway with a three-partition topic whose schema is ``ORDER``."""
    await create_with_schema(gateway, topic_name, 3)
    return gateway


async def stored(client: Client, topic: str, partitions: int,
                 headers: dict[str, str] | None = None) -> list[Any]:
    """Every value the topic's partitions replay, partition by partition."""
    values = []
    for partition in range(partitions):
        page = await client.get(f"/v1/topics/{topic}/partitions/{partition}/messages",
                                params={"limit": "100"}, headers=headers)
        assert page.status == 200, await page.text()
        values += [message["value"] for message in (await page.json())["messages"]]
    return values


def keyed(values: list[Any]) -> list[dict[str, Any]]:
    return [{"key": f"customer-{n}", "value": value} for n, value in enumerate(values)]


async def test_a_dry_run_answers_the_version_and_placement_a_publish_gets_and_writes_nothing(
        client: Client, topic_name: str) -> None:
    path = f"/v1/topics/{topic_name}/messages"
    dry = await client.post(path, params=DRY, json={"messages": keyed(GOOD)})
    assert dry.status == 200, await dry.text()
    answer = await dry.json()
    assert (answer["dry_run"], answer["valid"]) == (True, True)
    assert (answer["messages"], answer["schema_version"]) == (len(GOOD), 1)
    assert await stored(client, topic_name, 3) == []
    published = await client.post(path, json={"messages": keyed(GOOD)})
    assert published.status == 200, await published.text()
    assert [r["partition"] for r in (await published.json())["results"]] == answer["partitions"]


async def test_a_dry_run_of_a_bad_message_is_the_publish_refusal_at_its_path(
        client: Client, topic_name: str) -> None:
    refused = await client.post(f"/v1/topics/{topic_name}/messages", params=DRY,
                                json={"messages": with_a_bad_total()})
    assert refused.status == 422
    assert refused.content_type == "application/problem+json"
    problem = await refused.json()
    assert problem["type"] == PROBLEMS + "schema-mismatch"
    assert (problem["pointer"], problem["schema_version"]) == ("/messages/3/value/total", 1)
    assert await stored(client, topic_name, 3) == []


async def test_a_dry_run_of_a_topic_without_a_schema_has_no_version_and_a_bad_flag_is_422(
        gateway: Client, topic_name: str) -> None:
    assert (await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 2})
            ).status == 201
    path = f"/v1/topics/{topic_name}/messages"
    dry = await gateway.post(path, params=DRY, json={"messages": [
        {"value": "anything", "partition": 1}]})
    assert dry.status == 200, await dry.text()
    assert (await dry.json())["schema_version"] is None
    assert (await dry.json())["partitions"] == [1]
    odd = await gateway.post(path, params={"dry_run": "yes"}, json={"messages": [{"value": 1}]})
    assert odd.status == 422
    assert (await odd.json())["pointer"] == "/dry_run"
    assert await stored(gateway, topic_name, 2) == []


async def test_a_cloudevents_dry_run_checks_the_event_data_and_writes_nothing(
        client: Client, topic_name: str) -> None:
    event = {"specversion": "1.0", "id": "order-1", "source": "/shop/orders",
             "type": "com.example.order.created", "datacontenttype": "application/json",
             "data": GOOD[0]}
    path = f"/v1/topics/{topic_name}/messages"
    headers = {"Content-Type": STRUCTURED}
    dry = await client.post(path, params=DRY, json=event, headers=headers)
    assert dry.status == 200, await dry.text()
    assert (await dry.json())["schema_version"] == 1
    bad = await client.post(path, params=DRY, headers=headers,
                            json=event | {"data": {"id": "o1", "total": "ten"}})
    assert bad.status == 422
    assert (await bad.json())["pointer"] == "/data/total"
    assert await stored(client, topic_name, 3) == []


async def test_a_dry_run_by_a_caller_who_may_not_publish_is_403(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    keys = {"owner": "sgk_dry-owner-key", "reader": "sgk_dry-reader-key"}
    config = (api_keys(keys) + rule(["owner"], ["it-*"], ["publish", "subscribe", "admin"])
              + rule(["reader"], ["it-*"], ["subscribe"]))
    client = await secured_client(aiohttp_client, gateway_settings, tmp_path, config)
    owner, reader = ({"X-API-Key": keys[name]} for name in ("owner", "reader"))
    assert (await client.post("/v1/topics", json={"name": topic_name, "partitions": 1},
                              headers=owner)).status == 201
    refused = await client.post(f"/v1/topics/{topic_name}/messages", params=DRY,
                                json={"messages": [{"value": 1}]}, headers=reader)
    assert refused.status == 403
    assert refused.content_type == "application/problem+json"


async def test_dry_runs_are_charged_to_the_reads_limit_and_leave_the_publish_limit_whole(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    # a principal of its own: its buckets in the session's Redis are fresh
    name = f"writer-{topic_name}"
    keys = {name: f"sgk_{name}-key"}
    config = api_keys(keys) + rule([name], ["it-*"], ["publish", "subscribe", "admin"])
    client = await secured_client(
        aiohttp_client, gateway_settings, tmp_path, config,
        rate_limit_principal_messages_per_s=0.1, rate_limit_principal_reads_per_s=0.1,
        rate_limit_burst_s=30)  # bursts of 3 messages and 3 reads
    writer = {"X-API-Key": keys[name]}
    assert (await client.post("/v1/topics", json={"name": topic_name, "partitions": 1},
                              headers=writer)).status == 201
    path, three = f"/v1/topics/{topic_name}/messages", {"messages": [{"value": n}
                                                                      for n in range(3)]}
    dry_runs = [await client.post(path, params=DRY, json=three, headers=writer)
                for _ in range(4)]
    assert [answer.status for answer in dry_runs] == [200, 200, 200, 429]
    assert dry_runs[0].headers["RateLimit-Policy"] == '"reads";q=3;w=30'
    published = await client.post(path, json=three, headers=writer)
    assert published.status == 200, await published.text()


async def test_a_dry_run_past_the_retained_bytes_cap_is_507_and_dry_runs_charge_nothing(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    client = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, node_id="rq-dry")
    await create_topic(client, topic_name)
    path, one = f"/v1/topics/{topic_name}/messages", {"messages": [{"value": VALUE}]}
    # far more than the cap in total: were any charged, the publishes below would be refused
    for _ in range(6):
        dry = await client.post(path, params=DRY, json=one, headers=AS["solo"])
        assert dry.status == 200, await dry.text()
    assert [(await client.post(path, json=one, headers=AS["solo"])).status
            for _ in range(2)] == [200, 200]
    refused = await client.post(path, params=DRY, json=one, headers=AS["solo"])
    assert refused.status == 507
    assert (await refused.json())["type"].endswith("quota-retained-bytes")
    assert len(await stored(client, topic_name, 1, AS["solo"])) == 2
