"""The scale hint of a group, for autoscalers (KEDA's metrics-api scaler): ``GET
/v1/groups/{group}/scale?topic=T&target_drain_s=60``, computed on read from the flows the
partitions' owners post beside their verdicts (``duties.scale``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiohttp import web

from gateway.auth.gatekeeper import READ_ACTIONS, gatekeeper_of, principal_of
from gateway.delivery.key_shared import is_seat
from gateway.delivery.params import GROUP_NAME
from gateway.duties.scale import (
    Bounds,
    Hint,
    PullerRoster,
    ScaleMemo,
    desired,
    per_member,
    total,
)
from gateway.duties.verdict_duty import read_flow
from gateway.errors import invalid_field
from gateway.fanout import gather_bounded
from gateway.responses import json_response
from gateway.routes.admission import admit_or_refuse
from gateway.services import Services, services_of
from gateway.throttle import RateAction
from partitioner.group_state import group_view
from partitioner.topics import TopicMetadata

SCALE_MEMO = web.AppKey("scale_memo", ScaleMemo)
PULL_ROSTER = web.AppKey("pull_roster", PullerRoster)
DEFAULT_TARGET_DRAIN_S = 60.0
MAX_TARGET_DRAIN_S = 86_400.0
DEFAULT_STABILISE_S = 60.0  # a lower hint is given once every hint of this window was lower
MAX_STABILISE_S = 3600.0
MAX_MEMBERS = 100_000


def _seconds_param(request: web.Request, name: str, default: float, high: float,
                   zero: bool = False) -> float:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (value >= 0 if zero else value > 0) or value > high:
        low = "[0" if zero else "(0"
        raise invalid_field(f"/{name}",
                            f"'{name}' must be a number of seconds in {low}, {high:g}]")
    return value


def _count_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_MEMBERS:
        raise invalid_field(f"/{name}", f"'{name}' must be a whole number up to {MAX_MEMBERS}")
    return int(raw)


async def _members(services: Services, topic: str, group: str) -> int | None:
    """The group's exclusive members in etcd (None: none there, or no etcd: not an exclusive
    group, whose clients the gateway cannot count)."""
    if services.etcd is None:
        return None
    view = await group_view(services.etcd, topic=topic, group=group,
                            prefix=services.settings.etcd_prefix)
    sessions = [m for m in view.members if not is_seat(m.member_id)]
    return len(sessions) or None


def note_puller(request: web.Request, topic: str, group: str) -> None:
    """Count the caller of a pull among the group's pull members: its principal from its
    address, so pods sharing a credential count apart."""
    roster = request.app.get(PULL_ROSTER)
    if roster is not None:
        caller = f"{principal_of(request).name}@{request.remote or ''}"
        roster.saw((topic, group), caller, int(time.time() * 1000))


@dataclass(frozen=True, slots=True)
class ScaleAsk:
    """What a read of the hint asks: the drain target, the stabilisation window, the members
    the caller counts (None: counted here) and the least hint it wants."""

    target_drain_s: float = DEFAULT_TARGET_DRAIN_S
    stabilise_s: float = DEFAULT_STABILISE_S
    members: int | None = None
    min_members: int = 0

    @classmethod
    def of(cls, request: web.Request) -> ScaleAsk:
        """The ask in a request's query."""
        return cls(_seconds_param(request, "target_drain_s", DEFAULT_TARGET_DRAIN_S,
                                  MAX_TARGET_DRAIN_S),
                   _seconds_param(request, "stabilise_s", DEFAULT_STABILISE_S, MAX_STABILISE_S,
                                  zero=True),
                   _count_param(request, "members"), _count_param(request, "min_members") or 0)


async def hint_for(services: Services, memo: ScaleMemo, topic: TopicMetadata, group: str,
                   ask: ScaleAsk, pullers: PullerRoster | None = None) -> Hint:
    """The group's hint on ``topic``: its flows summed, its members counted (etcd for exclusive
    groups, bounded by the partitions; else the ask's, else its recent pull callers, else one),
    settled by ``memo``."""
    flows = await gather_bounded(lambda p: read_flow(services.verdicts, topic.name, p, group),
                                 range(topic.partitions))
    flow, key, now_ms = total(flows), (topic.name, group), int(time.time() * 1000)
    exclusive = await _members(services, topic.name, group)
    pulling = 0 if pullers is None else pullers.count(key, now_ms)
    members = exclusive if exclusive is not None else (ask.members or pulling or 1)
    bounds = Bounds(ask.min_members, topic.partitions if exclusive is not None else None)
    window_ms, target = int(ask.stabilise_s * 1000), ask.target_drain_s
    if flow is None:
        count = memo.settle(key, bounds.clamp(members), now_ms, window_ms)
        return Hint(count, members, None, None, None, target)
    capacity = memo.capacity(key, flow, members, now_ms)
    count = memo.settle(key, desired(flow, members, capacity, target, bounds), now_ms, window_ms)
    return Hint(count, members, flow.arrival_rate, per_member(flow, members), flow.backlog,
                target)


async def group_scale(request: web.Request) -> web.Response:
    """GET /v1/groups/{group}/scale?topic=&target_drain_s=&stabilise_s=&members=&min_members=
    -> the members the group wants to drain its backlog within the target, with the figures
    behind it."""
    services, group = services_of(request), request.match_info["group"]
    if not GROUP_NAME.fullmatch(group):
        raise invalid_field("/group", "'group' must match [A-Za-z0-9._-]{1,200}")
    name = request.query.get("topic")
    if name is None:
        raise invalid_field("/topic", "'topic' is required")
    principal = principal_of(request)
    gatekeeper_of(request).require_any(principal, name, READ_ACTIONS, group)
    limited = await admit_or_refuse(services, principal, RateAction.READ)
    ask = ScaleAsk.of(request)
    topic = await services.topic(name)
    hint = await hint_for(services, request.app[SCALE_MEMO], topic, group, ask,
                          request.app[PULL_ROSTER])
    services.metrics.group_desired_members.labels(topic.name, group).set(hint.desired_members)
    return json_response(hint.to_dict(), headers=limited)


def add_routes(app: web.Application) -> None:
    """Register the scale hint route."""
    app[SCALE_MEMO] = ScaleMemo()
    app[PULL_ROSTER] = PullerRoster()
    app.router.add_get("/v1/groups/{group}/scale", group_scale)
