"""Run many rollouts at once and collect them into groups (ART's `gather_trajectory_groups`).

    groups = await gather_trajectory_groups(
        (TrajectoryGroup(rollout(model, scenario) for _ in range(8)) for scenario in batch),
        max_exceptions=0.1,                 # tolerate up to 10% failed rollouts
        after_each=lambda g: ruler_score_group(g, "openai/o4-mini", swallow_exceptions=True),
    )

A group is built from awaitables (coroutines of rollouts); `gather_trajectory_groups` runs them all,
at most `max_concurrent` at a time. Its progress bar counts finished trajectories (as ART's does) and
shows, after them, the groups finished (after `after_each`), exceptions, the mean reward and the
trajectories' own metrics, and the completion tokens sampled so far. Where stderr is no terminal it
prints a line every ART_PROGRESS_EVERY_S seconds instead (art_core.progress).

What no rollout may bring into a run:
- a reward that is not a finite number (NaN, inf): the rollout fails with `NonFiniteReward` naming it, counted
  against max_exceptions like any failed rollout, and is never trained on;
- text that is not valid UTF-8 (a lone surrogate such as '\\udce9', from a file name decoded with
  surrogateescape): escaped where it stands and counted (art_core.trajectories.escape_invalid_text), so the
  group can be stored, judged and tokenized;
- a dead server of ours: a rollout that failed to reach a vLLM server this process started, which has
  exited, ends the gather at once with `ServerDied` naming it (art_core.inference.dead_server);
- a silent stall: a request its server is not working on fails within ART_REQUEST_STALL_S seconds (30 by
  default) with `ServerStalled` naming the server and its counts (art_core.inference.http_client), and a
  gather in which no rollout progressed for ART_GATHER_STALL_S seconds (120 by default) logs a warning
  saying which rollouts wait on which server, and what each server reported running and waiting:

    gather 'gather': no rollout progressed for 121 s; 2 of 16 rollouts unfinished:
      rollout 3 of group 1 (scenario train-7): waiting 121 s on POST /v1/chat/completions to http://127.0.0.1:41234
      rollout 5 of group 1 (scenario train-7): in its own code for 121 s, no request in flight
      server http://127.0.0.1:41234: its /metrics reported 0 running and 0 waiting 2 s ago

A server's line also says whether its token counters rose between reads: "still generating: slow, not stuck" (a
busy machine, a long context) or "has not moved in N s" (an engine holding requests without working on them).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import os
import time
from collections import Counter
from typing import Any, Awaitable, Callable, Iterable

from openai.types.chat.chat_completion import Choice

from art_core.inference.http_client import RolloutActivity, current_rollout, watched_server
from art_core.progress import every_s, progress_bar
from art_core.trajectories import RolloutError, Trajectory, TrajectoryGroup, escape_invalid_text

log = logging.getLogger(__name__)

STALL_ENV = "ART_GATHER_STALL_S"
DEFAULT_STALL_S = 120.0

AfterEachResult = "TrajectoryGroup | list[TrajectoryGroup] | None"
AfterEach = Callable[[TrajectoryGroup], "AfterEachResult | Awaitable[AfterEachResult]"]


class PendingGroup:
    """Awaitables of rollouts for one scenario, not yet run. `TrajectoryGroup(coros)` and `trajectory_group`
    return one; awaiting it runs it alone, `gather_trajectory_groups` runs many."""

    def __init__(
        self,
        awaitables: list[Awaitable[Trajectory]],
        metadata: dict[str, Any] | None = None,
        return_exceptions: bool = False,
    ) -> None:
        self.awaitables = awaitables
        self.metadata = metadata or {}
        self.return_exceptions = return_exceptions

    def __await__(self):  # ART lets a group of coroutines be awaited on its own
        return self._run().__await__()

    async def _run(self) -> TrajectoryGroup:
        try:
            return (await gather_trajectory_groups([self], pbar_desc=None))[0]
        except TooManyExceptions as exc:
            first = exc.__cause__
        # Awaited alone, a failed rollout raises its own exception, as ART's asyncio.gather does.
        raise first if first is not None else RuntimeError("a rollout failed")


def trajectory_group(
    awaitables: Iterable[Awaitable[Trajectory]],
    *,
    return_exceptions: bool = False,
    metadata: dict[str, Any] | None = None,
) -> PendingGroup:
    """A group of rollouts, run when awaited (`await art.trajectory_group(...)`) or by gather_trajectory_groups.

    return_exceptions (ART's option): a failed rollout comes back in `group.exceptions` (a RolloutError with
      its type, message and traceback; logged) and the group keeps the rollouts that finished, whatever
      the gather's max_exceptions. Without it, awaiting the group raises the first failure itself (as ART),
      and a gather counts it against max_exceptions.
    metadata (ours): the finished group's metadata, e.g. {"scenario_id": s.id}.
    Any other keyword is a TypeError: gather options (max_exceptions, after_each) go to gather_trajectory_groups.

        group = await art.trajectory_group([art.trajectory(rollout()) for _ in range(4)], return_exceptions=True)
        len(group.trajectories) + len(group.exceptions)   # 4
    """
    return PendingGroup(list(awaitables), metadata, return_exceptions=return_exceptions)


class TooManyExceptions(RuntimeError):
    """More rollouts failed than `max_exceptions` allows; the first failure's traceback is attached."""


