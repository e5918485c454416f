"""A loopback aiohttp server for the browser tests: its page and files, and everything else passed
on to the gateway (HTTP, WebSocket and event streams), so that the page and the gateway share one
origin; ``POST /__cut-event-streams`` drops every event stream it is passing on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
from aiohttp import WSMsgType, web
from multidict import CIMultiDict, CIMultiDictProxy

# Per-connection headers are not passed on; the client session sets Host and Content-Length itself.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"})


def passed_on(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP
                       and not k.lower().startswith("sec-websocket"))


SESSION = web.AppKey("session", aiohttp.ClientSession)
# the event streams being passed on: the browser's request and the gateway's answer
STREAMS: web.AppKey[list[tuple[web.Request, aiohttp.ClientResponse]]] = web.AppKey("streams")
CUT_STREAMS = "/__cut-event-streams"


async def pump(source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
               sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse) -> None:
    """Frames from ``source`` to ``sink`` until ``source`` closes; then ``sink`` closes with the
    same code and reason (the client acts on the gateway's close codes)."""
    while True:
        message = await source.receive()
        if message.type is WSMsgType.TEXT:
            await sink.send_str(message.data)
        elif message.type is WSMsgType.BINARY:
            await sink.send_bytes(message.data)
        else:
            closed = message.type is WSMsgType.CLOSE
            await sink.close(code=message.data if closed else 1011,
                             message=(message.extra or "").encode() if closed else b"")
            return


def make_app(gateway: str, files: dict[str, Path]) -> web.Application:
    """``files`` by URL path; any other path goes to ``gateway``."""
    app = web.Application()
    app[STREAMS] = []

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        # bodies pass through as they came (compressed or not)
        app[SESSION] = aiohttp.ClientSession(auto_decompress=False)
        yield
        await app[SESSION].close()

    app.cleanup_ctx.append(session_ctx)

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path in files:
            return web.FileResponse(files[request.path])
        if request.path == CUT_STREAMS and request.method == "POST":
            return web.json_response({"cut": cut_streams(request.app)})
        session = request.app[SESSION]
        target = gateway + str(request.rel_url)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await proxy_websocket(request, session, target.replace("http", "ws", 1))
        async with session.request(request.method, target, headers=passed_on(request.headers),
                                   data=await request.read(), allow_redirects=False) as answer:
            if answer.content_type == "text/event-stream":
                return await proxy_stream(request, answer)
            return web.Response(status=answer.status, headers=passed_on(answer.headers),
                                body=await answer.read())

    app.router.add_route("*", "/{path:.*}", handle)
    return app


async def proxy_websocket(request: web.Request, session: aiohttp.ClientSession,
                          target: str) -> web.StreamResponse:
    try:
        upstream = await session.ws_connect(target, headers=passed_on(request.headers))
    except aiohttp.WSServerHandshakeError as refused:
        # the client then asks again over plain HTTP for the problem document
        return web.Response(status=refused.status or 502)
    browser = web.WebSocketResponse()
    await browser.prepare(request)
    async with upstream:
        await asyncio.gather(pump(browser, upstream), pump(upstream, browser))
    return browser


async def proxy_stream(request: web.Request,
                       answer: aiohttp.ClientResponse) -> web.StreamResponse:
    """An event stream passed on chunk by chunk as it comes (never buffered), until either side
    ends it or ``cut_streams`` drops it."""
    response = web.StreamResponse(status=answer.status, headers=passed_on(answer.headers))
    await response.prepare(request)
    entry = (request, answer)
    request.app[STREAMS].append(entry)
    try:
        async for chunk in answer.content.iter_any():
            await response.write(chunk)
    except (aiohttp.ClientError, ConnectionError):
        pass  # cut, or the browser left
    finally:
        request.app[STREAMS].remove(entry)
    return response


def cut_streams(app: web.Application) -> int:
    """Drop every event stream being passed on, as a gateway that died would: the browser's
    connection is reset and the gateway's answer closed. How many were cut."""
    held = app[STREAMS]
    streams = list(held)
    for request, answer in streams:
        if request.transport is not None:
            request.transport.abort()
        answer.close()
    return len(streams)


@contextmanager
def serve_page(gateway: str, files: dict[str, Path]) -> Iterator[str]:
    """The server on a free loopback port, on an event loop in a thread of its own (the test's
    thread runs Playwright's); its base URL. Stopped, and the thread joined, afterwards."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="page-server", daemon=True)
    thread.start()
    runner = web.AppRunner(make_app(gateway, files))

    async def start() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port: int = runner.addresses[0][1]
        return port

    try:
        port = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
