"""Run many rollouts at once and collect them into groups (ART's `gather_trajectory_groups`).

    groups = await gather_trajectory_groups(
        (TrajectoryGroup(rollout(model, scenario) for _ in range(8)) for scenario in batch),
        max_exceptions=0.1,                 # tolerate up to 10% failed rollouts
        after_each=lambda g: ruler_score_group(g, "openai/o4-mini", swallow_exceptions=True),
    )

A group is built from awaitables (coroutines of rollouts); `gather_trajectory_groups` runs them all,
at most `max_concurrent` at a time. Its progress bar counts finished trajectories (as ART's does) and
shows, after them, the groups finished (after `after_each`), exceptions, the mean reward and the
trajectories' own metrics, and the completion tokens sampled so far.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import Counter
from typing import Any, Awaitable, Callable, Iterable

from openai.types.chat.chat_completion import Choice

from art_core.trajectories import RolloutError, Trajectory, TrajectoryGroup

log = logging.getLogger(__name__)

AfterEachResult = "TrajectoryGroup | list[TrajectoryGroup] | None"
AfterEach = Callable[[TrajectoryGroup], "AfterEachResult | Awaitable[AfterEachResult]"]


class PendingGroup:
    """Awaitables of rollouts for one scenario, not yet run. `TrajectoryGroup(coros)` returns one."""

    def __init__(self, awaitables: list[Awaitable[Trajectory]], metadata: dict[str, Any] | None = None) -> None:
        self.awaitables = awaitables
        self.metadata = metadata or {}

    def __await__(self):  # ART lets a group of coroutines be awaited on its own
        return self._run().__await__()

    async def _run(self) -> TrajectoryGroup:
        return (await gather_trajectory_groups([self], pbar_desc=None))[0]


def trajectory_group(awaitables: Iterable[Awaitable[Trajectory]], **metadata: Any) -> PendingGroup:
    """A group of rollouts to run later with `gather_trajectory_groups`."""
    return PendingGroup(list(awaitables), metadata)


class TooManyExceptions(RuntimeError):
    """More rollouts failed than `max_exceptions` allows; the first failure's traceback is attached."""


def _as_pending(group: Any) -> PendingGroup | Awaitable[Any]:
    if isinstance(group, PendingGroup):
        return group
    if isinstance(group, TrajectoryGroup):  # already finished: nothing to run
        return PendingGroup([_done(t) for t in group.trajectories], dict(group.metadata))
    if inspect.isawaitable(group):  # a coroutine that builds and returns its own group
        return group
    items = list(group)
    if items and all(inspect.isawaitable(i) for i in items):
        return PendingGroup(items)
    raise TypeError("each group must be TrajectoryGroup(awaitables), a TrajectoryGroup, or a list of awaitables")


async def _done(t: Trajectory) -> Trajectory:
    return t


def exception_limit(max_exceptions: int | float, total: int) -> int:
    if isinstance(max_exceptions, float) and 0 <= max_exceptions < 1:
        return int(max_exceptions * total)
    if max_exceptions < 0:
        raise ValueError("max_exceptions must be >= 0 (a count, or a fraction below 1)")
    return int(max_exceptions)


def completion_tokens(trajectory: Trajectory) -> int:
    """Tokens sampled in this trajectory (all its Choices, additional histories included)."""
    items = list(trajectory.messages_and_choices)
    for h in trajectory.additional_histories:
        items += h.messages_and_choices
    return sum(len(c.logprobs.content or []) for c in items if isinstance(c, Choice) and c.logprobs is not None)


class _Progress:
    """ART's bar: one tick per finished trajectory; groups, exceptions and mean metrics as postfix."""

    def __init__(self, desc: str | None, groups: int, trajectories: int, total_tokens: bool, max_metrics: int | None):
        self.groups, self.total_tokens, self.max_metrics = groups, total_tokens, max_metrics
        self.sums: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.done_groups = self.exceptions = self.tokens = 0
        self.bar = None
        if desc is not None:
            from art_core.progress import progress_bar

            self.bar = progress_bar(total=trajectories, desc=desc, unit="trajectory")

    def trajectory(self, t: Trajectory) -> None:
        self.sums["reward"] += t.reward
        self.counts["reward"] += 1
        for k, v in t.metrics.items():
            if isinstance(v, (int, float)):
                self.sums[k] += v
                self.counts[k] += 1
        self.tokens += completion_tokens(t)
        self._tick(1)

    def exception(self) -> None:
        self.exceptions += 1
        self._tick(1)

    def group(self) -> None:
        self.done_groups += 1
        self._tick(0)

    def postfix(self) -> dict[str, Any]:
        out: dict[str, Any] = {"groups": f"{self.done_groups}/{self.groups}", "exceptions": self.exceptions}
        names = list(self.sums)[: self.max_metrics] if self.max_metrics is not None else list(self.sums)
        out.update({k: round(self.sums[k] / self.counts[k], 4) for k in names})
        if self.total_tokens:
            out["total_completion_tokens"] = self.tokens
        return out

    def _tick(self, n: int) -> None:
        if self.bar is not None:
            self.bar.set_postfix(self.postfix(), refresh=False)
            self.bar.update(n)  # refreshes within tqdm's mininterval; close() draws the final state

    def close(self) -> None:
        if self.bar is not None:
            self.bar.set_postfix(self.postfix(), refresh=False)
            self.bar.refresh()
            self.bar.close()