class NonFiniteReward(ValueError):
    """A rollout's reward is NaN or infinite (or not a number): the rollout fails instead of being trained on."""


def check_reward(t: Trajectory, where: str) -> None:
    """Raise NonFiniteReward naming the rollout (`where`) unless its reward is a finite number.

    >>> try:
    ...     check_reward(Trajectory(reward=float("nan")), "rollout 2 of group 0")
    ... except NonFiniteReward as e:
    ...     print(e)
    rollout 2 of group 0 returned reward nan: a reward must be a finite number
    """
    r = t.reward
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
        raise NonFiniteReward(f"{where} returned reward {r!r}: a reward must be a finite number")


def rollout_name(group: int, index: int | None, metadata: dict[str, Any]) -> str:
    """How a failed rollout is named: its place and its scenario, when the group records one.

    >>> rollout_name(1, 3, {"scenario_id": "train-7"})
    'rollout 3 of group 1 (scenario train-7)'
    """
    name = f"rollout {index} of group {group}" if index is not None else f"a rollout of group {group}"
    return f"{name} (scenario {metadata['scenario_id']})" if "scenario_id" in metadata else name


async def raise_if_server_died(exc: BaseException, desc: str | None) -> None:
    """Raise ServerDied (from `exc`) when `exc` is a failed request to a vLLM server we started that exited."""
    from art_core.inference.dead_server import server_died_behind

    died = await server_died_behind(exc, f" during {desc!r}" if desc else " during a gather")
    if died is not None:
        raise died from exc


def stalled_or(exc: BaseException) -> BaseException:
    """The `ServerStalled` behind `exc` (naming the server, what it reported, and its log when we started it),
    else `exc` itself: the openai client raises a stalled request as `APITimeoutError: Request timed out.`."""
    from art_core.inference.dead_server import stalled_behind

    return stalled_behind(exc) or exc


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
        self.requests = 0  # answered so far, from the heartbeat (StallReport.answered)
        self.bar = None
        if desc is not None:
            # no time left: the rollouts run concurrently and most finish near the end (progress.py)
            self.bar = progress_bar(total=trajectories, desc=desc, unit="trajectory", eta=False)

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
        if self.requests:
            out["requests"] = self.requests
        return out

    def _tick(self, n: int) -> None:
        if self.bar is not None:
            self.bar.set_postfix(self.postfix(), refresh=False)
            self.bar.update(n)  # refreshes within tqdm's mininterval; close() draws the final state

    def heartbeat(self, requests: int) -> None:
        """Show the requests answered so far while no trajectory finishes: long episodes run concurrently
        end together, and a log would otherwise stay silent for minutes (a line per ART_PROGRESS_EVERY_S)."""
        self.requests = requests
        if self.bar is not None:
            self.bar.set_postfix(self.postfix(), refresh=False)
            self.bar.update(0)

    def close(self, requests: int) -> None:
        """The last line, with the gather's final count of answered requests."""
        self.requests = requests
        if self.bar is not None:
            self.bar.set_postfix(self.postfix(), refresh=False)
            self.bar.refresh()
            self.bar.close()


