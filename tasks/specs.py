"""What the tasks take and return: small storable values, so cache keys hold only what changes a result.

The references themselves live in art_core (`ModelRef`, `RolloutSpec`, `JudgeConfig`, `TrainConfig`):
the library and the pipeline describe a model, a rollout and a judge the same way. Raising `steps` or
the learning rate changes none of them, so step 0's rollouts stay cached.

    ref = ModelRef(storage_url="s3://bucket/runs", project="demo", model="agent-001", base_model="/models/tiny")
    ref.store().checkpoint(2)   # 's3://bucket/runs/demo/models/agent-001/checkpoints/0002'
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from art_core.persisted import Persisted
from art_core.rewards.config import JudgeConfig
from art_core.rollouts import RolloutSpec
from art_core.store import ModelRef


class ScoreResult(Persisted):
    """Where the scored groups are (the gathered file itself when no judge rescored them)."""

    step: int
    uri: str
    summary: dict[str, float]
    judged: bool
    seconds: float


class TrainStepResult(BaseModel):
    """The checkpoint a train step produced (or found already there) and its metrics."""

    step: int
    checkpoint_uri: str
    metrics: dict[str, Any] = Field(default_factory=dict)
    trained: bool = Field(description="False when the checkpoint existed and training was skipped.")
    seconds: float = 0.0


__all__ = ["JudgeConfig", "ModelRef", "RolloutSpec", "ScoreResult", "TrainStepResult"]
