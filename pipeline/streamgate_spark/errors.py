"""Errors raised by the pipeline package: one base, a few leaves carrying typed fields."""

from __future__ import annotations


class PipelineError(Exception):
    """Base of every pipeline error."""

    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidOption(PipelineError):
    """An option given to the ``streamgate`` source or sink is missing or malformed."""

    role = "source or sink"

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"streamgate {self.role} option {option!r}: {problem}")
        self.option = option
        self.problem = problem


class InvalidSourceOption(InvalidOption):
    """An option given to the ``streamgate`` source is missing or malformed."""

    role = "source"


class InvalidSinkOption(InvalidOption):
    """An option given to the ``streamgate`` sink is missing or malformed, or a column it reads has
    a type it cannot publish."""

    role = "sink"


class SinkOutsideStreamingQuery(PipelineError):
    """The sink ran in a task without a streaming query's id and batch id, from which its
    idempotency keys are made."""

    def __init__(self) -> None:
        super().__init__("the streamgate sink publishes micro-batches of a streaming query only "
                         "(df.writeStream.format('streamgate'))")


class TopicNotFound(PipelineError):
    """The gateway does not know the topic whose partitions the source needs."""

    def __init__(self, topic: str, gateway: str) -> None:
        super().__init__(f"topic {topic!r} not found at gateway {gateway}")
        self.topic = topic
        self.gateway = gateway


class UnknownSchemaVersion(PipelineError):
    """The ``schemaVersion`` the source was asked to read at is not one of the topic's registered
    versions (``known``; empty: the topic has no schema)."""

    def __init__(self, topic: str, version: int, known: tuple[int, ...]) -> None:
        have = (f"its versions are {', '.join(map(str, known))}" if known
                else "it has no schema: its values can only be read as written")
        super().__init__(f"topic {topic!r} has no schema version {version} to read at: {have}")
        self.topic = topic
        self.version = version
        self.known = known


class StreamgateDataLoss(PipelineError):
    """A checkpointed offset is older than the oldest retained entry: retention trimmed unread
    entries.

    ``lost`` is the number of trimmed entries after the checkpoint, or None when Redis cannot tell.
    Set ``failOnDataLoss=false`` to log and continue from the oldest retained entry instead.
    """

    def __init__(self, topic: str, partition: int, checkpointed: str, oldest_retained: str,
                 lost: int | None) -> None:
        count = "an unknown number of" if lost is None else str(lost)
        super().__init__(
            f"topic {topic!r} partition {partition}: checkpointed offset {checkpointed} is older "
            f"than the oldest retained entry {oldest_retained}; {count} entries after the "
            "checkpoint were trimmed by retention before they were read (set "
            "failOnDataLoss=false to skip them)"
        )
        self.topic = topic
        self.partition = partition
        self.checkpointed = checkpointed
        self.oldest_retained = oldest_retained
        self.lost = lost


class StreamgateSnapshotExpired(PipelineError):
    """A compacted partition's snapshot was read later than the topic's compaction lag allows:
    values it needs may be gone. A query that starts from a snapshot must read it within the lag;
    start it again (a new checkpoint) to take a fresh one."""

    def __init__(self, topic: str, partition: int, as_of: str, detail: str) -> None:
        super().__init__(f"topic {topic!r} partition {partition}: the snapshot as of {as_of} "
                         f"cannot be read consistently any more ({detail})")
        self.topic = topic
        self.partition = partition
        self.as_of = as_of


class ArchiveNotConfigured(PipelineError):
    """A planned range reaches entries the archive tier moved out of Redis, and the source was
    given no ``archiveUrl`` to read their segment files from: never skipped silently."""

    def __init__(self, topic: str, partition: int, first: str, last: str) -> None:
        super().__init__(
            f"topic {topic!r} partition {partition}: entries {first} to {last} of the range to "
            "read are in the archive tier; give the source 'archiveUrl' (and the archiveS3* "
            "options for an object store) to read them")
        self.topic = topic
        self.partition = partition
        self.first = first
        self.last = last


class ArchiveReadFailed(PipelineError):
    """A segment file of the archive tier could not be read (missing, unreachable or corrupt)."""

    retriable = True

    def __init__(self, url: str, name: str, detail: str) -> None:
        super().__init__(f"archive {url}: cannot read segment {name}: {detail}")
        self.url = url
        self.name = name

