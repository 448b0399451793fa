"""Prefect task: evaluate one step of a model on a split (mean reward, pass^k) and store the report.

Cached on its inputs and source: a step's checkpoint never changes, so neither does its evaluation.
The report goes to `eval/{step:04d}.json` and history.jsonl; a prompted baseline's (any model behind an
OpenAI-compatible URL, key from ART_BASELINE_API_KEY) to `{project}/baselines/{model}/eval-{split}.json`.
"""

from __future__ import annotations

import os
import re

from prefect import get_run_logger, task

from art_core.evaluate import EvalReport, evaluate_model
from art_core.reporting import record_metrics
from art_core.rollouts import Endpoint
from art_core.storage import Storage
from tasks._async import run_sync
from tasks.results import cached_on
from tasks.serving import endpoint_for, served_name
from tasks.specs import ModelRef, RolloutSpec


@task(name="evaluate", task_run_name="evaluate step {step} on {split}", cache_policy=cached_on("inference_url"),
      persist_result=True)  # fmt: skip
def evaluate(ref: ModelRef, rollout: RolloutSpec, step: int, policy: str, split: str = "val", scenarios: int = 8,
             trials: int = 1, success_threshold: float = 1.0, inference_url: str | None = None) -> EvalReport:  # fmt: skip
    """Mean reward and pass^k of the model at `step` (0: the base model) on the first `scenarios` of `split`.

    `policy` (the checkpoint's fingerprint) keys the cache on the weights, as in gather_trajectories.
    """
    storage, env = ref.storage(), rollout.load_environment()
    endpoint = endpoint_for(ref.base_model, inference_url)
    served = served_name(endpoint, storage, ref.project, ref.model, step)
    report, groups = run_sync(evaluate_model(env, endpoint, served, step=step, split=split, scenarios=scenarios,
                                             trials=trials, success_threshold=success_threshold,
                                             sampling=rollout.sampling))  # fmt: skip
    storage.write_json(ref.path("eval", f"{step:04d}.json"), report.model_dump(mode="json"))
    storage.write_groups(storage.trajectories_path(ref.project, ref.model, split, step), groups)
    metrics = {"reward": report.reward, **{f"pass^{k}": v for k, v in report.pass_k.items()}}
    record_metrics(storage, ref.project, ref.model, step, metrics, prefix=f"{split}/")
    get_run_logger().info("step %d on %s: reward %.3f, pass^k %s", step, split, report.reward, report.pass_k)
    return report


@task(name="evaluate_prompted", task_run_name="evaluate {model} on {split}", cache_policy=cached_on(),
      persist_result=True)  # fmt: skip
def evaluate_prompted(storage_url: str, project: str, base_url: str, model: str, rollout: RolloutSpec,
                      split: str = "val", scenarios: int = 8, trials: int = 1,
                      success_threshold: float = 1.0) -> EvalReport:  # fmt: skip
    """The same evaluation for a prompted model (a hosted one, or a base model on our server) as a baseline."""
    env = rollout.load_environment()
    key = os.environ.get("ART_BASELINE_API_KEY") or os.environ.get("ART_INFERENCE_API_KEY")
    endpoint = Endpoint(base_url=base_url.rstrip("/"), api_key=key, base_name=model)
    report, _ = run_sync(evaluate_model(env, endpoint, model, step=0, split=split, scenarios=scenarios, trials=trials,
                                        success_threshold=success_threshold, sampling=rollout.sampling))  # fmt: skip
    storage = Storage(storage_url)
    folder = re.sub(r"[^A-Za-z0-9._-]+", "_", model)
    storage.write_json(storage.join(project, "baselines", folder, f"eval-{split}.json"), report.model_dump(mode="json"))
    get_run_logger().info("prompted %s on %s: reward %.3f, pass^k %s", model, split, report.reward, report.pass_k)
    return report
