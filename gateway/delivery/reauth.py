"""An open socket's credential: the close at its token's expiry, and later ``auth`` frames whose
fresh token (the same principal's) moves that expiry instead of a reconnect."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.auth.errors import AuthError, Forbidden, UnknownKeyId
from gateway.auth.principal import Principal
from gateway.delivery.wire import authenticated_frame, error_frame
from gateway.errors import WS_CLOSE_TOO_MANY_CONNECTIONS, WS_CLOSE_UNAUTHENTICATED, close_code_for

if TYPE_CHECKING:
    from gateway.auth.gatekeeper import Gatekeeper

AUTH = "auth"
# a socket takes this many auth frames in a row, then one more per refill: a client refreshes a
# token a few times in its life, a flood only costs verifications
AUTH_FRAME_BURST = 5
AUTH_FRAME_REFILL_S = 10.0

Close = Callable[[int, str], None]
Reply = Callable[[dict[str, Any]], None]
# raises AuthError when the socket's grants (its topic, its group) are not the new principal's
Regrant = Callable[[Principal], None]


class SocketCredential:
    """Who holds one socket and until when. A JWT socket is closed with 4401 at its token's ``exp``
    (plus the leeway) unless an ``auth`` frame brings a valid token first: it must name the same
    principal (4403 otherwise) with the same forced headers, and its claims must still grant what
    the socket does (``regrant``). A socket whose credential does not expire (an API key) takes no
    later auth frame."""

    __slots__ = ("_allowance", "_close", "_counted_at", "_expiry", "_gatekeeper", "_regrant",
                 "_reply", "_verifying", "principal")

    def __init__(self, gatekeeper: Gatekeeper, principal: Principal, close: Close, reply: Reply,
                 regrant: Regrant) -> None:
        self._gatekeeper, self._close, self._reply = gatekeeper, close, reply
        self._regrant = regrant
        self.principal = principal
        self._allowance = float(AUTH_FRAME_BURST)
        self._counted_at = time.monotonic()
        self._verifying: asyncio.Task[None] | None = None
        self._expiry = self._arm(principal)

    def take(self, frame: dict[str, Any]) -> None:
        """A client frame of type ``auth`` on the open socket."""
        if self.principal.kind != "jwt":
            self._reply(error_frame("bad-frame", "this socket's credential does not expire: an "
                                    "auth frame is taken only on a socket opened with a token"))
        elif not self._within_rate():
            self._close(WS_CLOSE_TOO_MANY_CONNECTIONS,
                        f"more than {AUTH_FRAME_BURST} auth frames in a row (then one per "
                        f"{AUTH_FRAME_REFILL_S:g} s); retry in {AUTH_FRAME_REFILL_S:g} s")
        elif self._verifying is not None:
            self._reply(error_frame("bad-frame", "the previous auth frame is still verified"))
        else:
            self._verify(frame.get("token"))

    def cancel(self) -> None:
        """The socket closed: no timer, no verification left behind; idempotent."""
        if self._expiry is not None:
            self._expiry.cancel()
        if self._verifying is not None:
            self._verifying.cancel()

    def _verify(self, token: object) -> None:
        if not isinstance(token, str) or not token:
            self._close(WS_CLOSE_UNAUTHENTICATED, "a later auth frame needs a non-empty 'token'")
            return
        try:
            self._apply(self._gatekeeper.authenticate_token(token))
        except UnknownKeyId:
            self._verifying = asyncio.create_task(self._verify_after_key_refresh(token),
                                                  name="socket-reauth")
        except AuthError as exc:
            self._close(close_code_for(exc), exc.message)

    async def _verify_after_key_refresh(self, token: str) -> None:
        try:
            await self._gatekeeper.refresh_keys()
            self._apply(self._gatekeeper.authenticate_token(token))
        except AuthError as exc:
            self._close(close_code_for(exc), exc.message)
        finally:
            self._verifying = None

    def _apply(self, fresh: Principal) -> None:
        held = self.principal
        if fresh.name != held.name:
            raise Forbidden(f"the new token names {fresh.name!r}, not {held.name!r}: a socket "
                            "keeps its principal")
        gatekeeper = self._gatekeeper
        if gatekeeper.forced_headers(fresh) != gatekeeper.forced_headers(held):
            raise Forbidden("the new token's claims change the forced header filter: reconnect")
        self._regrant(fresh)
        self.principal = fresh
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry = self._arm(fresh)
        self._reply(authenticated_frame(fresh.name, fresh.expires_at_s))

    def _arm(self, principal: Principal) -> asyncio.TimerHandle | None:
        """Close with 4401 when the token expires."""
        deadline_s = self._gatekeeper.session_deadline_s(principal)
        if deadline_s is None:
            return None
        return asyncio.get_running_loop().call_later(
            max(0.0, deadline_s - time.time()), self._close, WS_CLOSE_UNAUTHENTICATED,
            "token expired")

    def _within_rate(self) -> bool:
        now = time.monotonic()
        self._allowance = min(float(AUTH_FRAME_BURST),
                              self._allowance + (now - self._counted_at) / AUTH_FRAME_REFILL_S)
        self._counted_at = now
        if self._allowance < 1.0:
            return False
        self._allowance -= 1.0
        return True
