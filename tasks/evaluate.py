"""Prefect tasks: evaluate one step of a model, a prompted baseline, the never-acts baseline or the expert, on a split
(art_core.evaluate). Where the environment has task categories, each report has reward and pass^k per category
and its headline is pass^1 on tasks that need a write.

Cached on inputs, source and the environment's code: a step's checkpoint never changes (its fingerprint is an
input), so neither does its evaluation, until the environment's code does (`art_core.envs.environment_fingerprint`:
an edited reward, customer or tool is evaluated again, not answered from the cache). A step's report goes to
`eval/{step:04d}.json` (`eval/{split}/` off val) and history.jsonl; a prompted baseline's (any model behind an
OpenAI-compatible URL, key from ART_BASELINE_API_KEY) to `{project}/baselines/{model}/eval-{split}.json`; the never-acts policy's (no server) to
`{project}/baselines/never-acts-{environment}/eval-{split}.json`; the expert's (retail, airline, tau2) to
`{project}/baselines/expert-{environment}/eval-{split}.json`.
"""

from __future__ import annotations

import os

from prefect import get_run_logger, task
from prefect.cache_policies import CacheKeyFnPolicy

from art_core.evaluate import EvalReport, evaluate_baseline, evaluate_step, expert_baseline, never_acts_baseline
from art_core.rollouts import RolloutSpec
from art_core.serving import Endpoint, endpoint_for
from art_core.store import ModelRef
from art_pipeline.tasks.results import cached_on


def _environment_code(context, parameters: dict) -> str:
    from art_core.envs import environment_fingerprint

    rollout = parameters["rollout"]
    return environment_fingerprint(rollout["environment"] if isinstance(rollout, dict) else rollout.environment)


ENVIRONMENT_CODE = CacheKeyFnPolicy(cache_key_fn=_environment_code)


@task(
    name="evaluate",
    task_run_name="evaluate step {step} on {split}",
    cache_policy=cached_on("inference_url", "max_lora_rank", "server") + ENVIRONMENT_CODE,
    persist_result=True,
)
def evaluate(
    ref: ModelRef,
    rollout: RolloutSpec,
    step: int,
    checkpoint_fingerprint: str,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
    inference_url: str | None = None,
    max_lora_rank: int = 8,
    server: dict | None = None,
) -> EvalReport:
    """Mean reward and pass^k of the model at `step` (0: the base model) on the first `scenarios` of `split`,
    and per task category where the environment has them (the headline: write pass^1).

    `checkpoint_fingerprint` keys the cache on the weights, as in gather_trajectories.
    """
    report = evaluate_step(
        ref,
        rollout,
        step,
        split=split,
        scenarios=scenarios,
        trials=trials,
        success_threshold=success_threshold,
        endpoint=lambda rank: endpoint_for(
            ref.base_model, inference_url, max_lora_rank=max(rank, max_lora_rank), options=server
        ),
    )
    h = report.headline  # write pass^1 where the environment has task categories, else the reward
    get_run_logger().info(
        "step %d on %s: %s, reward %.3f, pass^k %s", step, split, h.described(), report.reward, report.pass_k
    )
    return report


@task(
    name="evaluate_prompted",
    task_run_name="evaluate {model} on {split}",
    cache_policy=cached_on() + ENVIRONMENT_CODE,
    persist_result=True,
)
def evaluate_prompted(
    storage_url: str,
    project: str,
    base_url: str,
    model: str,
    rollout: RolloutSpec,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
) -> EvalReport:
    """The same evaluation for a prompted model (a hosted one, or a base model on our server) as a baseline,
    per task category too where the environment has them."""
    key = os.environ.get("ART_BASELINE_API_KEY") or os.environ.get("ART_INFERENCE_API_KEY")
    endpoint = Endpoint(base_url=base_url.rstrip("/"), api_key=key, base_name=model)
    report = evaluate_baseline(
        storage_url,
        project,
        endpoint,
        model,
        rollout,
        split=split,
        scenarios=scenarios,
        trials=trials,
        success_threshold=success_threshold,
    )
    h = report.headline
    get_run_logger().info(
        "prompted %s on %s: %s, reward %.3f, pass^k %s",
        model,
        split,
        h.described(),
        report.reward,
        report.pass_k,
    )
    return report


@task(
    name="evaluate_never_acts",
    task_run_name="evaluate never-acts on {split}",
    cache_policy=cached_on() + ENVIRONMENT_CODE,
    persist_result=True,
)
def evaluate_never_acts(
    storage_url: str,
    project: str,
    rollout: RolloutSpec,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
) -> EvalReport:
    """The do-nothing baseline on the same scenarios: a policy in code that never calls a tool and always
    declines, played through the environment (no server). It scores 0 on tasks that need a write."""
    report = never_acts_baseline(
        storage_url,
        project,
        rollout,
        split=split,
        scenarios=scenarios,
        trials=trials,
        success_threshold=success_threshold,
    )
    return _logged(report, split)


@task(
    name="evaluate_expert",
    task_run_name="evaluate the expert on {split}",
    cache_policy=cached_on() + ENVIRONMENT_CODE,
    persist_result=True,
)
def evaluate_expert(
    storage_url: str,
    project: str,
    rollout: RolloutSpec,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
) -> EvalReport | None:
    """The ceiling on the same scenarios: the domain's expert in code (retail, airline, tau2; None elsewhere) under the
    run's own limits, played through the environment (no server). A write task it fails there (cut by
    max_turns) is out of reach for a model trained on its demonstrations."""
    report = expert_baseline(
        storage_url,
        project,
        rollout,
        split=split,
        scenarios=scenarios,
        trials=trials,
        success_threshold=success_threshold,
    )
    return None if report is None else _logged(report, split)


def _logged(report: EvalReport, split: str) -> EvalReport:
    """Log a policy-in-code baseline's headline and reward (never-acts, the expert); returns the report."""
    h = report.headline
    get_run_logger().info("%s on %s: %s %.3f, reward %.3f", report.model, split, h.metric, h.value, report.reward)
    return report
