"""Evaluate a served model on a split of an environment: mean reward, and pass^k over repeated attempts.

pass^k (tau-bench) is the chance that k attempts at the same scenario all succeed, estimated from n
attempts with c successes as C(c, k) / C(n, k), averaged over scenarios. It needs n >= k attempts per
scenario, so it is reported for k = 1..trials.

    report = await evaluate_model(env, endpoint, "agent@3", split="val", scenarios=8, trials=4)
    report.reward, report.pass_k            # 0.41, {1: 0.5, 2: 0.31, 3: 0.22, 4: 0.16}
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel, Field

from art_core.envs.base import Environment
from art_core.rollouts import RolloutSpec, reward_summary, rollout_groups
from art_core.store import ModelRef, baseline_eval_path
from art_core.trajectories import TrajectoryGroup

if TYPE_CHECKING:
    from art_core.serving import Endpoint


class EvalReport(BaseModel):
    """What one evaluation measured; stored as `eval/{step:04d}.json`."""

    model: str = Field(description="The served name evaluated, e.g. agent@3 or the base model.")
    step: int
    split: str
    scenarios: int
    trials: int
    reward: float
    pass_k: dict[int, float] = Field(default_factory=dict, description="pass^k for k = 1..trials.")
    success_threshold: float = 1.0
    per_scenario: dict[str, list[float]] = Field(default_factory=dict, description="Rewards of each attempt.")
    seconds: float = 0.0


def pass_hat_k(successes: int, attempts: int, k: int) -> float:
    """C(c, k) / C(n, k): the chance that k attempts drawn from n all succeed.

    >>> pass_hat_k(3, 4, 2)
    0.5
    """
    if not 1 <= k <= attempts:
        raise ValueError(f"pass^k needs 1 <= k <= attempts, got k={k} with {attempts} attempts")
    return math.comb(successes, k) / math.comb(attempts, k)


def eval_report(
    groups: list[TrajectoryGroup], *, model: str, step: int, split: str, trials: int, success_threshold: float = 1.0
) -> EvalReport:
    """An EvalReport from finished groups (one group per scenario, `trials` attempts in each).

    A failed attempt (kept as an exception in its group) counts as an attempt that did not succeed.
    """
    pass_k: dict[int, float] = {}
    per_scenario: dict[str, list[float]] = {}
    for g in groups:
        per_scenario[str(g.metadata.get("scenario_id", len(per_scenario)))] = g.rewards()
    for k in range(1, trials + 1):
        values = []
        for g in groups:
            attempts = len(g.trajectories) + len(g.exceptions)
            if attempts < k:
                continue
            ok = sum(1 for r in g.rewards() if r >= success_threshold)
            values.append(pass_hat_k(ok, attempts, k))
        if values:
            pass_k[k] = sum(values) / len(values)
    return EvalReport(
        model=model,
        step=step,
        split=split,
        scenarios=len(groups),
        trials=trials,
        reward=reward_summary(groups)["reward"],
        pass_k=pass_k,
        success_threshold=success_threshold,
        per_scenario=per_scenario,
    )


async def evaluate_model(
    env: Environment,
    endpoint: "Endpoint",
    model: str,
    *,
    step: int,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
    sampling: dict[str, Any] | None = None,
) -> tuple[EvalReport, list[TrajectoryGroup]]:
    """Roll out the first `scenarios` of `split`, `trials` times each, and summarize them.

    Returns the report and the groups (to store next to it).
    """
    chosen = list(env.scenarios(env.check_split(split)))[:scenarios]
    if not chosen:
        raise ValueError(f"environment {env.name!r} has no {split!r} scenarios to evaluate on")
    t0 = time.perf_counter()
    groups = await rollout_groups(env, endpoint, model, chosen, trials, sampling=sampling, pbar_desc=f"eval {split}")
    report = eval_report(
        groups, model=model, step=step, split=split, trials=trials, success_threshold=success_threshold
    )
    report.seconds = time.perf_counter() - t0
    return report, groups


def evaluate_step(
    ref: ModelRef,
    rollout: RolloutSpec,
    step: int,
    endpoint: "Callable[[int], Endpoint]",
    *,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
    run: Callable[[Any], Any] | None = None,
) -> EvalReport:
    """Evaluate step `step` (0: the base model, as its zero adapter) and record it: `eval/{step}.json`, the
    rollouts under `trajectories/{split}/`, and `{split}/reward`, `{split}/pass^k` in history.jsonl.

    `endpoint(rank)` gives the server to sample from, able to serve adapters of LoRA rank `rank`.
    """
    from art_core.serving import adapter_rank, load_checkpoint

    store = ref.store()
    ep = endpoint(adapter_rank(store, step))
    served = load_checkpoint(ep, store, ref.base_model, step)
    report, groups = (run or asyncio.run)(
        evaluate_model(
            rollout.load_environment(),
            ep,
            served,
            step=step,
            split=split,
            scenarios=scenarios,
            trials=trials,
            success_threshold=success_threshold,
            sampling=rollout.sampling,
        )
    )
    store.write_eval(step, report.model_dump(mode="json"))
    store.write_groups(store.trajectories(split, step), groups)
    store.record(
        step, {"reward": report.reward, **{f"pass^{k}": v for k, v in report.pass_k.items()}}, prefix=f"{split}/"
    )
    return report


def evaluate_baseline(
    storage_url: str,
    project: str,
    endpoint: "Endpoint",
    model: str,
    rollout: RolloutSpec,
    *,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
    run: Callable[[Any], Any] | None = None,
) -> EvalReport:
    """The same evaluation for a prompted model (a hosted one, or a base model on any server), stored under
    `{project}/baselines/{model}/eval-{split}.json`."""
    from art_core.storage import Storage

    report, _ = (run or asyncio.run)(
        evaluate_model(
            rollout.load_environment(),
            endpoint,
            model,
            step=0,
            split=split,
            scenarios=scenarios,
            trials=trials,
            success_threshold=success_threshold,
            sampling=rollout.sampling,
        )
    )
    storage = Storage(storage_url)
    storage.write_json(baseline_eval_path(storage, project, model, split), report.model_dump(mode="json"))
    return report
