"""Prefect task: roll out one step's scenarios against the served model and write the groups to storage.

Cached on its inputs and source (not on the server's URL, which changes between runs): a re-run, a
resumed run after a crash, or another machine reading the same storage skips rollouts already done.
Without a cache hit the rollouts in storage are still reused when a checkpoint was trained on them or
when the same inputs wrote them (each group records an inputs key): Prefect commits its cache record
only after the task is marked Completed, and a crash in between must not roll out again.

    result = gather_trajectories(ref, rollout, step=0, inference_url=None)
    result.uri      # '.../demo/models/agent-001/trajectories/train/0000.jsonl'
"""

from __future__ import annotations

import hashlib
import json
import time

from prefect import get_run_logger, task

from art_core.rollouts import reward_summary, rollout_groups, scenarios_for_step
from tasks._async import run_sync
from tasks.results import cached_on
from tasks.serving import endpoint_for, served_name
from tasks.specs import GatherResult, ModelRef, RolloutSpec


@task(name="gather_trajectories", task_run_name="gather step {step}", cache_policy=cached_on("inference_url"),
      persist_result=True)  # fmt: skip
def gather_trajectories(
    ref: ModelRef, rollout: RolloutSpec, step: int, policy: str, inference_url: str | None = None
) -> GatherResult:
    """Roll out `groups_per_step` scenarios `group_size` times each with the model at `step`.

    `policy` is the checkpoint's fingerprint (art_core.rollouts.checkpoint_fingerprint): it is only here
    so that the cache key changes when the weights do.
    """
    t0 = time.perf_counter()
    storage, env = ref.storage(), rollout.load_environment()
    uri = storage.trajectories_path(ref.project, ref.model, "train", step)
    key = _inputs_key(ref, rollout, step, policy)
    if storage.exists(uri):  # written whole (rename / one PUT), so an existing file is complete
        groups = storage.read_groups(uri)
        trained = storage.is_complete(storage.checkpoint_path(ref.project, ref.model, step + 1))
        # Reuse what a checkpoint was trained on, or what these very inputs produced: a crash between the
        # file write and Prefect's cache commit (or new code, a new result store) must not roll out again.
        if trained or all(g.metadata.get("inputs_key") == key for g in groups):
            get_run_logger().info("step %d: reusing the rollouts in %s (not rolling out again)", step, uri)
            return GatherResult(step=step, uri=uri, summary=reward_summary(groups), seconds=time.perf_counter() - t0)
    endpoint = endpoint_for(ref.base_model, inference_url)
    served = served_name(endpoint, storage, ref.project, ref.model, step)
    scenarios = scenarios_for_step(env, "train", step, rollout.groups_per_step, rollout.seed)
    groups = run_sync(rollout_groups(env, endpoint, served, scenarios, rollout.group_size,
                                     max_exceptions=rollout.max_exceptions, sampling=rollout.sampling))  # fmt: skip
    for g in groups:
        g.metadata["inputs_key"] = key
    storage.write_groups(uri, groups)
    summary = reward_summary(groups)
    get_run_logger().info("step %d: %d rollouts of %s, reward %.3f -> %s",
                          step, int(summary["trajectories"]), served, summary["reward"], uri)  # fmt: skip
    return GatherResult(step=step, uri=uri, summary=summary, seconds=time.perf_counter() - t0)


def _inputs_key(ref: ModelRef, rollout: RolloutSpec, step: int, policy: str) -> str:
    """The inputs the cache keys on (not the server's URL), hashed: recorded in each group written."""
    blob = json.dumps([ref.model_dump(mode="json"), rollout.model_dump(mode="json"), step, policy], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
