"""Building the aiohttp application and wiring its resources, in one place."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack

from aiohttp import web

from gateway.auth.event_tokens import event_token_signer_for
from gateway.auth.gatekeeper import GATEKEEPER, authenticate, gatekeeper_from_settings
from gateway.auth.limits import LimitOverrides
from gateway.auth.quotas import QuotaRules
from gateway.delivery.dead_letters import DeadLetterWriter
from gateway.delivery.growth_gate import Gate, group_gate
from gateway.delivery.hub import DeliveryHub
from gateway.delivery.pause_gate import PauseGate
from gateway.delivery.pull import PULL_CONSUMER, Puller
from gateway.delivery.receipts import ReceiptSigner, signer_for
from gateway.duties.archive import ArchiveDuty, ArchivePolicy
from gateway.duties.runner import DutyRunner, DutySettings
from gateway.duties.sweep import GroupSweep, SweepSettings
from gateway.duties.verdict_duty import VerdictKeeper, VerdictSources, etcd_holders, ttl_ms_for
from gateway.errors import Handler, problem_for
from gateway.group_quota import GroupNames, GroupQuota
from gateway.growth import Growth, GrowthPauses
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.server_log import server_log
from gateway.observe.tracing import tracing
from gateway.publish.publisher import Publisher
from gateway.push.endpoint import EndpointPolicy
from gateway.push.runner import PushRunner
from gateway.quotas.in_flight import InFlightQuota
from gateway.quotas.retained import RetainedQuota
from gateway.routes import (
    cluster,
    console,
    event_tokens,
    events,
    group_pause,
    group_scale,
    groups,
    health,
    history,
    messages,
    publish_socket,
    purge,
    push,
    quotas,
    schemas,
    subscribe,
    topics,
)
from gateway.services import SERVICES, Services
from gateway.settings import GatewaySettings
from gateway.throttle import RateLimits, Throttle
from gateway.tls import etcd_tls
from partitioner.cache import TopicCache
from partitioner.errors import TopicNotFound
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd_registry import EtcdTopicRegistry
from partitioner.group_binding import GroupBindings
from partitioner.group_ledger import GroupLedger
from partitioner.group_pause import GroupPauses
from partitioner.group_policy import GroupPolicies
from partitioner.growth import GrowthAcks
from partitioner.ownership import PartitionOwnership
from partitioner.push_subscriptions import PushSubscriptions
from partitioner.schemas import SchemaMirror, SchemaRegistry
from partitioner.topic_watcher import TopicWatcher
from partitioner.topics import TopicMetadata
from storage.archive.object_store import S3Settings, open_archive
from storage.archive.tier import ArchiveSettings
from storage.redis_store import RedisStoreSettings, RedisStreamStore

SETTINGS = web.AppKey("settings", GatewaySettings)
RECEIPT_SIGNER = web.AppKey("receipt_signer", ReceiptSigner)
BODY_SLACK_BYTES = 1024
# reading the rest of a refused body so the client sees the answer: long enough, not a hold
LINGERING_S = 2.0
# a growth waits this much longer than a node's lease for every gateway to pause publishing
GROWTH_PAUSE_SLACK_S = 5.0


@web.middleware
async def gateway_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every request: authenticate it, run the handler with its errors rendered as problem+json,
    count the response by route template, method and status.

    One middleware rather than three: a WebSocket request holds its middlewares' coroutine frames
    for its whole life, and each frame is also crossed on every resume of the handler, so every
    extra layer costs CPU on every request, a measurable share of a small publish's.
    """
    try:
        pending = authenticate(request)
        if pending is not None:  # a token naming a key id the JWKS URL may have published since
            await pending
        response = await handler(request)
    except Exception as exc:
        response = problem_for(request, exc)
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    metrics = request.app[SERVICES].metrics
    metrics.http_requests.labels(route, request.method, str(response.status)).inc()
    return response


