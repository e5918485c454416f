"""W3C trace context carried from publish to every delivery, and OpenTelemetry spans for both as an
optional extra: off, a delivery costs one global lookup and a publish one header lookup."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from gateway.observe.version import installed_version

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
MAX_TRACESTATE_CHARS = 512
MAX_LINKS = 128  # a delivery span links at most this many messages' publish contexts
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]*")
SCOPE = "streamgate.gateway"

_tracer: Any = None  # the active OpenTelemetry tracer; None while spans are off


def valid_traceparent(text: str) -> bool:
    """Whether ``text`` is a W3C traceparent this gateway stores (version 00 form; not all-zero
    ids; never version ff)."""
    match = _TRACEPARENT.fullmatch(text)
    return (match is not None and match[1] != "ff" and match[2] != "0" * 32
            and match[3] != "0" * 16)


def valid_tracestate(text: str) -> bool:
    """Whether ``text`` may be stored as a tracestate (printable ASCII, at most 512 chars)."""
    return len(text) <= MAX_TRACESTATE_CHARS and _TRACESTATE.fullmatch(text) is not None


def incoming_context(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The trace context of a request's headers, or None when it has no valid traceparent (a
    malformed one is ignored, as W3C asks: the trace restarts here)."""
    parent = headers.get(TRACEPARENT)
    if parent is None or not valid_traceparent(parent):
        return None
    state = headers.get(TRACESTATE)
    if state and valid_tracestate(state):
        return {TRACEPARENT: parent, TRACESTATE: state}
    return {TRACEPARENT: parent}


def spans_on() -> bool:
    """Whether OpenTelemetry spans are recorded."""
    return _tracer is not None


@contextlib.contextmanager
def publish_span(topic: str, count: int,
                 incoming: Mapping[str, str] | None) -> Iterator[dict[str, str] | None]:
    """A PRODUCER span for one publish request, the child of the request's context; yields the
    context to store with the messages (the span's own), or ``incoming`` while spans are off."""
    tracer = _tracer
    if tracer is None:
        yield dict(incoming) if incoming else None
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = TraceContextTextMapPropagator()
    parent = propagator.extract(incoming) if incoming else None
    with tracer.start_as_current_span(
            f"publish {topic}", context=parent, kind=trace.SpanKind.PRODUCER,
            attributes={"messaging.system": "streamgate", "messaging.operation.type": "send",
                        "messaging.destination.name": topic,
                        "messaging.batch.message_count": count}) as span:
        carrier: dict[str, str] = {}
        propagator.inject(carrier, context=trace.set_span_in_context(span))
        yield carrier


def delivery_span(topic: str, group: str, mode: str, items: Sequence[Any]) -> None:
    """A CONSUMER span for one page handed to a subscriber or puller, linked to the publish
    context of each message (``items``: deliveries or entries); nothing while spans are off."""
    if _tracer is None or not items:
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = TraceContextTextMapPropagator()
    links = []
    for item in items[:MAX_LINKS]:
        headers = getattr(item, "entry", item).headers
        if TRACEPARENT in headers:
            context = trace.get_current_span(propagator.extract(headers)).get_span_context()
            if context.is_valid:
                links.append(trace.Link(context))
    attributes = {"messaging.system": "streamgate", "messaging.operation.type": "receive",
                  "messaging.destination.name": topic, "messaging.batch.message_count": len(items),
                  "streamgate.delivery.mode": mode}
    if group:
        attributes["messaging.consumer.group.name"] = group
    _tracer.start_span(f"deliver {topic}", kind=trace.SpanKind.CONSUMER, links=links,
                       attributes=attributes).end()


@contextlib.asynccontextmanager
async def tracing(enabled: bool, service_name: str) -> AsyncIterator[None]:
    """Spans on for the context's life when ``enabled``: the process's tracer provider if one is
    set (e.g. by ``opentelemetry-instrument``), else one exporting over OTLP/HTTP as the standard
    ``OTEL_EXPORTER_OTLP_*`` variables say, flushed at the end."""
    global _tracer
    if not enabled:
        yield
        return
    try:
        from opentelemetry import trace
    except ImportError:
        raise RuntimeError("otel_enabled needs OpenTelemetry: pip install 'streamgate[otel]'") \
            from None
    provider = trace.get_tracer_provider()
    owned = None
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        owned = provider = _exporting_provider(service_name)
    _tracer = provider.get_tracer(SCOPE, installed_version())
    try:
        yield
    finally:
        _tracer = None
        if owned is not None:
            owned.shutdown()


def _exporting_provider(service_name: str) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise RuntimeError("otel_enabled without a configured tracer provider needs the SDK and "
                           "the OTLP exporter: pip install 'streamgate[otel]'") from None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider
