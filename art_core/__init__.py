"""art_core: train multi-step, tool-using LLM agents with GRPO, rewarded by RULER or the environment.

The public names follow OpenPipe's ART, so ART rollout code ports by changing the import:

    import art_core as art
    model = art.TrainableModel(name="agent-001", project="retail", base_model="/models/tiny")
    await model.register(art.LocalBackend(path="./.art"))
    groups = await art.gather_trajectory_groups(
        art.TrajectoryGroup(rollout(model, s) for _ in range(8)) for s in scenarios)
    await model.train(groups)

Importing this package stays light: torch, vLLM, transformers and Prefect load only when a module
that needs them is used (LocalBackend, the trainer, the tiny-model builder).
"""

from __future__ import annotations

import importlib
from typing import Any

from art_core import dev, utils
from art_core.backend import Backend, TrainResult
from art_core.capture import (
    auto_trajectory,
    capture_auto_trajectory,
    capture_yielded_trajectory,
    current_trajectory,
    no_capture,
    trajectory,
    yield_trajectory,
)
from art_core.gather import TooManyExceptions, gather_trajectories, gather_trajectory_groups, trajectory_group
from art_core.lora import LoRAConfig
from art_core.model import Model, TrainableModel
from art_core.retry import retry
from art_core.storage import Storage, validate_name
from art_core.training.config import TrainConfig
from art_core.trajectories import (
    History,
    Messages,
    MessagesAndChoices,
    PydanticException,
    RolloutError,
    Tools,
    Trajectory,
    TrajectoryGroup,
)

# Names whose modules pull heavy dependencies (or litellm): imported on first use.
_LAZY = {
    "LocalBackend": "art_core.local_backend",
    "ruler": "art_core.rewards.ruler",
    "ruler_score_group": "art_core.rewards.ruler",
    "load_environment": "art_core.envs",
    "TrainSFTConfig": "art_core.sft",
    "trajectory_group_batches": "art_core.batches",
    "LocalServingUnavailableError": "art_core.errors",
}
# ART names that stand for services this project cannot offer: using one says why.
_UNSERVABLE = {
    "ServerlessBackend": "W&B's hosted training (ServerlessBackend) needs W&B's service; train with LocalBackend or "
    "the Prefect train flow on your own GPU (docs/art-compatibility.md)",
    "TinkerBackend": "Thinking Machines' Tinker API is a hosted service; train with LocalBackend",
    "MegatronBackend": "Megatron multi-GPU training is not part of art_core; LocalBackend trains a LoRA on one device",
    "TinkerNativeBackend": "Thinking Machines' Tinker API is a hosted service; train with LocalBackend",
    "SkyPilotBackend": "SkyPilot is a launcher here, not a backend: scripts/launch-cluster.sh starts a GPU node that "
    "trains with LocalBackend (docs/clusters.md)",
    "TrainingObjectives": "ART's distillation objectives train on MegatronBackend only; distil by SFT here "
    "(art_core.distill says how)",
}
# ART's submodules a user reaches as attributes of `art` (each says what it offers or why not).
_SUBMODULES = (
    "distill",
    "langgraph",
    "local",
    "mcp",
    "megatron",
    "pipeline_trainer",
    "rewards",
    "serverless",
    "skypilot",
    "tinker",
    "tinker_native",
    "trainer_rank",
    "types",
)


def _unservable(name: str, why: str) -> type:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"art_core.{name} is not available: {why}")

    return type(name, (), {"__init__": refuse, "__doc__": f"Not available here: {why}."})


LocalTrainResult = TrainResult  # ART's LocalBackend result: step, metrics and the checkpoint's path


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:  # ART's `art.local.LocalBackend`, `art.distill`, ...: imported on first use
        return importlib.import_module(f"art_core.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _UNSERVABLE:
        return _unservable(name, _UNSERVABLE[name])
    raise AttributeError(f"module 'art_core' has no attribute {name!r}")


__all__ = [
    "Backend",
    "History",
    "auto_trajectory",
    "capture_auto_trajectory",
    "capture_yielded_trajectory",
    "current_trajectory",
    "no_capture",
    "trajectory",
    "yield_trajectory",
    "LocalBackend",
    "PydanticException",
    "dev",
    "gather_trajectories",
    "retry",
    "utils",
    "Messages",
    "MessagesAndChoices",
    "Model",
    "RolloutError",
    "Storage",
    "TooManyExceptions",
    "Tools",
    "TrainConfig",
    "TrainResult",
    "LocalTrainResult",
    "LocalServingUnavailableError",
    "LoRAConfig",
    "TrainSFTConfig",
    "trajectory_group_batches",
    "TrainableModel",
    "Trajectory",
    "TrajectoryGroup",
    "gather_trajectory_groups",
    "load_environment",
    "ruler",
    "ruler_score_group",
    "trajectory_group",
    "validate_name",
]
