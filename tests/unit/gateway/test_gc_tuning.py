"""The serving process's collector settings: startup state frozen, a higher young-generation
threshold."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest
from aiohttp import web

from gateway.gc_tuning import tune_collector, tuned_collector


@pytest.fixture
def restored_collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_collector")
def test_tuning_freezes_startup_and_raises_threshold() -> None:
    _, middle, old = gc.get_threshold()
    startup_state = [object(), {"long": "lived"}]
    tune_collector(20_000)
    assert gc.get_threshold() == (20_000, middle, old)
    assert gc.get_freeze_count() > 0
    # frozen: out of the collector's view
    assert all(tracked is not startup_state for tracked in gc.get_objects())


@pytest.mark.usefixtures("restored_collector")
def test_zero_leaves_pythons_defaults() -> None:
    before = gc.get_threshold()
    tune_collector(0)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


@pytest.mark.usefixtures("restored_collector")
async def test_cleanup_context_tunes_while_serving() -> None:
    app = web.Application()
    app.cleanup_ctx.append(tuned_collector(5_000, every_s=0.02))
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        assert gc.get_threshold()[0] == 5_000
        # a cycle, unreachable at once: only the cyclic collector frees it
        watched = weakref.ref(_Node())
        for _ in range(100):
            if watched() is None:
                break
            await asyncio.sleep(0.01)
        assert watched() is None, "the periodic young collection never freed the cycle"
        assert any(task.get_name() == "young-gc" for task in asyncio.all_tasks())
    finally:
        await runner.cleanup()
    assert not any(task.get_name() == "young-gc" for task in asyncio.all_tasks())


class _Node:
    """An object in a reference cycle with itself."""

    def __init__(self) -> None:
        self.me = self
