"""One training step's work, shared by both front doors: `LocalBackend.train` and the Prefect tasks.

    gather_step(ref, rollout, step, fingerprint, endpoint)   rollouts for step s, reused when already in storage
    train_and_record(store, base, groups, config, s)    checkpoint s + 1 and its history record, once
    run_and_record(store, train, prefix="sft/")         any train call (GRPO or SFT) with servers asleep, recorded

Both are idempotent by what they leave in storage, so a crash at any point (SIGKILL included) resumes
without doing finished work twice: rollouts a checkpoint was trained on, or that these very inputs
wrote, are reused; a complete checkpoint is never trained again, and its history record is written
from the checkpoint itself when the crash came between the two.

    outcome = train_and_record(ModelStore(root, "demo", "agent"), "/models/tiny", groups, TrainConfig(), step=0,
                               servers=[server])   # the server sleeps while the trainer holds the device
    outcome.step, outcome.trained                  # (1, True)
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any, Callable, Iterable

from art_core.adapters import adapter_rank, load_checkpoint
from art_core.coroutines import run_sync
from art_core.fanout import Replicas, roll_out_on_ray
from art_core.inference.server import VLLMServer
from art_core.persisted import Persisted
from art_core.rollouts import RolloutSpec, reward_summary, rollout_groups, scenarios_for_step, step_sampling
from art_core.serving import Endpoint, sleeps_for_training
from art_core.store import ModelRef, ModelStore, file_fingerprint
from art_core.training import trainer  # trainer.train_grpo_step looked up per call: tests spy on it
from art_core.training.config import TrainConfig
from art_core.training.result import TrainResult
from art_core.training.session import release_cuda_cache
from art_core.trajectories import TrajectoryGroup

log = logging.getLogger(__name__)


# ---- gather ----------------------------------------------------------------------------------------
class GatherOutcome(Persisted):
    """Where a step's rollouts are, what they scored, and whether they were reused from storage."""

    step: int
    uri: str
    fingerprint: str  # of the file's content: keys the scoring cache, so a re-gathered file is rescored
    summary: dict[str, float]
    reused: bool
    seconds: float = 0.0


