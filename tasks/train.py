"""Prefect task: one GRPO step and its history record (art_core.step.train_and_record), idempotent by its
checkpoint instead of by a cache.

If `checkpoints/{step+1:04d}` is complete the step is not trained again: the task ends in a `Cached`
state, and a history record lost to a crash is written back from the checkpoint. Otherwise the trainer
resumes from `checkpoints/{step:04d}` and writes the new checkpoint with its COMPLETE marker last. A
vLLM server this process runs for the model sleeps while the trainer holds the device. The checkpoint
travels by URI, never as a task result.
"""

from __future__ import annotations

import time

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from art_core.serving import servers_sharing
from art_core.step import already_trained, train_and_record
from art_core.store import ModelRef
from art_core.training.config import TrainConfig
from art_pipeline.tasks.results import step_run_name, train_step_state


@task(name="train_step", task_run_name=step_run_name("train"), cache_policy=NO_CACHE, persist_result=False)
def train_step(
    ref: ModelRef,
    scored_uri: str,
    step: int,
    config: TrainConfig,
    inference_url: str | None = None,
    sleep_servers: bool = True,
):
    """Train checkpoint `step` -> checkpoint `step + 1` on the scored groups at `scored_uri`.

    `sleep_servers=False` keeps this process's vLLM servers awake while training (asynchronous steps:
    the next step's rollouts are sampled meanwhile)."""
    t0, log = time.perf_counter(), get_run_logger()
    store = ref.store()
    if store.is_complete(step + 1):  # a resumed run: the rollouts are read only to write back a lost record
        result = already_trained(store, lambda: store.read_groups(scored_uri, damaged="warn"), step + 1, complete=True)
    else:
        groups = store.read_groups(scored_uri)  # a damaged file raises DamagedRollouts naming its line
        if groups is None:
            raise FileNotFoundError(
                f"the scored rollouts of step {step + 1} at {scored_uri} are missing; "
                "run the flow again and they are gathered and scored again"
            )
        servers = servers_sharing(ref.base_model, inference_url) if sleep_servers else []
        result = train_and_record(store, ref.base_model, groups, config, step, servers=servers, complete=False)
    if result.trained:
        log.info("trained step %d -> %s", result.step, result.checkpoint_path)
    else:
        log.info("checkpoint %s exists: step %d is not trained again", result.checkpoint_path, result.step)
    return train_step_state(result, store, t0)
