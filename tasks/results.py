"""Where Prefect keeps task results and cache records: next to the run's data, in the same storage.

Cached results live under `{storage root}/.prefect/results`, so a fresh Prefect database (a new server,
another machine) still finds them. A local root is used as a plain path; an s3:// root becomes a saved
`RemoteFileSystem` block (Prefect refuses unsaved blocks as result storage). The block stores only the
endpoint URL; keys are read by s3fs from the environment, never written to Prefect.

    gather = with_result_storage(gather_trajectories, result_storage_for("s3://bucket/runs"))

A train step is idempotent by its checkpoint, not by a cache; `train_step_state` still shows a step whose
checkpoint existed as `Cached` in the UI, like a cache hit.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from prefect.cache_policies import INPUTS, TASK_SOURCE, CachePolicy
from prefect.states import Completed, State

from art_pipeline.tasks.specs import TrainStepResult

if TYPE_CHECKING:
    from art_core.store import ModelStore
    from art_core.training.result import TrainResult

T = TypeVar("T")

RESULTS_DIR = ".prefect/results"


def cached_on(*excluded: str) -> CachePolicy:
    """Inputs plus task source, ignoring inputs that change between runs without changing the result.

    The default policy also keys on the flow run id, so nothing would be reused across runs.

    >>> policy = cached_on("endpoint")   # a fresh vLLM port must not miss the cache
    """
    inputs = INPUTS
    for name in excluded:
        inputs = inputs - name
    return inputs + TASK_SOURCE


def result_storage_for(storage_url: str):
    """A Path (local root) or a saved RemoteFileSystem block (s3://) under the storage root."""
    root = storage_url.rstrip("/")
    if "://" not in root or root.startswith("file://"):
        path = Path(root.removeprefix("file://")).expanduser().absolute() / RESULTS_DIR
        path.mkdir(parents=True, exist_ok=True)
        return path
    from prefect.filesystems import RemoteFileSystem

    settings: dict = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and root.startswith("s3://"):
        settings["client_kwargs"] = {"endpoint_url": endpoint}
    block = RemoteFileSystem(basepath=f"{root}/{RESULTS_DIR}", settings=settings)
    # One block per (root, endpoint): re-saving is idempotent, so a fresh database gets it back.
    digest = hashlib.sha1(f"{root}|{endpoint}".encode()).hexdigest()[:12]
    block.save(f"art-results-{digest}", overwrite=True)
    return block


def with_result_storage(task: T, storage) -> T:
    """`task` with its results kept in `storage`, what `result_storage_for` returned (one call a flow run:
    for an s3:// root it saves the block, so a new Prefect database gets it back).

    For a local root the copy is made once per process: `Task.with_options` reads the function's source
    and hashes it again, about 3 ms a task, which a cached re-run of the train flow paid three times.
    """
    if isinstance(storage, Path):
        return _with_local_results(task, storage)
    return task.with_options(result_storage=storage)


@functools.lru_cache(maxsize=64)
def _with_local_results(task, path: Path):
    return task.with_options(result_storage=path)


def step_run_name(phase: str):
    """A task run name that counts steps from 1, as the flow's log does: the gather, score and train of step
    N work on checkpoint N - 1 (their `step` parameter) and produce checkpoint N.

    >>> gather = gather_trajectories.with_options(task_run_name=step_run_name("gather"))   # doctest: +SKIP
    """

    def name() -> str:
        from prefect.runtime import task_run

        return f"{phase} step {int(task_run.parameters['step']) + 1}"

    return name


def train_step_state(result: "TrainResult", store: "ModelStore", t0: float, message: str | None = None) -> State:
    """The final state of a train or SFT task: Completed with its TrainStepResult (the checkpoint by URI, never
    its bytes), named `Cached` when nothing was trained because the checkpoint existed. `t0`: the task's
    perf_counter start; `message`: the Cached state's, default "checkpoint N exists: not trained again".

    >>> train_step_state(already_trained(store, None, 2), store, t0).name        # doctest: +SKIP
    'Cached'
    """
    out = TrainStepResult(
        step=result.step,
        checkpoint_uri=result.checkpoint_path or store.checkpoint(result.step),
        metrics=result.metrics,
        trained=result.trained,
        seconds=time.perf_counter() - t0,
    )
    if out.trained:
        return Completed(data=out)
    return Completed(name="Cached", data=out, message=message or f"checkpoint {out.step} exists: not trained again")
