"""W3C trace context on the real cluster: a publish request's traceparent (or a message's own) is
stored with each message and handed to every delivery; with otel_enabled, publish and delivery
spans are recorded, the delivery linked to the publish."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from subscribers import subscribe, wait_until

from gateway.app import create_app
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
OWN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
STATE = "vendor=opaque,other=1"


async def new_topic(gateway: Client) -> str:
    topic = f"trace-{uuid.uuid4().hex[:8]}"
    assert (await gateway.post("/v1/topics", json={"name": topic, "partitions": 1})).status == 201
    return topic


async def publish(gateway: Client, topic: str, body: dict[str, Any],
                  headers: dict[str, str]) -> Any:
    response = await gateway.post(f"/v1/topics/{topic}/messages", json=body, headers=headers)
    assert response.status == 200, await response.text()
    return await response.json()


async def replayed_headers(gateway: Client, topic: str) -> list[dict[str, str]]:
    page = await (await gateway.get(f"/v1/topics/{topic}/partitions/0/messages",
                                    params={"from": "earliest"})).json()
    return [m["headers"] for m in page["messages"]]


async def test_request_trace_context_reaches_every_delivery(gateway: Client) -> None:
    topic = await new_topic(gateway)
    context = {"traceparent": PARENT, "tracestate": STATE}
    await publish(gateway, topic, {"messages": [{"value": "plain"}]}, context)  # the fast path
    await publish(gateway, topic, {"acks": "all", "messages": [
        {"value": "general", "headers": {"h": "1"}},
        {"value": "own", "headers": {"traceparent": OWN}}]}, context)
    await publish(gateway, topic, {"messages": [{"value": "untraced"}]}, {})
    expected = [context, {"h": "1", **context}, {"traceparent": OWN}, {}]

    assert await replayed_headers(gateway, topic) == expected
    group = await subscribe(gateway, "group", topic=topic, group="workers", mode="exclusive")
    fans = await subscribe(gateway, "fan", topic=topic, mode="broadcast", **{"from": "earliest"})
    await wait_until(lambda: len(group.messages) == 4 and len(fans.messages) == 4,
                     what="every message")
    await group.close()
    await fans.close()
    pulled = await (await gateway.post("/v1/groups/pullers/pull",
                                       json={"topic": topic, "max_messages": 10})).json()
    assert [m.headers for m in group.messages] == expected
    assert [m.headers for m in fans.messages] == expected
    assert [m["headers"] for m in pulled["messages"]] == expected


async def test_malformed_trace_context_is_refused_or_ignored(gateway: Client) -> None:
    topic = await new_topic(gateway)
    for bad in ("00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                f"ff-{TRACE_ID}-00f067aa0ba902b7-01", "not-a-trace", PARENT.upper()):
        response = await gateway.post(f"/v1/topics/{topic}/messages", json={
            "messages": [{"value": 1}, {"value": 2, "headers": {"traceparent": bad}}]})
        assert response.status == 422, bad
        assert (await response.json())["pointer"] == "/messages/1/headers/traceparent"
    refused = await gateway.post(f"/v1/topics/{topic}/messages", json={"messages": [
        {"value": 1, "headers": {"traceparent": OWN, "tracestate": "é"}}]})
    assert refused.status == 422
    await publish(gateway, topic, {"messages": [{"value": "x"}]},
                  {"traceparent": "00-zz-00f067aa0ba902b7-01", "tracestate": STATE})
    assert await replayed_headers(gateway, topic) == [{}]


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """Spans recorded by the process's SDK tracer provider (set here unless one is set)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    yield exporter
    processor.shutdown()


async def test_spans_link_publish_and_delivery(
        aiohttp_client: Any, gateway_settings: GatewaySettings,
        spans: InMemorySpanExporter) -> None:
    spans.clear()
    gateway: Client = await aiohttp_client(
        create_app(dataclasses.replace(gateway_settings, otel_enabled=True)))
    topic = await new_topic(gateway)
    await publish(gateway, topic, {"messages": [{"value": n} for n in range(3)]},
                  {"traceparent": PARENT})
    stored = (await replayed_headers(gateway, topic))[0]["traceparent"]
    group = await subscribe(gateway, "group", topic=topic, group="workers", mode="exclusive")
    await wait_until(lambda: len(group.messages) == 3, what="the messages")
    await group.close()
    await gateway.post("/v1/groups/pullers/pull", json={"topic": topic, "max_messages": 10})
    await asyncio.sleep(0.1)

    finished = spans.get_finished_spans()
    [published] = [s for s in finished if s.name == f"publish {topic}"]
    assert published.kind is trace.SpanKind.PRODUCER
    assert (f"{published.context.trace_id:032x}", f"{published.parent.span_id:016x}") == (
        TRACE_ID, "00f067aa0ba902b7")  # the request's context is the parent
    assert stored == f"00-{TRACE_ID}-{published.context.span_id:016x}-01"  # the span's own
    assert published.attributes["messaging.batch.message_count"] == 3
    delivered = [s for s in finished if s.name == f"deliver {topic}"]
    assert {s.attributes["streamgate.delivery.mode"] for s in delivered} == {"exclusive", "pull"}
    for span in delivered:
        assert span.kind is trace.SpanKind.CONSUMER
        assert {link.context.span_id for link in span.links} == {published.context.span_id}
        assert span.attributes["messaging.consumer.group.name"] in ("workers", "pullers")
