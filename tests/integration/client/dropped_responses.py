"""A client middleware that loses the first answer on the way back, for retry tests."""

from __future__ import annotations

import aiohttp
from aiohttp import ClientHandlerType, ClientRequest, ClientResponse


class DropFirstResponse:
    """A client middleware that lets the first publish reach the gateway, then loses its answer."""

    def __init__(self) -> None:
        self.dropped = 0

    async def __call__(self, request: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
        response = await handler(request)
        if request.method == "POST" and self.dropped == 0:
            self.dropped += 1
            response.release()
            raise aiohttp.ServerDisconnectedError("injected: response lost")
        return response
