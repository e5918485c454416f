"""The compression rows of bench/run.py (goal 6): gzip and zstd publish bodies next to identity,
and permessage-deflate on delivery frames; with the realistic orders every row publishes."""

from __future__ import annotations

import gzip
import importlib
import random
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from publish import http_publish_for
from table import UNSUPPORTED, Row

PUBLISH_TOPIC = "bench"
WORDS = ("leave", "at", "the", "back", "door", "ring", "twice", "fragile", "gift", "wrap", "call",
         "before", "monday", "morning", "office", "reception", "please", "thanks")


def realistic_value(index: int) -> dict[str, Any]:
    """A ~200-byte JSON order that differs per message (identical values would flatter every
    codec)."""
    rng = random.Random(index)
    return {"order": 100_000 + index, "customer": f"cust-{rng.randrange(10_000):04d}",
            "currency": rng.choice(("EUR", "USD", "GBP")), "total": round(rng.uniform(1, 5000), 2),
            "items": [{"sku": f"sku-{rng.randrange(10_000)}", "qty": rng.randrange(1, 9)}
                      for _ in range(2)],
            "note": " ".join(rng.choice(WORDS) for _ in range(6)),
            "ts": 1795418703164 + rng.randrange(10**6)}


def realistic_body(batch: int) -> bytes:
    """A publish body of ``batch`` distinct realistic messages, acks=1."""
    return orjson.dumps({"acks": "1", "messages": [{"key": f"k{i}", "value": realistic_value(i)}
                                                   for i in range(batch)]})


async def compression_rows(base: str, seconds: float, cpu_seconds: Callable[[], float],
                           fresh_topic: Callable[[], Awaitable[None]]) -> list[Row]:
    """Goal 6: publish bodies in gzip and zstd next to identity (rate, wire bytes, gateway
    CPU), and what permessage-deflate makes of delivery frames."""
    rows: list[Row] = []
    plain = realistic_body(100)
    codecs: dict[str, Callable[[bytes], bytes] | None] = {"gzip": gzip.compress,
                                                          "zstd": zstd_compressor()}
    await fresh_topic()
    cpu0 = cpu_seconds()
    base_rate = await http_publish_for(base, PUBLISH_TOPIC, plain, 100, seconds, 16)
    base_cpu = (cpu_seconds() - cpu0) / base_rate.messages * 1e6
    for name, compress in codecs.items():
        figure = f"publish, Content-Encoding {name}, batch 100"
        refusal = "the client has no zstd module (backports.zstd)" if compress is None else \
            await encoding_refusal(base, name, compress(plain))
        if refusal:
            rows.append(Row("6", figure, None, "msg/s", status=UNSUPPORTED, note=refusal))
            continue
        body = compress(plain)
        await fresh_topic()
        cpu0 = cpu_seconds()
        result = await http_publish_for(base, PUBLISH_TOPIC, body, 100, seconds, 16,
                                        {"content-encoding": name})
        cpu = (cpu_seconds() - cpu0) / result.messages * 1e6
        rows.append(Row("6", figure, result.rate, "msg/s", base_rate.rate, "identity",
                        "shows when it helps",
                        note=f"wire {len(body) / 100:.0f} B/msg vs {len(plain) / 100:.0f} B/msg "
                             f"identity; gateway CPU {cpu:.1f} us/msg vs {base_cpu:.1f} us/msg"))
    rows.append(await websocket_deflate(base))
    return rows


async def encoding_refusal(base: str, name: str, body: bytes) -> str:
    """Feature detection: '' when the gateway takes a body in this Content-Encoding, else its
    answer."""
    async with aiohttp.ClientSession() as http, http.post(
            f"{base}/v1/topics/{PUBLISH_TOPIC}/messages", data=body,
            headers={"content-type": "application/json", "content-encoding": name}) as response:
        return "" if response.status == 200 else (f"refused: {response.status} "
                                                  f"{(await response.text())[:160]}")

async def websocket_deflate(base: str) -> Row:
    """The wire bytes of a message frame under the negotiated permessage-deflate."""
    figure = "WebSocket permessage-deflate"
    async with aiohttp.ClientSession() as http, http.ws_connect(
            f"{base}/v1/subscribe", params={"topic": PUBLISH_TOPIC},
            compress=15) as ws:
        negotiated = ws.compress
    if not negotiated:
        return Row("6", figure, None, "", status=UNSUPPORTED, note="not negotiated")
    frames = [orjson.dumps({"type": "message", "topic": PUBLISH_TOPIC, "partition": i % 6,
                            "offset": f"{1795418703164 + i}-0", "key": f"k{i}",
                            "value": realistic_value(i), "headers": {},
                            "timestamp_ms": 1795418703164 + i, "delivery_count": 1})
              for i in range(1000)]
    deflater = zlib.compressobj(wbits=-15)
    sizes = [len(deflater.compress(frame) + deflater.flush(zlib.Z_SYNC_FLUSH)) - 4
             for frame in frames]
    per_frame = sum(sizes) / len(sizes)
    plain = sum(len(frame) for frame in frames) / len(frames)
    return Row("6", figure + " (wire bytes per message frame)", per_frame, "B", plain,
               "uncompressed frame", "shows when it helps",
               note=f"negotiated (window bits {negotiated}); size computed with the same raw "
                    "deflate and context takeover over 1,000 distinct frames, not captured on "
                    "the wire")


def zstd_compressor() -> Callable[[bytes], bytes] | None:
    """zstd from the standard library (3.14+) or its backport (the gateway's own dependency), else
    zstandard."""
    for module in ("compression.zstd", "backports.zstd"):
        try:
            return importlib.import_module(module).compress  # type: ignore[no-any-return]
        except ImportError:
            continue
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard.ZstdCompressor().compress
