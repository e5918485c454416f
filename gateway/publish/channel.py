"""A connection's publish frames: each one through the publish flow HTTP uses, many in flight
(bounded in frames and bytes), taken in arrival order up to the queueing of their writes, and
answered by id."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from gateway.auth.gatekeeper import Gatekeeper
from gateway.auth.principal import Principal
from gateway.errors import Problem, problem_from
from gateway.publish.flow import publish_batch
from gateway.publish.frames import PublishFrame, problem_frame, published_frame
from gateway.publish.validation import PublishBatch
from gateway.services import Services

log = logging.getLogger(__name__)

Send = Callable[[Sequence[bytes]], Awaitable[None]]
INSTANCE = "/v1/publish"
TOO_MANY = "too-many-in-flight"


class PublishChannel:
    """The publish side of one connection for ``principal``. A frame waits for the one before it
    to pass its checks and queue its write (``placed``), so that two frames of one connection for
    one partition are written in the order they came; the writes themselves overlap."""

    def __init__(self, services: Services, gatekeeper: Gatekeeper, principal: Principal,
                 send: Send) -> None:
        self._services, self._gatekeeper, self._principal = services, gatekeeper, principal
        self._send = send
        settings = services.settings
        self.max_in_flight = settings.ws_publish_max_in_flight
        self.max_in_flight_bytes = 2 * settings.max_batch_bytes
        self._frames = 0
        self._bytes = 0
        self._last: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def use_principal(self, principal: Principal) -> None:
        """Check the frames taken from now on for ``principal``: the same one, its token
        refreshed (its claims may grant other topics)."""
        self._principal = principal

    def ready_frame(self) -> dict[str, Any]:
        """What the client may have in flight: the ``ready`` frame."""
        return {"type": "ready", "max_in_flight": self.max_in_flight,
                "max_in_flight_bytes": self.max_in_flight_bytes,
                "max_frame_bytes": self._services.settings.max_batch_bytes}

    def take(self, frame: PublishFrame) -> None:
        """Start publishing ``frame`` (or refuse it at once when too much is in flight)."""
        if self._frames >= self.max_in_flight \
                or self._bytes + frame.size > self.max_in_flight_bytes:
            self._start(self._refuse(frame))
            return
        self._frames += 1
        self._bytes += frame.size
        previous, mine = self._last, asyncio.get_running_loop().create_future()
        self._last = mine
        self._start(self._publish(frame, previous, mine))

    def send_soon(self, work: bytes | Coroutine[Any, Any, None]) -> None:
        """Send a frame (or run a step) once the loop turns, tracked as a frame in flight is."""
        self._start(self._answer(work) if isinstance(work, bytes) else work)

    async def drain(self, timeout_s: float) -> None:
        """Until every frame taken was written or failed (their answers may go nowhere)."""
        others = [task for task in self._tasks if task is not asyncio.current_task()]
        if others:
            await asyncio.wait(others, timeout=timeout_s)

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, frame: PublishFrame, previous: asyncio.Future[None] | None,
                       mine: asyncio.Future[None]) -> None:
        def placed() -> None:
            if not mine.done():
                mine.set_result(None)

        async def read_batch() -> PublishBatch:
            return frame.batch(self._services.limits)

        try:
            if previous is not None and not previous.done():
                await previous
            answer = await publish_batch(self._services, self._gatekeeper, self._principal,
                                         frame.topic, read_batch, frame.incoming(), placed)
            out = published_frame(frame.id, answer)
        except Exception as exc:  # answered as HTTP would answer it
            out = problem_frame(frame.id, self._problem(exc), INSTANCE)
        finally:
            placed()
            self._frames -= 1
            self._bytes -= frame.size
        await self._answer(out)

    async def _refuse(self, frame: PublishFrame) -> None:
        problem = Problem(429, TOO_MANY, "Too many publishes in flight",
                          f"this connection has {self._frames} publish frames in flight "
                          f"({self._bytes} bytes); at most {self.max_in_flight} "
                          f"({self.max_in_flight_bytes} bytes) may await their answer",
                          retry_after_s=1)
        await self._answer(problem_frame(frame.id, problem, INSTANCE))

    async def _answer(self, frame: bytes) -> None:
        # the client went away: its write stands, the answer goes nowhere
        with contextlib.suppress(ConnectionResetError):
            await self._send([frame])

    def _problem(self, exc: Exception) -> Problem:
        problem = problem_from(exc)
        if problem.status >= 500 and problem.status not in (503, 507):
            log.error("publish frame failed", exc_info=exc)
        return problem
