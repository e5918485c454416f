from typing import Any

from storage.models import StoredEntry

def decode_raw_entries(partition: int, items: list[Any], layout: tuple[Any, ...],
                       /) -> list[StoredEntry] | None: ...
def entries_of_columns(partition: int, count: int, ids: tuple[Any, ...], names: tuple[Any, ...],
                       values: tuple[Any, ...], formats: tuple[Any, ...] | None,
                       headers: tuple[Any, ...] | None, layout: tuple[Any, ...],
                       /) -> list[StoredEntry] | None: ...
