"""When compression pays: bytes on the wire vs CPU for publish bodies (none/gzip/zstd) and WebSocket
deliveries.

No servers: it runs the gateway's own code on realistic JSON (order events, ~350 B each):
  - publish, batch B: body bytes per message, the producer's compress CPU (client.compression) and
    the gateway's bounded inflate CPU (gateway.routes.bodies.inflate), per message;
  - delivery frames: permessage-deflate as aiohttp does it (raw deflate, context takeover, a sync
    flush per frame) on one-message and 16-message frames: bytes and CPU per message, for each
    socket (compression is per socket, so fan-out to N compressed sockets costs N times the CPU).
It also prints the link speed below which compressing saves wall time (bytes saved / CPU spent).

    python bench/compression.py --batch 100 --rounds 200
"""

from __future__ import annotations

import argparse
import random
import time
import zlib
from collections.abc import Callable

import orjson

from gateway.routes.bodies import inflate
from streamgate_client.compression import compress_body


def order_event(rng: random.Random, index: int) -> dict[str, object]:
    """A realistic event: repeated field names, ids, a few free-text and numeric fields."""
    return {"type": "order.created", "order_id": f"ord_{rng.getrandbits(48):012x}", "seq": index,
            "customer": {"id": f"cus_{rng.randrange(10**6):06d}",
                         "country": rng.choice(["DE", "FR", "US", "JP"]),
                         "tier": rng.choice(["free", "pro", "enterprise"])},
            "items": [{"sku": f"SKU-{rng.randrange(5000):04d}", "qty": rng.randrange(1, 5),
                       "price_cents": rng.randrange(100, 20000)}
                      for _ in range(rng.randrange(1, 4))],
            "currency": "EUR", "created_at": 1_763_900_000_000 + index * 37,
            "note": rng.choice(["", "gift wrap please", "leave at the door",
                                "call before delivery"])}


def per_call_us(action: Callable[[], object], rounds: int) -> float:
    started = time.process_time()
    for _ in range(rounds):
        action()
    return (time.process_time() - started) / rounds * 1e6


def publish_rows(batch: int, rounds: int, rng: random.Random) -> list[str]:
    body = orjson.dumps({"acks": "1", "messages": [{"key": f"k{i}", "value": order_event(rng, i)}
                                                   for i in range(batch)]})
    rows = [f"publish, batch {batch}: plain body {len(body):,} B "
            f"({len(body) / batch:.0f} B/message)",
            f"{'coding':<8} {'B/msg':>7} {'ratio':>6} {'client us/msg':>14} {'gateway us/msg':>15} "
            f"{'breakeven link':>15}"]
    rows.append(f"{'none':<8} {len(body) / batch:>7.0f} {1.0:>6.2f} {0.0:>14.2f} "
                f"{0.0:>15.2f} {'-':>15}")
    for coding in ("gzip", "zstd"):
        wire = compress_body(body, coding)  # type: ignore[arg-type]
        assert inflate(wire, coding, len(body)) == body
        client_us = per_call_us(lambda c=coding: compress_body(body, c),  # type: ignore[misc]
                                rounds) / batch
        server_us = per_call_us(lambda w=wire, c=coding: inflate(w, c, len(body)), rounds) / batch
        saved_bits = (len(body) - len(wire)) / batch * 8
        breakeven_mbit = saved_bits / (client_us + server_us)  # bits per microsecond = Mbit/s
        rows.append(f"{coding:<8} {len(wire) / batch:>7.0f} {len(body) / len(wire):>6.2f} "
                    f"{client_us:>14.2f} {server_us:>15.2f} {breakeven_mbit:>10.0f} Mbit/s")
    return rows


def deflate_frames(frames: list[bytes]) -> tuple[int, float]:
    """permessage-deflate as aiohttp sends it: one compressor per socket, a sync flush per frame."""
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    started = time.process_time()
    size = 0
    for frame in frames:
        # tail stripped (RFC 7692)
        size += len(compressor.compress(frame) + compressor.flush(zlib.Z_SYNC_FLUSH)) - 4
    return size, time.process_time() - started


def delivery_rows(messages: int, rng: random.Random) -> list[str]:
    events = [orjson.dumps({"type": "message", "partition": i % 6, "offset": f"1763900000000-{i}",
                            "value": order_event(rng, i)}) for i in range(messages)]
    rows = [f"WebSocket deliveries, {messages:,} messages ({sum(map(len, events)) / messages:.0f} "
            "B each as JSON)",
            f"{'frames':<28} {'B/msg plain':>12} {'B/msg deflate':>14} {'ratio':>6} "
            f"{'us/msg/socket':>14}"]
    for per_frame in (1, 16):
        frames = [b"[" + b",".join(events[i:i + per_frame]) + b"]" if per_frame > 1 else events[i]
                  for i in range(0, messages, per_frame)]
        plain = sum(map(len, frames))
        size, cpu_s = deflate_frames(frames)
        rows.append(f"{per_frame:>2} message(s) per frame       {plain / messages:>12.0f} "
                    f"{size / messages:>14.0f} {plain / size:>6.2f} "
                    f"{cpu_s / messages * 1e6:>14.2f}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--messages", type=int, default=20_000,
                        help="delivered messages for the WebSocket rows")
    args = parser.parse_args()
    rng = random.Random(8)
    print("\n".join(publish_rows(args.batch, args.rounds, rng)))
    print()
    print("\n".join(delivery_rows(args.messages, rng)))
    print("\nbreakeven link: below this link speed the bytes saved take longer to send "
          "than the CPU spent compressing and inflating (one core each side); above it, "
          "compression costs wall time.")


if __name__ == "__main__":
    main()
