"""Append calls from record objects, and a call's reply as results, for the storage unit tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage._speedups import reply_offsets
from storage.append.batch import reply_duplicates
from storage.append.calls import AppendCall
from storage.models import Appended, AppendOptions, AppendResult, Record, Records


def append_call(topic: str, partition: int, records: Sequence[Record],
                options: AppendOptions) -> AppendCall:
    """One partition's call for ``records`` (objects, as a test writes them)."""
    return AppendCall(topic, partition, Records.of(records), options)


def append_results(partition: int, reply: list[Any]) -> list[AppendResult]:
    """A call's flat script reply as one result per record, as the store reads it."""
    offsets = reply_offsets(partition, reply)
    return list(Appended([partition] * len(offsets), offsets, reply_duplicates(reply)))
