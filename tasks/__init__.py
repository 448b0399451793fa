"""Prefect tasks: each a thin wrapper of one art_core call, with its cache policy.

    gather_trajectories -> score_groups -> train_step -> evaluate -> export_adapter / serve_adapter

Pure, costly tasks (gather, score, evaluate) are cached on inputs plus source, with results persisted
in the run's own storage (tasks.results); train_step is idempotent by its checkpoint instead.
"""

from tasks._async import run_sync
from tasks.deploy import export_adapter, serve_adapter
from tasks.evaluate import evaluate, evaluate_never_acts, evaluate_prompted
from tasks.gather import gather_trajectories
from tasks.results import cached_on, result_storage_for, with_result_storage
from tasks.score import JudgeError, score_groups
from tasks.specs import GatherResult, JudgeConfig, ModelRef, RolloutSpec, ScoreResult, TrainStepResult
from tasks.train import train_step

__all__ = [
    "GatherResult",
    "JudgeConfig",
    "JudgeError",
    "ModelRef",
    "RolloutSpec",
    "ScoreResult",
    "TrainStepResult",
    "cached_on",
    "evaluate",
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
