"""Prefect task: one step's rollouts, written to storage (art_core.step.gather_step).

Cached on its inputs and source (not on the server's URL, which changes between runs): a re-run, a
resumed run after a crash, or another machine reading the same storage skips rollouts already done.
Without a cache hit the rollouts in storage are still reused when a checkpoint was trained on them or
when the same inputs wrote them: Prefect commits its cache record only after the task is Completed, and
a crash in between must not roll out again. An unreadable file is rolled out again, with a warning.

    result = gather_trajectories(ref, rollout, step=0, checkpoint_fingerprint="base", inference_url=None)
    result.uri      # '.../demo/models/agent-001/trajectories/train/0000.jsonl'
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

from prefect import get_run_logger, task

from art_core.fanout import Replicas
from art_core.rollouts import RolloutSpec
from art_core.serving import endpoint_for
from art_core.step import GatherOutcome, gather_step
from art_core.store import ModelRef
from art_pipeline.tasks.results import cached_on, step_run_name


@task(
    name="gather_trajectories",
    task_run_name=step_run_name("gather"),
    cache_policy=cached_on("inference_url", "max_lora_rank", "replicas", "oldest_reusable", "server"),
    persist_result=True,
)
def gather_trajectories(
    ref: ModelRef,
    rollout: RolloutSpec,
    step: int,
    checkpoint_fingerprint: str,
    inference_url: str | None = None,
    max_lora_rank: int = 8,
    replicas: Replicas | None = None,
    sample_step: int | None = None,
    oldest_reusable: int | None = None,
    server: dict | None = None,
) -> GatherOutcome:
    """Roll out `groups_per_step` scenarios `group_size` times each with the model at checkpoint `step`
    (or `sample_step`, for asynchronous steps), over every replica of `replicas` when given.

    `checkpoint_fingerprint` is the sampled checkpoint's (art_core.rollouts.checkpoint_fingerprint): it is
    only here so that the cache key changes when the weights do. `server`: the run's server settings
    (ServerOptions fields) for a server this process starts.
    """

    def endpoints(rank: int):
        rank = max(rank, max_lora_rank)
        if replicas is not None:
            return replicas.endpoints(ref.base_model, max_lora_rank=rank, options=server)
        return endpoint_for(ref.base_model, inference_url, max_lora_rank=rank, options=server)

    logger = get_run_logger()
    with gather_warnings_to(logger):  # a stuck gather's report and failed rollouts show in the task's log
        outcome = gather_step(
            ref,
            rollout,
            step,
            checkpoint_fingerprint,
            endpoint=endpoints,
            sample_step=sample_step,
            oldest_reusable=oldest_reusable,
            replicas=replicas,
        )
    logger.info(
        "checkpoint %d: %s %d rollouts, reward %.3f -> %s",
        step,
        "reused" if outcome.reused else "rolled out",
        int(outcome.summary["trajectories"]),
        outcome.summary["reward"],
        outcome.uri,
    )
    return outcome


@contextlib.contextmanager
def gather_warnings_to(logger: Any) -> Iterator[None]:
    """Send art_core.gather's warnings (a stuck gather's report, a failed rollout) to `logger` (the task's run
    logger, which the Prefect UI shows) while the block runs; from any thread, as rollouts may run in another."""
    source = logging.getLogger("art_core.gather")
    handler = _Forward(logger)
    source.addHandler(handler)
    try:
        yield
    finally:
        source.removeHandler(handler)


class _Forward(logging.Handler):
    def __init__(self, logger: Any) -> None:
        super().__init__(logging.WARNING)
        self.logger = logger

    def emit(self, record: logging.LogRecord) -> None:
        self.logger.log(record.levelno, "%s", record.getMessage())
