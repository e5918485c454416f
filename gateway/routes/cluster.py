"""The cluster as one gateway sees it: the live gateway nodes and who owns each partition of each
topic (GET /v1/cluster, an admin read)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.gatekeeper import gatekeeper_of, principal_of
from gateway.errors import unavailable
from gateway.observe.version import installed_version
from gateway.responses import json_response
from gateway.routes.admission import admit_or_refuse
from gateway.services import Services, services_of
from gateway.throttle import RateAction
from partitioner.errors import CoordinationUnavailable
from partitioner.ownership_keys import ClusterView, NodeRecord, cluster_view
from partitioner.topics import TopicMetadata

ADMIN_ONLY = (Action.ADMIN,)


async def describe_cluster(request: web.Request) -> web.Response:
    """GET /v1/cluster -> this gateway, every live gateway node and the owner of each partition of
    the topics the caller administers.

    Needs ``admin`` on some topic; charged to the caller's reads bucket."""
    services, principal = services_of(request), principal_of(request)
    gatekeeper = gatekeeper_of(request)
    gatekeeper.require_somewhere(principal, Action.ADMIN)
    limited = await admit_or_refuse(services, principal, RateAction.READ)
    view = await _current_view(services)
    topics = [topic for topic in sorted(services.cache.all(), key=lambda t: t.name)
              if gatekeeper.may_see(principal, topic.name, ADMIN_ONLY)]
    return json_response({"node_id": services.settings.node_id, "version": installed_version(),
                          "nodes": [_node_document(node) for node in view.nodes],
                          "topics": [_topic_document(topic, view) for topic in topics]},
                         headers=limited)


async def _current_view(services: Services) -> ClusterView:
    """The ownership mirror when its watches are up, else one read of etcd bounded by the etcd
    timeout (503 when etcd does not answer in time)."""
    mirrored = None if services.ownership is None else services.ownership.cluster
    if mirrored is not None:
        return mirrored
    settings = services.settings
    if services.etcd is None:
        raise unavailable("this gateway does not coordinate through etcd", settings.retry_after_s)
    try:
        return await asyncio.wait_for(cluster_view(services.etcd, prefix=settings.etcd_prefix),
                                      settings.etcd_timeout_s)
    except TimeoutError:
        raise CoordinationUnavailable("etcd did not answer the cluster read in time",
                                      settings.retry_after_s) from None


def _node_document(node: NodeRecord) -> dict[str, Any]:
    return {"node_id": node.node_id, "address": node.address, "started_at_ms": node.started_at_ms}


def _topic_document(topic: TopicMetadata, view: ClusterView) -> dict[str, Any]:
    owners = [view.owners.get((topic.name, partition)) for partition in range(topic.partitions)]
    return {"name": topic.name,
            "partitions": [{"partition": partition, "owner": owner}
                           for partition, owner in enumerate(owners)],
            "unowned": [partition for partition, owner in enumerate(owners) if owner is None]}


def add_routes(app: web.Application) -> None:
    """Register the cluster route."""
    app.router.add_get("/v1/cluster", describe_cluster)