def build_app(settings: GatewaySettings, env: Mapping[str, str] | None = None) -> web.Application:
    """The application with its routes and middlewares; services are attached by the caller or
    wiring.

    ``env`` supplies secrets the auth config names by environment variable (the CLI passes
    ``os.environ``). Raises ``AuthConfigError`` when the auth settings or the auth config file are
    unusable.
    """
    app = web.Application(
        client_max_size=settings.max_batch_bytes + BODY_SLACK_BYTES,
        middlewares=[gateway_middleware],
        # gateway.routes.bodies decodes bodies itself, with a bound
        handler_args={"auto_decompress": False,
                      # aiohttp's keep-alive timer also closes a connection whose request head is
                      # not complete: the head gets the body's deadline (and an idle keep-alive
                      # connection is closed after it).
                      "keepalive_timeout": settings.body_read_timeout_s,
                      "lingering_time": LINGERING_S,
                      # a refused request head is one line in the log, never its bytes
                      "logger": server_log()},
    )
    app[SETTINGS] = settings
    app[GATEKEEPER] = gatekeeper_from_settings(settings, env or {})
    app[event_tokens.EVENT_TOKENS] = event_token_signer_for(settings.receipt_secret)
    for module in (topics, messages, publish_socket, history, subscribe, groups, group_scale,
                   group_pause, purge, health, cluster, quotas, schemas, event_tokens,
                   events, push):
        module.add_routes(app)
    if settings.console_enabled:
        console.add_routes(app)
    return app


def app_with_services(services: Services, env: Mapping[str, str] | None = None) -> web.Application:
    """An application serving already-built services (tests, embedding)."""
    app = build_app(services.settings, env)
    app[SERVICES] = services
    return app


def create_app(settings: GatewaySettings, env: Mapping[str, str] | None = None) -> web.Application:
    """The production application: opens Redis and etcd on startup and closes them on shutdown.

    Raises ValueError when ``receipt_secret`` is too short (besides ``build_app``'s
    AuthConfigError)."""
    app = build_app(settings, env)
    app[RECEIPT_SIGNER] = signer_for(settings.receipt_secret)
    app.cleanup_ctx.append(_backends)
    return app