async def gather_trajectory_groups(
    groups: Iterable[Any],
    *,
    pbar_desc: str | None = "gather",
    pbar_total_completion_tokens: bool = True,
    max_exceptions: int | float = 0,
    max_metrics: int | None = None,
    after_each: AfterEach | None = None,
    max_concurrent: int = 64,
) -> list[TrajectoryGroup]:
    """Run every rollout of every group concurrently and return the finished groups, in input order.

    max_exceptions: failed rollouts tolerated in all (an int) or as a share of all rollouts (a float < 1);
      past it, `TooManyExceptions` is raised carrying the first failure. Tolerated failures are kept in
      `group.exceptions`.
    after_each: called with each finished group as soon as it is done; may return a replacement group,
      a list of groups (flattened into the result), or None to drop the group.
    pbar_desc: the progress bar's label (None: no bar); max_metrics: show at most this many metrics on
      it; pbar_total_completion_tokens: show the completion tokens sampled so far.
    """
    pending = [_as_pending(g) for g in groups]
    total = sum(len(p.awaitables) if isinstance(p, PendingGroup) else 1 for p in pending)
    limit = exception_limit(max_exceptions, total)
    semaphore = asyncio.Semaphore(max_concurrent)
    failures: list[BaseException] = []
    progress = _Progress(pbar_desc, len(pending), total, pbar_total_completion_tokens, max_metrics)

    def failed(exc: BaseException) -> RolloutError:
        failures.append(exc)
        progress.exception()
        if len(failures) > limit:
            raise TooManyExceptions(
                f"{len(failures)} rollouts failed, more than max_exceptions={max_exceptions} allows; "
                f"first failure: {type(failures[0]).__name__}: {failures[0]}"
            ) from failures[0]
        log.warning("rollout failed (%d tolerated so far): %r", len(failures), exc)
        return RolloutError.from_exception(exc)

    async def run_one(aw: Awaitable[Trajectory]) -> Trajectory | RolloutError:
        async with semaphore:
            try:
                t = await aw
            except Exception as exc:  # counted against max_exceptions, never scored
                return failed(exc)
        if not isinstance(t, Trajectory):
            raise TypeError(f"a rollout returned {type(t).__name__}; rollouts must return a Trajectory")
        progress.trajectory(t)
        return t

    async def run_group(p: PendingGroup | Awaitable[Any]) -> list[TrajectoryGroup]:
        if isinstance(p, PendingGroup):
            results = await asyncio.gather(*(run_one(aw) for aw in p.awaitables))
            group = TrajectoryGroup(
                [r for r in results if isinstance(r, Trajectory)],
                exceptions=[r for r in results if isinstance(r, RolloutError)],
                metadata=p.metadata,
            )
        else:
            try:
                group = await p
            except Exception as exc:
                failed(exc)
                return []
            if isinstance(group, PendingGroup):
                return await run_group(group)
            for t in group.trajectories:
                progress.trajectory(t)
        out: Any = group
        if after_each is not None:
            out = after_each(group)
            out = await out if inspect.isawaitable(out) else out
        progress.group()
        if out is None:
            return []
        return list(out) if isinstance(out, (list, tuple)) else [out]

    tasks = [asyncio.ensure_future(run_group(p)) for p in pending]
    try:
        finished = await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        _close_unstarted(pending)
        raise
    finally:
        progress.close()
    return [g for gs in finished for g in gs if g is not None]


def _close_unstarted(pending: list[Any]) -> None:
    """Close the rollouts a failed gather never started, so Python does not warn they were never awaited."""
    for p in pending:
        for aw in p.awaitables if isinstance(p, PendingGroup) else [p]:
            if inspect.iscoroutine(aw) and inspect.getcoroutinestate(aw) == inspect.CORO_CREATED:
                aw.close()


async def gather_trajectories(
    trajectories: Iterable[Awaitable[Any]],
    *,
    pbar_desc: str | None = "gather",
    pbar_total_completion_tokens: bool = True,
    max_exceptions: int | float = 0,
    max_metrics: int | None = None,
) -> list[Any]:
    """Run rollouts that are not grouped (e.g. an evaluation) and return their results in input order.

    Each awaitable returns a Trajectory (or an iterable of them, kept as a list). Within
    `max_exceptions`, a failed rollout's exception is returned in its place, as ART does.

        results = await gather_trajectories((rollout(model, s) for s in val_scenarios), max_exceptions=2)
        trajectories = [r for r in results if isinstance(r, Trajectory)]
    """
    items = list(trajectories)
    limit = exception_limit(max_exceptions, len(items))
    progress = _Progress(pbar_desc, 0, len(items), pbar_total_completion_tokens, max_metrics)
    failures: list[BaseException] = []

    async def run(aw: Awaitable[Any]) -> Any:
        try:
            out = await aw
        except Exception as exc:
            failures.append(exc)
            progress.exception()
            if len(failures) > limit:
                raise
            return exc
        outs = [out] if isinstance(out, Trajectory) else list(out)
        for t in outs:
            if not isinstance(t, Trajectory):
                raise TypeError(f"a rollout returned {type(t).__name__}; rollouts must return a Trajectory")
            progress.trajectory(t)
        return out if isinstance(out, Trajectory) else outs

    try:
        return list(await asyncio.gather(*(run(aw) for aw in items)))
    finally:
        progress.close()
