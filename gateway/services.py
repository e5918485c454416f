"""What the request handlers need, gathered in one object stored on the app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from gateway.auth.quotas import QuotaRules
from gateway.connections import ConnectionLimits
from gateway.delivery.hub import DeliveryHub
from gateway.delivery.membership import Membership
from gateway.delivery.ports import DeliveryPorts, OpenSubscription
from gateway.delivery.pull import Puller
from gateway.group_quota import GroupQuota
from gateway.growth import Growth
from gateway.observe.hotspots import PublishStats
from gateway.observe.metrics import GatewayMetrics
from gateway.publish.publisher import Publisher
from gateway.publish.validation import PublishLimits
from gateway.push.endpoint import EndpointPolicy
from gateway.quotas.in_flight import InFlightQuota
from gateway.quotas.retained import RetainedQuota
from gateway.schemas.migrate import SchemaVersions, ValueConverter
from gateway.schemas.validation import SchemaGate, SchemaSource
from gateway.settings import GatewaySettings
from gateway.throttle import Throttle
from partitioner.cache import TopicCache
from partitioner.errors import CoordinationUnavailable, TopicNotFound
from partitioner.etcd.connection import EtcdConnection
from partitioner.group_binding import GroupBindings
from partitioner.group_policy import NO_BACKOFF, GroupPolicies, GroupPolicy, RetryBackoff
from partitioner.hashing import KeylessSpreader
from partitioner.ownership import PartitionOwnership
from partitioner.push_subscriptions import PushSubscriptions
from partitioner.registry import TopicRegistry
from partitioner.schemas import SchemaRegistry
from partitioner.topics import TopicMetadata, validate_topic_name
from storage.protocol import StreamStore
from storage.verdicts import RedisVerdictBoard

ReadinessCheck = Callable[[], Awaitable[None]]


@dataclass
class Services:
    """The gateway's collaborators; built once per process by ``gateway.app``."""

    settings: GatewaySettings
    store: StreamStore
    registry: TopicRegistry
    cache: TopicCache
    publisher: Publisher
    metrics: GatewayMetrics
    readiness_checks: Sequence[tuple[str, ReadinessCheck]] = ()
    # consumer groups; None where no group store is wired (unit tests)
    delivery: DeliveryHub | None = None
    etcd: EtcdConnection | None = None  # exclusive-group membership; None without etcd
    puller: Puller | None = None  # HTTP pull for groups
    # group ack timeout / max deliveries in etcd, for the owners' sweep
    policies: GroupPolicies | None = None
    # publish, read and subscribe rate limits; None when none is configured
    throttle: Throttle | None = None
    group_quota: GroupQuota | None = None  # groups per principal (etcd ledger); None without etcd
    growth: Growth | None = None  # grows topics; None without etcd
    ownership: PartitionOwnership | None = None  # who owns what; None without etcd
    # the forced filter each group's members read through; None with auth off or without etcd
    group_bindings: GroupBindings | None = None
    verdicts: RedisVerdictBoard | None = None  # the partition owners' group verdicts
    # who each principal's retained bytes and in-flight messages count against, with the caps
    quota_rules: QuotaRules = field(default_factory=QuotaRules)
    retained_quota: RetainedQuota | None = None  # None when no principal has a retained-bytes cap
    in_flight_quota: InFlightQuota | None = None  # None when no principal has an in-flight cap
    # push subscriptions' definitions (etcd mirror) and where endpoints may be; None without etcd
    push_subscriptions: PushSubscriptions | None = None
    push_policy: EndpointPolicy = field(default_factory=lambda: EndpointPolicy.of((), (), False))
    schemas: SchemaSource | None = None  # topics' schema versions (watch-fed); None without etcd
    schema_registry: SchemaRegistry | None = None  # registers versions in etcd; None without etcd
    schema_gate: SchemaGate | None = field(init=False)  # validation at the door, from ``schemas``
    # values converted to the schema version a reader asks for; None without a registry mirror
    value_converter: ValueConverter | None = field(init=False)
    connections: ConnectionLimits = field(init=False)  # open subscriptions per principal
    # closed with 1001 on shutdown
    subscriptions: set[OpenSubscription] = field(default_factory=set)
    stats: PublishStats = field(default_factory=PublishStats)  # per-partition rates and heavy keys
    spreader: KeylessSpreader = field(default_factory=KeylessSpreader)
    limits: PublishLimits = field(init=False)

    def __post_init__(self) -> None:
        self.limits = PublishLimits.from_settings(self.settings)
        self.schema_gate = None if self.schemas is None else SchemaGate(self.schemas)
        self.value_converter = (ValueConverter(self.schemas)
                                if isinstance(self.schemas, SchemaVersions) else None)
        self.connections = ConnectionLimits(self.settings.max_connections_per_principal,
                                            self.settings.max_unauthenticated_connections)

    async def topic(self, name: str) -> TopicMetadata:
        """A topic's metadata from the watch-fed cache; etcd is read only on a miss (e.g. watch
        lag)."""
        cached = self.cache.get(name)
        if cached is not None:
            return cached
        try:
            validate_topic_name(name)
        except Exception:
            raise TopicNotFound(name) from None
        metadata = await self.registry.get(name)
        self.cache.remember(metadata)
        return metadata

    def delivery_ports(self) -> DeliveryPorts:
        """What a subscription is served with (gateway.delivery.subscription)."""
        settings, membership = self.settings, None
        if self.etcd is not None:
            membership = Membership(self.etcd, self.cache, settings.node_id, settings.etcd_prefix,
                                    settings.member_lease_ttl_s,
                                    settings.group_initial_assignment_delay_ms / 1000)
        return DeliveryPorts(self.store, self.cache, self.metrics, self.delivery, membership,
                             self.note_group_policy, self.subscriptions)

    def note_group_policy(self, topic: str, group: str, ack_timeout_ms: int,
                          max_deliveries: int, retry_backoff: RetryBackoff = NO_BACKOFF) -> None:
        """Remember how ``group`` is served, for the partition owners' sweep (written to etcd in the
        background)."""
        if self.policies is not None:
            self.policies.note(topic, group,
                               GroupPolicy(ack_timeout_ms, max_deliveries, retry_backoff))


    async def retry_backoff_of(self, topic: str, group: str) -> RetryBackoff:
        """The retry backoff ``group`` is served with on ``topic`` (none when unknown or etcd does
        not answer: a nack then comes back as before backoffs)."""
        if self.policies is None:
            return NO_BACKOFF
        try:
            policy = await self.policies.of(topic, group)
        except CoordinationUnavailable:
            return NO_BACKOFF
        return NO_BACKOFF if policy is None else policy.retry_backoff


SERVICES = web.AppKey("services", Services)


def services_of(request: web.Request) -> Services:
    """The services of the app serving ``request``."""
    return request.app[SERVICES]
