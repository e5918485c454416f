"""Reading a served gateway back over plain HTTP: a partition replayed whole, page by page."""

from __future__ import annotations

from typing import Any

import requests


def replay_all(url: str, topic: str, partition: int, page: int = 1000) -> list[dict[str, Any]]:
    """Every message of the partition from the first offset, ``page`` at a time."""
    messages: list[dict[str, Any]] = []
    cursor = "earliest"
    while True:
        response = requests.get(f"{url}/v1/topics/{topic}/partitions/{partition}/messages",
                                params={"from": cursor, "limit": page}, timeout=30)
        body = response.json()
        if not body["messages"]:
            return messages
        messages += body["messages"]
        cursor = body["next_offset"]
