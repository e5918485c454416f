from typing import Any

from storage.models import StoredEntry

def decode_raw_entries(partition: int, items: list[Any], layout: tuple[Any, ...],
                       /) -> list[StoredEntry] | None: ...
