"""The train flow: (sft ->) gather -> score -> train (-> evaluate) for each step, every step a cached Prefect task
(score only with a RULER judge: without one the environment's rewards stand and there is nothing to run).
With `config.sft` the run first fine-tunes on demonstrations (flows.sft.sft_stage: the environment's expert,
built by a cached task, or a file), one checkpoint per epoch, and GRPO's steps continue after them.

    python -c "from flows.train import train; from flows.config import RunConfig; train(RunConfig(...))"

or from the Prefect UI through the `train` deployment (deployments/prefect.yaml). Running it again with
the same config resumes: rollouts come from the cache in storage, steps whose checkpoint exists are not
trained again, so a crashed or killed run picks up where it stopped. Steps checkpointed without rollouts
(the sft flow's epochs) are not rolled out at all: the first rollouts sample the last such checkpoint.
A run holds the model's lease (art_core.lease) from its first line to its end: a second run of the same
project/model in the same storage is refused before any work, with the running one named.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from prefect import flow, get_run_logger
from pydantic import BaseModel

from art_core.fanout import Replicas
from art_core.rollouts import RolloutSpec, checkpoint_fingerprint
from art_core.serving import server_lora_rank
from art_core.step import GatherOutcome
from art_core.store import ModelRef
from flows.config import RunConfig
from flows.lifetime import guard_temporary_server, training_lease
from flows.overrides import warn_if_config_replaced
from flows.queue import device_slot
from flows.reporting import publish_run_report
from flows.sft import SFTSummary, sft_stage
from tasks import evaluate, gather_trajectories, result_storage_for, score_groups, train_step, with_result_storage
from tasks.specs import ScoreResult


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
    # Steps whose rollouts were sampled from an older checkpoint (max_steps_off_policy > 0): how much older.
    staleness: dict[int, float] = {}
    # When (epoch seconds) each step's training finished: steps per second of a run, overlapping or not.
    step_done_at: dict[int, float] = {}
    # With scale.device_slot: seconds waited for the device, and when (epoch seconds) the run held it.
    device: dict[str, float] = {}
    # How each checkpoint of this run was trained: "sft" (no rollouts: SFT's epochs) or "grpo".
    phases: dict[int, str] = {}
    # With config.sft: what the SFT stage did (its epochs' checkpoints, losses, which were trained now).
    sft: SFTSummary | None = None


def refs(config: RunConfig, for_eval: bool = False) -> tuple[ModelRef, RolloutSpec]:
    """The task-level references a run config stands for (only what changes a task's result).

    `for_eval`: the rollout spec of evaluations (their temperature, see RunConfig.eval_sampling)."""
    ref = ModelRef(
        storage_url=config.storage_url, project=config.project, model=config.model, base_model=config.base_model
    )
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


def checkpoint_fingerprint_of(ref: ModelRef, step: int) -> str:
    """The fingerprint of the weights step `step` samples from (art_core.rollouts.checkpoint_fingerprint)."""
    return checkpoint_fingerprint(ref.storage(), ref.project, ref.model, step)


def bind_model(ref: ModelRef, config: RunConfig) -> None:
    """Record what the model is (base model, environment) and refuse a run whose base model differs from
    the one its checkpoints were trained from, before any work. No secrets live in the config."""
    ref.store().bind(ref.base_model, environment=config.environment.model_dump(), trainable=True)


def replicas_of(config: RunConfig) -> Replicas | None:
    """Where a run's rollouts go when it has more than one replica or runs them on Ray; None: one server,
    in this process (inference_url, or the process's own), exactly as before replicas existed."""
    sc = config.scale
    if len(config.inference_urls) <= 1 and sc.replicas == 1 and sc.rollouts_on == "process":
        return None
    return Replicas(urls=tuple(config.inference_urls), count=sc.replicas, on=sc.rollouts_on, ray_address=sc.ray_address)


@flow(name="train", log_prints=True)
def train(config: RunConfig) -> TrainSummary:
    """Train `config.model` until `config.steps` steps exist; resume whatever is already done.

    With `max_steps_off_policy = k > 0`, the rollouts of the next k steps are gathered while a step trains,
    each from the newest checkpoint then complete (at most k steps old)."""
    guard_temporary_server()  # a temporary Prefect server dies with this process, SIGKILL included
    warn_if_config_replaced()  # a run given a whole new config, not a few fields: say what fell back
    ref, rollout = refs(config)
    eval_rollout = refs(config, for_eval=True)[1]
    # One writer per model: a second run of this model is refused here, before any server starts or task runs.
    with training_lease(ref.store()) as lease:
        bind_model(ref, config)
        if config.scale.train_deployment:
            from tasks.remote import check_train_deployment

            check_train_deployment(config.scale.train_deployment, config.storage_url)
        with device_slot(config.scale.device_slot, get_run_logger()) as waited:
            held_from = time.time()
            warmup = sft_stage(config, ref, lease.check) if config.sft else None  # demonstrations -> SFT epochs
            # GRPO continues after SFT's last epoch (a model SFT started later than 0 may end past config.steps).
            steps = max(config.steps, warmup.start_step + config.sft.epochs) if warmup else config.steps
            summary = _train(config, ref, rollout, eval_rollout, lease.check, steps)  # gather -> score -> train
            summary.sft = warmup
            if config.scale.device_slot:
                summary.device = {"waited_s": waited, "held_from": held_from, "held_to": time.time()}
            return summary


def _train(
    config: RunConfig,
    ref: ModelRef,
    rollout: RolloutSpec,
    eval_rollout: RolloutSpec,
    check_lease: Callable[[], None] = lambda: None,
    steps: int | None = None,
) -> TrainSummary:
    results = result_storage_for(config.storage_url)
    gather = with_result_storage(gather_trajectories, results)
    score = with_result_storage(score_groups, results)
    evaluate_step = with_result_storage(evaluate, results)
    store = ref.store()
    url, rank = config.inference_url, server_lora_rank(config.train.lora_rank)  # the server serves our adapters
    server = config.server.model_dump(exclude_unset=True) or None  # settings for a server this process starts
    replicas, k = replicas_of(config), config.max_steps_off_policy
    n = steps or config.steps  # checkpoints the run ends with, SFT's included
    summary = TrainSummary(
        storage_url=config.storage_url,
        model_path=store.root,
        rewards={},
        checkpoints={},
        trained_steps=[],
        evaluations={},
        report_paths={},
    )

    def start_gather(step: int):
        """Submit step `step`'s rollouts: from checkpoint `step` (k = 0), else the newest complete one."""
        sample = step if not k else max(s for s in [0, *store.checkpoint_steps()] if s <= step)
        args = (ref, rollout, step, checkpoint_fingerprint_of(ref, sample), url, rank)
        extra = {"server": server} if replicas is None else {"replicas": replicas}
        if not k:  # synchronous: runs in the flow's thread when its result is asked for
            return _Done(lambda: gather(*args, **extra)), args, extra
        extra.update(sample_step=sample, oldest_reusable=max(0, step - k))
        return gather.submit(*args, **extra), args, extra

    def train_one(step: int, scored_uri: str):
        if config.scale.train_deployment:
            from tasks.remote import train_step_remotely

            remote = config.scale.train_deployment, ref, scored_uri, step, config.train
            if k:
                return train_step_remotely.submit(*remote)
            return _Done(lambda: train_step_remotely(*remote, return_state=True).result())  # Cached or Completed
        if k:  # the servers stay awake: the next steps' rollouts are sampled while this one trains
            return train_step.submit(ref, scored_uri, step, config.train, url, sleep_servers=False)
        # The task's own state says Cached when the checkpoint existed; its result is the TrainStepResult.
        return _Done(lambda: train_step(ref, scored_uri, step, config.train, url, return_state=True).result())

    def finish(running: _Training) -> None:
        """Wait for a step's training, record it in the summary, print its line, evaluate when due."""
        step, gathered, scored = running.step, running.gathered, running.scored
        trained = running.future.result()
        summary.step_done_at[step + 1] = time.time()
        summary.step_seconds[step + 1] = time.perf_counter() - running.started
        summary.phase_seconds[step + 1] = {
            "gather": gathered.seconds,
            "score": scored.seconds,
            "train": trained.seconds,
        }
        summary.rewards[step + 1] = scored.summary["reward"]
        summary.checkpoints[trained.step] = trained.checkpoint_uri
        summary.phases[trained.step] = "grpo"
        if trained.trained:
            summary.trained_steps.append(trained.step)
        age = trained.metrics.get("staleness")
        if age is not None:
            summary.staleness[step + 1] = age
        print(
            f"step {step + 1}/{n}: {int(gathered.summary['trajectories'])}/{per_step} rollouts, "
            f"reward {scored.summary['reward']:.3f}; gather {running.gather_s:.1f}s, "
            + (f"score {running.score_s:.1f}s, " if scored.judged else "")  # no judge: nothing was scored
            + f"train {trained.seconds:.1f}s{'' if trained.trained else ' (checkpoint existed)'}"
            + (f", sampled {age:g} step(s) behind" if age else "")
        )
        evaluate_if_due(trained.step)

    def evaluate_if_due(checkpoint: int) -> None:
        if not config.eval_every or (checkpoint % config.eval_every and checkpoint != n):
            return
        e = config.eval
        report = evaluate_step(
            ref,
            eval_rollout,
            checkpoint,
            checkpoint_fingerprint_of(ref, checkpoint),
            e.split,
            e.scenarios,
            e.trials,
            e.success_threshold,
            url,
            rank,
            server,
        )
        if store.read_eval(checkpoint) is None:  # cached, but its file was lost or damaged: write it back
            store.write_eval(checkpoint, report.model_dump(mode="json"))
        summary.evaluations[checkpoint] = report.reward
        print(f"  eval step {checkpoint} on {e.split}: reward {report.reward:.3f}, pass^k {report.pass_k}")

    def trained_elsewhere(step: int, trained: bool | None = None) -> bool:
        """Checkpoint `step + 1` exists and no rollouts of step `step` do: it was not trained here on rollouts
        (SFT's epochs), so there is nothing to gather, score or train for it. `trained`: whether checkpoint
        `step + 1` is complete, when the caller knows already."""
        trained = store.is_complete(step + 1) if trained is None else trained
        return trained and not store.storage.exists(store.trajectories("train", step))

    per_step = config.groups_per_step * config.group_size
    gathers: dict[int, Any] = {}
    training: _Training | None = None  # the step being trained, recorded by finish() once its checkpoint exists
    for step in range(n):  # step s samples from checkpoint s (0: the base model) and trains checkpoint s + 1
        trained = store.is_complete(step + 1)  # then its rollouts are not read again (a resumed run)
        if trained_elsewhere(step, trained):
            if training is not None:
                finish(training)
                training = None
            summary.checkpoints[step + 1] = store.checkpoint(step + 1)
            summary.phases[step + 1] = "sft"
            print(f"step {step + 1}/{n}: checkpoint {step + 1} was trained without rollouts (SFT): nothing to gather")
            evaluate_if_due(step + 1)
            continue
        t0 = time.perf_counter()
        if step not in gathers:
            gathers[step] = start_gather(step)
        future, args, extra = gathers.pop(step)
        gathered = future.result()
        # The cache outlived its file (deleted, damaged): again, unless the step is trained already.
        if not trained and store.read_groups(gathered.uri, damaged="warn") is None:
            gathered = gather.with_options(refresh_cache=True)(*args, **extra)
        t1 = time.perf_counter()
        if config.judge is None:  # the environment's rewards stand: nothing to score, so no task run for it
            scored = ScoreResult(step=step, uri=gathered.uri, summary=gathered.summary, judged=False, seconds=0.0)
        else:
            scored = score(ref, gathered.uri, gathered.fingerprint, step, config.judge)
            if not trained and store.read_groups(scored.uri, damaged="warn") is None:
                scored = score.with_options(refresh_cache=True)(
                    ref, gathered.uri, gathered.fingerprint, step, config.judge
                )
        t2 = time.perf_counter()
        if training is not None:  # checkpoint `step` must exist before step `step` trains from it
            finish(training)
        check_lease()  # LeaseLost if another run took this model over: stop before writing another checkpoint
        training = _Training(step, t0, t1 - t0, t2 - t1, gathered, scored, train_one(step, scored.uri))
        if k:  # the next k steps' rollouts are gathered while this step trains
            for later in range(step + 1, min(n, step + 1 + k)):
                if later not in gathers and not trained_elsewhere(later):
                    gathers[later] = start_gather(later)
        else:
            finish(training)
            training = None
    if training is not None:
        finish(training)

    summary.report_paths = publish_run_report(ref, wandb=config.report_to_wandb)
    return summary


@dataclass
class _Training:
    """A step whose training was started: what the summary and the step's printed line need of it."""

    step: int
    started: float  # perf_counter() when its gather began
    gather_s: float
    score_s: float
    gathered: GatherOutcome
    scored: ScoreResult
    future: Any  # a Prefect future or _Done; its result is the TrainStepResult


class _Done:
    """A task run of a synchronous step, shaped like a future: it runs in the flow's thread, once, when
    its result is first asked for."""

    def __init__(self, run: Callable[[], Any]) -> None:
        self.run, self.value, self.done = run, None, False

    def result(self) -> Any:
        if not self.done:
            self.value, self.done = self.run(), True
        return self.value
