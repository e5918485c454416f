"""Admin calls: topics, replay, consumer groups, dead-letter redrive and push subscriptions. Thin:
gateway's JSON document as a typed, read-only record (client/streamgate_client/admin_types.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from ssl import SSLContext
from typing import Any, Generic, Literal, TypeVar, overload

import aiohttp
import orjson

from streamgate_client.admin_types import (
    Cluster,
    GroupDetails,
    GroupList,
    GroupPauseState,
    GroupRef,
    HistoryPage,
    MessageOut,
    ParkedKeyResult,
    PublishDryRun,
    PurgeDryRun,
    PurgeResult,
    PushRotation,
    PushSubscription,
    PushSubscriptionCreated,
    PushSubscriptionDescribed,
    PushSubscriptionList,
    Quotas,
    RedriveDryRun,
    RedriveResult,
    ReplayPage,
    SchemaVersion,
    SchemaVersionRef,
    SchemaVersions,
    SeekDryRun,
    SeekResult,
    SnapshotPage,
    Topic,
    TopicDetails,
    TopicDryRun,
    TopicList,
)
from streamgate_client.credentials import Credentials, TokenProvider, authorized_body
from streamgate_client.typed import decode_value, decoder_for, type_name

T = TypeVar("T")
Compatibility = Literal["backward", "backward_transitive", "forward", "forward_transitive",
                        "full", "full_transitive", "none"]


@dataclass(frozen=True, slots=True)
class Decoded(Generic[T]):
    """A replayed message and its value decoded into the ``decode_as`` type."""

    message: MessageOut
    data: T


class Admin:
    """The gateway's HTTP admin API. ``async with Admin("http://127.0.0.1:8080") as admin: ...``.

    Each call returns the gateway's document as a record of ``streamgate_client.admin_types``:
    typed attributes (``topic.partitions``; None for a field the gateway left out), and a read-only
    mapping of the document as sent (extra fields of a newer gateway too; what ``orjson.dumps``
    writes); ``to_dict()`` is a plain copy.

    Errors raise ``ProblemError`` (carrying the problem document) or ``ConnectionFailed``; nothing
    is retried, except a 401 when ``token`` is a provider: once, with a fresh token from it.
    ``token`` is a JWT or a provider of them (see ``Producer``); ``ssl`` an ``SSLContext`` for
    HTTPS (a private CA, a client certificate) or False to skip verification.
    """

    def __init__(self, base_url: str, *, timeout_s: float = 10, api_key: str | None = None,
                 token: str | TokenProvider | None = None,
                 session: aiohttp.ClientSession | None = None,
                 ssl: SSLContext | bool | None = None) -> None:
        self._base_url = base_url.rstrip("/")
        self._credentials = Credentials(api_key, token)
        self._ssl: SSLContext | bool = True if ssl is None else ssl
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._owns_session = session is None

    async def __aenter__(self) -> Admin:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session this client opened; idempotent."""
        session, self._session = self._session, None
        if self._owns_session and session is not None:
            await session.close()

    # --- topics -----------------------------------------------------------------------------------
    async def create_topic(self, name: str, partitions: int, *, retention_ms: int | None = None,
                           max_length: int | None = None, key_index: bool = False,
                           compact: bool = False) -> Topic:
        """POST /v1/topics -> the topic; ``key_index`` keeps each key's history (for
        ``key_history`` and expected key offsets), ``compact`` keeps each key's newest message
        (``retention_ms`` is then the compaction lag; ``snapshot`` reads it)."""
        body: dict[str, Any] = {"name": name, "partitions": partitions}
        if key_index:
            body["key_index"] = True
        if compact:
            body["compact"] = True
        if retention_ms is not None:
            body["retention_ms"] = retention_ms
        if max_length is not None:
            body["max_length"] = max_length
        return Topic(await self._call("POST", "/v1/topics", body=body))

    @overload
    async def grow_topic(self, name: str, partitions: int, *,
                         dry_run: Literal[False] = False) -> Topic: ...
    @overload
    async def grow_topic(self, name: str, partitions: int, *,
                         dry_run: Literal[True]) -> TopicDryRun: ...
    @overload
    async def grow_topic(self, name: str, partitions: int, *,
                         dry_run: bool) -> Topic | TopicDryRun: ...

    async def grow_topic(self, name: str, partitions: int, *,
                         dry_run: bool = False) -> Topic | TopicDryRun:
        """PATCH /v1/topics/{name} with more partitions -> the topic (like Kafka's
        ``create_partitions``, but keys keep their order: publishes pause for a moment and consumers
        hold a grown partition until the keys that moved there were consumed where they were).
        ``dry_run``: what the growth would do (``impact.growth``), nothing changed."""
        return _topic(await self._call("PATCH", f"/v1/topics/{name}", params=_dry(dry_run),
                                       body={"partitions": partitions}), dry_run)

    @overload
    async def update_topic(self, name: str, *, retention_ms: int | None = None,
                           max_length: int | None = None, clear_max_length: bool = False,
                           dry_run: Literal[False] = False) -> Topic: ...
    @overload
    async def update_topic(self, name: str, *, retention_ms: int | None = None,
                           max_length: int | None = None, clear_max_length: bool = False,
                           dry_run: Literal[True]) -> TopicDryRun: ...
    @overload
    async def update_topic(self, name: str, *, retention_ms: int | None = None,
                           max_length: int | None = None, clear_max_length: bool = False,
                           dry_run: bool) -> Topic | TopicDryRun: ...

    async def update_topic(self, name: str, *, retention_ms: int | None = None,
                           max_length: int | None = None, clear_max_length: bool = False,
                           dry_run: bool = False) -> Topic | TopicDryRun:
        """PATCH /v1/topics/{name} with a new ``retention_ms`` and/or ``max_length`` (None leaves
        each as it is; ``clear_max_length`` removes the length cap) -> the topic. ``dry_run``:
        what the new retention would trim now, per group (``impact.retention``), nothing
        changed."""
        body: dict[str, Any] = {} if retention_ms is None else {"retention_ms": retention_ms}
        if max_length is not None or clear_max_length:
            body["max_length"] = max_length
        return _topic(await self._call("PATCH", f"/v1/topics/{name}", body=body,
                                       params=_dry(dry_run)), dry_run)

    async def list_topics(self) -> list[Topic]:
        """GET /v1/topics -> the topics, sorted by name."""
        return list(TopicList(await self._call("GET", "/v1/topics")).topics)

    async def describe_topic(self, name: str) -> TopicDetails:
        """GET /v1/topics/{name} -> the topic with ``partition_details``: each partition's whole
        log (length, first and last offset) and its ``tiers`` (the hot range in Redis, the
        archived one)."""
        return TopicDetails(await self._call("GET", f"/v1/topics/{name}"))

    async def delete_topic(self, name: str) -> None:
        """DELETE /v1/topics/{name}: the metadata and every partition's data."""
        await self._call("DELETE", f"/v1/topics/{name}")

    async def replay(self, topic: str, partition: int, *, from_: str | None = None,
                     from_time_ms: int | None = None, limit: int | None = None) -> ReplayPage:
        """GET one page of a partition -> its ``messages`` and the ``next_offset`` to pass as
        ``from_`` for the next page (``from_`` inclusive)."""
        params = {name: str(value) for name, value in
                  (("from", from_), ("from_time_ms", from_time_ms), ("limit", limit))
                  if value is not None}
        return ReplayPage(await self._call(
            "GET", f"/v1/topics/{topic}/partitions/{partition}/messages", params=params))

    @overload
    async def replay_all(self, topic: str, partition: int, *, from_: str = "earliest",
                         page_size: int = 1000, decode_as: None = None) -> list[MessageOut]: ...
    @overload
    async def replay_all(self, topic: str, partition: int, *, from_: str = "earliest",
                         page_size: int = 1000, decode_as: type[T]) -> list[Decoded[T]]: ...

    async def replay_all(self, topic: str, partition: int, *, from_: str = "earliest",
                         page_size: int = 1000, decode_as: type[T] | None = None,
                         ) -> list[MessageOut] | list[Decoded[T]]:
        """Every message of a partition from ``from_`` to its current end, page by page.
        ``decode_as`` (a dataclass, a pydantic model or a msgspec Struct): each as ``Decoded``
        with its value as that type; ``DecodeFailed`` names the first message that does not
        decode."""
        messages = await self._replay_all(topic, partition, from_, page_size)
        if decode_as is None:
            return messages
        decoder = (decoder_for(decode_as), type_name(decode_as))
        return [Decoded(m, decode_value(decoder, (topic, partition, m.offset), m.value,
                                        m.value_b64 is not None)) for m in messages]

    async def _replay_all(self, topic: str, partition: int, from_: str,
                          page_size: int) -> list[MessageOut]:
        messages: list[MessageOut] = []
        start = from_
        while True:
            page = await self.replay(topic, partition, from_=start, limit=page_size)
            messages += page.messages
            if len(page.messages) < page_size:
                return messages
            start = page.next_offset

    async def key_history(self, topic: str, key: str, *, newest_first: bool = False,
                          from_: str | None = None, from_time_ms: int | None = None,
                          limit: int | None = None,
                          partition: int | None = None) -> HistoryPage:
        """GET one page of a key's messages (a topic with ``key_index``) -> its ``partition``,
        ``messages`` and ``next_offset``; ``from_`` inclusive; ``next_offset`` is None once a
        newest-first read is exhausted. The newest offset (``newest_first=True, limit=1``) is
        what an ``expected_offset`` names."""
        params = {name: str(value) for name, value in
                  (("key", key), ("order", "desc" if newest_first else "asc"), ("from", from_),
                   ("from_time_ms", from_time_ms), ("limit", limit), ("partition", partition))
                  if value is not None}
        return HistoryPage(await self._call("GET", f"/v1/topics/{topic}/history", params=params))

    async def key_position(self, topic: str, key: str) -> str:
        """The offset of a key's newest retained message, or ``"none"``: what to expect next."""
        page = await self.key_history(topic, key, newest_first=True, limit=1)
        return page.messages[0].offset if page.messages else "none"

    async def snapshot_page(self, topic: str, partition: int, *, as_of: str | None = None,
                            after: str | None = None,
                            limit: int | None = None) -> SnapshotPage:
        """GET one page of a compacted partition's snapshot -> its ``partition``, ``as_of``,
        ``messages`` and ``after``; pass ``as_of`` and ``after`` back for the next page (``after``
        None: the end)."""
        params = {name: str(value) for name, value in
                  (("as_of", as_of), ("after", after), ("limit", limit)) if value is not None}
        return SnapshotPage(await self._call(
            "GET", f"/v1/topics/{topic}/partitions/{partition}/snapshot", params=params))

    async def snapshot(self, topic: str, partition: int, *,
                       page_size: int = 1000) -> tuple[str, list[MessageOut]]:
        """Every key's newest value in a compacted partition, as of one offset, and that offset:
        follow the partition strictly after it (``Consumer(..., from_=f"{partition}:{as_of}")``)
        for no gap and no duplicate. ``ProblemError`` 410 when reading took longer than the
        topic's compaction lag."""
        page = await self.snapshot_page(topic, partition, limit=page_size)
        as_of, messages = page.as_of, list(page.messages)
        while page.after is not None:
            page = await self.snapshot_page(topic, partition, as_of=as_of, after=page.after,
                                            limit=page_size)
            messages += page.messages
        return as_of, messages

    async def cluster(self) -> Cluster:
        """GET /v1/cluster -> the answering gateway, every live gateway node and the owner of each
        partition (admin)."""
        return Cluster(await self._call("GET", "/v1/cluster"))

    async def quotas(self) -> Quotas:
        """GET /v1/quotas -> the caller's own quota ``subject`` (``principal:<name>`` or
        ``tenant:<name>``) and, per quota, its ``limit`` and ``used`` (None: no cap of that kind,
        nothing counted)."""
        return Quotas(await self._call("GET", "/v1/quotas"))

    # --- schemas ---------------------------------------------------------------------------------
    async def register_schema(self, topic: str, schema: Mapping[str, Any], *,
                              compatibility: Compatibility | None = None,
                              migrations: Mapping[str, Any] | None = None,
                              event_types: Mapping[str, str] | None = None) -> SchemaVersion:
        """POST /v1/topics/{topic}/schemas -> the new version (or the latest, when ``schema`` is
        the same). ``compatibility`` defaults to the latest version's mode, else ``backward``;
        ``migrations`` are the version's declared conversions (docs/api.md, "Schemas");
        ``event_types`` map CloudEvents types to pointers at their subschemas under ``$defs``
        (docs/schemas.md, "Event types").
        ``SchemaIncompatible`` (409) names each incompatible change; a refused schema is a
        ``ProblemError`` 422 pointing into it."""
        body: dict[str, Any] = {"schema": dict(schema)}
        if compatibility is not None:
            body["compatibility"] = compatibility
        if migrations is not None:
            body["migrations"] = dict(migrations)
        if event_types is not None:
            body["event_types"] = dict(event_types)
        return SchemaVersion(await self._call("POST", f"/v1/topics/{topic}/schemas", body=body))

    async def schemas(self, topic: str) -> list[SchemaVersionRef]:
        """GET /v1/topics/{topic}/schemas -> its versions, oldest first, without their schema."""
        return list(SchemaVersions(await self._call("GET", f"/v1/topics/{topic}/schemas")).versions)

    async def schema(self, topic: str, version: int | Literal["latest"] = "latest",
                     ) -> SchemaVersion:
        """GET /v1/topics/{topic}/schemas/{version} -> that version with its schema;
        ``ProblemError`` 404 ``schema-not-found`` when there is none."""
        return SchemaVersion(await self._call("GET", f"/v1/topics/{topic}/schemas/{version}"))

    async def validate(self, topic: str, messages: Sequence[Mapping[str, Any]]) -> PublishDryRun:
        """POST /v1/topics/{topic}/messages?dry_run=true: check ``messages`` (each as a publish
        body's message: ``value`` or ``value_b64``, ``key``, ``headers``...) as a publish would,
        writing nothing -> the ``schema_version`` they match (None: no schema) and the partition
        each would go to. A refusal is the publish's own: ``SchemaMismatch`` (422, its
        ``pointer`` at the failing path), else a ``ProblemError``. Charged one read, never the
        publish rate limits."""
        return PublishDryRun(await self._call(
            "POST", f"/v1/topics/{topic}/messages", params=_dry(True),
            body={"messages": [dict(message) for message in messages]}))

    # --- consumer groups and dead letters ---------------------------------------------------------
    async def list_groups(self) -> list[GroupRef]:
        """GET /v1/groups -> each group's ``topic`` and ``group``."""
        return list(GroupList(await self._call("GET", "/v1/groups")).groups)

    async def describe_group(self, group: str, topic: str | None = None) -> GroupDetails:
        """GET /v1/groups/{group}[?topic=] -> per topic: members, generation, assignment,
        partitions' lag."""
        return GroupDetails(await self._call("GET", f"/v1/groups/{group}",
                                             params={"topic": topic} if topic else None))

    @overload
    async def seek(self, group: str, topic: str, to: str | Mapping[str, int], *,
                   dry_run: Literal[False] = False) -> SeekResult: ...
    @overload
    async def seek(self, group: str, topic: str, to: str | Mapping[str, int], *,
                   dry_run: Literal[True]) -> SeekDryRun: ...
    @overload
    async def seek(self, group: str, topic: str, to: str | Mapping[str, int], *,
                   dry_run: bool) -> SeekResult | SeekDryRun: ...

    async def seek(self, group: str, topic: str, to: str | Mapping[str, int], *,
                   dry_run: bool = False) -> SeekResult | SeekDryRun:
        """POST /v1/groups/{group}/seek ``{topic, to}``.

        ``to``: ``earliest``, ``latest``, a cursor ``<partition>:<offset>,...`` (deliver strictly
        after) or ``{"timestamp_ms": t}``. Pending messages stay pending. ``dry_run``: per
        partition, the entries the seek would skip or deliver again, nothing changed.
        """
        target = to if isinstance(to, str) else dict(to)
        document = await self._call("POST", f"/v1/groups/{group}/seek", params=_dry(dry_run),
                                    body={"topic": topic, "to": target})
        return SeekDryRun(document) if dry_run else SeekResult(document)

    @overload
    async def redrive(self, topic: str, max_messages: int | None = None, *,
                      rate_per_s: int | None = None, letter: tuple[int, str] | None = None,
                      dry_run: Literal[False] = False) -> RedriveResult: ...
    @overload
    async def redrive(self, topic: str, max_messages: int | None = None, *,
                      rate_per_s: int | None = None, letter: tuple[int, str] | None = None,
                      dry_run: Literal[True]) -> RedriveDryRun: ...
    @overload
    async def redrive(self, topic: str, max_messages: int | None = None, *,
                      rate_per_s: int | None = None, letter: tuple[int, str] | None = None,
                      dry_run: bool) -> RedriveResult | RedriveDryRun: ...

    async def redrive(self, topic: str, max_messages: int | None = None, *,
                      rate_per_s: int | None = None, letter: tuple[int, str] | None = None,
                      dry_run: bool = False) -> RedriveResult | RedriveDryRun:
        """POST /v1/topics/{topic}/dlq/redrive: move dead letters back to the topic (and out of
        the DLQ) -> how many were ``redriven``; ``letter`` = (partition, offset) moves that one
        only. ``dry_run``: how many would go, per DLQ partition, nothing moved."""
        body: dict[str, Any] = {
            name: value
            for name, value in (("max_messages", max_messages), ("rate_per_s", rate_per_s))
            if value is not None}
        if letter is not None:
            body |= {"partition": letter[0], "offset": letter[1]}
        document = await self._call("POST", f"/v1/topics/{topic}/dlq/redrive", body=body,
                                    params=_dry(dry_run))
        return RedriveDryRun(document) if dry_run else RedriveResult(document)

    async def settle_parked_key(self, group: str, topic: str, partition: int, key: str, *,
                                dead_letter: bool = False,
                                reason: str | None = None) -> ParkedKeyResult:
        """POST /v1/groups/{group}/parked: a key_shared group's parked key goes on now, its failed
        message redelivered at once or (``dead_letter``) sent to the dead letters with
        ``reason``. The parked keys are in ``describe_group``'s ``parked_keys``."""
        body: dict[str, Any] = {"topic": topic, "partition": partition, "key": key,
                                "action": "dead_letter" if dead_letter else "release"}
        if reason is not None:
            body["reason"] = reason
        return ParkedKeyResult(await self._call("POST", f"/v1/groups/{group}/parked", body=body))

    async def pause_group(self, group: str, topic: str, *,
                          until_ms: int | None = None) -> GroupPauseState:
        """POST /v1/groups/{group}/pause?topic=: no delivery to the group's members on any gateway
        until ``resume_group`` or ``until_ms`` (epoch ms) (like NATS's consumer pause); members
        stay, are told, and may still settle what they hold."""
        body = {} if until_ms is None else {"until_ms": until_ms}
        return GroupPauseState(await self._call("POST", f"/v1/groups/{group}/pause",
                                                params={"topic": topic}, body=body))

    async def resume_group(self, group: str, topic: str) -> GroupPauseState:
        """POST /v1/groups/{group}/resume?topic=: deliveries go on from where they stopped."""
        return GroupPauseState(await self._call("POST", f"/v1/groups/{group}/resume",
                                                params={"topic": topic}))

    @overload
    async def purge(self, topic: str, partition: int | None = None, *, dead_letters: bool = False,
                    dry_run: Literal[False] = False) -> PurgeResult: ...
    @overload
    async def purge(self, topic: str, partition: int | None = None, *, dead_letters: bool = False,
                    dry_run: Literal[True]) -> PurgeDryRun: ...
    @overload
    async def purge(self, topic: str, partition: int | None = None, *, dead_letters: bool = False,
                    dry_run: bool) -> PurgeResult | PurgeDryRun: ...

    async def purge(self, topic: str, partition: int | None = None, *, dead_letters: bool = False,
                    dry_run: bool = False) -> PurgeResult | PurgeDryRun:
        """POST /v1/topics/{topic}/purge (or ``.../dlq/purge`` with ``dead_letters``): remove every
        message of the topic, or of one partition, at one cut; consumer groups move to the cut
        (like SQS's PurgeQueue, per partition atomic) -> the ``topic``, the entries ``purged``
        and ``scheduled`` messages removed, and each partition's cut. Admin only; audited by the
        gateway. ``dry_run``: the same figures and each group's losses, nothing removed."""
        path = f"/v1/topics/{topic}/dlq/purge" if dead_letters else f"/v1/topics/{topic}/purge"
        document = await self._call("POST", path, params=_dry(dry_run),
                                    body={} if partition is None else {"partition": partition})
        return PurgeDryRun(document) if dry_run else PurgeResult(document)

    # --- push subscriptions ----------------------------------------------------------------------
    async def put_push(self, topic: str, group: str, endpoint: str, *,
                       format: Literal["json", "cloudevents"] | None = None,
                       batch_max_messages: int | None = None, batch_max_bytes: int | None = None,
                       max_in_flight: int | None = None, rate_per_s: float | None = None,
                       timeout_ms: int | None = None, key_ordered: bool | None = None,
                       ack_timeout_ms: int | None = None, max_deliveries: int | None = None,
                       retry_backoff_ms: float | None = None,
                       retry_backoff_multiplier: float | None = None,
                       retry_backoff_max_ms: float | None = None,
                       start: Literal["latest", "earliest"] | None = None,
                       headers: Mapping[str, str] | None = None,
                       filter: Sequence[str] | None = None,
                       secret: str | None = None) -> PushSubscriptionCreated:
        """PUT /v1/topics/{topic}/push/{group}: the group's member becomes ``endpoint``, which the
        partitions' owners POST messages to, signed (``verify_webhook`` checks them). None leaves
        a field at the gateway's default (on a replacement too: send every field you set).
        ``secret`` (``whsec_...``) brings your own signing secret. -> the subscription, with
        ``secret`` when a new one was made: the only time it is shown. ``ProblemError`` 422
        ``push-endpoint-refused`` (pointer ``/endpoint``) when the gateway may not call it."""
        settable = (("format", format), ("batch_max_messages", batch_max_messages),
                    ("batch_max_bytes", batch_max_bytes), ("max_in_flight", max_in_flight),
                    ("rate_per_s", rate_per_s), ("timeout_ms", timeout_ms),
                    ("key_ordered", key_ordered), ("ack_timeout_ms", ack_timeout_ms),
                    ("max_deliveries", max_deliveries), ("retry_backoff_ms", retry_backoff_ms),
                    ("retry_backoff_multiplier", retry_backoff_multiplier),
                    ("retry_backoff_max_ms", retry_backoff_max_ms), ("start", start),
                    ("headers", None if headers is None else dict(headers)),
                    ("filter", None if filter is None else list(filter)), ("secret", secret))
        body = {"endpoint": endpoint} | {name: value for name, value in settable
                                         if value is not None}
        return PushSubscriptionCreated(await self._call("PUT", _push_path(topic, group),
                                                        body=body))

    async def push_subscriptions(self, topic: str) -> list[PushSubscription]:
        """GET /v1/topics/{topic}/push -> the topic's push subscriptions, without secrets or
        header values."""
        document = await self._call("GET", f"/v1/topics/{topic}/push")
        return list(PushSubscriptionList(document).subscriptions)

    async def push_subscription(self, topic: str, group: str) -> PushSubscriptionDescribed:
        """GET /v1/topics/{topic}/push/{group} -> the subscription and its endpoint's ``health``
        as the partitions' owners last posted it; ``ProblemError`` 404
        ``push-subscription-not-found`` when there is none."""
        return PushSubscriptionDescribed(await self._call("GET", _push_path(topic, group)))

    async def delete_push(self, topic: str, group: str) -> None:
        """DELETE /v1/topics/{topic}/push/{group}: stop pushing; the group and its positions
        stay."""
        await self._call("DELETE", _push_path(topic, group))

    async def rotate_push_secret(self, topic: str, group: str, *, secret: str | None = None,
                                 previous_expires_in_s: int | None = None) -> PushRotation:
        """POST .../push/{group}/rotate-secret -> the new signing ``secret`` (yours, or a new one)
        and the live ``secrets``: the newest old one signs beside it for
        ``previous_expires_in_s`` (the gateway's default a day; 0 retires it at once)."""
        body = {name: value for name, value in (("secret", secret),
                                                ("previous_expires_in_s", previous_expires_in_s))
                if value is not None}
        return PushRotation(await self._call(
            "POST", f"{_push_path(topic, group)}/rotate-secret", body=body))

    # --- transport --------------------------------------------------------------------------------
    async def _call(self, method: str, path: str, *, body: dict[str, Any] | None = None,
                    params: dict[str, str] | None = None) -> dict[str, Any]:
        if self._session is None:
            raise RuntimeError("the admin client is not open (use 'async with Admin(...)')")
        url = self._base_url + path
        data = orjson.dumps(body) if body is not None else None
        payload = await authorized_body(
            self._credentials, self._session, method, url, data=data, params=params,
            headers=None if data is None else {"Content-Type": "application/json"},
            timeout=self._timeout, ssl=self._ssl)
        document = orjson.loads(payload) if payload else {}
        return document if isinstance(document, dict) else {"result": document}


def _dry(dry_run: bool) -> dict[str, str] | None:
    """The ``dry_run`` query parameter of a destructive call (absent for the real one)."""
    return {"dry_run": "true"} if dry_run else None


def _push_path(topic: str, group: str) -> str:
    return f"/v1/topics/{topic}/push/{group}"


def _topic(document: dict[str, Any], dry_run: bool) -> Topic | TopicDryRun:
    return TopicDryRun(document) if dry_run else Topic(document)
