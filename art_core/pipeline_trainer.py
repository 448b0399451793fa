"""`PipelineTrainer` and `make_group_rollout_fn` (ART's `art.pipeline_trainer`): rollouts keep running while a
step trains, at most `max_steps_off_policy` steps behind the policy being trained.

    trainer = PipelineTrainer(model, backend, make_group_rollout_fn(rollout, n=8), scenarios, config=None,
                              min_batch_size=4, max_steps_off_policy=1, learning_rate=1e-5, max_steps=50)
    await trainer.train()

Two stages over one queue, in this process: `num_rollout_workers` workers take scenarios in order and roll
out a group each, sampling the model's latest step (`model.get_inference_name()`); a worker waits before
starting a group while the latest step is more than `max_steps_off_policy` behind the step being trained.
The training stage takes at least `min_batch_size` finished groups (up to `max_batch_size`), trains one step
with `backend.train` and records it with `model.log`. Each group records the step it was sampled from and
the history gets `steps_off_policy`. What ART's pipeline adds on top (its autotuner, in-flight LoRA updates,
a discard queue, persisted scenario offsets) is not here; the Prefect train flow's `max_steps_off_policy`
is the pipeline door to the same overlap.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable

from art_core.trajectories import Trajectory, TrajectoryGroup

log = logging.getLogger(__name__)

GroupRolloutFn = Callable[[Any, Any, Any], Awaitable[TrajectoryGroup]]


def make_group_rollout_fn(
    single_rollout_fn: Callable[[Any, Any, Any], Awaitable[Trajectory]], n: int = 4
) -> GroupRolloutFn:
    """A group rollout from a single one: `n` concurrent runs of `single_rollout_fn(model, scenario, config)`;
    a run that raises is kept in the group's exceptions."""

    async def group_rollout(model: Any, scenario: Any, config: Any) -> TrajectoryGroup:
        if n <= 0:
            return TrajectoryGroup([])
        results = await asyncio.gather(
            *(single_rollout_fn(model, scenario, config) for _ in range(n)), return_exceptions=True
        )
        return TrajectoryGroup(results)

    return group_rollout


async def _aiter(items: Iterable[Any] | AsyncIterator[Any]) -> AsyncIterator[Any]:
    if hasattr(items, "__anext__"):
        async for item in items:  # type: ignore[union-attr]
            yield item
    else:
        for item in items:  # type: ignore[union-attr]
            yield item


class PipelineTrainer:
    """ART's asynchronous rollout/train pipeline over `backend.train` (see the module docstring)."""

    def __init__(
        self,
        model: Any,
        backend: Any,
        rollout_fn: GroupRolloutFn,
        scenarios: Iterable[Any],
        config: Any = None,
        *,
        num_rollout_workers: int = 16,
        min_batch_size: int = 4,
        max_batch_size: int | None = None,
        max_steps_off_policy: int = 4,
        learning_rate: float = 1e-5,
        loss_fn: str = "cispo",
        max_steps: int | None = None,
        eval_fn: Callable[[Any, int, Any], Awaitable[Any]] | None = None,
        eval_every_n_steps: int = 20,
        eval_step_0: bool = True,
        **train_options: Any,
    ) -> None:
        if num_rollout_workers < 1 or min_batch_size < 1:
            raise ValueError("num_rollout_workers and min_batch_size must be >= 1")
        if max_batch_size is not None and max_batch_size < min_batch_size:
            raise ValueError("max_batch_size must be >= min_batch_size")
        if max_steps_off_policy < 0:
            raise ValueError("max_steps_off_policy must be >= 0")
        if loss_fn not in ("cispo", "ppo"):
            raise ValueError(f"loss_fn {loss_fn!r}: use 'cispo' or 'ppo'")
        self.model, self.backend, self.rollout_fn, self.config = model, backend, rollout_fn, config
        self.scenarios = scenarios
        self.num_rollout_workers, self.min_batch_size = num_rollout_workers, min_batch_size
        self.max_batch_size = max_batch_size or 10 * min_batch_size
        self.max_steps_off_policy, self.max_steps = max_steps_off_policy, max_steps
        self.eval_fn, self.eval_every_n_steps, self.eval_step_0 = eval_fn, eval_every_n_steps, eval_step_0
        self.train_options = {"learning_rate": learning_rate, "ppo": loss_fn == "ppo", **train_options}
        self.policy_version = 0  # the latest trained step rollouts sample
        self.training_step = 0  # the step being trained (policy_version + 1 while a step trains)

    async def train(self) -> None:
        """Run until the scenarios are used up or `max_steps` steps are trained."""
        self.policy_version = self.training_step = await self.model.get_step()
        stop_at = None if self.max_steps is None else self.policy_version + self.max_steps
        queue: asyncio.Queue[TrajectoryGroup | None] = asyncio.Queue()
        changed = asyncio.Condition()
        scenarios = _aiter(self.scenarios)
        lock = asyncio.Lock()
        if self.eval_fn is not None and self.eval_step_0 and self.policy_version == 0:
            await self.eval_fn(self.model, 0, self.config)

        async def next_scenario() -> Any:
            async with lock:
                return await anext(scenarios, _END)

        async def worker() -> None:
            while (scenario := await next_scenario()) is not _END:
                async with changed:  # not more than max_steps_off_policy behind the step being trained
                    await changed.wait_for(
                        lambda: self.policy_version >= self.training_step - self.max_steps_off_policy
                    )
                sampled = self.policy_version
                group = await self.rollout_fn(self.model, scenario, self.config)
                group.metadata["sampled_step"] = sampled
                await queue.put(group)

        async def rollouts() -> None:
            await asyncio.gather(*(worker() for _ in range(self.num_rollout_workers)))
            await queue.put(None)

        async def training() -> None:
            finished = False
            while not finished and (stop_at is None or self.policy_version < stop_at):
                batch: list[TrajectoryGroup] = []
                while len(batch) < self.min_batch_size or (not queue.empty() and len(batch) < self.max_batch_size):
                    group = await queue.get()
                    if group is None:
                        finished = True
                        break
                    batch.append(group)
                if not batch:
                    break
                async with changed:
                    self.training_step = self.policy_version + 1
                result = await self.backend.train(self.model, batch, **self.train_options)
                behind = [result.step - 1 - int(g.metadata.get("sampled_step", result.step - 1)) for g in batch]
                metrics = {**result.metrics, "steps_off_policy": sum(behind) / len(behind), "num_groups": len(batch)}
                await self.model.log(batch, split="train", step=result.step, metrics=metrics)
                async with changed:
                    self.policy_version = self.training_step = result.step
                    changed.notify_all()
                if self.eval_fn is not None and self.eval_every_n_steps and result.step % self.eval_every_n_steps == 0:
                    await self.eval_fn(self.model, result.step, self.config)

        roll = asyncio.ensure_future(rollouts())
        try:
            await training()
        finally:
            roll.cancel()
            await asyncio.gather(roll, return_exceptions=True)


_END = object()
