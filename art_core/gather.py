"""Run many rollouts at once and collect them into groups.

    groups = await gather_trajectory_groups(
        (TrajectoryGroup(rollout(model, scenario) for _ in range(8)) for scenario in batch),
        max_exceptions=0.1,                 # tolerate up to 10% failed rollouts
        after_each=lambda g: ruler_score_group(g, "openai/o4-mini", swallow_exceptions=True),
    )

A group is built from awaitables (coroutines of rollouts); `gather_trajectory_groups` runs them all,
at most `max_concurrent` at a time, and shows a progress bar of groups, trajectories and exceptions.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Awaitable, Callable, Iterable

from art_core.trajectories import RolloutError, Trajectory, TrajectoryGroup

log = logging.getLogger(__name__)

AfterEach = Callable[[TrajectoryGroup], "TrajectoryGroup | None | Awaitable[TrajectoryGroup | None]"]


class PendingGroup:
    """Awaitables of rollouts for one scenario, not yet run. `TrajectoryGroup(coros)` returns one."""

    def __init__(self, awaitables: list[Awaitable[Trajectory]], metadata: dict[str, Any] | None = None) -> None:
        self.awaitables = awaitables
        self.metadata = metadata or {}


def trajectory_group(awaitables: Iterable[Awaitable[Trajectory]], **metadata: Any) -> PendingGroup:
    """A group of rollouts to run later with `gather_trajectory_groups`."""
    return PendingGroup(list(awaitables), metadata)


class TooManyExceptions(RuntimeError):
    """More rollouts failed than `max_exceptions` allows; the first failure's traceback is attached."""


def _as_pending(group: Any) -> PendingGroup:
    if isinstance(group, PendingGroup):
        return group
    if isinstance(group, TrajectoryGroup):  # already finished: nothing to run
        return PendingGroup([_done(t) for t in group.trajectories], dict(group.metadata))
    items = list(group)
    if items and all(inspect.isawaitable(i) for i in items):
        return PendingGroup(items)
    raise TypeError("each group must be trajectory_group(awaitables), a TrajectoryGroup, or a list of awaitables")


async def _done(t: Trajectory) -> Trajectory:
    return t


def _exception_limit(max_exceptions: int | float, total: int) -> int:
    if isinstance(max_exceptions, float) and 0 <= max_exceptions < 1:
        return int(max_exceptions * total)
    if max_exceptions < 0:
        raise ValueError("max_exceptions must be >= 0 (a count, or a fraction below 1)")
    return int(max_exceptions)


async def gather_trajectory_groups(
    groups: Iterable[Any],
    *,
    max_exceptions: int | float = 0,
    max_concurrent: int = 64,
    after_each: AfterEach | None = None,
    pbar_desc: str | None = "gather",
) -> list[TrajectoryGroup]:
    """Run every rollout of every group concurrently and return the finished groups, in input order.

    max_exceptions: failed rollouts tolerated in all (an int) or as a share of all rollouts (a float < 1);
      past it, `TooManyExceptions` is raised carrying the first failure. Tolerated failures are kept in
      `group.exceptions`.
    after_each: called with each finished group; may return a replacement, or None to drop the group.
    """
    pending = [_as_pending(g) for g in groups]
    total = sum(len(p.awaitables) for p in pending)
    limit = _exception_limit(max_exceptions, total)
    semaphore = asyncio.Semaphore(max_concurrent)
    failures: list[BaseException] = []
    bar = _progress(pbar_desc, len(pending), total)
    stats = {"trajectories": 0, "exceptions": 0}

    async def run_one(aw: Awaitable[Trajectory]) -> Trajectory | RolloutError:
        async with semaphore:
            try:
                t = await aw
            except Exception as exc:  # counted against max_exceptions below, never scored
                failures.append(exc)
                stats["exceptions"] += 1
                _postfix(bar, stats)
                if len(failures) > limit:
                    raise TooManyExceptions(
                        f"{len(failures)} rollouts failed, more than max_exceptions={max_exceptions} allows; "
                        f"first failure: {type(failures[0]).__name__}: {failures[0]}"
                    ) from failures[0]
                log.warning("rollout failed (%d tolerated so far): %r", len(failures), exc)
                return RolloutError.from_exception(exc)
        if not isinstance(t, Trajectory):
            raise TypeError(f"a rollout returned {type(t).__name__}; rollouts must return a Trajectory")
        stats["trajectories"] += 1
        _postfix(bar, stats)
        return t

    async def run_group(p: PendingGroup) -> TrajectoryGroup | None:
        results = await asyncio.gather(*(run_one(aw) for aw in p.awaitables))
        group = TrajectoryGroup(
            [r for r in results if isinstance(r, Trajectory)],
            exceptions=[r for r in results if isinstance(r, RolloutError)],
            metadata=p.metadata,
        )
        if after_each is not None:
            out = after_each(group)
            group = await out if inspect.isawaitable(out) else out
        if bar is not None:
            bar.update(1)
        return group

    tasks = [asyncio.ensure_future(run_group(p)) for p in pending]
    try:
        finished = await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    return [g for g in finished if g is not None]


def _progress(desc: str | None, groups: int, trajectories: int):
    if desc is None:
        return None
    from tqdm.auto import tqdm

    bar = tqdm(total=groups, desc=desc, unit="group", leave=False)
    bar.set_postfix(trajectories=f"0/{trajectories}", exceptions=0)
    bar._art_total = trajectories  # type: ignore[attr-defined]
    return bar


def _postfix(bar, stats: dict[str, int]) -> None:
    if bar is not None:
        bar.set_postfix(trajectories=f"{stats['trajectories']}/{bar._art_total}", exceptions=stats["exceptions"], refresh=False)