async def _backends(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    metrics = GatewayMetrics.create()
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(tracing(settings.otel_enabled, "streamgate-gateway"))
        key_checks = await app[GATEKEEPER].keep_keys_fresh(stack, metrics.registry)
        archive = None if settings.archive_url == "none" else await stack.enter_async_context(
            open_archive(settings.archive_url, archive_s3_settings(settings)))
        store = await stack.enter_async_context(
            RedisStreamStore(redis_store_settings(settings), observer=metrics.observe_redis,
                             archive=archive, archive_settings=archive_settings(settings)))
        metrics.watch_redis_memory(lambda: store.memory.nodes)
        etcd = EtcdConnection(settings.etcd_endpoints, timeout_s=settings.etcd_timeout_s,
                              tls=etcd_tls(settings))
        etcd.observer = metrics.observe_etcd
        await stack.enter_async_context(etcd)
        cache = TopicCache()
        watcher = await stack.enter_async_context(TopicWatcher(etcd, cache,
                                                               prefix=settings.etcd_prefix))
        registry = EtcdTopicRegistry(etcd, prefix=settings.etcd_prefix)
        group_store = store.groups
        dead_letters = DeadLetterWriter(registry, store, settings.dedup_ttl_ms, metrics)
        policies = await stack.enter_async_context(GroupPolicies(etcd, prefix=settings.etcd_prefix))

        def gates(topic: str, group: str) -> Gate:
            return group_gate(cache, topic, group, group_store, store)

        pauses = PauseGate(await stack.enter_async_context(
            GroupPauses(etcd, prefix=settings.etcd_prefix)), cache)
        hub = await stack.enter_async_context(DeliveryHub(group_store, settings.node_id,
                                                          dead_letters, metrics, gates, pauses))
        ownership = await stack.enter_async_context(PartitionOwnership(
            etcd, node_id=settings.node_id, prefix=settings.etcd_prefix,
            lease_ttl_s=settings.owner_lease_ttl_s, address=settings.advertised_url,
            partitions=lambda: {topic.name: topic.partitions for topic in cache.all()}))
        push_subscriptions = await stack.enter_async_context(
            PushSubscriptions(etcd, prefix=settings.etcd_prefix))
        push_policy = EndpointPolicy.of(settings.push_allowed_hosts, settings.push_allowed_cidrs,
                                        settings.push_allow_http)
        push = await stack.enter_async_context(PushRunner(
            push_subscriptions, hub, lambda: ownership.owned, cache.get, push_policy, metrics,
            settings.push_ca_path, settings.node_id))
        sweep = GroupSweep(
            group_store, store.consumers, policies, dead_letters.acting_as("sweep"), metrics,
            SweepSettings(settings.node_id,
                          dead_consumer_idle_ms=int(settings.owner_lease_ttl_s * 2000),
                          service_consumers=frozenset({PULL_CONSUMER}),
                          paused=pauses.paused))
        duties = await stack.enter_async_context(DutyRunner(
            ownership, cache, delayed=store.delayed, retention=store.retention, streams=store,
            groups=group_store, metrics=metrics,
            settings=DutySettings(settings.promote_interval_s, settings.retention_interval_s,
                                  settings.lag_interval_s, settings.sweep_interval_s,
                                  settings.archive_interval_s),
            sweep=sweep, archive=_archive_duty(store, settings, metrics),
            verdicts=VerdictKeeper(VerdictSources(
                group_store, store.consumers, policies, store.verdicts, cache.get,
                etcd_holders(etcd, settings.etcd_prefix),
                settings.hot_retention_ms if store.archive is not None else 0,
                ttl_ms_for(settings.lag_interval_s),
                paused=lambda topic, group: pauses.pause_of(topic, group) is not None,
                push_health=push.health), metrics)))

        async def duties_are_healthy() -> None:
            if not duties.healthy:
                raise RuntimeError("partition duties unhealthy: "
                                   f"{duties.crashed or 'ownership lease not held'}")

        publisher = await stack.enter_async_context(
            Publisher(store, store.delayed, metrics, settings.dedup_ttl_ms,
                      settings.acks0_queue_batches, settings.retry_after_s,
                      settings.acks0_queue_bytes, settings.acks0_queue_wait_ms))

        growth = Growth(registry, cache, store, GrowthAcks(etcd, prefix=settings.etcd_prefix),
                        pause_limit_s=settings.owner_lease_ttl_s + GROWTH_PAUSE_SLACK_S,
                        node_id=settings.node_id)
        await stack.enter_async_context(GrowthPauses(cache, publisher.in_flight, growth,
                                                     settings.node_id))

        async def watch_is_live() -> None:
            if not watcher.healthy:
                raise RuntimeError("topic metadata watch is down")

        quota_rules = QuotaRules(app[GATEKEEPER].quota_entries,
                                 settings.max_retained_bytes_per_principal,
                                 settings.max_in_flight_per_principal)
        retained_quota = None
        if quota_rules.enabled("retained_bytes"):
            retained_quota = await stack.enter_async_context(
                _retained_quota(store, registry, cache, metrics, settings))
        in_flight_quota = None
        if quota_rules.enabled("in_flight_messages"):
            in_flight_quota = await stack.enter_async_context(InFlightQuota(
                store.in_flight, settings.node_id, settings.quota_sync_interval_s, metrics))
        app[SERVICES] = Services(
            settings=settings,
            store=store,
            registry=registry,
            cache=cache,
            publisher=publisher,
            metrics=metrics,
            readiness_checks=[("redis", store.ping), ("etcd", etcd.ping),
                              ("topic_watch", watch_is_live), ("duties", duties_are_healthy),
                              *key_checks],
            delivery=hub,
            etcd=etcd,
            puller=Puller(group_store, dead_letters.acting_as("pull"), metrics,
                          app[RECEIPT_SIGNER], gates=gates, pauses=pauses),
            policies=policies,
            throttle=_throttle(store, settings, app[GATEKEEPER].limit_overrides),
            group_quota=_group_quota(settings, etcd, group_store, cache),
            growth=growth,
            ownership=ownership,
            group_bindings=(None if settings.auth_mode == "none"
                            else GroupBindings(etcd, prefix=settings.etcd_prefix)),
            verdicts=store.verdicts,
            quota_rules=quota_rules,
            retained_quota=retained_quota,
            in_flight_quota=in_flight_quota,
            push_subscriptions=push_subscriptions,
            push_policy=push_policy,
            schemas=await stack.enter_async_context(
                SchemaMirror(etcd, prefix=settings.etcd_prefix)),
            schema_registry=SchemaRegistry(etcd, prefix=settings.etcd_prefix),
        )
        yield


def _retained_quota(store: RedisStreamStore, registry: EtcdTopicRegistry, cache: TopicCache,
                    metrics: GatewayMetrics, settings: GatewaySettings) -> RetainedQuota:
    async def topic(name: str) -> TopicMetadata | None:
        # the registry on a miss: a topic this gateway's watch has not seen yet keeps its buckets
        try:
            return cache.get(name) or await registry.get(name)
        except TopicNotFound:
            return None

    return RetainedQuota(store.quotas, topic, store.partition_info, metrics,
                         settings.quota_sync_interval_s)


def _group_quota(settings: GatewaySettings, etcd: EtcdConnection, groups: GroupNames,
                 cache: TopicCache) -> GroupQuota | None:
    # Without authentication every caller is the same principal: a cap would be one global cap on
    # groups.
    if settings.max_groups_per_principal == 0 or settings.auth_mode == "none":
        return None
    return GroupQuota(GroupLedger(etcd, prefix=settings.etcd_prefix),
                      settings.max_groups_per_principal, groups,
                      lambda name: cache.get(name) is not None)


def _throttle(store: RedisStreamStore, settings: GatewaySettings,
              overrides: LimitOverrides) -> Throttle | None:
    throttle = Throttle(store.rate_limiter, RateLimits.from_settings(settings), overrides)
    return throttle if throttle.enabled else None


def archive_s3_settings(settings: GatewaySettings) -> S3Settings:
    """How the archive reaches an S3-compatible store (unused for a file:// archive)."""
    return S3Settings(endpoint_override=settings.archive_s3_endpoint,
                      region=settings.archive_s3_region,
                      access_key=settings.archive_s3_access_key,
                      secret_key=settings.archive_s3_secret_key, scheme=settings.archive_s3_scheme,
                      credentials_chain=settings.archive_s3_credentials_chain)


def archive_settings(settings: GatewaySettings) -> ArchiveSettings:
    """How big the archive's segments get."""
    return ArchiveSettings(segment_max_entries=settings.archive_segment_max_entries,
                           segment_max_bytes=settings.archive_segment_max_bytes)


def _archive_duty(store: RedisStreamStore, settings: GatewaySettings,
                  metrics: GatewayMetrics) -> ArchiveDuty | None:
    if store.archive is None:
        return None
    policy = ArchivePolicy(settings.archive_memory_watermark, settings.hot_retention_ms)
    return ArchiveDuty(store.archive, store.memory, store.router.node_for_slot, policy, metrics)


def redis_store_settings(settings: GatewaySettings) -> RedisStoreSettings:
    """The storage slice of the gateway settings."""
    return RedisStoreSettings(
        startup_nodes=settings.redis_startup_nodes,
        password=settings.redis_password,
        min_insync_replicas=settings.min_insync_replicas,
        wait_timeout_ms=settings.wait_timeout_ms,
        write_deadline_s=settings.redis_write_deadline_s,
        read_deadline_s=settings.redis_read_deadline_s,
        publish_memory_watermark=settings.publish_memory_watermark,
        memory_poll_interval_s=settings.memory_poll_interval_s,
        tls=settings.redis_tls,
        tls_ca_path=settings.redis_tls_ca_path,
        tls_cert_path=settings.redis_tls_cert_path,
        tls_key_path=settings.redis_tls_key_path,
        tls_check_hostname=settings.redis_tls_check_hostname,
    )
