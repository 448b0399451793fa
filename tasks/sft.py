"""Prefect tasks of supervised fine-tuning: the expert demonstrations (cached), and one epoch (art_core.sft.sft_epoch),
idempotent by its checkpoint.

`build_demonstrations` plays an environment's expert and writes the JSONL to storage; it is cached on its inputs
(environment, split, seed, limit, the options they depend on, where) and on the digest of the expert's code (an
edited expert, tool or policy builds again), and returns the file's URI, never the conversations.

Like train_step: if `checkpoints/{step+1:04d}` is complete the epoch is not trained again and the task
ends `Cached`; otherwise the adapter of checkpoint `step` is fine-tuned on the epoch's examples and
checkpoint `step + 1` written, COMPLETE marker last. The data travels as a path, never as a result.
"""

from __future__ import annotations

import time

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE, CacheKeyFnPolicy

from art_core.serving import servers_sharing
from art_core.sft import SFTSpec, sft_epoch, store_expert_demonstrations
from art_core.store import ModelRef
from art_core.training.config import TrainConfig
from art_pipeline.tasks.results import cached_on, step_run_name, train_step_state


def _expert_code(context, parameters: dict) -> str:
    from art_core.envs.experts import expert_fingerprint

    return expert_fingerprint(parameters["environment"])


@task(
    name="build_demonstrations",
    task_run_name="demonstrations {environment} {split}",
    cache_policy=cached_on() + CacheKeyFnPolicy(cache_key_fn=_expert_code),
    persist_result=True,
)
def build_demonstrations(
    storage_url: str,
    project: str,
    environment: str,
    split: str = "train",
    seed: int = 0,
    limit: int | None = None,
    options: dict | None = None,
) -> str:
    """The URI of `environment`'s expert demonstrations on `split` (the first `limit` scenarios), written to storage.
    `options`: the environment options they depend on (`demonstration_options`; tau2's data folder, judge and skip_judged)."""
    uri, demos = store_expert_demonstrations(storage_url, project, environment, split, seed, limit, options)
    get_run_logger().info("%s\nwritten to %s", demos.summary(), uri)
    return uri


@task(name="sft_step", task_run_name=step_run_name("sft"), cache_policy=NO_CACHE, persist_result=False)
def sft_step(
    ref: ModelRef,
    data: str,
    spec: SFTSpec,
    epoch: int,
    step: int,
    config: TrainConfig,
    inference_url: str | None = None,
):
    """Fine-tune checkpoint `step` -> `step + 1` on epoch `epoch` of the JSONL at `data`."""
    t0, log = time.perf_counter(), get_run_logger()
    store = ref.store()
    servers = servers_sharing(ref.base_model, inference_url)
    result = sft_epoch(store, ref.base_model, data, spec, epoch, step, config, servers=servers)
    if result.trained:
        log.info("SFT epoch %d -> %s (loss %.4f)", epoch + 1, result.checkpoint_path, result.metrics["loss"])
    else:
        log.info("checkpoint %s exists: SFT epoch %d is not trained again", result.checkpoint_path, epoch + 1)
    return train_step_state(result, store, t0)
