"""Errors raised by the storage package."""

from __future__ import annotations


class StorageError(Exception):
    """Base of every storage error.

    Every redis exception is translated here at the boundary (``raise ... from exc``); callers never
    see redis types. ``retriable`` tells a caller whether the same request may succeed later (the
    gateway maps those to 503).
    """

    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StorageUnavailable(StorageError):
    """The Redis Cluster (or the node owning a slot) could not serve the request in time."""

    retriable = True

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class StorageFull(StorageUnavailable):
    """A write refused for memory: a Redis node is at its ``maxmemory`` (noeviction), or past the
    store's publish watermark. Nothing of the refused call was written; a retry may succeed once
    retention, the archive or more memory make room."""

    def __init__(self, message: str, retry_after_s: float = 5.0, node: str | None = None,
                 reason: str = "oom") -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.node = node
        self.reason = reason  # "oom": Redis refused it; "watermark": refused before writing


class ArchiveUnavailable(StorageUnavailable):
    """The archive tier (a filesystem path or an object store) could not be read or written."""


class ArchiveConflict(StorageError):
    """A segment commit the partition's manifest refused: an owner of a later epoch committed
    (``fenced``), or the segment does not join the archive to the stream (overlap, gap); nothing
    was committed or trimmed."""

    def __init__(self, message: str, *, fenced: bool) -> None:
        super().__init__(message)
        self.fenced = fenced


class NotEnoughReplicas(StorageUnavailable):
    """acks=all: WAIT returned fewer replicas than required, so the write is not acknowledged."""

    def __init__(self, required: int, acknowledged: int, partition: int) -> None:
        super().__init__(
            f"partition {partition}: {acknowledged} of {required} required replicas "
            "acknowledged the write",
            retry_after_s=1.0,
        )
        self.required = required
        self.acknowledged = acknowledged
        self.partition = partition


class IdempotencyConflict(StorageError):
    """A batch's idempotency key was used before for a batch of another size in this partition."""

    def __init__(self, partition: int) -> None:
        super().__init__(f"partition {partition}: the idempotency key was used before for a "
                         "different batch")
        self.partition = partition


class ConditionFailed(StorageError):
    """A conditional append's expectation did not hold; nothing of the append was written.
    ``index`` is the record whose key moved, None for the partition's last offset."""

    def __init__(self, partition: int, index: int | None, expected: str, current: str) -> None:
        what = "the partition's last offset" if index is None else f"message {index}'s key"
        super().__init__(f"partition {partition}: {what} is {current}, expected {expected}")
        self.partition = partition
        self.index = index
        self.expected = expected
        self.current = current


class SnapshotExpired(StorageError):
    """A snapshot read is older than its topic's compaction lag: values it needs may be gone, so
    it must start again."""


class InvalidOffset(StorageError):
    """An offset given by a client is not a valid stream ID."""

    def __init__(self, offset: str) -> None:
        super().__init__(f"invalid offset {offset!r}: expected '<ms>-<seq>', "
                         "'earliest' or 'latest'")
        self.offset = offset
