"""One partition of a push subscription on the gateway owning it: a group member whose deliveries
become signed requests to the endpoint, settled by the answers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from itertools import repeat
from operator import attrgetter
from typing import Any

from gateway.delivery.params import Mode, SubscribeParams
from gateway.delivery.session import MessageRef, Session
from gateway.push.definition import PushDefinition
from gateway.push.payload import PushRequest, body_size, build_request
from gateway.push.sender import Endpoint, Outcome
from partitioner.errors import PartitionerError
from storage.errors import StorageError
from storage.models import Delivery

log = logging.getLogger(__name__)

# (member, partition, refs, action, delay_ms, reason) -> how many it settled (the hub's settle)
Settle = Callable[[Session, int, list[MessageRef], str, int, str], Awaitable[int]]
UNSENDABLE = "push: the message cannot be sent as an HTTP request"
_ENTRY_OFFSET = attrgetter("entry.offset")


async def _no_frames(frames: Sequence[bytes]) -> None:
    """A push member writes no frames: its deliveries leave as requests."""


def member_params(definition: PushDefinition, credit: int) -> SubscribeParams:
    """What the hub serves a push member with."""
    return SubscribeParams(
        topic=definition.topic, group=definition.group,
        mode=Mode.KEY_SHARED if definition.key_ordered else Mode.SHARED,
        start=definition.start, cursor={}, from_time_ms=None, max_in_flight=credit,
        ack_timeout_ms=definition.ack_timeout_ms, max_deliveries=definition.max_deliveries,
        auto_ack=False, filter=definition.header_filter(),
        retry_backoff=definition.retry_backoff)


class PushMember(Session):
    """Takes deliveries of one partition as a session does, and sends them in batches, at most the
    endpoint's slots at a time; every answer settles its batch through the hub."""

    def __init__(self, definition: PushDefinition, partition: int, endpoint: Endpoint,
                 settle: Settle, owner: str = "") -> None:
        credit = max(1, endpoint.slots * definition.batch_max_messages)
        super().__init__(f"push-{definition.group}-{partition}", definition.topic,
                         member_params(definition, credit), _no_frames,
                         slow_client_timeout_s=definition.timeout_ms / 1000)
        self.definition, self.partition = definition, partition
        self._endpoint, self._settle = endpoint, settle
        self._queue: deque[Delivery] = deque()
        self._queued = asyncio.Event()
        self._requests: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self.health: dict[str, Any] = {"node": owner, "last_status": None, "last_error": None,
                                       "last_success_ms": None, "last_failure_ms": None}

    def start(self) -> None:
        """Start sending what the hub hands over."""
        self._task = asyncio.create_task(self._run(), name=f"push-{self.topic}/{self.partition}")

    async def aclose(self) -> None:
        """Stop sending; requests still out are cancelled (their deliveries come back to the
        group: the hub takes them back when the member detaches)."""
        tasks = [t for t in [self._task, *self._requests] if t is not None]
        self._task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._queue.clear()
        await super().aclose()

    def health_view(self) -> dict[str, Any]:
        """How the endpoint fares from this partition, for the owner's posted verdict."""
        breaker = self._endpoint.breaker
        return {**self.health, "breaker": breaker.state,
                "consecutive_failures": breaker.consecutive_failures,
                "in_flight": len(self.in_flight)}

    # --- what the hub calls ----------------------------------------------------------------------
    def offer(self, delivery: Delivery) -> bool:
        """A push member takes no delivery that needs no ack."""
        return False

    def offer_page(self, deliveries: list[Delivery]) -> int:
        """Take deliveries of the partition, in order, as far as the credit goes."""
        if not self.has_credit or not deliveries:
            return 0
        taken = deliveries[:self.credit]
        self.credit -= len(taken)
        # what the session sizes its next read by (it writes no frames to learn it from): left at
        # its first guess, every read would fetch a handful and every request carry as few
        self._frame_bytes = max(body_size(self.topic, taken[0]), body_size(self.topic, taken[-1]))
        deadline = time.monotonic() + self.params.ack_timeout_ms / 1000
        self.in_flight.update(zip(zip(repeat(self.partition), map(_ENTRY_OFFSET, taken)),
                                  repeat(deadline)))
        self._queue.extend(taken)
        self._queued.set()
        return len(taken)

    def send_control(self, frame: dict[str, Any]) -> None:
        """Control frames (paused, resumed, assignments) have nobody to go to."""
        log.debug("push member %s: %s", self.id, frame.get("type"))

    # --- sending ---------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            await self._queued.wait()
            await self._endpoint.take_turn(self._keep_alive, self.params.ack_timeout_ms / 3000)
            # the batch is cut once the turn is ours: what came while every slot was busy rides
            # along, so a loaded endpoint gets fuller requests instead of more of them
            batch = self._next_batch()
            if not batch:
                self._endpoint.unused()
                continue
            task = asyncio.create_task(self._deliver(batch))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    def _next_batch(self) -> list[Delivery]:
        """The next deliveries still held (one whose ack timeout passed went back to the group),
        up to the batch's count and bytes."""
        definition, queue, held = self.definition, self._queue, self.in_flight
        batch: list[Delivery] = []
        size = 0
        while queue and len(batch) < definition.batch_max_messages:
            delivery = queue[0]
            if (self.partition, delivery.entry.offset) not in held:
                queue.popleft()
                continue
            grown = size + body_size(self.topic, delivery)
            if batch and grown > definition.batch_max_bytes:
                break
            batch.append(queue.popleft())
            size = grown
        if not queue:
            self._queued.clear()
        return batch

    async def _keep_alive(self) -> None:
        """Restart the ack timeout of what waits here for the endpoint."""
        await self._settled([(self.partition, d.entry.offset) for d in self._queue], "extend")

    async def _deliver(self, batch: list[Delivery]) -> None:
        outcome = Outcome("reject", "rejected", error=UNSENDABLE)
        try:
            request = self._request(batch)
            if request is not None:
                outcome = await self._endpoint.send(request)
        finally:
            self._endpoint.done(outcome)
        self._note(outcome)
        refs = [(self.partition, d.entry.offset) for d in batch]
        if outcome.action == "ack":
            await self._settled(refs, "ack")
        elif outcome.action == "reject":
            await self._settled(refs, "reject", reason=f"push: {outcome.error}")
        else:
            delay_ms = 0 if outcome.retry_after_s is None else int(outcome.retry_after_s * 1000)
            await self._settled(refs, "nack", delay_ms)

    def _request(self, batch: list[Delivery]) -> PushRequest | None:
        definition = self.definition
        keys = definition.signing_keys(int(time.time() * 1000))
        try:
            return build_request(self.topic, definition.group, definition.format, batch, keys,
                                 dict(definition.headers))
        except ValueError:  # a stored header aiohttp cannot send (a line break in a ce- value)
            return None

    def _note(self, outcome: Outcome) -> None:
        now_ms = int(time.time() * 1000)
        self.health["last_status"] = outcome.status
        if outcome.action == "nack":
            self.health.update(last_error=outcome.error, last_failure_ms=now_ms)
        else:
            self.health["last_success_ms"] = now_ms
            if outcome.action == "reject":
                self.health.update(last_error=outcome.error, last_failure_ms=now_ms)

    async def _settled(self, refs: Iterable[MessageRef], action: str, delay_ms: int = 0,
                       reason: str = "") -> None:
        try:
            await self._settle(self, self.partition, list(refs), action, delay_ms, reason)
        except (StorageError, PartitionerError) as exc:
            # still pending: the group redelivers them after their ack timeout
            log.warning("push %s/%s group %s: %s not settled: %s", self.topic, self.partition,
                        self.definition.group, action, exc)
