"""The train flow: gather -> score -> train (-> evaluate) for each step, every step a cached Prefect task.

    python -c "from flows.train import train; from flows.config import RunConfig; train(RunConfig(...))"

or from the Prefect UI through the `train` deployment (deployments/prefect.yaml). Running it again with
the same config resumes: rollouts come from the cache in storage, steps whose checkpoint exists are not
trained again, so a crashed or killed run picks up where it stopped.
"""

from __future__ import annotations

import time

from prefect import flow
from pydantic import BaseModel

from art_core.rollouts import RolloutSpec, checkpoint_fingerprint
from art_core.serving import server_lora_rank
from art_core.store import ModelRef
from flows.config import RunConfig
from flows.lifetime import guard_temporary_server
from flows.overrides import warn_if_config_replaced
from flows.reporting import publish_run_report
from tasks import evaluate, gather_trajectories, result_storage_for, score_groups, train_step


class TrainSummary(BaseModel):
    """What a train run did: reward per step, where checkpoints and reports are, and which steps were new."""

    storage_url: str
    model_path: str
    rewards: dict[int, float]
    checkpoints: dict[int, str]
    trained_steps: list[int]
    evaluations: dict[int, float]
    step_seconds: dict[int, float] = {}
    # Seconds spent inside each task's body (the art_core calls); a cached task reports its original run's.
    phase_seconds: dict[int, dict[str, float]] = {}
    report_paths: dict[str, str]


def refs(config: RunConfig, for_eval: bool = False) -> tuple[ModelRef, RolloutSpec]:
    """The task-level references a run config stands for (only what changes a task's result).

    `for_eval`: the rollout spec of evaluations (their temperature, see RunConfig.eval_sampling)."""
    ref = ModelRef(storage_url=config.storage_url, project=config.project, model=config.model, base_model=config.base_model)
    rollout = RolloutSpec(
        environment=config.environment.name,
        env_options=config.environment.options,
        groups_per_step=config.groups_per_step,
        group_size=config.group_size,
        seed=config.seed,
        sampling=config.eval_sampling() if for_eval else config.sampling.model_dump(),
        max_exceptions=config.max_exceptions,
    )
    return ref, rollout


def policy_of(ref: ModelRef, step: int) -> str:
    """The fingerprint of the weights step `step` samples from (art_core.rollouts.checkpoint_fingerprint)."""
    return checkpoint_fingerprint(ref.storage(), ref.project, ref.model, step)


def bind_model(ref: ModelRef, config: RunConfig) -> None:
    """Record what the model is (base model, environment) and refuse a run whose base model differs from
    the one its checkpoints were trained from, before any work. No secrets live in the config."""
    ref.store().bind(ref.base_model, environment=config.environment.model_dump(), trainable=True)


@flow(name="train", log_prints=True)
def train(config: RunConfig) -> TrainSummary:
    """Train `config.model` until `config.steps` steps exist; resume whatever is already done."""
    guard_temporary_server()  # a temporary Prefect server dies with this process, SIGKILL included
    warn_if_config_replaced()  # a run given a whole new config, not a few fields: say what fell back
    ref, rollout = refs(config)
    eval_rollout = refs(config, for_eval=True)[1]
    bind_model(ref, config)  # before any server starts or any task runs
    results = result_storage_for(config.storage_url)
    gather = gather_trajectories.with_options(result_storage=results)
    score = score_groups.with_options(result_storage=results)
    evaluate_step = evaluate.with_options(result_storage=results)
    store = ref.store()
    url, rank = config.inference_url, server_lora_rank(config.train.lora_rank)  # the server serves our adapters
    n, per_step = config.steps, config.groups_per_step * config.group_size
    summary = TrainSummary(storage_url=config.storage_url, model_path=store.root, rewards={}, checkpoints={},
                           trained_steps=[], evaluations={}, report_paths={})  # fmt: skip

    for step in range(n):  # step s samples from checkpoint s (0: the base model) and trains checkpoint s + 1
        t0 = time.perf_counter()
        policy = policy_of(ref, step)  # keys the cache on the weights sampled from, not just the step number
        gathered = gather(ref, rollout, step, policy, url, rank)
        if store.read_groups(gathered.uri) is None:  # the cache outlived its file (deleted, truncated): again
            gathered = gather.with_options(refresh_cache=True)(ref, rollout, step, policy, url, rank)
        t1 = time.perf_counter()
        scored = score(ref, gathered.uri, gathered.fingerprint, step, config.judge)
        if store.read_groups(scored.uri) is None:
            scored = score.with_options(refresh_cache=True)(ref, gathered.uri, gathered.fingerprint, step, config.judge)
        t2 = time.perf_counter()
        # The task's own state says Cached when the checkpoint existed; its result is the TrainStepResult.
        trained = train_step(ref, scored.uri, step, config.train, url, return_state=True).result()
        t3 = time.perf_counter()
        summary.step_seconds[step + 1] = t3 - t0
        summary.phase_seconds[step + 1] = {"gather": gathered.seconds, "score": scored.seconds, "train": trained.seconds}
        summary.rewards[step + 1] = scored.summary["reward"]
        summary.checkpoints[trained.step] = trained.checkpoint_uri
        if trained.trained:
            summary.trained_steps.append(trained.step)
        print(
            f"step {step + 1}/{n}: {int(gathered.summary['trajectories'])}/{per_step} rollouts, "
            f"reward {scored.summary['reward']:.3f}; gather {t1 - t0:.1f}s, score {t2 - t1:.1f}s, "
            f"train {t3 - t2:.1f}s{'' if trained.trained else ' (checkpoint existed)'}"
        )
        if config.eval_every and ((step + 1) % config.eval_every == 0 or step + 1 == n):
            e = config.eval
            report = evaluate_step(ref, eval_rollout, trained.step, policy_of(ref, trained.step), e.split, e.scenarios,
                                   e.trials, e.success_threshold, url, rank)  # fmt: skip
            if store.read_eval(trained.step) is None:  # cached, but its file was lost or damaged: write it back
                store.write_eval(trained.step, report.model_dump(mode="json"))
            summary.evaluations[trained.step] = report.reward
            print(f"  eval step {trained.step} on {e.split}: reward {report.reward:.3f}, pass^k {report.pass_k}")

    summary.report_paths = publish_run_report(ref, wandb=config.report_to_wandb)
    return summary
