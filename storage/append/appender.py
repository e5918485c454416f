"""The node-batching appender: one call per partition, a node's calls in one write on its lanes
(WAIT after them for acks=all), retried inside the write deadline; ``NodeReplies`` reads them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from storage._speedups import TransactionsRead, read_transactions
from storage.append.calls import PartitionCall
from storage.append.indexed import conflict_of
from storage.append.lua import is_reused_batch_key
from storage.cluster import (
    ClusterRouter,
    Deadline,
    is_transient,
    needs_refresh,
    report,
    translate,
)
from storage.errors import (
    IdempotencyConflict,
    NotEnoughReplicas,
    StorageError,
    StorageUnavailable,
)
from storage.keys import slot_of
from storage.memory import MemoryWatch
from storage.wire.connection import NodeAddress
from storage.wire.errors import AskError, NoScriptError, Redirect
from storage.wire.lanes import NodeLanes
from storage.wire.resp import encode_command
from storage.wire.scripts import LuaScript

R = TypeVar("R")
ReplyParser = Callable[[int, list[Any]], list[R]]


@dataclass(slots=True)
class _NodeOutcome(Generic[R]):
    """What one node's pipeline achieved: finished partitions, partitions to retry and why, a hard
    error."""

    results: dict[int, list[R]] = field(default_factory=dict)
    retry: dict[int, BaseException] = field(default_factory=dict)
    fatal: StorageError | None = None
    redirects: dict[int, NodeAddress] = field(default_factory=dict)


class Appender(Generic[R]):
    """Writes calls (one per partition) to the nodes owning their slots; ``parse`` reads one reply.

    A node's calls go on its lanes (``storage.wire.lanes``) as one payload of their ``wire()``
    bytes (an append without idempotency keys as a MULTI/XADD/EXEC transaction, folded back into
    the script's reply); concurrent writes to one node share one socket write. acks=all writes take
    a connection of their own so WAIT follows their writes; the acks=all writes to one node in one
    event-loop turn share it and one WAIT (a group commit). Generic over the script: each
    ``PartitionCall`` names its script, and ``parse`` turns one call's reply into that partition's
    results (the delayed-message scripts reuse the path with their own parsers).

    Retry semantics (documented on purpose): a connection error or timeout after the payload was
    sent leaves it unknown whether the script ran, and the batch is sent again. Records without an
    idempotency key may then be stored twice (at-least-once); records with one are safe, because
    the script returns the first offset. MOVED/ASK/READONLY (the slot moved after a failover or
    resharding) refresh the slot map and retry at once; NOSCRIPT (a fresh or promoted node lacks
    the script) loads it and retries; a transaction a node refuses is aborted whole (EXECABORT) and
    retried like a refused script. WAIT acknowledging fewer than ``min_insync_replicas`` replicas
    fails the call with NotEnoughReplicas; it is not retried because the entries are already on
    the primary and a blind re-send would duplicate them.
    """

    def __init__(self, router: ClusterRouter, parse: ReplyParser[R],
                 lanes: NodeLanes, memory: MemoryWatch | None = None) -> None:
        self._router = router
        self._memory = memory  # told what each node was sent, for its estimate between polls
        self._settings = s = router.settings
        # the longest a write attempt can take on the node connections: a connect, then the
        # reply watchdog's timeout with a WAIT's grace on top
        self._bounded_s = (s.socket_connect_timeout_s + s.node_socket_timeout_s
                           + s.wait_timeout_ms / 1000)
        self._parse = parse
        self._lanes = lanes
        self._loading: dict[tuple[NodeAddress, str], asyncio.Future[Any]] = {}

    async def write(self, topic: str, calls: Sequence[PartitionCall], *,
                    wait: bool) -> dict[int, list[R]]:
        """Run every call (concurrently per node) and return each partition's results in record
        order."""
        s = self._settings
        deadline = Deadline(s.write_deadline_s, s.retry_backoff_s, s.retry_backoff_max_s)
        pending = {call.partition: call for call in calls}
        asking: dict[int, NodeAddress] = {}
        done: dict[int, list[R]] = {}
        while True:
            outcomes = await self._attempt(topic, pending, asking, wait, deadline)
            retry = self._merge(outcomes, pending, done, asking)
            if not retry:
                return done
            await self._before_retry(retry, deadline)

    async def _attempt(
        self,
        topic: str,
        pending: dict[int, PartitionCall],
        asking: dict[int, NodeAddress],
        wait: bool,
        deadline: Deadline,
    ) -> list[_NodeOutcome[R]]:
        try:
            groups = self._group_by_node(topic, pending, asking)
        except Exception as exc:  # the slot map lost a slot (failover in progress)
            return [_NodeOutcome(retry=dict.fromkeys(pending, exc))]
        # queued on the nodes' node connections: no task, whatever the count
        writing = self._write_nodes_at_once(self._lanes, groups, asking, wait)
        if deadline.remaining() > self._bounded_s:
            # the connections' own bounds (connect timeout, reply watchdog) end the attempt
            # first: no timer of its own to arm and cancel on every write
            return await writing
        try:
            async with asyncio.timeout(deadline.remaining()):
                return await writing
        except TimeoutError as exc:
            return [_NodeOutcome(retry=dict.fromkeys(pending, exc))]

    def _group_by_node(
        self, topic: str, pending: dict[int, PartitionCall], asking: dict[int, NodeAddress]
    ) -> dict[NodeAddress, list[PartitionCall]]:
        groups: dict[NodeAddress, list[PartitionCall]] = {}
        for partition, call in pending.items():
            addr = asking.get(partition) or self._router.node_for_slot(slot_of(topic, partition))
            groups.setdefault(addr, []).append(call)
        return groups

    async def _write_node(
        self, addr: NodeAddress, calls: list[PartitionCall], asking: dict[int, NodeAddress],
        wait: bool, encoded: tuple[bytes, NodeReplies] | None = None,
    ) -> _NodeOutcome[R]:
        operation, started = ("append_wait" if wait else "append"), time.perf_counter()
        try:
            replies = await self._send(addr, calls, asking, wait, encoded)
        except Exception as exc:  # the whole pipeline is in doubt: retry all its partitions
            report(self._router.observer, operation, started, exc)
            return _NodeOutcome(retry={call.partition: exc for call in calls})
        return await self._outcome(addr, calls, replies, wait, operation, started)

    async def _write_nodes_at_once(self, lanes: NodeLanes,
                                   groups: dict[NodeAddress, list[PartitionCall]],
                                   asking: dict[int, NodeAddress],
                                   wait: bool) -> list[_NodeOutcome[R]]:
        """Writes to several nodes without a task per node: each node's calls queued in this turn,
        on its shared node connection (they leave together) or, with ``wait``, in its next group
        commit (WAIT), then the replies awaited node by node. A node whose shared connection is not
        open yet or is full goes the way of ``_write_node`` (a task, as ``gather`` makes).
        Cancelled, the group-commit shares not sent yet are dropped, as a cancelled task's would
        be."""
        started = time.perf_counter()
        queued: list[tuple[NodeAddress, list[PartitionCall], asyncio.Future[list[Any]]]] = []
        later: list[tuple[NodeAddress, list[PartitionCall], tuple[bytes, NodeReplies]]] = []
        memory = self._memory
        for addr, calls in groups.items():
            encoded = self._encode(calls, asking)
            if memory is not None:
                memory.note_written(addr, len(encoded[0]))
            try:
                future = self._submit(lanes, addr, encoded, wait)
            except Exception:  # the lanes are closed: _write_node reports it like any failed send
                future = None
            if future is None:
                later.append((addr, calls, encoded))
            else:
                queued.append((addr, calls, future))
        rest = asyncio.gather(*(self._write_node(addr, calls, asking, wait, encoded)
                                for addr, calls, encoded in later)) if later else None
        try:
            outcomes = [await self._collect(addr, calls, asking, future, started, wait)
                        for addr, calls, future in queued]
        except BaseException:
            if rest is not None:
                rest.cancel()
            if wait:
                for _, _, future in queued:
                    future.cancel()
            raise
        return outcomes if rest is None else outcomes + list(await rest)

    def _submit(self, lanes: NodeLanes, addr: NodeAddress, encoded: tuple[bytes, NodeReplies],
                wait: bool) -> asyncio.Future[list[Any]] | None:
        payload, shape = encoded
        if wait:
            return lanes.submit_replicated(addr, payload, shape.replies,
                                           replicas=self._settings.min_insync_replicas,
                                           timeout_ms=self._settings.wait_timeout_ms, shape=shape)
        return lanes.submit(addr, payload, shape)

    async def _collect(self, addr: NodeAddress, calls: list[PartitionCall],
                       asking: dict[int, NodeAddress], future: asyncio.Future[list[Any]],
                       started: float, wait: bool) -> _NodeOutcome[R]:
        """``_write_node`` for calls already queued (``_write_nodes_at_once``): their replies'
        outcome."""
        operation = "append_wait" if wait else "append"
        try:
            answer, *rest = await future
            replies = [*answer, *rest]  # a reply per call, then WAIT's
        except Exception as exc:  # the whole pipeline is in doubt: retry all its partitions
            report(self._router.observer, operation, started, exc)
            return _NodeOutcome(retry={call.partition: exc for call in calls})
        # no coroutine step when clean
        outcome = self._reported_outcome(calls, replies, wait, operation, started)
        if outcome.retry:
            await self._load_missing_scripts(addr, calls, outcome)
        return outcome

    async def _outcome(self, addr: NodeAddress, calls: list[PartitionCall], replies: list[Any],
                       wait: bool, operation: str, started: float) -> _NodeOutcome[R]:
        outcome = self._reported_outcome(calls, replies, wait, operation, started)
        if outcome.retry:
            await self._load_missing_scripts(addr, calls, outcome)
        return outcome

    def _reported_outcome(self, calls: list[PartitionCall], replies: list[Any], wait: bool,
                          operation: str, started: float) -> _NodeOutcome[R]:
        """The replies' outcome, told to the observer."""
        outcome = self._parse_replies(calls, replies, wait)
        report(self._router.observer, operation, started,
               outcome.fatal or (next(iter(outcome.retry.values())) if outcome.retry else None))
        return outcome

    async def _load_missing_scripts(self, addr: NodeAddress, calls: list[PartitionCall],
                                    outcome: _NodeOutcome[R]) -> None:
        if any(isinstance(exc, NoScriptError) for exc in outcome.retry.values()):
            await self._load_scripts(addr, {call.script for call in calls}, outcome)

    async def _send(self, addr: NodeAddress, calls: list[PartitionCall],
                    asking: dict[int, NodeAddress], wait: bool,
                    encoded: tuple[bytes, NodeReplies] | None = None) -> list[Any]:
        """Every call on one connection in order: a reply per call (``NodeReplies``), WAIT's
        last. ``encoded`` is the calls' payload when the caller has it already (``_encode``).
        Error replies come back as exception values."""
        lanes = self._lanes
        payload, shape = encoded or self._encode(calls, asking)
        if wait:  # WAIT last, shared with the other acks=all writes to this node in this loop turn
            answer, waited = await lanes.execute_replicated(
                addr, payload, shape.replies, replicas=self._settings.min_insync_replicas,
                timeout_ms=self._settings.wait_timeout_ms, shape=shape)
            return [*answer, waited]
        return list(await lanes.execute_shaped(addr, payload, shape))

    @staticmethod
    def _encode(calls: list[PartitionCall],
                asking: dict[int, NodeAddress]) -> tuple[bytes, NodeReplies]:
        """One node's calls as one RESP payload (ASKING before a redirected call, valid for the
        next command, the whole transaction, only) and how its replies are read."""
        asked = [call.partition in asking for call in calls]
        chunks = [b"%b%b" % (_ASKING_WIRE, call.wire()) if ask else call.wire()
                  for call, ask in zip(calls, asked, strict=True)]
        return b"".join(chunks), NodeReplies(calls, asked)

    def _parse_replies(self, calls: list[PartitionCall], replies: list[Any],
                       wait: bool) -> _NodeOutcome[R]:
        outcome: _NodeOutcome[R] = _NodeOutcome()
        for call, reply in zip(calls, replies, strict=False):
            self._take_reply(call.partition, reply, outcome)
        if wait and outcome.results:
            self._check_wait(replies[len(calls)], outcome)
        return outcome

    def _take_reply(self, partition: int, reply: Any, outcome: _NodeOutcome[R]) -> None:
        if not isinstance(reply, BaseException):
            outcome.results[partition] = self._parse(partition, reply)
        elif isinstance(reply, AskError):
            outcome.redirects[partition] = (reply.host, reply.port)
            outcome.retry[partition] = reply
        elif is_transient(reply) or isinstance(reply, NoScriptError):
            outcome.retry[partition] = reply
        elif outcome.fatal is None:
            outcome.fatal = (IdempotencyConflict(partition) if is_reused_batch_key(reply)
                             else conflict_of(partition, reply)
                             or translate(reply, f"append to partition {partition}"))

    def _check_wait(self, reply: Any, outcome: _NodeOutcome[R]) -> None:
        required = self._settings.min_insync_replicas
        acknowledged = reply if isinstance(reply, int) else 0
        if acknowledged < required and outcome.fatal is None:
            outcome.fatal = NotEnoughReplicas(required, acknowledged, min(outcome.results))

    async def _load_scripts(self, addr: NodeAddress, scripts: set[LuaScript],
                            outcome: _NodeOutcome[R]) -> None:
        try:
            for script in scripts:
                await self._load_once(addr, script)
        except Exception as exc:
            # retried with the partitions; the next attempt sees the same error
            for partition in outcome.retry:
                outcome.retry[partition] = exc

    async def _load_once(self, addr: NodeAddress, script: LuaScript) -> None:
        """SCRIPT LOAD, one at a time per node and script: concurrent writers that all saw NOSCRIPT
        share it."""
        key = (addr, script.sha)
        loading = self._loading.get(key)
        if loading is None:
            loading = asyncio.ensure_future(self._load_script(addr, script))
            self._loading[key] = loading
            loading.add_done_callback(lambda done: self._loading.pop(key, None) and None)
            # retrieved: no warning
            loading.add_done_callback(lambda done: done.cancelled() or done.exception())
        await asyncio.shield(loading)

    async def _load_script(self, addr: NodeAddress, script: LuaScript) -> None:
        (reply,) = await self._lanes.execute(addr, [("SCRIPT", "LOAD", script.lua)],
                                             exclusive=False)
        if isinstance(reply, BaseException):
            raise reply

    @staticmethod
    def _merge(
        outcomes: list[_NodeOutcome[R]],
        pending: dict[int, PartitionCall],
        done: dict[int, list[R]],
        asking: dict[int, NodeAddress],
    ) -> dict[int, BaseException]:
        retry: dict[int, BaseException] = {}
        for outcome in outcomes:
            if outcome.fatal is not None:
                raise outcome.fatal
            done.update(outcome.results)
            retry.update(outcome.retry)
        for partition in done:
            pending.pop(partition, None)
        # an ASK redirect is good for one attempt; afterwards the slot map decides again
        asking.clear()
        for outcome in outcomes:
            asking.update(outcome.redirects)
        return retry

    async def _before_retry(self, retry: dict[int, BaseException], deadline: Deadline) -> None:
        errors = list(retry.values())
        last = errors[-1]
        if any(needs_refresh(exc) and not isinstance(exc, AskError) for exc in errors):
            await self._router.recover(last)
        # Redirects and a freshly loaded script are retried at once; everything else backs off
        # first.
        quick = all(isinstance(exc, Redirect | NoScriptError) for exc in errors)
        if not await deadline.sleep(quick=quick):
            raise StorageUnavailable(f"append: cluster did not accept the write in time: "
                                     f"{last}") from last


class NodeReplies:
    """One node's calls' replies as the appender reads them: one reply per call (its replies
    folded, an ASKING's dropped), read straight from the bytes when every call is a transaction
    whose replies are clean."""

    __slots__ = ("_asked", "_calls", "_sizes", "replies")

    def __init__(self, calls: Sequence[PartitionCall], asked: Sequence[bool]) -> None:
        self._calls, self._asked = calls, asked
        self.replies = sum(asked) + sum([call.wire_replies for call in calls])
        sizes = [call.transaction_size for call in calls]
        self._sizes: list[int] | None = (
            None if any(asked) or None in sizes else [n for n in sizes if n is not None])

    def read(self, data: bytes, offset: int, /) -> TransactionsRead:
        """Every call's flat reply from the bytes (``read_transactions``), or None when not every
        call is a transaction."""
        sizes = self._sizes
        return None if sizes is None else read_transactions(data, offset, sizes)

    def fold(self, replies: list[Any], /) -> list[Any]:
        """Every call's reply (or error) from the replies hiredis read."""
        folded: list[Any] = []
        pos = 0
        for call, asked in zip(self._calls, self._asked, strict=True):
            pos += asked
            end = pos + call.wire_replies
            folded.append(call.fold_replies(replies[pos:end]))
            pos = end
        return folded


_ASKING_WIRE = encode_command(("ASKING",))
