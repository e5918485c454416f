"""One message at a time, end to end: each party's CPU per message beside the round trip it adds
up to, for the Python Producer over the WebSocket and over HTTP, a bare aiohttp WebSocket loop,
and nats-py's ``await js.publish()`` on JetStream, interleaved over ``--runs`` rounds.

    python bench/lone_publish.py --seconds 4 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from anchors import VALUE, nats_one_at_a_time
from deliver import create_topic
from publish import process_cpu_seconds, redis_cpu_seconds, wait_ready
from services import GatewayProcess, NatsServer

from streamgate_client import Producer
from streamgate_devstack import DevStack, DevStackConfig

TOPIC, PARTITIONS = "lone", 8
TEXT_VALUE = VALUE.decode()
KEYS = [f"user-{n}" for n in range(100)]
MODES = ("producer-websocket", "producer-http", "aiohttp-websocket", "nats")
# where the gateway's Python goes, by the file a function is in (first match); a built-in goes
# where its costliest caller is
AREAS = (
    ("gateway/delivery/", "WebSocket frames in and out"),
    ("aiohttp/", "HTTP requests and responses (aiohttp)"),
    ("multidict/", "HTTP requests and responses (aiohttp)"),
    ("yarl/", "HTTP requests and responses (aiohttp)"),
    ("gateway/", "publish flow: frame, validation, ACL, placement, metrics"),
    ("partitioner/", "publish flow: frame, validation, ACL, placement, metrics"),
    ("storage/append/", "append: calls, encoding, results"),
    ("storage/", "Redis wire: requests out, replies in, deadlines"),
)
LOOP_AREA = "event loop: tasks, futures, timers, I/O"


async def producer_loop(base: str, transport: str, seconds: float) -> list[float]:
    async with Producer(base, TOPIC, acks="1",
                        transport=transport) as producer:  # type: ignore[arg-type]
        await producer.send_and_wait(TEXT_VALUE, key=KEYS[0])
        return await timed(seconds, lambda n: producer.send_and_wait(TEXT_VALUE,
                                                                     key=KEYS[n % 100]))


async def aiohttp_loop(base: str, seconds: float) -> list[float]:
    """The same frames by hand on aiohttp's WebSocket, each answer read by the sender: the floor
    of any client built on it."""
    async with aiohttp.ClientSession() as session, \
            session.ws_connect(f"{base}/v1/publish") as ws:
        await ws.receive()  # ready
        ids = itertools.count()

        async def one(n: int) -> None:
            frame = {"type": "publish", "topic": TOPIC, "id": str(next(ids)), "acks": "1",
                     "messages": [{"key": KEYS[n % 100], "value": TEXT_VALUE}]}
            await ws.send_str(json.dumps(frame))
            answer = json.loads((await ws.receive()).data)
            assert answer["type"] == "published", answer

        await one(0)
        return await timed(seconds, one)


async def timed(seconds: float, one: Callable[[int], Awaitable[Any]]) -> list[float]:
    latencies: list[float] = []
    started = time.perf_counter()
    while (sent_at := time.perf_counter()) - started < seconds:
        await one(len(latencies))
        latencies.append(time.perf_counter() - sent_at)
    return latencies


def run_client(mode: str, target: str, seconds: float) -> None:
    """In a process of its own: one mode's loop; prints its latencies and its own CPU."""
    cpu = time.process_time()
    started = time.perf_counter()
    if mode == "nats":
        _, latencies = asyncio.run(nats_one_at_a_time(target, seconds, stream="LONE"))
    elif mode == "aiohttp-websocket":
        latencies = asyncio.run(aiohttp_loop(target, seconds))
    else:
        latencies = asyncio.run(producer_loop(target, mode.removeprefix("producer-"), seconds))
    # the loop's CPU, not the connection's setup: scaled by the loop's share of the wall time
    share = seconds / max(seconds, time.perf_counter() - started)
    print(json.dumps({"latencies": latencies, "cpu_s": (time.process_time() - cpu) * share}))


