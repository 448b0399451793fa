"""Prefect task: one train step run elsewhere, as a flow run of the `train-step` deployment (a GPU work pool).

    check_train_deployment("train-step/gpu", config.storage_url)      # before any work: refuse or warn
    result = train_step_remotely("train-step/gpu", ref, scored.uri, step, config.train)
    result.checkpoint_uri, result.trained

The flow that calls it waits on it like on the in-process `train_step`: same run name ("train step N"),
same TrainStepResult, `Cached` when nothing was trained. The child flow run (flows/train_step.py) is
linked under this task in the UI and tagged with its GPU ask (`gpus:N`, N = `config.ranks`). Everything
crosses machines through storage: the child reads the step's scored rollouts and writes checkpoint `step + 1`
and its history record; this task builds its result from what storage then holds, not from a return value
that would have to travel between machines.
A step whose checkpoint already exists is not sent to the pool at all, so a resumed run does not queue
behind other runs' steps on the GPU only to find its work done.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import MissingContextError

from art_core.step import already_trained
from art_core.store import ModelRef
from art_core.training.config import TrainConfig
from art_core.training.result import TrainResult
from art_pipeline.tasks.results import step_run_name, train_step_state

TRAIN_STEP_FLOW = "train-step"  # flows/train_step.py's flow name
GPU_POOL = "art-gpu"  # the pool deployments/prefect.yaml puts `train-step/gpu` on
WAITING_WARN_SECONDS = 60.0  # a run still Scheduled this long: say what to check, then every 5 minutes


class TrainDeploymentError(ValueError):
    """The run names a train deployment that cannot take its steps (missing, another flow, unusable storage)."""


class RemoteTrainError(RuntimeError):
    """A train step's flow run on the work pool did not leave a checkpoint (failed, crashed, cancelled...)."""


def _logger() -> logging.Logger | logging.LoggerAdapter:
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)


def how_to_create(deployment: str, pool: str = GPU_POOL) -> str:
    """The commands that create the train deployment and its pool, and start a worker for it."""
    name = deployment.partition("/")[2] or "gpu"
    return (
        f"create it from the repository root with `prefect work-pool create {pool} --type process`, "
        f"`prefect work-pool set-concurrency-limit {pool} 1` and `prefect --no-prompt deploy --name {name} "
        f"--prefect-file deployments/prefect.yaml`, then start a worker where the GPU is: "
        f"`prefect worker start --pool {pool}` (see deployments/README.md)"
    )


