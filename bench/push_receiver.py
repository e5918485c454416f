"""A lean push endpoint for the push row: a raw asyncio HTTP/1.1 server on loopback that answers
204 at once and counts the messages of each JSON body with a byte scan (no parsing).

Prints READY once listening, then one JSON line (received, requests, first_ts, last_ts) once it
counted ``--total`` messages, or after ``--idle-s`` without a request once it got any.

    python bench/push_receiver.py --port 9000 --total 200000
"""

from __future__ import annotations

import argparse
import asyncio
import time

import orjson

# every message of a push body carries one offset (the subscription object names none)
MESSAGE_MARK = b'"offset":"'
ANSWER = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
WAKE_S = 0.05


class Counter:
    """What the endpoint got so far."""

    def __init__(self, total: int) -> None:
        self.total, self.received, self.requests = total, 0, 0
        self.first_ts = self.last_ts = 0.0
        self.done = asyncio.Event()
        self.connections: set[asyncio.StreamWriter] = set()

    def count(self, body: bytes) -> None:
        now = time.time()
        self.first_ts = self.first_ts or now
        self.last_ts = now
        self.requests += 1
        self.received += body.count(MESSAGE_MARK)
        if self.received >= self.total:
            self.done.set()


def content_length(head: bytes) -> int:
    """The request's Content-Length (push requests always carry one)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


async def serve_connection(counter: Counter, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
    """Answer every request of one keep-alive connection as it comes."""
    counter.connections.add(writer)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            body = await reader.readexactly(content_length(head))
            writer.write(ANSWER)
            counter.count(body)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        counter.connections.discard(writer)
        writer.close()


async def main_async(port: int, total: int, idle_s: float) -> None:
    counter = Counter(total)
    server = await asyncio.start_server(
        lambda r, w: serve_connection(counter, r, w), "127.0.0.1", port, backlog=1024)
    async with server:
        print("READY", flush=True)
        started = time.time()
        while not counter.done.is_set():
            await asyncio.sleep(WAKE_S)
            if time.time() - (counter.last_ts or started) > idle_s:
                break
        print(orjson.dumps({"received": counter.received, "requests": counter.requests,
                            "first_ts": counter.first_ts, "last_ts": counter.last_ts}).decode(),
              flush=True)
        for writer in list(counter.connections):  # their readers end at EOF, not cancelled
            writer.close()
        await asyncio.sleep(WAKE_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--total", type=int, required=True)
    parser.add_argument("--idle-s", type=float, default=30.0)
    args = parser.parse_args()
    asyncio.run(main_async(args.port, args.total, args.idle_s))


if __name__ == "__main__":
    main()
