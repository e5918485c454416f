"""The cost of event sourcing next to plain publish, in the same run: key indexes on every append,
conditional appends, and key history reads.

    python bench/event_sourcing.py --seconds 5    # alone: starts its own stack and gateway
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import aiohttp
import orjson
from publish import VALUE, Result, drive_for, http_publish_for, publish_body
from services import on_own_gateway
from table import Row, at_least, render_text

PARTITIONS = 6
# a key-indexed topic keeps at least this share of plain publish throughput
INDEXED_RATIO = 0.85
WORKERS = 32


async def create(http: aiohttp.ClientSession, base: str, name: str, key_index: bool,
                 compact: bool = False) -> None:
    async with http.post(f"{base}/v1/topics", json={"name": name, "partitions": PARTITIONS,
                                                    "key_index": key_index,
                                                    "compact": compact}) as response:
        assert response.status == 201, await response.text()


async def best_batch_rate(base: str, topic: str, seconds: float) -> Result:
    """Batch 100, acks=1, 32 connections (wrk when installed): the better of two runs."""
    runs = [await http_publish_for(base, topic, publish_body(100), 100, seconds, WORKERS)
            for _ in range(2)]
    return max(runs, key=lambda run: run.rate)


async def keyed_appends_rate(base: str, topic: str, seconds: float, batch: int,
                             conditional: bool) -> float:
    """Closed-loop writers, each appending batches of ``batch`` messages of a key of its own; a
    conditional writer expects the offset its previous append answered (the aggregate's
    position), as an event-sourced service does."""
    url = f"{base}/v1/topics/{topic}/messages"
    headers = {"content-type": "application/json"}
    written = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=WORKERS)) as http:

        async def writer(index: int, deadline: float) -> None:
            nonlocal written
            key = f"{topic}-{batch}-{index}-{conditional}"
            messages = [{"key": key, "value": VALUE} for _ in range(batch)]
            position = "none"
            while time.perf_counter() < deadline:
                if conditional:
                    messages[0]["expected_offset"] = position
                async with http.post(url, data=orjson.dumps({"messages": messages}),
                                     headers=headers) as response:
                    body = await response.read()
                    assert response.status == 200, body
                position = orjson.loads(body)["results"][-1]["offset"]
                written += batch

        started = time.perf_counter()
        await asyncio.gather(*(writer(i, started + seconds) for i in range(WORKERS)))
        return written / (time.perf_counter() - started)


async def history_rate(base: str, topic: str, seconds: float) -> tuple[float, float]:
    """Messages/s read as pages of 100: a key's history, and its partition's replay."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=WORKERS)) as http:
        async with http.get(f"{base}/v1/topics/{topic}/history",
                            params={"key": "k7", "order": "desc", "limit": "1"}) as response:
            partition = (await response.json())["partition"]

        async def pages(url: str, params: dict[str, str]) -> float:
            read = 0

            async def page(_: int) -> None:
                nonlocal read
                async with http.get(url, params=params) as response:
                    read += len((await response.json())["messages"])

            elapsed, _ = await drive_for(seconds, WORKERS, page)
            return read / elapsed

        history = await pages(f"{base}/v1/topics/{topic}/history",
                              {"key": "k7", "limit": "100"})
        replay = await pages(f"{base}/v1/topics/{topic}/partitions/{partition}/messages",
                             {"limit": "100"})
    return history, replay


async def event_sourcing_rows(base: str, seconds: float) -> list[Row]:
    """The rows of the event-sourcing costs, each against plain publish in the same run."""
    async with aiohttp.ClientSession() as http:
        await create(http, base, "es-plain", False)
        await create(http, base, "es-indexed", True)
        await create(http, base, "es-compacted", True, compact=True)
    plain = await best_batch_rate(base, "es-plain", seconds)
    indexed = await best_batch_rate(base, "es-indexed", seconds)
    compacted = await best_batch_rate(base, "es-compacted", seconds)
    rows = [at_least(Row("9", "key-indexed publish, batch 100, acks=1", indexed.rate, "msg/s",
                         plain.rate, "plain publish, same load", f">= {INDEXED_RATIO}x plain",
                         note=f"every append also indexes its key; {WORKERS} connections, "
                              f"the better of two runs each"), INDEXED_RATIO, on_ratio=True),
            Row("9", "compacted-topic publish, batch 100, acks=1", compacted.rate, "msg/s",
                plain.rate, "plain publish, same load", "information",
                note="100 keys updated over and over: each update also tells compaction")]
    for batch in (100, 1):
        unconditional = await keyed_appends_rate(base, "es-indexed", seconds, batch, False)
        conditional = await keyed_appends_rate(base, "es-indexed", seconds, batch, True)
        rows.append(Row("9", f"conditional append, batch {batch} of one key", conditional,
                        "msg/s", unconditional, "the same appends without expectation",
                        "information", note=f"{WORKERS} writers, each expecting the offset its "
                                            "last append answered"))
    history, replay = await history_rate(base, "es-indexed", seconds)
    rows.append(Row("9", "key history, pages of 100", history, "msg/s", replay,
                    "partition replay, pages of 100", "information",
                    note="one key among 100 on its partition: read from its index"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    rows = on_own_gateway(lambda base: event_sourcing_rows(base, args.seconds))
    print(f"{os.cpu_count()} cores")
    print(render_text(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
