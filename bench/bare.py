"""A bare aiohttp server speaking the gateway's publish and subscribe URLs with no storage behind
them: the same-run anchor of the rows that count requests, latency and fan-out deliveries.

POST /v1/topics/{topic}/messages parses the JSON batch and hands every message to the topic's
WebSocket subscribers at once (in memory, nothing kept); GET /v1/subscribe upgrades and sends the
assignment frame, then message frames shaped as the gateway's. It runs on the gateway's event loop
(uvloop when installed), one process, so the ratio is what streamgate's own work costs on top.

    python bench/bare.py --port 8090
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
from collections import defaultdict

import orjson
from aiohttp import WSMsgType, web

DEFAULT_PARTITIONS = 8


class Topics:
    """Each topic's partition count, subscribers and the next offset handed out."""

    def __init__(self) -> None:
        self.partitions: dict[str, int] = {}
        self.subscribers: defaultdict[str, set[web.WebSocketResponse]] = defaultdict(set)
        self.offsets = itertools.count(1)

    def frames(self, topic: str,
               messages: list[dict[str, object]]) -> list[tuple[int, str, str]]:
        """(partition, offset, message frame) per message, in order."""
        partitions = self.partitions.get(topic, DEFAULT_PARTITIONS)
        framed = []
        for message in messages:
            sequence = next(self.offsets)
            partition, offset = sequence % partitions, f"{sequence}-0"
            framed.append((partition, offset, orjson.dumps({
                "type": "message", "topic": topic, "partition": partition, "offset": offset,
                "key": message.get("key"), "value": message.get("value")}).decode()))
        return framed


TOPICS = web.AppKey("topics", Topics)


async def create_topic(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    request.app[TOPICS].partitions[body["name"]] = int(body.get("partitions", DEFAULT_PARTITIONS))
    return web.json_response(body, status=201, dumps=lambda v: orjson.dumps(v).decode())


async def publish(request: web.Request) -> web.Response:
    topics, topic = request.app[TOPICS], request.match_info["topic"]
    framed = topics.frames(topic, orjson.loads(await request.read())["messages"])
    for socket in tuple(topics.subscribers[topic]):
        for _, _, frame in framed:
            await socket.send_str(frame)
    offsets = [{"partition": partition, "offset": offset} for partition, offset, _ in framed]
    return web.Response(body=orjson.dumps({"offsets": offsets}), content_type="application/json")


async def subscribe(request: web.Request) -> web.WebSocketResponse:
    topics, topic = request.app[TOPICS], request.query["topic"]
    socket = web.WebSocketResponse(autoping=True)
    await socket.prepare(request)
    partitions = list(range(topics.partitions.get(topic, DEFAULT_PARTITIONS)))
    await socket.send_str(orjson.dumps({"type": "assignment", "topic": topic,
                                        "partitions": partitions}).decode())
    topics.subscribers[topic].add(socket)
    try:
        async for message in socket:  # acks and credit frames are read and dropped
            if message.type is WSMsgType.ERROR:
                break
    finally:
        topics.subscribers[topic].discard(socket)
    return socket


async def ready(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def application() -> web.Application:
    app = web.Application()
    app[TOPICS] = Topics()
    app.router.add_post("/v1/topics", create_topic)
    app.router.add_post("/v1/topics/{topic}/messages", publish)
    app.router.add_get("/v1/subscribe", subscribe)
    app.router.add_get("/readyz", ready)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    loop = None
    if importlib.util.find_spec("uvloop") is not None:
        import uvloop
        loop = uvloop.new_event_loop()
    web.run_app(application(), host="127.0.0.1", port=args.port, print=None, loop=loop,
                access_log=None)


if __name__ == "__main__":
    main()