def measure(mode: str, target: str, seconds: float,
            servers: Callable[[], tuple[float, float]]) -> dict[str, float]:
    """One mode's round: msg/s, p50/p99 (ms) and CPU per message (us) of the client, the broker
    (the gateway; nats-server) and its store (the Redis nodes)."""
    before = servers()
    done = subprocess.run([sys.executable, __file__, "--client", mode, "--target", target,
                           "--seconds", str(seconds)], capture_output=True, text=True,
                          check=True, timeout=seconds + 120)
    broker_s, store_s = (after - then for after, then in zip(servers(), before, strict=True))
    result = json.loads(done.stdout.strip().splitlines()[-1])
    latencies = sorted(result["latencies"])
    count = len(latencies)
    return {"rate": count / seconds, "p50_ms": latencies[count // 2] * 1e3,
            "p99_ms": latencies[int(count * 0.99)] * 1e3,
            "client_us": result["cpu_s"] / count * 1e6, "broker_us": broker_s / count * 1e6,
            "store_us": store_s / count * 1e6}


def summary(rounds: list[dict[str, float]], field: str) -> str:
    values = [r[field] for r in rounds]
    middle = statistics.median(values)
    digits = 0 if middle >= 100 else 2
    return f"{middle:,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def areas_us(profile: Path, messages: int) -> dict[str, float]:
    """Own time per message (us, as cProfile slows it) by area of the profiled gateway."""
    stats: dict[Any, Any] = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}

    def area_of(function: tuple[str, int, str], depth: int = 0) -> str:
        filename = function[0]
        if filename == "~" and depth < 3:  # a built-in: its costliest caller's area
            callers = stats[function][4]
            if callers:
                return area_of(max(callers, key=lambda c: callers[c][3]), depth + 1)
        return next((area for part, area in AREAS if part in filename), LOOP_AREA)

    for function, (_, calls, own_s, _, _) in stats.items():
        # what runs once in a while (start-up, shutdown, long-lived frames) is not the message's
        if function[2] in IDLE_FUNCTIONS or calls < messages // 10:
            continue
        area = area_of(function)
        out[area] = out.get(area, 0.0) + own_s / messages * 1e6
    return out


# the loop's own C frames: waiting for events (idle) and the native work cProfile cannot split
IDLE_FUNCTIONS = frozenset({"<method 'run_forever' of 'uvloop.loop.Loop' objects>",
                            "<method 'poll' of 'select.epoll' objects>"})


def profile_mode(mode: str, seconds: float) -> int:
    """One mode against a gateway under cProfile: where its Python goes per message."""
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp:
        profile = Path(tmp) / "gateway.prof"
        with DevStack(DevStackConfig(data_dir=Path(tmp) / "stack")) as stack, \
                GatewayProcess(stack, profile_to=profile) as gateway:
            asyncio.run(_ready(gateway.base))
            measured = measure(mode, gateway.base, seconds,
                               lambda: (gateway.cpu_seconds(), 0.0))
        messages = int(measured["rate"] * seconds)
        by_area = areas_us(profile, messages)
    total = sum(by_area.values())
    print(f"{mode}: the gateway's Python per message under cProfile ({messages:,} messages; "
          "cProfile slows calls, so read the shares)")
    for area, us in sorted(by_area.items(), key=lambda item: -item[1]):
        print(f"  {us / total:6.1%}  {area}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--profile", choices=MODES[:3],
                        help="instead: where the gateway's Python goes in one mode (cProfile)")
    parser.add_argument("--client", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        run_client(args.client, args.target, args.seconds)
        return 0
    if args.profile:
        return profile_mode(args.profile, args.seconds)
    modes = args.modes.split(",")
    rounds: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp))) as stack, NatsServer() as nats, \
            GatewayProcess(stack) as gateway:
        asyncio.run(_ready(gateway.base))
        nats.wait_ready()

        def ours() -> tuple[float, float]:
            return gateway.cpu_seconds(), sum(redis_cpu_seconds(stack).values())

        def theirs() -> tuple[float, float]:
            return process_cpu_seconds(nats.process.pid), 0.0

        for _ in range(args.runs):
            for mode in modes:
                target, servers = (nats.url, theirs) if mode == "nats" else (gateway.base, ours)
                rounds[mode].append(measure(mode, target, args.seconds, servers))
    print(f"one message at a time, {args.runs} rounds of {args.seconds:g} s: median (min-max)")
    print("| client | msg/s | p50 ms | p99 ms | CPU us/msg: client | broker | Redis |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for mode, measured in rounds.items():
        print(f"| {mode} | " + " | ".join(summary(measured, field) for field in (
            "rate", "p50_ms", "p99_ms", "client_us", "broker_us", "store_us")) + " |")
    print("broker: the gateway (nats: nats-server, its store inside); Redis: every node")
    print_ratios(rounds)
    return 0


def print_ratios(rounds: dict[str, list[dict[str, float]]]) -> None:
    """Each round against its own anchors: rate and p50 against nats-py's in the same round, the
    WebSocket's gateway CPU against HTTP's."""
    ratios: dict[str, list[float]] = {}
    for index, nats in enumerate(rounds.get("nats", [])):
        for mode in (m for m in rounds if m != "nats"):
            ours = rounds[mode][index]
            ratios.setdefault(f"{mode} msg/s / nats-py's", []).append(ours["rate"] / nats["rate"])
            ratios.setdefault(f"{mode} p50 / nats-py's", []).append(ours["p50_ms"]
                                                                    / nats["p50_ms"])
    pairs = zip(rounds.get("producer-websocket", []), rounds.get("producer-http", []),
                strict=False)
    for socket, http in pairs:
        ratios.setdefault("gateway CPU, WebSocket / HTTP", []).append(
            socket["broker_us"] / http["broker_us"])
    for name, values in ratios.items():
        print(f"{name}: {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")


async def _ready(base: str) -> None:
    await wait_ready(base)
    async with aiohttp.ClientSession() as http:
        await create_topic(http, base, TOPIC, PARTITIONS)


if __name__ == "__main__":
    sys.exit(main())
