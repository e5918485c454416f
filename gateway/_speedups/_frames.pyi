from collections.abc import Sequence
from typing import Any

from storage.models import Delivery

def message_frames(prefix: bytes, deliveries: list[Delivery], layout: tuple[Any, ...],
                   /) -> list[bytes] | None: ...
def refill(page: list[Delivery], indexes: list[int], values: Sequence[object],
           alone: dict[str, str], only_version: int, layout: tuple[Any, ...], /) -> bool: ...
def text_frames(payloads: list[bytes], /) -> bytes | None: ...
