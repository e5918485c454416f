"""A lean WebSocket load client for fan-out, run as its own process so it does not starve the
gateway.

It opens ``--sockets`` broadcast subscriptions of one topic with a bare HTTP upgrade (no
permessage-deflate, no per-frame parsing: it counts '"type":"message"' in the byte stream, which is
C-speed), prints READY once every socket got its assignment frame, then counts deliveries until
every socket has ``--expect`` messages or ``--seconds`` pass, and prints one JSON line. With
``--idle`` it only holds the sockets until stdin closes (memory per idle connection).

    python bench/fanout.py --port 8080 --topic fan --sockets 500 --expect 1000 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import time
from collections.abc import Awaitable, Callable

import orjson

MARK = b'"type":"message"'
Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Opener = Callable[[int, str], Awaitable[Stream]]


async def open_socket(port: int, topic: str) -> Stream:
    """Upgrade a broadcast subscription and wait for its assignment frame."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write((f"GET /v1/subscribe?topic={topic}&mode=broadcast&from=latest"
                  "&max_in_flight=1000 HTTP/1.1\r\n"
                  f"Host: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 101 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"upgrade refused: {head[:200]!r}")
    seen = b""
    while b"assignment" not in seen:
        seen += await reader.read(4096)
    return reader, writer


async def count(reader: asyncio.StreamReader, expect: int, deadline: float,
                last: list[float]) -> int:
    """Count message frames on one socket until ``expect`` arrived or the deadline passes."""
    got, tail = 0, b""
    while got < expect:
        try:
            chunk = await asyncio.wait_for(reader.read(65536),
                                           max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            break
        if not chunk:
            break
        data = tail + chunk
        got += data.count(MARK)
        tail = data[-(len(MARK) - 1):]
        last[0] = time.time()
    return got


async def main_async(args: argparse.Namespace, opener: Opener = open_socket) -> None:
    """Open every subscription with ``opener``, say READY, then count (or hold them idle)."""
    sockets = await asyncio.gather(*(opener(args.port, args.topic)
                                     for _ in range(args.sockets)))
    print("READY", flush=True)
    if args.idle:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    else:
        last = [0.0]
        deadline = time.monotonic() + args.seconds
        counts = await asyncio.gather(*(count(r, args.expect, deadline, last) for r, _ in sockets))
        print(orjson.dumps({"delivered": sum(counts), "last_ts": last[0]}).decode(), flush=True)
    for _, writer in sockets:
        writer.close()


def arguments(description: str | None) -> argparse.Namespace:
    """The command line shared by the lean fan-out clients."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--sockets", type=int, default=500)
    parser.add_argument("--expect", type=int, default=1000, help="messages each socket should get")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--idle", action="store_true",
                        help="only hold the sockets open until stdin closes")
    return parser.parse_args()


def main() -> None:
    asyncio.run(main_async(arguments(__doc__)))


if __name__ == "__main__":
    main()
