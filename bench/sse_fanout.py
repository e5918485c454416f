"""A lean Server-Sent Events load client for fan-out, the twin of bench/fanout.py (same command
line, same READY and JSON line) with ``GET /v1/topics/{topic}/events`` in place of the WebSocket.

It counts '"type":"message"' in the raw bytes (each ``data:`` line holds one message frame, and a
chunk of the response never splits an event), so it parses no more than the WebSocket client does.

    python bench/sse_fanout.py --port 8080 --topic fan --sockets 500 --expect 1000 --seconds 30
"""

from __future__ import annotations

import asyncio

from fanout import Stream, arguments, main_async

# the first line of every stream, written once its start positions are pinned
STARTED = b"retry:"


async def open_stream(port: int, topic: str) -> Stream:
    """Open a broadcast event stream from now and wait for its first line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write((f"GET /v1/topics/{topic}/events?from=latest&max_in_flight=1000 HTTP/1.1\r\n"
                  f"Host: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"event stream refused: {head[:200]!r}")
    seen = b""
    while STARTED not in seen:
        chunk = await reader.read(4096)
        if not chunk:
            raise RuntimeError("the event stream ended before it started")
        seen += chunk
    return reader, writer


def main() -> None:
    asyncio.run(main_async(arguments(__doc__), open_stream))


if __name__ == "__main__":
    main()
