"""The cluster router tells its observer about every attempt: operation, time taken and the error's
class."""

from __future__ import annotations

from typing import Any

import pytest

from storage.cluster import ClusterRouter
from storage.errors import StorageError
from storage.settings import RedisStoreSettings
from storage.wire import errors

Report = tuple[str, float, "str | None"]


def router(reports: list[Report]) -> ClusterRouter:
    # The cluster client is only touched by the slot-map refresh after a connection error; a failed
    # refresh is left to the next attempt, so a placeholder will do.
    settings = RedisStoreSettings(retry_backoff_s=0.001, retry_backoff_max_s=0.001)
    made = ClusterRouter(object(), settings, owns_cluster=False)  # type: ignore[arg-type]
    made.observer = lambda operation, seconds, error: reports.append((operation, seconds, error))
    return made


async def test_retried_call_reports_failed_attempt_then_success() -> None:
    reports: list[Report] = []
    attempts = iter([errors.ConnectionLost("reset"), None])

    async def op() -> str:
        failure: Any = next(attempts)
        if failure is not None:
            raise failure
        return "ok"

    assert await router(reports).call("read", 2.0, op) == "ok"
    assert [(operation, error) for operation, _, error in reports] == [("read", "ConnectionLost"),
                                                                       ("read", None)]
    assert all(seconds >= 0 for _, seconds, _ in reports)


async def test_permanent_error_is_reported_once_and_raised() -> None:
    reports: list[Report] = []

    async def op() -> None:
        raise errors.ResponseError("WRONGTYPE")

    with pytest.raises(StorageError):
        await router(reports).call("state", 2.0, op)
    assert [(operation, error) for operation, _, error in reports] == [("state", "ResponseError")]
