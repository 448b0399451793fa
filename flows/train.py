"""The train flow: (sft ->) gather -> score -> train (-> evaluate) for each step, every step a cached Prefect task
(score only with a RULER judge: without one the environment's rewards stand and there is nothing to run).
With `config.sft` the run first fine-tunes on demonstrations (flows.sft.sft_stage: the environment's expert,
built by a cached task, or a file), one checkpoint per epoch, and GRPO's steps continue after them.

    python -c "from art_pipeline.flows.train import train; from art_pipeline.flows.config import RunConfig; train(RunConfig(...))"

or from the Prefect UI through the `train` deployment (deployments/prefect.yaml). Running it again with
the same config resumes: rollouts come from the cache in storage, steps whose checkpoint exists are not
trained again, so a crashed or killed run picks up where it stopped. Steps checkpointed without rollouts
(the sft flow's epochs) are not rolled out at all: the first rollouts sample the last such checkpoint.
art_core.run_state holds these rules (and what is repaired when a cache outlived its file), tested alone.
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
from art_core.fork import fork_model
from art_core.rollouts import RolloutSpec, checkpoint_fingerprint
from art_core.run_state import RunState, StepPlan, run_length
from art_core.serving import server_lora_rank
from art_core.step import GatherOutcome
from art_core.store import ModelRef
from art_pipeline.flows.config import RunConfig
from art_pipeline.flows.lifetime import guard_temporary_server, training_lease
from art_pipeline.flows.overrides import warn_if_config_replaced
from art_pipeline.flows.preflight import fork_stores, preflight
from art_pipeline.flows.queue import device_slot
from art_pipeline.flows.reporting import publish_run_report
from art_pipeline.flows.sft import SFTSummary, sft_stage
from art_pipeline.tasks import (
    evaluate,
    gather_trajectories,
    result_storage_for,
    score_groups,
    train_step,
    with_result_storage,
)
from art_pipeline.tasks.specs import ScoreResult


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

    `for_eval`: the rollout spec of evaluations (their temperature, see RunConfig.eval_sampling; no option that
    shapes only the training reward, see RolloutSpec.for_evaluation)."""
    ref = ModelRef(
        storage_url=config.storage_url, project=config.project, model=config.model, base_model=config.base_model
    )
    rollout = RolloutSpec(
        environment=config.environment.name,
        env_options=config.environment.options,
        groups_per_step=config.groups_per_step,
        group_size=config.group_size,
        seed=config.seed,
        sampling=config.sampling.model_dump(),
        max_exceptions=config.max_exceptions,
    )
    return ref, rollout.for_evaluation(config.eval_sampling()) if for_eval else rollout


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
    config = preflight(config)  # base model, environment, template, files: refused here, before any work
    ref, rollout = refs(config)
    eval_rollout = refs(config, for_eval=True)[1]
    # One writer per model: a second run of this model is refused here, before any server starts or task runs.
    with training_lease(ref.store()) as lease:
        if config.fork_from is not None:  # another model's checkpoints first: the run resumes from them
            fork_model(*fork_stores(config), config.fork_from.step, config.base_model)
        bind_model(ref, config)
        if config.scale.train_deployment:
            from art_pipeline.tasks.remote import check_train_deployment

            check_train_deployment(config.scale.train_deployment, config.storage_url)
        with device_slot(config.scale.device_slot, get_run_logger()) as waited:
            held_from = time.time()
            warmup = sft_stage(config, ref, lease.check) if config.sft else None  # demonstrations -> SFT epochs
            # GRPO continues after SFT's last epoch (a model SFT started later than 0 may end past config.steps).
            steps = run_length(config.steps, warmup.start_step, config.sft.epochs) if warmup else config.steps
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
    """Steps 0..n-1 (n: `steps`, SFT's epochs included) as gather -> score -> train -> evaluate; what storage
    holds already (art_core.run_state) is resumed, skipped (SFT's epochs) or repaired, never done twice."""
    run = RunState(ref.store(), steps or config.steps, config.max_steps_off_policy, config.eval_every)
    tasks = _StepTasks(config, ref, rollout, eval_rollout, run)
    gathers: dict[int, _Gather] = {}  # off policy: later steps' rollouts, gathered while a step trains
    training: _Training | None = None  # the step being trained, recorded by finish() once its checkpoint exists
    for step in range(run.last):  # step s samples from checkpoint s (0: the base model) and trains checkpoint s + 1
        plan = run.plan(step)  # checkpoint s + 1 complete: its rollouts are not read again (a resumed run)
        if plan.sft:  # an SFT epoch's checkpoint: nothing to gather, score or train
            training = tasks.finish(training)
            tasks.trained_without_rollouts(step + 1)
            continue
        t0 = time.perf_counter()
        gathered = tasks.gathered(gathers.pop(step, None) or tasks.start_gather(step), plan)
        t1 = time.perf_counter()
        scored = tasks.score(gathered, plan)
        t2 = time.perf_counter()
        training = tasks.finish(training)  # checkpoint `step` must exist before step `step` trains from it
        check_lease()  # LeaseLost if another run took this model over: stop before writing another checkpoint
        training = _Training(step, t0, t1 - t0, t2 - t1, gathered, scored, tasks.train(step, scored.uri))
        for later in run.prefetch(step, gathers):  # off policy: the next k steps' rollouts, while this one trains
            gathers[later] = tasks.start_gather(later)
        if not run.off_policy:
            training = tasks.finish(training)
    tasks.finish(training)
    tasks.summary.report_paths = publish_run_report(ref, wandb=config.report_to_wandb, split=config.eval.split)
    return tasks.summary


