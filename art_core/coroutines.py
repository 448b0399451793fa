"""Run a coroutine to completion from synchronous code, whether or not this thread already runs an event loop.

The engine's synchronous entry points (a Prefect task's body, `evaluate_step`, `gather_step`, an MCP
server's discovery in a notebook) all go through `run_sync`:

    name, tools, resources = run_sync(discover(server))
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, or asyncio.run in a helper thread when this thread already runs a loop (an async flow, a
    notebook cell)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
