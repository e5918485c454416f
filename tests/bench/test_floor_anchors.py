"""The bench's floor anchors: the bare aiohttp server must speak the gateway's URLs and frames (the
same load clients measure both), and the raw group drain must read and ack every entry."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import orjson
import redis
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer

from streamgate_devstack import RedisClusterProcess

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench_module(name: str) -> ModuleType:
    """A bench script as a module; bench/ stays off sys.path (its pipeline.py would shadow the
    pipeline package)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


bare, anchors, group_drain = (_bench_module(name) for name in ("bare", "anchors", "group_drain"))


async def test_bare_server_sends_published_batch_as_gateway_frames() -> None:
    async with TestClient(TestServer(bare.application())) as client:
        created = await client.post("/v1/topics", json={"name": "orders", "partitions": 3})
        assert created.status == 201
        socket = await client.ws_connect("/v1/subscribe",
                                         params={"topic": "orders", "mode": "broadcast"})
        assignment = await socket.receive()
        assert assignment.type is WSMsgType.TEXT
        assert orjson.loads(assignment.data)["partitions"] == [0, 1, 2]
        published = await client.post("/v1/topics/orders/messages", data=orjson.dumps(
            {"messages": [{"key": f"k{i}", "value": {"i": i}} for i in range(5)]}))
        assert published.status == 200
        offsets = (await published.json())["offsets"]
        frames = [await socket.receive() for _ in range(5)]
        await socket.close()
    assert [frame.type for frame in frames] == [WSMsgType.TEXT] * 5
    messages = [orjson.loads(frame.data) for frame in frames]
    assert [m["value"] for m in messages] == [{"i": i} for i in range(5)]
    assert [{"partition": m["partition"], "offset": m["offset"]} for m in messages] == offsets
    for frame in frames:  # what the lean load clients look for in the byte stream
        assert group_drain.MESSAGE.search(frame.data.encode())
        assert b'"type":"message"' in frame.data.encode()


async def test_bare_server_answers_readyz_and_publishes() -> None:
    async with TestClient(TestServer(bare.application())) as client:
        assert (await client.get("/readyz")).status == 200
        published = await client.post("/v1/topics/nobody/messages",
                                      data=b'{"messages":[{"value":1}]}')
        assert published.status == 200
        assert len((await published.json())["offsets"]) == 1


async def test_raw_group_anchor_acks_every_entry_then_drops_group(
        redis_cluster: RedisClusterProcess) -> None:
    keys = [f"floor-anchor:{{s{slot}}}:log" for slot in range(3)]
    sizes = {key: 300 + 217 * index for index, key in enumerate(keys)}
    for key, size in sizes.items():
        host, port = redis_cluster.primary_for_key(key).address
        with redis.Redis(host=host, port=port) as node:
            node.delete(key)
            pipe = node.pipeline(transaction=False)
            for index in range(size):
                pipe.xadd(key, {"v": str(index)})
            pipe.execute()
    rate, acked = await anchors.raw_group_ack_rate(redis_cluster, keys, count=128)
    assert acked == sum(sizes.values())
    assert rate > 0
    for key in keys:
        host, port = redis_cluster.primary_for_key(key).address
        with redis.Redis(host=host, port=port) as node:
            assert node.xinfo_groups(key) == []
            assert node.xlen(key) == sizes[key]  # read, never trimmed
            node.delete(key)
