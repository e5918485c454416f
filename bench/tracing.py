"""What trace context costs publish, in the same run: the hooks' CPU while tracing is off against
the gateway's own CPU per request, a traceparent on every request, and OpenTelemetry spans on.

    python bench/tracing.py --seconds 5    # alone: starts its own stack and gateways
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import timeit
from pathlib import Path

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from publish import http_publish_for, publish_body, wait_ready
from services import GatewayProcess
from table import Row, below, render_text

from gateway.observe.tracing import TRACEPARENT, delivery_span, spans_on
from gateway.publish.validation import PublishBatch
from streamgate_devstack import DevStack, DevStackConfig

PARTITIONS = 6
WORKERS = 32
# the hooks a request and its delivery run while tracing is off, against the gateway's CPU
OFF_COST_RATIO = 0.03
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
REQUEST_HEADERS = CIMultiDictProxy(CIMultiDict({
    "Host": "127.0.0.1", "Content-Type": "application/json", "Content-Length": "60",
    "User-Agent": "wrk", "Accept": "*/*"}))


def off_hooks_us() -> float:
    """Microseconds of what a single-message publish and its delivery run for tracing while it is
    off (the header lookup, the spans switch, the batch passed on, one delivery hook)."""
    batch = PublishBatch("1", [b"k"], [b"1"], 1)
    page = [batch]

    def hooks() -> None:
        incoming = None if TRACEPARENT not in REQUEST_HEADERS else REQUEST_HEADERS
        if spans_on():
            raise AssertionError("spans are on in the bench process")
        if incoming:
            raise AssertionError("no traceparent was sent")
        delivery_span("t", "g", "exclusive", page)

    runs = 200_000
    return min(timeit.repeat(hooks, number=runs, repeat=5)) / runs * 1e6


async def gateway_us_per_request(gateway: GatewayProcess, topic: str, seconds: float) -> float:
    """The gateway's CPU per single-message publish (``/proc``), over ``seconds`` of load."""
    before = gateway.cpu_seconds()
    run = await http_publish_for(gateway.base, topic, publish_body(1), 1, seconds, WORKERS)
    return (gateway.cpu_seconds() - before) / max(run.messages, 1) * 1e6


async def create(base: str, name: str) -> None:
    async with aiohttp.ClientSession() as http, \
            http.post(f"{base}/v1/topics", json={"name": name, "partitions": PARTITIONS}) as r:
        assert r.status == 201, await r.text()


async def batch_rate(base: str, topic: str, seconds: float,
                     headers: dict[str, str] | None = None) -> float:
    """Batch 100, acks=1, 32 connections: the better of two runs."""
    runs = [await http_publish_for(base, topic, publish_body(100), 100, seconds, WORKERS,
                                   headers=headers) for _ in range(2)]
    return max(run.rate for run in runs)


async def tracing_rows(plain: GatewayProcess, traced: GatewayProcess,
                       seconds: float) -> list[Row]:
    """The rows, each against the same load without tracing in the same run."""
    await create(plain.base, "trace-plain")
    await create(traced.base, "trace-spans")
    per_request = await gateway_us_per_request(plain, "trace-plain", seconds)
    hooks = off_hooks_us()
    without = await batch_rate(plain.base, "trace-plain", seconds)
    with_context = await batch_rate(plain.base, "trace-plain", seconds, {TRACEPARENT: PARENT})
    spans = await batch_rate(traced.base, "trace-spans", seconds, {TRACEPARENT: PARENT})
    return [
        below(Row("10", "tracing off: its hooks per single-message publish and delivery", hooks,
                  "us", per_request, "gateway CPU per single-message publish",
                  f"< {OFF_COST_RATIO}x the gateway's CPU",
                  note="what a request with no traceparent runs for tracing, timed alone"),
              OFF_COST_RATIO, on_ratio=True),
        Row("10", "publish, batch 100, a traceparent on every request", with_context, "msg/s",
            without, "the same requests without one", "information",
            note="every message stores the request's trace context as a header"),
        Row("10", "publish, batch 100, otel_enabled (spans sent over OTLP/HTTP)", spans, "msg/s",
            without, "a gateway with otel_enabled off", "information",
            note="one PRODUCER span per request, exported in batches to a local sink"),
    ]


async def otlp_sink() -> tuple[web.AppRunner, int]:
    """An OTLP/HTTP endpoint that takes every export and keeps nothing."""
    async def take(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", take)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, int(port)


async def tracing_rows_beside(stack: DevStack, plain: GatewayProcess,
                              seconds: float) -> list[Row]:
    """The rows against ``plain``, with a gateway of ``otel_enabled`` started beside it for the
    spans' row (exporting to a local OTLP sink)."""
    runner, port = await otlp_sink()
    env = {"STREAMGATE_OTEL_ENABLED": "true",
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    try:
        with GatewayProcess(stack, extra_env=env) as traced:
            await wait_ready(traced.base)
            return await tracing_rows(plain, traced, seconds)
    finally:
        await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    async def run(stack: DevStack) -> list[Row]:
        with GatewayProcess(stack) as plain:
            await wait_ready(plain.base)
            return await tracing_rows_beside(stack, plain, args.seconds)

    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp))) as stack:
        rows = asyncio.run(run(stack))
    print(f"{os.cpu_count()} cores")
    print(render_text(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