def gather_stall_s() -> float:
    """Seconds without progress after which a gather says it is stuck: ART_GATHER_STALL_S, default 120; 0: never."""
    try:
        return max(0.0, float(os.environ.get(STALL_ENV) or DEFAULT_STALL_S))
    except ValueError:
        return DEFAULT_STALL_S


class StallReport:
    """Watches a gather's rollouts and logs a warning when none of them progressed for `after_s` seconds (a
    request answered, a streamed byte, a rollout finished): which rollouts wait on which server, and what the
    server's /metrics said. Again after every further `after_s` seconds while the gather stays stuck."""

    def __init__(self, desc: str | None, after_s: float | None = None) -> None:
        self.desc = desc or "gather"
        self.after_s = gather_stall_s() if after_s is None else after_s
        self.unfinished: dict[RolloutActivity, None] = {}  # in start order
        self.total = 0
        self.last_finished = self.reported_at = time.monotonic()
        self.reports = 0
        self.answered_by_finished = 0

    def start(self, name: str) -> RolloutActivity:
        """A rollout starts: its activity, to set in `current_rollout` while it runs."""
        activity = RolloutActivity(name)
        self.unfinished[activity] = None
        self.total += 1
        return activity

    def finish(self, activity: RolloutActivity) -> None:
        if self.unfinished.pop(activity, False) is None:
            self.answered_by_finished += activity.answered
        self.last_finished = time.monotonic()

    def answered(self) -> int:
        """Requests of the gather's rollouts answered so far (model turns taken, judge calls made)."""
        return self.answered_by_finished + sum(a.answered for a in self.unfinished)

    def quiet_for(self, now: float) -> float:
        """Seconds since the last progress of any rollout."""
        return now - max([self.last_finished, *(a.last_progress for a in self.unfinished)])

    async def watch(self, heartbeat: Callable[[int], None] | None = None) -> None:
        """Run beside the gather (cancelled when it ends); `heartbeat` is given the requests answered so far
        every few seconds (at most every ART_PROGRESS_EVERY_S)."""
        if not self.after_s and heartbeat is None:
            return
        while True:
            await asyncio.sleep(max(0.05, min(10.0, self.after_s / 4 if self.after_s else 10.0, every_s())))
            if heartbeat is not None:
                heartbeat(self.answered())
            if not self.after_s:
                continue
            now = time.monotonic()
            quiet = self.quiet_for(now)
            if self.unfinished and quiet >= self.after_s and now - self.reported_at >= self.after_s:
                self.reported_at, self.reports = now, self.reports + 1
                await self.refresh_servers()
                log.warning("%s", self.describe(time.monotonic()))

    def servers(self) -> list[str]:
        """The servers the unfinished rollouts wait on, in the order first met."""
        return list({f.server: None for a in self.unfinished for f in sorted(a.in_flight, key=lambda f: f.since)})

    async def refresh_servers(self) -> None:
        """Fresh counts from each server waited on, each read within a few seconds (the report goes out anyway)."""
        refreshes = [asyncio.ensure_future(w.refresh()) for w in map(watched_server, self.servers()) if w is not None]
        if refreshes:
            _, late = await asyncio.wait(refreshes, timeout=5.0)
            for task in late:
                task.cancel()

    def describe(self, now: float) -> str:
        """The report: the gather, how long it has been quiet, each unfinished rollout and each server's counts."""
        lines = [
            f"gather {self.desc!r}: no rollout progressed for {self.quiet_for(now):.0f} s; "
            f"{len(self.unfinished)} of {self.total} rollouts unfinished:"
        ]
        for a in self.unfinished:
            flights = sorted(a.in_flight, key=lambda f: f.since)
            if not flights:
                lines.append(f"  {a.name}: in its own code for {now - a.last_progress:.0f} s, no request in flight")
            for f in flights:
                lines.append(f"  {a.name}: waiting {now - f.since:.0f} s on {f.describe()}")
        for root in self.servers():
            watch = watched_server(root)
            lines.append(f"  server {root}: {watch.seen() if watch is not None else 'not watched'}")
        return "\n".join(lines)


