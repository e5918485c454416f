"""A local push endpoint for tests: records every request (verified against the subscription's
secrets) and answers as a script says."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import field
from typing import Any

import orjson
from aiohttp import web

from streamgate_client import verify_webhook

# (request number from 1, the request's messages) -> (status, headers) to answer with
Answer = Callable[[int, list[dict[str, Any]]], tuple[int, dict[str, str]]]


def always_ok(number: int, messages: list[dict[str, Any]]) -> tuple[int, dict[str, str]]:
    """Every request acked."""
    return 204, {}


@dataclasses.dataclass
class Received:
    """One request as the receiver saw it."""

    at: float
    headers: dict[str, str]
    body: bytes
    messages: list[dict[str, Any]]
    status: int


@dataclasses.dataclass
class Receiver:
    """The endpoint's state: its secrets, how it answers, what it got."""

    secrets: list[str] = field(default_factory=list)
    answer: Answer = always_ok
    stall_s: float = 0.0
    requests: list[Received] = field(default_factory=list)
    unverified: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.secrets:
            try:
                verify_webhook(self.secrets, dict(request.headers), body)
            except Exception:
                self.unverified += 1
                return web.Response(status=401)
        if "ce-specversion" not in request.headers:
            messages = orjson.loads(body)["messages"]
        else:  # a binary-mode CloudEvent: one message, its attributes in the headers
            messages = [{"value_bytes": body, "headers": dict(request.headers)}]
        if self.stall_s:
            await asyncio.sleep(self.stall_s)
        status, headers = self.answer(len(self.requests) + 1, messages)
        self.requests.append(Received(time.monotonic(), dict(request.headers), body, messages,
                                      status))
        return web.Response(status=status, headers=headers)

    def acked(self) -> list[dict[str, Any]]:
        """The messages of requests answered 2xx, in the order answered."""
        return [m for r in self.requests if 200 <= r.status < 300 for m in r.messages]

    def values_by_key(self) -> dict[str, list[Any]]:
        """Each key's acked values in the order they were acked."""
        by_key: dict[str, list[Any]] = {}
        for message in self.acked():
            by_key.setdefault(message["key"], []).append(message["value"])
        return by_key
