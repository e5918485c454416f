"""The publish response's result documents: fresh appends serialised by orjson straight from the dataclass."""

from __future__ import annotations

import orjson

from gateway.publisher import PublishResult
from gateway.routes.messages import result_document, results_documents
from storage.models import AppendResult, ScheduledResult


def _as_documents(results: list[PublishResult]) -> bytes:
    return orjson.dumps([result_document(result) for result in results])


def test_fresh_appends_serialise_exactly_as_their_documents() -> None:
    results: list[PublishResult] = [AppendResult(2, "1700000000000-0"), AppendResult(0, "1700000000000-1")]
    assert results_documents(results) is results  # no dict per message
    assert orjson.dumps(results_documents(results)) == _as_documents(results)
    assert orjson.loads(orjson.dumps(results_documents(results)))[0] == {
        "partition": 2, "offset": "1700000000000-0", "duplicate": False}


def test_duplicates_and_scheduled_results_get_their_own_documents() -> None:
    results: list[PublishResult] = [
        AppendResult(1, "5-0"),
        AppendResult(1, "s:abc", duplicate=True),  # an idempotent retry of a message still scheduled
        ScheduledResult(1, "abc", 1_700_000_000_000, False, None),
    ]
    documents = results_documents(results)
    assert orjson.dumps(documents) == _as_documents(results)
    assert documents[1] == {"partition": 1, "offset": None, "duplicate": True, "scheduled_id": "abc"}
