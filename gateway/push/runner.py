"""Runs the push subscriptions of the partitions this gateway owns: one member per (subscription,
owned partition), attached to the hub like any group member, started and stopped as ownership and
definitions change (async context manager)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import aiohttp

from gateway.delivery.hub import DeliveryHub, GroupConflict
from gateway.observe.metrics import GatewayMetrics
from gateway.push.definition import PushDefinition
from gateway.push.endpoint import EndpointPolicy, GuardedResolver
from gateway.push.member import PushMember
from gateway.push.sender import Endpoint
from partitioner.push_subscriptions import PushSubscriptions
from partitioner.tasks import cancel_until_done
from partitioner.topics import TopicMetadata
from storage.errors import StorageError

log = logging.getLogger(__name__)

RECONCILE_EVERY_S = 1.0
CONNECTIONS = 256  # open connections to every endpoint together
SubscriptionKey = tuple[str, str]  # (topic, group)
MemberKey = tuple[str, str, int]  # (topic, group, partition)


def endpoint_ssl(ca_path: str | None) -> ssl.SSLContext:
    """Certificates checked against ``ca_path`` (unset: the system's CAs)."""
    return ssl.create_default_context(cafile=ca_path)


class PushRunner:
    """This gateway's push members."""

    def __init__(self, subscriptions: PushSubscriptions, hub: DeliveryHub,
                 owned: Callable[[], frozenset[tuple[str, int]]],
                 topics: Callable[[str], TopicMetadata | None], policy: EndpointPolicy,
                 metrics: GatewayMetrics, ca_path: str | None = None, node_id: str = "") -> None:
        self._subscriptions, self._hub, self._owned, self._topics = (subscriptions, hub, owned,
                                                                     topics)
        self.policy, self._metrics, self._ca_path = policy, metrics, ca_path
        self._node_id = node_id  # named in each member's health: which gateway pushes
        self._endpoints: dict[SubscriptionKey, Endpoint] = {}
        self._members: dict[MemberKey, PushMember] = {}
        self._refused: set[MemberKey] = set()  # conflicts already logged
        self._changed = asyncio.Event()
        self._http: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PushRunner:
        connector = aiohttp.TCPConnector(resolver=GuardedResolver(self.policy),
                                         ssl=endpoint_ssl(self._ca_path), limit=CONNECTIONS)
        self._http = aiohttp.ClientSession(connector=connector,
                                           cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)
        self._subscriptions.listen(lambda _: self._changed.set())
        self._task = asyncio.create_task(self._run(), name="push-runner")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every member (their deliveries go back to the groups) and the HTTP client."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_until_done([task])
        for key in list(self._members):
            await self._stop(key)
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    def note_change(self) -> None:
        """Look again now (ownership or a definition changed)."""
        self._changed.set()

    def health(self, topic: str, partition: int, group: str) -> dict[str, Any] | None:
        """How the group's endpoint fares from the partition, if it is pushed from here."""
        member = self._members.get((topic, group, partition))
        return None if member is None else member.health_view()

    @property
    def members(self) -> frozenset[MemberKey]:
        """The (topic, group, partition) pushed from this gateway now."""
        return frozenset(self._members)

    async def _run(self) -> None:
        while True:
            try:
                await self.reconcile()
            except (StorageError, aiohttp.ClientError) as exc:
                log.warning("push subscriptions not reconciled, will retry: %s", exc)
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), RECONCILE_EVERY_S)

    async def reconcile(self) -> None:
        """Start the members this gateway should run and stop the others."""
        wanted: dict[MemberKey, PushDefinition] = {}
        owned = self._owned()
        for name, doc in self._subscriptions.all().items():
            definition = _definition(doc)
            topic = None if definition is None else self._topics(definition.topic)
            if definition is None or topic is None \
                    or topic.created_at_ms != definition.topic_created_at_ms:
                continue  # a topic deleted (or made again) since: the definition is not its
            partitions = [p for p in range(topic.partitions) if (topic.name, p) in owned]
            self._endpoint_for(name, definition, len(partitions) / topic.partitions)
            wanted.update({(*name, p): definition for p in partitions})
        for key, member in list(self._members.items()):
            wanted_now = wanted.get(key)
            if wanted_now is not None and same_delivery(wanted_now, member.definition):
                member.definition = wanted_now  # new secrets sign from the next request on
            else:
                await self._stop(key)
        for name in [n for n in self._endpoints if not any(m[:2] == n for m in wanted)]:
            del self._endpoints[name]
        for key, wanted_def in wanted.items():
            if key not in self._members:
                await self._start(key, wanted_def)

    def _endpoint_for(self, key: SubscriptionKey, definition: PushDefinition,
                      share: float) -> None:
        endpoint = self._endpoints.get(key)
        if endpoint is not None and same_delivery(endpoint.definition, definition):
            endpoint.definition = definition
            endpoint.reshare(share)
            return
        assert self._http is not None
        self._endpoints[key] = Endpoint(definition, self._http, self.policy, self._metrics,
                                        share)

    async def _start(self, key: MemberKey, definition: PushDefinition) -> None:
        topic, group, partition = key
        member = PushMember(definition, partition, self._endpoints[(topic, group)],
                            self._hub.settle, self._node_id)
        try:
            await self._hub.attach(member, partition, group, definition.group_config())
        except GroupConflict as exc:
            await member.aclose()
            if key not in self._refused:
                self._refused.add(key)
                log.warning("push subscription %s/%s not started on partition %d: %s", topic,
                            group, partition, exc)
            return
        self._refused.discard(key)
        self._members[key] = member
        member.start()

    async def _stop(self, key: MemberKey) -> None:
        member = self._members.pop(key)
        await member.aclose()
        with contextlib.suppress(StorageError):
            await self._hub.detach(member, key[2], key[1])


def same_delivery(a: PushDefinition, b: PushDefinition) -> bool:
    """Whether two definitions deliver alike: they may differ in their secrets only."""
    return replace(a, secrets=(), updated_at_ms=0) == replace(b, secrets=(), updated_at_ms=0)


def _definition(doc: dict[str, Any]) -> PushDefinition | None:
    try:
        return PushDefinition.from_doc(doc)
    except (KeyError, TypeError, ValueError, AttributeError):
        log.warning("ignoring a malformed push subscription: %.200r", doc)
        return None
