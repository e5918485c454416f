"""A lean consumer-group client for goal 5, run as its own process so the client is not what is
measured.

It opens ``--members`` WebSocket members of one exclusive group (bare HTTP upgrade, no
permessage-deflate), finds each message frame's partition and offset in the received bytes with one
regular expression (C-speed, no per-frame JSON parsing: the gateway writes
``"type":"message","topic":...,"partition":N,"offset":"..."`` at the head of every message frame,
docs/websocket.md), and acks what it got in masked text frames of up to ``--ack-batch`` messages
(the same ``{"type":"ack","messages":[...]}`` frames any client sends). It stops once the process
acked ``--total`` messages or after ``--idle-s`` without a message, and prints one JSON line: acked,
first_ts (first message) and last_ts (last ack sent). With ``--ack-each-read`` it acks what each
read of the socket brought at once, as a client acking message by message would, instead of
collecting up to ``--ack-batch``.

The aiohttp client it replaces spent several times more CPU per message (a receive with a timeout,
``orjson.loads`` and a dict per frame) on the cores the gateway and Redis share, so it took CPU from
what it measured.

    python bench/group_drain.py --port 8080 --topic orders --group g --members 2 --total 50000
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import struct
import time
from urllib.parse import urlencode

import orjson

# Message frames start so (gateway.delivery.wire.message_frame); the topic is a JSON string.
MESSAGE = re.compile(rb'"type":"message","topic":"(?:[^"\\]|\\.)*","partition":(\d+),'
                     rb'"offset":"(\d+-\d+)"')
LONGEST_HEAD = 512  # bytes: longer than any match above for topics up to ~400 bytes
READ_BYTES = 1 << 18
POLL_S = 0.01


def masked_text_frame(payload: bytes) -> bytes:
    """A client-to-server text frame (FIN, masked with a fresh random key, RFC 6455 5.3)."""
    key = os.urandom(4)
    size = len(payload)
    mask = (key * (size // 4 + 1))[:size]
    body = (int.from_bytes(payload, "little")
            ^ int.from_bytes(mask, "little")).to_bytes(size, "little")
    if size < 126:
        header = bytes((0x81, 0x80 | size))
    elif size < 1 << 16:
        header = struct.pack("!BBH", 0x81, 0x80 | 126, size)
    else:
        header = struct.pack("!BBQ", 0x81, 0x80 | 127, size)
    return header + key + body


def ack_frames(acked: list[bytes], batch: int) -> list[bytes]:
    """Ack frames for ``acked`` (``{"partition":N,"offset":"..."}`` items), at most ``batch`` per
    frame."""
    return [masked_text_frame(b'{"type":"ack","messages":[' + b",".join(acked[at:at + batch])
                              + b"]}")
            for at in range(0, len(acked), batch)]


class Scanner:
    """Message references found in a byte stream read in arbitrary chunks (a match may span two
    chunks)."""

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The ack items of every message frame whose head is complete in what was read so far."""
        data = self._tail + chunk
        found: list[bytes] = []
        end = 0
        for match in MESSAGE.finditer(data):
            found.append(b'{"partition":%b,"offset":"%b"}' % match.groups())
            end = match.end()
        self._tail = data[max(end, len(data) - LONGEST_HEAD):]
        return found


class Totals:
    """What the members of this process did together."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.acked = 0
        self.first_ts = 0.0
        self.last_ts = 0.0

    @property
    def done(self) -> bool:
        return self.acked >= self.total


async def open_member(port: int, topic: str, group: str, max_in_flight: int,
                      schema_version: int | None = None
                      ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Upgrade one exclusive-group member (from the earliest entry, pinned to ``schema_version``
    if given) and return its stream after the 101."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    pin = {} if schema_version is None else {"schema_version": schema_version}
    query = urlencode({"topic": topic, "group": group, "max_in_flight": max_in_flight,
                       "from": "earliest", **pin})
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write((f"GET /v1/subscribe?{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                  "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 101 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"upgrade refused: {head[:200]!r}")
    return reader, writer


async def drain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, totals: Totals,
                ack_batch: int, idle_s: float) -> None:
    """Read, ack and count until the process is done or nothing came for ``idle_s``."""
    scanner, pending = Scanner(), []
    quiet_since = time.monotonic()
    while not totals.done and time.monotonic() - quiet_since < idle_s:
        try:
            chunk: bytes | None = await asyncio.wait_for(reader.read(READ_BYTES), POLL_S)
        except TimeoutError:
            chunk = None
        if chunk == b"":
            break  # the gateway closed the socket
        if chunk:
            found = scanner.feed(chunk)
            if found:
                quiet_since = time.monotonic()
                totals.first_ts = totals.first_ts or time.time()
                pending += found
        if pending and (chunk is None or len(pending) >= ack_batch):
            writer.writelines(ack_frames(pending, ack_batch))
            await writer.drain()
            totals.acked += len(pending)
            totals.last_ts = time.time()
            pending = []


async def drain_acking_each_read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                 totals: Totals, ack_batch: int, idle_s: float) -> None:
    """As a client that acks what each read brought at once (frames of at most ``ack_batch``), until
    the process is done or nothing came for ``idle_s``: no waiting for a batch of acks to fill
    up."""
    scanner = Scanner()
    while not totals.done:
        try:
            async with asyncio.timeout(idle_s):
                chunk = await reader.read(READ_BYTES)
        except TimeoutError:
            break
        if chunk == b"":
            break  # the gateway closed the socket
        found = scanner.feed(chunk)
        if found:
            totals.first_ts = totals.first_ts or time.time()
            writer.writelines(ack_frames(found, ack_batch))
            await writer.drain()
            totals.acked += len(found)
            totals.last_ts = time.time()


async def main_async(args: argparse.Namespace) -> None:
    totals = Totals(args.total)
    members = await asyncio.gather(*(open_member(args.port, args.topic, args.group,
                                                 args.max_in_flight, args.schema_version)
                                     for _ in range(args.members)))
    run = drain_acking_each_read if args.ack_each_read else drain
    await asyncio.gather(*(run(reader, writer, totals, args.ack_batch, args.idle_s)
                           for reader, writer in members))
    for _, writer in members:
        writer.close()
    print(orjson.dumps({"acked": totals.acked, "first_ts": totals.first_ts,
                        "last_ts": totals.last_ts}).decode(),
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--total", type=int, required=True,
                        help="stop once this process acked so many")
    parser.add_argument("--max-in-flight", type=int, default=2000)
    parser.add_argument("--ack-batch", type=int, default=500)
    parser.add_argument("--schema-version", type=int, default=None,
                        help="pin the members to this schema version of the topic")
    parser.add_argument("--ack-each-read", action="store_true",
                        help="ack what each read brought at once instead of up to "
                             "--ack-batch at a time")
    parser.add_argument("--idle-s", type=float, default=3.0,
                        help="stop after this long without a message")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
