"""The log: one Redis Stream per partition on a Redis Cluster. Knows nothing of HTTP or etcd."""

from storage.delayed import RedisDelayedStore
from storage.errors import (
    ConditionFailed,
    IdempotencyConflict,
    InvalidOffset,
    NotEnoughReplicas,
    SnapshotExpired,
    StorageError,
    StorageUnavailable,
)
from storage.groups import RedisGroupStore
from storage.groups_protocol import GroupStore
from storage.models import (
    Acks,
    Appended,
    AppendOptions,
    AppendResult,
    Conditions,
    Delivery,
    GroupPartitionState,
    PartitionInfo,
    PendingEntry,
    Record,
    Records,
    ScheduledResult,
    StoredEntry,
    TrimReport,
    ValueFormat,
)
from storage.protocol import StreamStore
from storage.redis_store import RedisStreamStore
from storage.retention import RedisRetention, offset_for_time
from storage.settings import RedisStoreSettings

__all__ = [
    "Acks",
    "AppendOptions",
    "AppendResult",
    "Appended",
    "ConditionFailed",
    "Conditions",
    "Delivery",
    "GroupPartitionState",
    "GroupStore",
    "IdempotencyConflict",
    "InvalidOffset",
    "NotEnoughReplicas",
    "PartitionInfo",
    "PendingEntry",
    "Record",
    "Records",
    "RedisDelayedStore",
    "RedisGroupStore",
    "RedisRetention",
    "RedisStoreSettings",
    "RedisStreamStore",
    "ScheduledResult",
    "SnapshotExpired",
    "StorageError",
    "StorageUnavailable",
    "StoredEntry",
    "StreamStore",
    "TrimReport",
    "ValueFormat",
    "offset_for_time",
]
