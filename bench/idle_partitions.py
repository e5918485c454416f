"""Idle cost of owned partitions: gateway CPU while it owns many partitions and nothing is
published.

Starts its own Redis Cluster (3 primaries x 1 replica) and etcd on free loopback ports and one
gateway process, creates ``--topics`` topics of ``--partitions`` partitions each (the single gateway
owns them all), waits for the duties to settle, then reads the gateway's CPU time over
``--seconds``. What it measures: the partition duties (delayed-message promotion every 100 ms, lag
every 5 s, sweep every 5 s, retention every 30 s) with no traffic. Nothing here is a test assertion.

    python bench/idle_partitions.py --topics 8 --partitions 64 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import aiohttp
from publish import process_cpu_seconds, serving_gateway

from streamgate_devstack import DevStack, DevStackConfig


async def run(args: argparse.Namespace, stack: DevStack) -> None:
    async with serving_gateway(stack) as (base, gateway), aiohttp.ClientSession() as http:
        for index in range(args.topics):
            async with http.post(f"{base}/v1/topics",
                                 json={"name": f"idle{index}",
                                       "partitions": args.partitions}) as response:
                assert response.status == 201, await response.text()
        await asyncio.sleep(args.settle)
        cpu_before, started = process_cpu_seconds(gateway.pid), time.monotonic()
        await asyncio.sleep(args.seconds)
        share = (process_cpu_seconds(gateway.pid) - cpu_before) / (time.monotonic() - started)
    print(f"{args.topics * args.partitions} owned partitions, idle: gateway CPU "
          f"{100 * share:.1f}% of a core over {args.seconds:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=64, help="partitions per topic")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds to wait after creating the topics")
    args = parser.parse_args()
    with (tempfile.TemporaryDirectory(prefix="sg-idle-") as tmp,
          DevStack(DevStackConfig(data_dir=Path(tmp))) as stack):
        asyncio.run(run(args, stack))


if __name__ == "__main__":
    main()