def inputs_key(ref: ModelRef, rollout: RolloutSpec, step: int, checkpoint_fingerprint: str) -> str:
    """The inputs a step's rollouts depend on (not the server's URL), hashed; recorded in each group written."""
    blob = json.dumps(
        [ref.model_dump(mode="json"), rollout.model_dump(mode="json"), step, checkpoint_fingerprint], sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def gather_step(
    ref: ModelRef,
    rollout: RolloutSpec,
    step: int,
    checkpoint_fingerprint: str,
    endpoint: "Callable[[int], Endpoint | list[Endpoint]]",
    *,
    served_name: "Callable[[Endpoint], str] | None" = None,
    sample_step: int | None = None,
    oldest_reusable: int | None = None,
    replicas: "Replicas | None" = None,
) -> GatherOutcome:
    """Step `step`'s rollouts: reused from storage when a checkpoint was trained on them or these inputs
    wrote them (a crash between the write and a cache commit must not roll out again); else rolled out.

    `endpoint(rank)` is called only when rolling out (a reused step never starts a server), with the LoRA
    rank of the adapter to serve (the server's max_lora_rank follows it); it may return several replicas,
    over which the rollouts are balanced (on Ray when `replicas.on == "ray"`). `served_name` picks the name
    to sample (default: the sampled step's adapter, loaded on every replica). Asynchronous steps: `sample_step`
    (default `step`) is the checkpoint sampled from, and stored rollouts sampled from any checkpoint >=
    `oldest_reusable` are reused as they are.
    Every group and trajectory records the step it was sampled from (`sampled_step`).
    """
    t0 = time.perf_counter()
    store = ref.store()
    uri = store.trajectories("train", step)
    sampled = step if sample_step is None else sample_step
    key = inputs_key(ref, rollout, step, checkpoint_fingerprint)
    groups = store.read_groups(uri, damaged="warn")  # None when missing, or damaged (file and line in a warning)
    if groups is not None:
        trained = store.is_complete(step + 1)
        fresh_enough = oldest_reusable is not None and all(
            int(g.metadata.get("sampled_step", step)) >= oldest_reusable for g in groups
        )
        if trained or fresh_enough or all(g.metadata.get("inputs_key") == key for g in groups):
            log.info("step %d: reusing the rollouts in %s (not rolling out again)", step, uri)
            return GatherOutcome(
                step=step,
                uri=uri,
                fingerprint=file_fingerprint(store.storage, uri),
                summary=reward_summary(groups),
                reused=True,
                seconds=time.perf_counter() - t0,
            )
    env = rollout.load_environment()
    found = endpoint(adapter_rank(store, sampled))
    endpoints = found if isinstance(found, list) else [found]
    if served_name:
        name = served_name(endpoints[0])
    else:
        for ep in endpoints:  # every replica serves the step under the same name
            name = load_checkpoint(ep, store, ref.base_model, sampled)
    scenarios = scenarios_for_step(env, "train", step, rollout.groups_per_step, rollout.seed)
    sampling = step_sampling(rollout.sampling, step)  # a seed, if set, differs from step to step
    if replicas is not None and replicas.on == "ray":
        spec = rollout.model_copy(update={"sampling": sampling})
        groups = roll_out_on_ray(spec, endpoints, name, scenarios, replicas.ray_address)
    else:
        coro = rollout_groups(
            env,
            endpoints,
            name,
            scenarios,
            rollout.group_size,
            max_exceptions=rollout.max_exceptions,
            sampling=sampling,
        )
        groups = run_sync(coro)
    for g in groups:
        g.metadata.update(inputs_key=key, sampled_from=name, sampled_step=sampled)
        for t in g.trajectories:
            t.metadata["sampled_step"] = sampled
    store.write_groups(uri, groups)
    summary = reward_summary(groups)
    log.info(
        "step %d: %d rollouts of %s on %d replica(s), reward %.3f -> %s",
        step,
        int(summary["trajectories"]),
        name,
        len(endpoints),
        summary["reward"],
        uri,
    )
    return GatherOutcome(
        step=step,
        uri=uri,
        fingerprint=file_fingerprint(store.storage, uri),
        summary=summary,
        reused=False,
        seconds=time.perf_counter() - t0,
    )


# ---- train -----------------------------------------------------------------------------------------
def train_and_record(
    store: ModelStore,
    base_model: str,
    groups: "list[TrajectoryGroup]",
    config: "TrainConfig",
    step: int,
    *,
    servers: "Iterable[VLLMServer]" = (),
    complete: bool | None = None,
) -> TrainResult:
    """Train step `step` -> checkpoint `step + 1` and append its record to history.jsonl; once.

    If checkpoint `step + 1` is complete nothing is trained (`trained=False`); a missing history record is
    backfilled from the checkpoint. `servers` sleep while the trainer holds the device (run_and_record), except
    those on GPUs the step does not use (art_core.serving.sleeps_for_training), which keep serving.
    `complete`: whether checkpoint `step + 1` is complete, when the caller read it already.
    """
    done = already_trained(store, groups, step + 1, complete=complete)
    if done is not None:
        return done
    # The reward the step was trained on sits next to the trainer's own metrics (loss, grad norm...).
    rewards = {**reward_summary(groups), **staleness(groups, step)}
    return run_and_record(
        store,
        trainer.train_grpo_step,
        prefix="train/",
        servers=[s for s in servers if sleeps_for_training(s, config)],
        extra=rewards,
        base_model=base_model,
        groups=groups,
        config=config,
        step=step,
    )


def run_and_record(
    store: ModelStore,
    train: Callable[..., TrainResult],
    *,
    prefix: str,
    servers: "Iterable[VLLMServer]" = (),
    extra: dict[str, Any] | None = None,
    **arguments: Any,
) -> TrainResult:
    """Run one train call (a GRPO or an SFT step: `train(storage=, project=, name=, **arguments)`, with the
    store's storage, project and name) and record its checkpoint's metrics under `prefix` in history.jsonl;
    the result, `extra` first in its metrics. The one wrapper of both kinds of step.

    `servers` share the device with the trainer: each is put to sleep before training and woken after
    (both no-ops on CPU), the trainer's free GPU blocks given back in between, so one GPU holds vLLM and
    the trainer in turn.

    >>> run_and_record(store, sft_step, prefix="sft/", servers=[server], step=1, ...).step   # doctest: +SKIP
    2
    """
    servers = list(servers)
    for server in servers:
        server.sleep()  # frees the GPU (vLLM sleep mode); returns False and does nothing on CPU
    try:
        result = train(storage=store.storage, project=store.project, name=store.name, **arguments)
    finally:
        if servers:
            release_cuda_cache()
        for server in servers:
            server.wake_up()
    metrics = {**(extra or {}), **result.metrics}
    store.record(result.step, metrics, prefix=prefix)
    return TrainResult(step=result.step, metrics=metrics, checkpoint_path=result.checkpoint_path, trained=True)


def already_trained(
    store: ModelStore,
    groups: "list[TrajectoryGroup] | Callable[[], list[TrajectoryGroup] | None] | None",
    target: int,
    *,
    complete: bool | None = None,
    prefix: str = "train/",
) -> TrainResult | None:
    """The result of training checkpoint `target` when it is complete already (`trained=False`), its history
    record written back from the checkpoint if a crash lost it; None when it still has to be trained.
    `prefix`: where its record is in history ("sft/" for supervised fine-tuning), left off its metrics.

    `groups`: the rollouts it was trained on, or a function that reads them: called only when a lost record
    is written back (with their rewards), so a resumed run does not read a finished step's rollouts.
    `complete`: store.is_complete(target), when the caller read it already. A finished step costs the marker
    check and one history read (on S3 each call is a round trip).
    """
    if not (store.is_complete(target) if complete is None else complete):
        return None
    recorded = store.step_metrics(target, prefix)
    if not recorded and prefix == "train/":  # only a GRPO record is written back (store.backfill_train_record)
        rollouts = groups() if callable(groups) else groups
        extra = reward_summary(rollouts) if rollouts else None
        recorded = store.backfill_train_record(target, extra=extra, known_missing=True) or {}
    log.info("checkpoint %s exists: step %d is not trained again", store.checkpoint(target), target)
    metrics = {k.removeprefix(prefix): v for k, v in recorded.items()}
    return TrainResult(step=target, metrics=metrics, checkpoint_path=store.checkpoint(target), trained=False)


def staleness(groups: "list[TrajectoryGroup]", step: int) -> dict[str, float]:
    """How many steps older than `step` the checkpoints the groups were sampled from are (mean and max);
    0 for synchronous steps, up to max_steps_off_policy for asynchronous ones. Empty when unrecorded."""
    ages = [step - int(g.metadata["sampled_step"]) for g in groups if "sampled_step" in g.metadata]
    if not ages:
        return {}
    return {"staleness": sum(ages) / len(ages), "staleness_max": float(max(ages))}
