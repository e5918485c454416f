"""The release the deployment tests install: the chart's values (Redis and etcd from the local
Debian image, one admin API key) and the credentials that key gives."""

from __future__ import annotations

from typing import Any

from containers import DATASTORES

from gateway.auth.keys import hash_api_key

API_KEY = "sgk_chart-pods-test-key"
HEADERS = {"Authorization": f"ApiKey {API_KEY}"}
REPOSITORY, TAG = DATASTORES.rsplit(":", 1)
DECLARED_TOPICS: list[dict[str, Any]] = [
    {"name": "declared-orders", "partitions": 3, "retention_ms": 3_600_000},
    {"name": "declared-accounts", "partitions": 1, "compact": True},
]
# the chart's values for these tests: Redis and etcd from the local Debian image, an admin key
# (for `helm test` too)
CHART_VALUES: dict[str, Any] = {
    "redis": {"image": {"repository": REPOSITORY, "tag": TAG}},
    "etcd": {"image": {"repository": REPOSITORY, "tag": TAG}},
    "helmTest": {"apiKey": API_KEY},
    # applied by the chart's topics Job (a post-install/post-upgrade hook) with the same key
    "topics": DECLARED_TOPICS,
    "topicsJob": {"apiKeySecret": {"name": "sg-streamgate", "key": "test-api-key"}},
    # fixed, as the chart's lookup keeps generated ones across upgrades (offline rendering has none)
    "auth": {"redisPassword": "chart-pods-redis-password", "receiptSecret": "r" * 32,
             "config": f'''
[[api_keys]]
principal = "ops"
sha256 = "{hash_api_key(API_KEY)}"

[[rules]]
principals = ["ops"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]
'''},
}
