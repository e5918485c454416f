"""An identity provider's JWKS endpoint on a loopback port, for the tests of the auth config's
``jwks_url``: the test publishes and rotates ES256 keys, signs tokens, and counts fetches."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec


class Idp:
    """The key set served at ``url``; ``publish`` replaces it (a rotation drops the kids not
    named)."""

    def __init__(self, port: int = 0) -> None:
        self.private: dict[str, ec.EllipticCurvePrivateKey] = {}
        self.document: dict[str, Any] = {"keys": []}
        self.status = 200
        self.fetches = 0
        self._served = asyncio.Condition()
        # known before start when the port is given: a gateway may be pointed at it first
        self.url = f"http://127.0.0.1:{port}/jwks.json" if port else ""
        self._port = port
        self._runner: web.AppRunner | None = None

    def publish(self, *kids: str) -> None:
        """Serve the public keys of ``kids`` (made on first use) and no others."""
        for kid in kids:
            self.private.setdefault(kid, ec.generate_private_key(ec.SECP256R1()))
        self.document = {"keys": [
            {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.private[kid].public_key())),
             "kid": kid, "alg": "ES256", "use": "sig"} for kid in kids]}

    def token(self, kid: str, subject: str | None = None) -> str:
        """An ES256 token naming ``kid``, signed by its key (a key made here for an unknown
        kid)."""
        key = self.private.get(kid) or ec.generate_private_key(ec.SECP256R1())
        claims = {"sub": subject or f"by-{kid}", "exp": int(time.time()) + 300}
        return jwt.encode(claims, key, algorithm="ES256", headers={"kid": kid})

    async def start(self) -> None:
        """Listen on 127.0.0.1 (the port given, or a free one)."""
        app = web.Application()
        app.router.add_get("/jwks.json", self._serve)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self._port).start()
        host, port = self._runner.addresses[0][:2]
        self._port, self.url = port, f"http://{host}:{port}/jwks.json"

    async def stop(self) -> None:
        """Stop listening: fetches are refused (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def fetched(self, count: int) -> None:
        """Wait until the key set has been asked for ``count`` times."""
        async with self._served:
            await self._served.wait_for(lambda: self.fetches >= count)

    async def _serve(self, request: web.Request) -> web.Response:
        async with self._served:
            self.fetches += 1
            self._served.notify_all()
        return web.json_response(self.document, status=self.status)


@asynccontextmanager
async def serving_jwks(*kids: str, port: int = 0) -> AsyncIterator[Idp]:
    """An IdP serving the keys of ``kids`` until the block ends."""
    idp = Idp(port)
    idp.publish(*kids)
    await idp.start()
    try:
        yield idp
    finally:
        await idp.stop()
