"""Prefect tasks: each wraps art_core calls for one step of a flow, with its cache policy.

    gather_trajectories -> score_groups (only with a RULER judge) -> train_step -> evaluate -> deploy_step

    gather.py    gather_trajectories                 cached on inputs plus source
    score.py     score_groups                        cached; run only when a judge is configured
    train.py     train_step                          not cached: idempotent by its checkpoint
    remote.py    train_step_remotely                 train_step as a flow run on a GPU work pool; waits for it
    sft.py       build_demonstrations (cached), sft_step (idempotent by its checkpoint)
    evaluate.py  evaluate, evaluate_prompted, evaluate_never_acts, evaluate_expert   cached on inputs plus source
    mcp.py       generate_mcp_scenarios              cached; the set is also kept in storage
    deploy.py    export_adapter, serve_adapter, deploy_step         not cached: they act on the world

Most are a few lines around one art_core call; train_step_remotely is the exception (it starts a flow
run of the `train-step` deployment and builds its result from storage). Cached results are persisted in
the run's own storage (tasks.results). The package re-exports the tasks and specs most flows use; the
others (deploy_step, sft, mcp, remote) are imported from their modules.
"""

from art_core.coroutines import run_sync
from art_pipeline.tasks.deploy import export_adapter, serve_adapter
from art_pipeline.tasks.evaluate import evaluate, evaluate_expert, evaluate_never_acts, evaluate_prompted
from art_pipeline.tasks.gather import gather_trajectories
from art_pipeline.tasks.results import cached_on, result_storage_for, with_result_storage
from art_pipeline.tasks.score import JudgeError, score_groups
from art_pipeline.tasks.specs import JudgeConfig, ModelRef, RolloutSpec, ScoreResult, TrainStepResult
from art_pipeline.tasks.train import train_step

__all__ = [
    "JudgeConfig",
    "JudgeError",
    "ModelRef",
    "RolloutSpec",
    "ScoreResult",
    "TrainStepResult",
    "cached_on",
    "evaluate",
    "evaluate_expert",
    "evaluate_never_acts",
    "evaluate_prompted",
    "export_adapter",
    "gather_trajectories",
    "result_storage_for",
    "with_result_storage",
    "run_sync",
    "score_groups",
    "serve_adapter",
    "train_step",
]
