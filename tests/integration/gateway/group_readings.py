"""Reading a gateway's answers in the group tests: a group's partitions over HTTP, one metric
from the /metrics text."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient

Client = TestClient[Any, Any]


async def group_partitions(client: Client, group: str, topic: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/groups/{group}", params={"topic": topic})
    assert response.status == 200, await response.text()
    return list((await response.json())["topics"][0]["partitions"])


def metric(text: str, name: str, labels: str = "") -> float:
    """The sum of a counter's samples whose labels contain ``labels``."""
    return sum(
        float(m.group(2))
        for m in re.finditer(rf"^{name}{{([^}}]*)}} (\S+)$", text, re.MULTILINE)
        if labels in m.group(1)
    )
