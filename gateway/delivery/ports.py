"""What delivery takes of the gateway: the ports a subscription is served with, built by
gateway.services, and what shutdown needs of a served subscription."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.delivery.hub import DeliveryHub
from gateway.delivery.membership import Membership
from gateway.observe.metrics import GatewayMetrics
from partitioner.cache import TopicCache
from partitioner.group_policy import RetryBackoff
from storage.protocol import StreamStore

# (topic, group, ack_timeout_ms, max_deliveries, retry_backoff): remembered for the owners' sweep
PolicyNote = Callable[[str, str, int, int, RetryBackoff], None]


class OpenSubscription(Protocol):
    """What shutdown needs of a served subscription (gateway.delivery.subscription)."""

    def request_shutdown(self) -> None: ...

    async def finished(self, timeout_s: float) -> None: ...


@dataclass(frozen=True, slots=True)
class DeliveryPorts:
    """The collaborators a subscription is served with."""

    store: StreamStore
    cache: TopicCache  # topics' partition counts as they grow
    metrics: GatewayMetrics
    hub: DeliveryHub | None  # consumer groups; None where no group store is wired
    membership: Membership | None  # exclusive and key_shared groups; None without etcd
    note_group_policy: PolicyNote
    subscriptions: set[OpenSubscription]  # open subscriptions, closed with 1001 on shutdown
