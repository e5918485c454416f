from collections.abc import Callable
from typing import Any

def parse_plain(raw_messages: list[Any], max_key_bytes: int, max_value_bytes: int,
                dumps: Callable[[Any], bytes],
                /) -> tuple[list[bytes | None], list[bytes], int] | None: ...
def plain_results_json(partitions: list[int], offsets: list[str], /) -> bytes: ...
def scan_plain_body(body: bytes, max_batch_messages: int, max_key_bytes: int, max_value_bytes: int,
                    loads: Callable[[bytes], Any], dumps: Callable[[Any], bytes],
                    /) -> tuple[str, list[bytes | None], list[bytes], int] | None: ...
