"""Prefect task: one GRPO step, made idempotent by its checkpoint instead of by a cache.

If `checkpoints/{step+1:04d}` is complete in storage the step is not trained again (its metrics are
read back from history.jsonl); otherwise the trainer resumes from `checkpoints/{step:04d}` and writes
the new checkpoint with its COMPLETE marker last. A crash mid-step leaves no complete checkpoint, so
the re-run trains that step once. The checkpoint travels by URI, never as a task result.
"""

from __future__ import annotations

import time

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from art_core.reporting import record_metrics, step_metrics
from art_core.rollouts import reward_summary
from tasks.specs import ModelRef, TrainStepResult


@task(name="train_step", task_run_name="train step {step}", cache_policy=NO_CACHE, persist_result=False)
def train_step(ref: ModelRef, scored_uri: str, step: int, train_config: dict) -> TrainStepResult:
    """Train step `step` -> checkpoint `step + 1` on the scored groups at `scored_uri`."""
    t0, log = time.perf_counter(), get_run_logger()
    storage = ref.storage()
    target = storage.checkpoint_path(ref.project, ref.model, step + 1)
    if storage.is_complete(target):
        log.info("checkpoint %s exists: step %d is not trained again", target, step + 1)
        metrics = step_metrics(storage, ref.project, ref.model, step + 1, prefix="train/")
        return TrainStepResult(step=step + 1, checkpoint_uri=target, metrics=metrics, trained=False)
    from art_core.training.config import TrainConfig
    from art_core.training.trainer import train_step as train_one_step

    groups = storage.read_groups(scored_uri)
    result = train_one_step(base_model=ref.base_model, groups=groups,
                            config=TrainConfig.model_validate(train_config), storage=storage,
                            project=ref.project, name=ref.model, step=step)  # fmt: skip
    # The reward the step was trained on sits next to the trainer's own metrics (loss, grad norm...).
    metrics = {**reward_summary(groups), **result.metrics}
    metrics = record_metrics(storage, ref.project, ref.model, result.step, metrics, prefix="train/")
    log.info("trained step %d -> %s", result.step, result.checkpoint_path)
    return TrainStepResult(step=result.step, checkpoint_uri=result.checkpoint_path or target, metrics=metrics,
                           trained=True, seconds=time.perf_counter() - t0)  # fmt: skip