class _StepTasks:
    """A run's Prefect tasks, bound to its config and results storage: one method per phase of a step, and
    the summary they fill in."""

    def __init__(
        self, config: RunConfig, ref: ModelRef, rollout: RolloutSpec, eval_rollout: RolloutSpec, run: RunState
    ) -> None:
        results = result_storage_for(config.storage_url)
        self.gather = with_result_storage(gather_trajectories, results)
        self.score_groups = with_result_storage(score_groups, results)
        self.evaluate = with_result_storage(evaluate, results)
        self.config, self.ref, self.rollout, self.eval_rollout, self.run = config, ref, rollout, eval_rollout, run
        self.url, self.rank = config.inference_url, server_lora_rank(config.train.lora_rank)  # it serves our adapters
        self.server = config.server.model_dump(exclude_unset=True) or None  # settings for a server this process starts
        self.replicas = replicas_of(config)
        self.per_step = config.groups_per_step * config.group_size
        self.summary = TrainSummary(
            storage_url=config.storage_url,
            model_path=run.store.root,
            rewards={},
            checkpoints={},
            trained_steps=[],
            evaluations={},
            report_paths={},
        )

    def start_gather(self, step: int) -> _Gather:
        """Submit step `step`'s rollouts: from checkpoint `step` (k = 0), else the newest complete one."""
        sample = self.run.sample_step(step)
        args = (self.ref, self.rollout, step, checkpoint_fingerprint_of(self.ref, sample), self.url, self.rank)
        extra: dict[str, Any] = {"server": self.server}  # for the server, or every replica, started here
        if self.replicas is not None:
            extra["replicas"] = self.replicas
        if not self.run.off_policy:  # synchronous: runs in the flow's thread when its result is asked for
            return _Gather(_Done(lambda: self.gather(*args, **extra)), args, extra)
        extra.update(sample_step=sample, oldest_reusable=self.run.oldest_reusable(step))
        return _Gather(self.gather.submit(*args, **extra), args, extra)

    def gathered(self, started: _Gather, plan: StepPlan) -> GatherOutcome:
        """A gather's outcome; gathered again when the cache outlived its file (deleted, damaged)."""
        gathered = started.future.result()
        if self.run.lost(plan, gathered.uri):
            gathered = self.gather.with_options(refresh_cache=True)(*started.args, **started.extra)
        return gathered

    def score(self, gathered: GatherOutcome, plan: StepPlan) -> ScoreResult:
        """RULER's scores of a step's groups; without a judge the environment's rewards stand (no task run)."""
        if self.config.judge is None:
            return ScoreResult(step=plan.step, uri=gathered.uri, summary=gathered.summary, judged=False, seconds=0.0)
        args = (self.ref, gathered.uri, gathered.fingerprint, plan.step, self.config.judge)
        scored = self.score_groups(*args)
        if self.run.lost(plan, scored.uri):  # the cache outlived its file: scored again
            scored = self.score_groups.with_options(refresh_cache=True)(*args)
        return scored

    def train(self, step: int, scored_uri: str) -> Any:
        """Start training checkpoint `step + 1`: a Prefect future off policy, else a _Done run when waited for.
        The task's own state says Cached when the checkpoint existed; its result is the TrainStepResult."""
        config, k = self.config, self.run.off_policy
        if config.scale.train_deployment:
            from art_pipeline.tasks.remote import train_step_remotely

            remote = config.scale.train_deployment, self.ref, scored_uri, step, config.train
            if k:
                return train_step_remotely.submit(*remote)
            return _Done(lambda: train_step_remotely(*remote, return_state=True).result())  # Cached or Completed
        if k:  # the servers stay awake: the next steps' rollouts are sampled while this one trains
            return train_step.submit(self.ref, scored_uri, step, config.train, self.url, sleep_servers=False)
        return _Done(lambda: train_step(self.ref, scored_uri, step, config.train, self.url, return_state=True).result())

    def finish(self, running: _Training | None) -> None:
        """Wait for a step's training, record it in the summary, print its line, evaluate when due.
        None: nothing is being trained any more (the caller's `training` becomes it)."""
        if running is None:
            return None
        summary, step, gathered, scored = self.summary, running.step, running.gathered, running.scored
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
            f"step {step + 1}/{self.run.last}: {int(gathered.summary['trajectories'])}/{self.per_step} rollouts, "
            f"reward {scored.summary['reward']:.3f}; gather {running.gather_s:.1f}s, "
            + (f"score {running.score_s:.1f}s, " if scored.judged else "")  # no judge: nothing was scored
            + f"train {trained.seconds:.1f}s{'' if trained.trained else ' (checkpoint existed)'}"
            + (f", sampled {age:g} step(s) behind" if age else "")
        )
        self.evaluate_if_due(trained.step)
        return None

    def trained_without_rollouts(self, checkpoint: int) -> None:
        """Record a checkpoint trained without rollouts (SFT's epochs), say so, evaluate it when due."""
        self.summary.checkpoints[checkpoint] = self.run.store.checkpoint(checkpoint)
        self.summary.phases[checkpoint] = "sft"
        print(
            f"step {checkpoint}/{self.run.last}: checkpoint {checkpoint} was trained without rollouts (SFT): "
            "nothing to gather"
        )
        self.evaluate_if_due(checkpoint)

    def evaluate_if_due(self, checkpoint: int) -> None:
        if not self.run.eval_due(checkpoint):
            return
        e = self.config.eval
        report = self.evaluate(
            self.ref,
            self.eval_rollout,
            checkpoint,
            checkpoint_fingerprint_of(self.ref, checkpoint),
            e.split,
            e.scenarios,
            e.trials,
            e.success_threshold,
            self.url,
            self.rank,
            self.server,
        )
        self.run.keep_eval(checkpoint, report.model_dump(mode="json"))  # cached, but its file was lost: written back
        self.summary.evaluations[checkpoint] = report.reward
        print(f"  eval step {checkpoint} on {e.split}: reward {report.reward:.3f}, pass^k {report.pass_k}")


@dataclass
class _Gather:
    """A started gather and the arguments that run it again (refresh_cache) when its file was lost."""

    future: Any  # a Prefect future or _Done; its result is the GatherOutcome
    args: tuple
    extra: dict[str, Any]


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
