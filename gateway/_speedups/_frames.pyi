from typing import Any

from storage.models import Delivery

def message_frames(prefix: bytes, deliveries: list[Delivery], layout: tuple[Any, ...],
                   /) -> list[bytes] | None: ...
def text_frames(payloads: list[bytes], /) -> bytes | None: ...
