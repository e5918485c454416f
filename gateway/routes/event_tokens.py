"""``POST /v1/topics/{topic}/events/token``: a short-lived event token a browser's ``EventSource``
puts in the events URL (``?access_token=``), as it cannot send credentials in headers."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.errors import Unauthenticated
from gateway.auth.event_tokens import DEFAULT_TTL_S, INVALID, MAX_TTL_S, EventTokenSigner
from gateway.auth.gatekeeper import QUERY_TOKEN, gatekeeper_of, principal_of
from gateway.auth.principal import Principal
from gateway.publish.validation import reject_unknown_fields
from gateway.responses import json_response
from gateway.routes.bodies import bounded_int, read_json_object
from gateway.services import services_of
from partitioner.group_pause import now_ms

EVENT_TOKENS = web.AppKey("event_tokens", EventTokenSigner)
TOKEN_FIELDS = frozenset({"ttl_s"})


async def mint_event_token(request: web.Request) -> web.Response:
    """POST /v1/topics/{topic}/events/token {ttl_s?}: 201 with a token for the caller's events
    stream of the topic, once the caller may subscribe to it (403 before 404)."""
    name = request.match_info["topic"]
    principal, gatekeeper = principal_of(request), gatekeeper_of(request)
    gatekeeper.require(principal, Action.SUBSCRIBE, name)
    topic = await services_of(request).topic(name)
    doc = await read_json_object(request) if request.body_exists else {}
    reject_unknown_fields(doc, TOKEN_FIELDS)
    ttl_s = bounded_int(doc, "ttl_s", DEFAULT_TTL_S, 1, MAX_TTL_S)
    issued = request.app[EVENT_TOKENS].issue(principal, topic.name, ttl_s, now_ms(),
                                             gatekeeper.selector_claims)
    url = (f"/v1/topics/{quote(topic.name, safe='')}/events?"
           f"{QUERY_TOKEN}={quote(issued.token, safe='')}")
    return json_response({"token": issued.token, "expires_at_ms": issued.expires_at_ms,
                          "url": url}, status=201)


def query_token_principal(request: web.Request, topic: str) -> Principal | None:
    """The principal of the event token in the request's query, for ``topic``; None when the
    request carries none; 401 when it is not a valid, unexpired token of that topic."""
    token = request.query.get(QUERY_TOKEN)
    if token is None:
        return None
    principal = request.app[EVENT_TOKENS].verify(token, topic, now_ms())
    if principal.is_anonymous and gatekeeper_of(request).required:
        # minted with auth off by a gateway sharing the receipt secret: no one in particular
        raise Unauthenticated(INVALID, credentials_given=True)
    return principal


def add_routes(app: web.Application) -> None:
    """Register the event token route."""
    app.router.add_post("/v1/topics/{topic}/events/token", mint_event_token)