def check_train_deployment(name: str, storage_url: str | None = None) -> str:
    """Refuse a train deployment that does not exist or runs another flow; returns its work pool's name.

    Warns (without refusing) when no worker polls that pool yet, and when `storage_url` is a local folder,
    which a worker on another machine cannot read; refuses memory:// storage, which no other process sees.

    >>> check_train_deployment("train-step/gpu", "s3://bucket/runs")     # doctest: +SKIP
    'art-gpu'
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import WorkerFilter, WorkerFilterStatus
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import get_current_settings

    log = _logger()
    flow_name, _, deployment_name = name.partition("/")
    if not flow_name or not deployment_name:
        raise TrainDeploymentError(
            f"train deployment {name!r} is not 'flow/deployment' (e.g. '{TRAIN_STEP_FLOW}/gpu'); {how_to_create(name)}"
        )
    if storage_url is not None and storage_url.startswith("memory://"):
        raise TrainDeploymentError(
            f"storage {storage_url!r} lives in this process's memory; the train step on "
            f"{name!r} runs in another process and cannot see it: use s3://bucket/prefix"
        )
    api = get_current_settings().api.url
    with get_client(sync_client=True) as client:
        try:
            deployment = client.read_deployment_by_name(name)
        except ObjectNotFound:
            where = (
                f"the Prefect server at {api}"
                if api
                else "this process's temporary Prefect server (PREFECT_API_URL is unset; set it to the server "
                "your workers poll)"
            )
            raise TrainDeploymentError(
                f"train deployment {name!r} does not exist on {where}: {how_to_create(name)}"
            ) from None
        flow = client.read_flow(deployment.flow_id)
        if flow.name != TRAIN_STEP_FLOW:
            raise TrainDeploymentError(
                f"deployment {name!r} runs flow {flow.name!r}, not {TRAIN_STEP_FLOW!r} "
                "(flows/train_step.py): name a deployment of the train step"
            )
        pool = deployment.work_pool_name or ""
        online = WorkerFilter(status=WorkerFilterStatus(any_=["ONLINE"]))
        workers = client.read_workers_for_work_pool(pool, worker_filter=online) if pool else []
    if not workers:
        log.warning(
            "no worker is polling work pool %r yet: train steps sent to %r wait (Scheduled) until one "
            "starts: `prefect worker start --pool %s` on the GPU machine",
            pool,
            name,
            pool,
        )
    if storage_url is not None and ("://" not in storage_url or storage_url.startswith("file://")):
        log.warning(
            "storage %s is a local folder: a worker of pool %r on another machine cannot read the rollouts "
            "or write the checkpoint there (unless the folder is shared at the same path); use "
            "s3://bucket/prefix for train steps on %r",
            storage_url,
            pool,
            name,
        )
    return pool


@task(name="train_step_remotely", task_run_name=step_run_name("train"), cache_policy=NO_CACHE, persist_result=False)
def train_step_remotely(
    deployment: str, ref: ModelRef, scored_uri: str, step: int, config: TrainConfig, poll_seconds: float = 2.0
):
    """Train checkpoint `step` -> `step + 1` as a flow run of `deployment`, wait for it, and return its
    TrainStepResult read back from storage (`Cached`, trained False, when the checkpoint existed).

    Raises RemoteTrainError naming the child flow run, its state and message when it does not complete.
    """
    t0, log = time.perf_counter(), get_run_logger()
    store, target = ref.store(), step + 1
    if store.is_complete(target):
        log.info("checkpoint %s exists: step %d is not sent to %s", store.checkpoint(target), target, deployment)
        # The rollouts are read only to write back a lost history record with their rewards.
        done = already_trained(store, lambda: store.read_groups(scored_uri, damaged="warn"), target, complete=True)
        return train_step_state(done, store, t0)
    if not store.storage.exists(scored_uri):  # fail here, not after queueing for the GPU
        raise FileNotFoundError(
            f"the scored rollouts of step {target} at {scored_uri} are missing; run the flow "
            "again and they are gathered and scored again"
        )
    child = _start(deployment, ref, scored_uri, step, config)
    log.info(
        "step %d: flow run %r of %s on work pool %r (%s); waiting for it",
        target,
        child.name,
        deployment,
        child.work_pool_name,
        gpu_ask(config),
    )
    child = _wait(child, poll_seconds, log)
    state = child.state
    if not state.is_completed():
        raise RemoteTrainError(
            f"train step {target} ran as flow run {child.name!r} ({child.id}) of {deployment} on work pool "
            f"{child.work_pool_name!r} and ended {state.name}: {state.message or 'no message'}. Check that flow "
            f"run's logs in the Prefect UI; is a worker polling the pool (`prefect worker start --pool "
            f"{child.work_pool_name}`), and does it reach the storage {ref.storage_url} and the base model "
            f"{ref.base_model}? Running the flow again resumes from the last complete checkpoint."
        )
    if not store.is_complete(target):
        raise RemoteTrainError(
            f"flow run {child.name!r} ({child.id}) of {deployment} ended {state.name}, but {store.checkpoint(target)} "
            "has no complete checkpoint: the worker wrote elsewhere (a local storage folder on its own machine?). "
            "Give the run storage that every worker reaches (s3://bucket/prefix)."
        )
    result = TrainResult(
        step=target,
        checkpoint_path=store.checkpoint(target),
        metrics=store.train_metrics(target),
        trained=state.name != "Cached",
    )
    ran = child.total_run_time.total_seconds()
    log.info(
        "step %d: %s by %r in %.1fs (%.1fs queued and starting) -> %s",
        target,
        "trained" if result.trained else "found trained",
        child.name,
        ran,
        max(time.perf_counter() - t0 - ran, 0.0),
        result.checkpoint_path,
    )
    return train_step_state(result, store, t0, message=state.message)


def gpu_ask(config: TrainConfig) -> str:
    """The flow run's tag for the GPUs its step needs, shown in the UI's run list: `gpus:N` for N local ranks
    (the worker side refuses the step if it sees fewer GPUs), `ray-ranks:N` when Ray places them elsewhere.

    >>> gpu_ask(TrainConfig(ranks=4))
    'gpus:4'
    """
    return f"gpus:{config.ranks}" if config.ranks_on == "local" else f"ray-ranks:{config.ranks}"


def _start(deployment: str, ref: ModelRef, scored_uri: str, step: int, config: TrainConfig) -> Any:
    """Create the child flow run, linked under the current task run (the UI nests it there)."""
    from prefect.deployments import run_deployment

    parameters = {
        "ref": ref.model_dump(mode="json"),
        "scored_uri": scored_uri,
        "step": step,
        "config": config.model_dump(mode="json"),
    }
    # timeout=0 returns at once: _wait polls, so a run nobody picks up is reported instead of waited on silently.
    return run_deployment(
        deployment,
        parameters=parameters,
        timeout=0,
        as_subflow=True,
        tags=["art", "train-step", gpu_ask(config)],
        flow_run_name=f"{ref.project}-{ref.model}-step-{step + 1}",
    )


def _wait(child: Any, poll_seconds: float, log: Any) -> Any:
    """Poll the child flow run until it is final; say what to check while nobody picks it up.

    If this process is stopped meanwhile (Ctrl-C, the flow run cancelled), the child is cancelled too, so a
    GPU does not go on training for a run that is gone."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled, Cancelling

    start = time.monotonic()
    next_warning = start + WAITING_WARN_SECONDS
    with get_client(sync_client=True) as client:
        try:
            while True:
                child = client.read_flow_run(child.id)
                if child.state is not None and child.state.is_final():
                    return child
                if (
                    child.state is not None
                    and (child.state.is_scheduled() or child.state.is_pending())
                    and time.monotonic() > next_warning
                ):
                    log.warning(
                        "flow run %r is still %s after %.0fs: is a worker polling work pool %r "
                        "(`prefect worker start --pool %s`)? Steps of other runs may hold the pool's slots.",
                        child.name,
                        child.state.name,
                        time.monotonic() - start,
                        child.work_pool_name,
                        child.work_pool_name,
                    )
                    next_warning = time.monotonic() + 300
                time.sleep(poll_seconds)
        except BaseException:
            try:
                # A run no worker holds yet is cancelled outright; a running one is asked to stop by its worker.
                queued = child.state is None or child.state.is_scheduled() or child.state.is_pending()
                stop = (Cancelled if queued else Cancelling)(message="the flow run waiting on it stopped")
                client.set_flow_run_state(child.id, stop, force=True)
            except Exception as e:  # the parent is going down anyway; say so and let the original error out
                log.warning("could not cancel flow run %r: %s", child.name, e)
            raise
