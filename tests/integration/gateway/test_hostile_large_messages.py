"""Subscribers that stop reading a backlog of 1 MiB messages: each costs the gateway about its
outbox bound, not its window of messages (a real `streamgate serve`, its RSS from /proc)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from test_hostile_connections import HEADERS, Gateway, connect, hostile_gateway, upgrade_request

from gateway.settings import GatewaySettings

READERS = 3  # each in a group of its own, the default window of 100 messages
BACKLOG = 120
VALUE = "x" * 1_000_000
OUTBOX_MIB = 4  # the gateway's ws_max_outbox_bytes
# per never-reading socket: its outbox, one read past it and the transport's buffers
PER_SOCKET_MIB = 3 * OUTBOX_MIB
SLACK_MIB = 32  # allocator and interpreter noise of a loaded gateway


@pytest.fixture
def gateway(gateway_settings: GatewaySettings, tmp_path: Path) -> Iterator[Gateway]:
    # the sockets stay open while the memory is sampled
    with hostile_gateway(gateway_settings, tmp_path,
                         STREAMGATE_SLOW_CLIENT_TIMEOUT_S="60") as started:
        yield started


async def test_a_subscriber_that_stops_reading_costs_about_its_outbox(
        gateway: Gateway, topic_name: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gateway.url}/v1/topics", json={"name": topic_name, "partitions": 1},
                             headers=HEADERS) as response:
            assert response.status == 201, await response.text()
        for _ in range(BACKLOG // 10):
            async with http.post(f"{gateway.url}/v1/topics/{topic_name}/messages",
                                 json={"messages": [{"value": VALUE}] * 10},
                                 headers=HEADERS) as response:
                assert response.status == 200, await response.text()
    await asyncio.sleep(1)
    before, peak = gateway.rss_mib(), 0.0
    writers = []
    for n in range(READERS):
        _, writer = await connect(gateway.port, tiny_buffer=True)
        writer.transport.pause_reading()  # type: ignore[attr-defined]  # reads nothing, ever
        writer.write(upgrade_request(f"/v1/subscribe?topic={topic_name}&group=stalled-{n}"
                                     "&from=earliest", HEADERS))
        writers.append(writer)
    try:
        for _ in range(60):
            peak = max(peak, gateway.rss_mib())
            await asyncio.sleep(0.1)
    finally:
        for writer in writers:
            writer.transport.abort()
    grown = peak - before
    print(f"\n[{READERS} stalled readers of 1 MiB messages] RSS {before:.0f} -> peak "
          f"{peak:.0f} MiB")
    assert grown < READERS * PER_SOCKET_MIB + SLACK_MIB, f"{grown:.0f} MiB for {READERS} sockets"
