"""The `Backend` interface: what serves a model, trains it and keeps its checkpoints.

`LocalBackend` (art_core.local_backend) does all three on one machine: a vLLM server we own, the LoRA
trainer in this process, and storage under a local folder or s3://. A remote backend implements the
same methods over HTTP.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from art_core.model import Model, TrainableModel
    from art_core.training.config import TrainConfig
    from art_core.trajectories import TrajectoryGroup


class TrainResult(BaseModel):
    """What one training step produced: the new step, its metrics and where its checkpoint lives."""

    step: int
    metrics: dict[str, Any] = Field(default_factory=dict)
    checkpoint_path: str | None = None
    trained: bool = Field(True, description="False when the checkpoint already existed and nothing was trained.")


class Backend(abc.ABC):
    """Serves models behind an OpenAI-compatible endpoint and trains them one step at a time."""

    @abc.abstractmethod
    async def register(self, model: "Model") -> None:
        """Start serving `model` (its latest checkpoint, or the base model at step 0) and fill in
        `model.inference_base_url`, `model.inference_api_key` and `model.inference_model_name`."""

    @abc.abstractmethod
    async def get_step(self, model: "TrainableModel") -> int:
        """The latest complete checkpoint's step, 0 when none."""

    @abc.abstractmethod
    async def train(
        self, model: "TrainableModel", groups: "list[TrajectoryGroup]", config: "TrainConfig | None" = None
    ) -> TrainResult:
        """Train one step on `groups`, save `checkpoints/{step+1}`, and serve it as `name@{step+1}` and `name`."""

    async def delete_checkpoints(
        self, model: "TrainableModel", best_checkpoint_metric: str = "val/reward"
    ) -> list[int]:
        """Keep the latest and the best step by `best_checkpoint_metric`; delete the others."""
        raise NotImplementedError(f"{type(self).__name__} does not delete checkpoints")

    async def close(self) -> None:
        """Stop whatever this backend started."""

    async def __aenter__(self) -> "Backend":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
