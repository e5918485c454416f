"""The streamgate Python client: ``Producer``, ``Consumer`` and ``Admin`` (asyncio, aiohttp).

```python
async with Producer("http://127.0.0.1:8080", "orders", acks="all") as producer:
    futures = [await producer.send({"n": n}, key=f"user-{n}") for n in range(10_000)]
    await producer.flush()  # queued at once, answered in batches; then future.result()
    results = await producer.send_many([{"value": n, "key": "bob"} for n in range(1000)])
    result = await producer.send_and_wait({"total": 42}, key="alice")

async with Producer("http://127.0.0.1:8080") as producer:  # any topic, one connection
    await producer.send({"n": 1}, key="bob", topic="orders")
    await producer.send_and_wait({"paid": 1}, key="bob", topic="payments")

async with Admin("http://127.0.0.1:8080") as admin, Producer(url, "carts", acks="all") as producer:
    position = await admin.key_position("carts", "cart-1")  # a topic created with key_index=True
    await producer.send_conditional([{"value": {"added": "pear"}, "key": "cart-1",
                                      "expected_offset": position}])  # UnexpectedOffset if moved

async with Consumer("http://127.0.0.1:8080", "orders", group="billing") as consumer:
    async for batch in consumer.batches():
        handle(batch)
        await consumer.ack(batch)
```
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamgate_client.admin import Admin, Decoded
    from streamgate_client.consumer import Consumer
    from streamgate_client.errors import (
        ClientError,
        ConnectionFailed,
        DecodeFailed,
        ProblemError,
        SchemaChange,
        SchemaIncompatible,
        SchemaMismatch,
        SubscriptionClosed,
        UnexpectedOffset,
    )
    from streamgate_client.producer import Producer, RetryPolicy, SendResult
    from streamgate_client.publish_socket import PublishNotOffered
    from streamgate_client.received import Assignment, Gap, Message
    from streamgate_client.webhooks import WebhookVerificationError, verify_webhook

# Imported on first use (PEP 562), so that the CLI's parser and ``--version`` start without
# aiohttp: the name each module gives.
_HOMES = {
    "Admin": "streamgate_client.admin",
    "Assignment": "streamgate_client.received",
    "ClientError": "streamgate_client.errors",
    "ConnectionFailed": "streamgate_client.errors",
    "Consumer": "streamgate_client.consumer",
    "DecodeFailed": "streamgate_client.errors",
    "Decoded": "streamgate_client.admin",
    "Gap": "streamgate_client.received",
    "Message": "streamgate_client.received",
    "ProblemError": "streamgate_client.errors",
    "Producer": "streamgate_client.producer",
    "PublishNotOffered": "streamgate_client.publish_socket",
    "RetryPolicy": "streamgate_client.producer",
    "SchemaChange": "streamgate_client.errors",
    "SchemaIncompatible": "streamgate_client.errors",
    "SchemaMismatch": "streamgate_client.errors",
    "SendResult": "streamgate_client.producer",
    "SubscriptionClosed": "streamgate_client.errors",
    "UnexpectedOffset": "streamgate_client.errors",
    "WebhookVerificationError": "streamgate_client.webhooks",
    "verify_webhook": "streamgate_client.webhooks",
}

__all__ = [
    "Admin",
    "Assignment",
    "ClientError",
    "ConnectionFailed",
    "Consumer",
    "DecodeFailed",
    "Decoded",
    "Gap",
    "Message",
    "ProblemError",
    "Producer",
    "PublishNotOffered",
    "RetryPolicy",
    "SchemaChange",
    "SchemaIncompatible",
    "SchemaMismatch",
    "SendResult",
    "SubscriptionClosed",
    "UnexpectedOffset",
    "WebhookVerificationError",
    "verify_webhook",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
