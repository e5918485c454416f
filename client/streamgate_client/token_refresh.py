"""A provider's fresh token sent over an open WebSocket shortly before the current one expires (an
``auth`` frame), so the socket outlives its token instead of being closed with 4401."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import orjson

from streamgate_client.credentials import Credentials, bearer_token, refresh_due_s
from streamgate_client.errors import ClientError

log = logging.getLogger(__name__)

# writes one text frame: a coroutine for aiohttp's socket, None for the publish socket's wire
SendText = Callable[[bytes], object]


class SocketTokenRefresh:
    """One socket's refresh timer. At the current token's refresh time (the credentials' margin:
    30 s or a tenth of its life before its ``exp``) it asks the provider for a fresh token, sends
    it as ``{"type": "auth", "token": ...}``, waits for the gateway's ``authenticated`` and arms
    itself for the new token. Whatever fails stops it, and the gateway's 4401 at the old token's
    expiry takes the reconnect path; a fresh token the gateway refuses closes the socket (4401,
    4403). Does nothing without a provider; ``cancel`` when the socket closes."""

    __slots__ = ("_answer", "_credentials", "_offered", "_send", "_task", "auth", "refreshes")

    def __init__(self, credentials: Credentials, auth: dict[str, str], send: SendText) -> None:
        self._credentials, self._send = credentials, send
        self.auth = auth  # the headers whose token the socket holds now
        self.refreshes = 0  # fresh tokens the gateway took
        self._answer: asyncio.Future[None] | None = None
        self._offered = auth  # the headers of the auth frame awaiting its answer
        self._task = (asyncio.ensure_future(self._run()) if credentials.refreshable
                      and bearer_token(auth) is not None else None)

    def authenticated(self, frame: dict[str, Any]) -> None:
        """The gateway's ``authenticated`` frame arrived on the socket."""
        if self._answer is not None and not self._answer.done():
            self.auth = self._offered
            self.refreshes += 1
            self._answer.set_result(None)

    def cancel(self) -> None:
        """The socket closed: no timer left behind; idempotent."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        with contextlib.suppress(ClientError, ConnectionError, RuntimeError):
            while True:
                if not await self._refreshed():
                    return

    async def _refreshed(self) -> bool:
        """Wait until the socket's token is due, send a fresh one; whether the gateway took it."""
        held = self.auth
        token = bearer_token(held)
        due_s = refresh_due_s(token, time.time()) if token is not None else math.inf
        if due_s == math.inf:
            return False
        await asyncio.sleep(max(0.0, due_s - time.time()))
        self._credentials.forget(held)  # the provider is asked even if the clock woke us early
        fresh = await self._credentials.headers()
        fresh_token = bearer_token(fresh)
        if fresh_token is None or fresh_token == token:
            log.info("the token provider gave no fresh token: the socket closes at its expiry")
            return False
        self._answer = asyncio.get_running_loop().create_future()
        self._offered = fresh
        sending = self._send(orjson.dumps({"type": "auth", "token": fresh_token}))
        if inspect.isawaitable(sending):
            await sending
        await self._answer
        return True
