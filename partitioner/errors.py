"""Errors raised by the partitioner package; etcd exceptions are translated here at the boundary."""

from __future__ import annotations


class PartitionerError(Exception):
    """Base of every partitioner error."""

    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidTopic(PartitionerError):
    """A topic name or setting breaks the rules; ``field`` names the offending field."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class TopicExists(PartitionerError):
    """Creating a topic whose name is taken."""

    def __init__(self, name: str) -> None:
        super().__init__(f"topic {name!r} already exists")
        self.name = name


class TopicNotFound(PartitionerError):
    """The topic does not exist."""

    def __init__(self, name: str) -> None:
        super().__init__(f"topic {name!r} does not exist")
        self.name = name


class ConcurrentModification(PartitionerError):
    """Someone else changed the topic between our read and our write; the caller may retry."""

    retriable = True

    def __init__(self, name: str) -> None:
        super().__init__(f"topic {name!r} was changed concurrently; retry")
        self.name = name


class CoordinationUnavailable(PartitionerError):
    """etcd could not be reached or did not answer in time."""

    retriable = True

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class HistoryCompacted(CoordinationUnavailable):
    """A watch asked for revisions etcd has compacted away; the watcher must reload a snapshot."""

    def __init__(self, compacted_revision: int) -> None:
        super().__init__(f"etcd history was compacted up to revision {compacted_revision}")
        self.compacted_revision = compacted_revision


class InvalidGroup(PartitionerError):
    """A consumer-group name or member id breaks the rules; ``field`` names the offending field."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class MembershipLost(PartitionerError):
    """A group member's lease could not be kept alive for a whole TTL (or it was closed).

    The member must stop serving every partition at once; the caller may join again as a new member.
    """

    retriable = True

    def __init__(self, topic: str, group: str, member_id: str) -> None:
        super().__init__(f"member {member_id!r} of group {group!r} on topic {topic!r} lost its "
                         "membership")
        self.topic = topic
        self.group = group
        self.member_id = member_id
