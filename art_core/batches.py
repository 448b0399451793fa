"""`trajectory_group_batches`: ART's asynchronous iterator of finished groups, a batch at a time.

    async for batch in trajectory_group_batches(
            (TrajectoryGroup(rollout(model, s) for _ in range(8)) for s in scenarios),
            batch_size=4, max_concurrent_batches=2):
        await backend.train(model, batch)      # the next batches keep rolling out meanwhile

Groups run concurrently, up to `batch_size * max_concurrent_batches` at once; a batch is the next
`batch_size` groups to *finish* (not the next in input order), so a slow scenario does not hold a
batch back. `skip_batches` leaves out the first `skip_batches * batch_size` groups (resuming a run).
`max_batch_exceptions` is how many failed rollouts each group tolerates (gather's max_exceptions).
The Prefect train flow's `max_steps_off_policy` is the pipeline's way to the same overlap.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, AsyncIterator, Iterable

from art_core.gather import gather_trajectory_groups
from art_core.trajectories import TrajectoryGroup


async def trajectory_group_batches(
    groups: Iterable[Any],
    *,
    batch_size: int,
    max_batch_exceptions: int | float = 0,
    max_concurrent_batches: int = 4,
    skip_batches: int = 0,
    pbar_desc: str | None = None,
    pbar_total_completion_tokens: bool = True,
) -> AsyncIterator[list[TrajectoryGroup]]:
    """Yield lists of `batch_size` finished groups (the last may be shorter) as they complete."""
    if batch_size < 1 or max_concurrent_batches < 1:
        raise ValueError("batch_size and max_concurrent_batches must be >= 1")
    every = list(groups)
    for skipped in every[: batch_size * skip_batches]:  # never run: close their coroutines instead of leaking them
        for awaitable in getattr(skipped, "awaitables", [skipped]):
            if inspect.iscoroutine(awaitable):
                awaitable.close()
    unstarted = every[batch_size * skip_batches :]
    unstarted.reverse()  # pop() from the end takes them in input order
    pending: set[asyncio.Task] = set()
    batch: list[TrajectoryGroup] = []

    async def run(group: Any) -> TrajectoryGroup:
        done = await gather_trajectory_groups(
            [group],
            pbar_desc=None,
            max_exceptions=max_batch_exceptions,
            pbar_total_completion_tokens=pbar_total_completion_tokens,
        )
        return done[0]

    try:
        while unstarted or pending:
            while unstarted and len(pending) < batch_size * max_concurrent_batches:
                pending.add(asyncio.ensure_future(run(unstarted.pop())))
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                batch.append(task.result())  # a group past its exception budget raises here
            while len(batch) >= batch_size:
                yield batch[:batch_size]
                batch = batch[batch_size:]
        if batch:
            yield batch
    finally:
        for task in pending:
            task.cancel()
