"""`TrainResult`, what one train step returns: a leaf module, so the engine (the trainer, art_core.step) and
the facade (art_core.backend, which re-exports it as ART's `art.TrainResult`) both import it from below.

    from art_core.training.result import TrainResult
    TrainResult(step=1, metrics={"loss": 0.1}, checkpoint_path="./.art/demo/models/agent/checkpoints/0001")
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class TrainResult(BaseModel):
    """What one training step produced: the new step, its metrics and where its checkpoint lives."""

    step: int
    metrics: dict[str, Any] = Field(default_factory=dict)
    checkpoint_path: str | None = None
    trained: bool = Field(True, description="False when the checkpoint already existed and nothing was trained.")

    def __init__(self, **data: Any) -> None:
        from art_core.trajectories import refuse_unknown  # a misspelt field is a TypeError, not dropped

        refuse_unknown(type(self), data)
        super().__init__(**data)