async def gather_trajectory_groups(
    groups: Iterable[Any],
    *,
    pbar_desc: str | None = "gather",
    pbar_total_completion_tokens: bool = True,
    max_exceptions: int | float = 0,
    max_metrics: int | None = None,
    after_each: AfterEach | None = None,
    max_concurrent: int = 64,
    stall_report_s: float | None = None,
) -> list[TrajectoryGroup]:
    """Run every rollout of every group concurrently and return the finished groups, in input order.

    max_exceptions: failed rollouts tolerated in all (an int) or as a share of all rollouts (a float < 1);
      past it, `TooManyExceptions` is raised carrying the first failure. Tolerated failures are kept in
      `group.exceptions`. A non-finite reward is such a failure (NonFiniteReward); a vLLM server of ours that
      died raises ServerDied at once, whatever the limit.
    after_each: called with each finished group as soon as it is done; may return a replacement group,
      a list of groups (flattened into the result), or None to drop the group.
    pbar_desc: the progress bar's label (None: no bar); max_metrics: show at most this many metrics on
      it; pbar_total_completion_tokens: show the completion tokens sampled so far.
    stall_report_s: log a warning naming the waiting rollouts and their servers when none progressed for this
      long (StallReport); None: ART_GATHER_STALL_S, default 120 s; 0: never.
    """
    pending = [_as_pending(g) for g in groups]
    total = sum(len(p.awaitables) if isinstance(p, PendingGroup) else 1 for p in pending)
    limit = exception_limit(max_exceptions, total)
    semaphore = asyncio.Semaphore(max_concurrent)
    failures: list[BaseException] = []
    progress = _Progress(pbar_desc, len(pending), total, pbar_total_completion_tokens, max_metrics)
    stalls = StallReport(pbar_desc, stall_report_s)

    def failed(exc: BaseException, returned: bool = False) -> RolloutError:
        progress.exception()
        if returned:  # its group asked for it (return_exceptions=True): not counted against max_exceptions
            log.warning("rollout failed, returned in its group: %r", exc)
            return RolloutError.from_exception(exc)
        failures.append(exc)
        if len(failures) > limit:
            raise TooManyExceptions(
                f"{len(failures)} rollouts failed, more than max_exceptions={max_exceptions} allows; "
                f"first failure: {type(failures[0]).__name__}: {failures[0]}"
            ) from failures[0]
        log.warning("rollout failed (%d tolerated so far): %r", len(failures), exc)
        return RolloutError.from_exception(exc)

    def refuse_non_finite(group: TrajectoryGroup, g: int) -> None:
        """Move trajectories whose reward is not finite (a group built by its own coroutine, or rescored by
        after_each) to the group's exceptions, each counted as a failed rollout."""
        kept = []
        for i, t in enumerate(group.trajectories):
            try:
                check_reward(t, rollout_name(g, i, group.metadata))
                kept.append(t)
            except NonFiniteReward as exc:
                group.exceptions.append(failed(exc))
        group.trajectories = kept

    async def run_one(aw: Awaitable[Trajectory], where: str, returned: bool) -> Trajectory | RolloutError:
        async with semaphore:
            activity = stalls.start(where)
            current_rollout.set(activity)  # this task's context: the rollout's requests report to it
            try:
                t = await aw
            except Exception as exc:  # counted against max_exceptions (or returned), never scored
                await raise_if_server_died(exc, pbar_desc)
                return failed(stalled_or(exc), returned)
            finally:
                stalls.finish(activity)
        if not isinstance(t, Trajectory):
            raise TypeError(f"a rollout returned {type(t).__name__}; rollouts must return a Trajectory")
        try:
            check_reward(t, where)
        except NonFiniteReward as exc:
            return failed(exc, returned)
        progress.trajectory(t)
        return t

    async def run_group(p: PendingGroup | Awaitable[Any], g: int) -> list[TrajectoryGroup]:
        if isinstance(p, PendingGroup):
            names = [rollout_name(g, i, p.metadata) for i in range(len(p.awaitables))]
            runs = (run_one(aw, name, p.return_exceptions) for aw, name in zip(p.awaitables, names))
            results = await asyncio.gather(*runs)
            group = TrajectoryGroup(
                [r for r in results if isinstance(r, Trajectory)],
                exceptions=[r for r in results if isinstance(r, RolloutError)],
                metadata=p.metadata,
            )
        else:
            activity = stalls.start(f"group {g}")
            current_rollout.set(activity)
            try:
                group = await p
            except Exception as exc:
                await raise_if_server_died(exc, pbar_desc)
                failed(stalled_or(exc))
                return []
            finally:
                stalls.finish(activity)
            if isinstance(group, PendingGroup):
                return await run_group(group, g)
            refuse_non_finite(group, g)
            for t in group.trajectories:
                progress.trajectory(t)
        escape_invalid_text(group)  # before a judge, storage or a tokenizer meets it
        out: Any = group
        if after_each is not None:
            out = after_each(group)
            out = await out if inspect.isawaitable(out) else out
        progress.group()
        if out is None:
            return []
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        for o in outs:
            if isinstance(o, TrajectoryGroup):
                refuse_non_finite(o, g)
        return outs

    tasks = [asyncio.ensure_future(run_group(p, g)) for g, p in enumerate(pending)]
    watcher = asyncio.ensure_future(stalls.watch(progress.heartbeat))
    try:
        finished = await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        _close_unstarted(pending)
        raise
    finally:
        watcher.cancel()
        progress.close(stalls.answered())
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
    stall_report_s: float | None = None,
) -> list[Any]:
    """Run rollouts that are not grouped (e.g. an evaluation) and return their results in input order.

    Each awaitable returns a Trajectory (or an iterable of them, kept as a list). Within
    `max_exceptions`, a failed rollout's exception is returned in its place, as ART does. A stuck evaluation
    says so as a gather does (`stall_report_s`, StallReport).

        results = await gather_trajectories((rollout(model, s) for s in val_scenarios), max_exceptions=2)
        trajectories = [r for r in results if isinstance(r, Trajectory)]
    """
    items = list(trajectories)
    limit = exception_limit(max_exceptions, len(items))
    progress = _Progress(pbar_desc, 0, len(items), pbar_total_completion_tokens, max_metrics)
    stalls = StallReport(pbar_desc, stall_report_s)
    failures: list[BaseException] = []

    async def fail(exc: BaseException) -> BaseException:
        await raise_if_server_died(exc, pbar_desc)
        exc = stalled_or(exc)
        failures.append(exc)
        progress.exception()
        if len(failures) > limit:
            raise exc
        return exc

    async def run(aw: Awaitable[Any], i: int) -> Any:
        activity = stalls.start(f"rollout {i}")
        current_rollout.set(activity)
        try:
            out = await aw
        except Exception as exc:
            return await fail(exc)
        finally:
            stalls.finish(activity)
        outs = [out] if isinstance(out, Trajectory) else list(out)
        for t in outs:
            if not isinstance(t, Trajectory):
                raise TypeError(f"a rollout returned {type(t).__name__}; rollouts must return a Trajectory")
        try:
            for t in outs:
                check_reward(t, f"rollout {i}")
        except NonFiniteReward as exc:
            return await fail(exc)
        for t in outs:
            escape_invalid_text(t)
            progress.trajectory(t)
        return out if isinstance(out, Trajectory) else outs

    watcher = asyncio.ensure_future(stalls.watch(progress.heartbeat))
    try:
        return list(await asyncio.gather(*(run(aw, i) for i, aw in enumerate(items))))
    finally:
        watcher.cancel()
        progress.close(stalls.answered())
