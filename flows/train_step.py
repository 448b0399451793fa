"""The train-step flow: one GRPO step as a flow run of its own, for a GPU work pool.

The train flow runs it through the `train-step/gpu` deployment (deployments/prefect.yaml) when its config
says `scale.train_deployment="train-step/gpu"`: a worker on the GPU machine picks the run up, reads the
step's scored rollouts from storage, trains, and writes checkpoint `step + 1` and its history record back
to the same storage (S3). Nothing but references crosses machines: the model's storage root and name,
the rollouts' URI, the step, the train settings.

    prefect work-pool create art-gpu --type process && prefect work-pool set-concurrency-limit art-gpu 1
    prefect --no-prompt deploy --name gpu --prefect-file deployments/prefect.yaml
    prefect worker start --pool art-gpu            # on the GPU machine, with the storage's keys set

Like the in-process step it is idempotent by the checkpoint: a run whose checkpoint already exists trains
nothing and ends `Cached`, so the caller can tell a trained step from a skipped one by the state's name.
A step whose `config.ranks` outnumber the GPUs this worker sees fails at once, naming the deployment.
"""

from __future__ import annotations

import socket

from prefect import flow
from prefect.runtime import deployment
from prefect.states import Completed

from art_core.store import ModelRef
from art_core.training.config import TrainConfig
from art_core.training.distributed import refuse_ranks_beyond_gpus
from art_pipeline.flows.lifetime import guard_temporary_server
from art_pipeline.tasks.specs import TrainStepResult
from art_pipeline.tasks.train import train_step


@flow(name="train-step", log_prints=True)
def train_step_flow(ref: ModelRef, scored_uri: str, step: int, config: TrainConfig):
    """Train checkpoint `step` -> `step + 1` of `ref` on the scored groups at `scored_uri` (all in storage).

    Ends `Completed` with the TrainStepResult when it trained, `Cached` when the checkpoint existed.

    >>> train_step_flow(ref, "s3://bucket/runs/demo/models/agent-001/trajectories/train/0000.jsonl", 0,
    ...                 TrainConfig(learning_rate=2e-3))          # doctest: +SKIP
    """
    guard_temporary_server()  # a temporary Prefect server dies with this process, SIGKILL included
    if config.ranks > 1 and config.ranks_on == "local":
        _refuse_too_few_gpus(config, step)
    # No inference_url: a vLLM server on this worker is not ours to put to sleep (it serves other runs).
    state = train_step(ref, scored_uri, step, config, return_state=True)
    result: TrainStepResult = state.result()
    if not result.trained:
        # The flow run's own state says it, so the caller on another machine reads it from the API.
        return Completed(name="Cached", data=result, message=state.message)
    return result


def _refuse_too_few_gpus(config: TrainConfig, step: int) -> None:
    """The trainer's own GPU check, made before the rollouts are read and naming where the step was sent: the
    caller on another machine reads this message from the flow run's state."""
    try:
        refuse_ranks_beyond_gpus(config.ranks)
    except ValueError as e:
        name = deployment.name  # read from the API: only on this path
        where = f"deployment 'train-step/{name}'" if name else "this flow run (no deployment)"
        raise ValueError(
            f"train step {step + 1} sent to {where}, worker on {socket.gethostname()}: {e}. Give the pool's "
            f"workers {config.ranks} GPUs for train steps (scripts/launch-cluster.sh --train-ranks {config.ranks}) "
            "or lower train.ranks"
        ) from None
