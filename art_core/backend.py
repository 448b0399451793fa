"""The `Backend` interface: what serves a model, trains it and keeps its checkpoints.

`LocalBackend` (art_core.local_backend) does all three on one machine: a vLLM server we own, the LoRA
trainer in this process, and storage under a local folder or s3://. A remote backend implements the
same methods over HTTP.

A `Model` asks its backend only through these public methods (`model_store`, `served_step`,
`use_server_settings`), and a backend tells a model only through the public fields `register` fills in:
neither reads the other's private state.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from art_core.training.result import TrainResult  # re-exported: ART users import it from here

if TYPE_CHECKING:
    from art_core.model import Model, TrainableModel
    from art_core.store import ModelStore
    from art_core.training.config import TrainConfig
    from art_core.trajectories import TrajectoryGroup


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

    def model_store(self, model: "Model") -> "ModelStore":
        """Where `model`'s records live (history.jsonl, trajectories, checkpoints): `model.log` writes there.

        The default is the settings' storage root (ART_STORAGE_ROOT, else ./.art); a backend with storage
        of its own (LocalBackend) returns that. A prompted model's records use its path-safe name.

            >>> backend.model_store(model).history            # doctest: +SKIP
            './.art/demo/models/agent-001/history.jsonl'
        """
        from art_core.store import ModelStore

        return ModelStore.in_default_root(model.project, model.storage_name)

    def served_step(self, model: "TrainableModel") -> int | None:
        """The step this backend serves as `model`'s latest (its `name` alias), as far as this process knows;
        None when it does not track one (the model then names the step it last saw itself).

        After `await backend.train(model, groups)` (ART's backend-first loop) this is the new step, so
        `model.get_inference_name()` names it without the model being told.
        """
        return None

    def use_server_settings(self, base_model: str, settings: dict[str, Any]) -> bool:
        """Apply server settings (ServerConfig fields, from a model's `_internal_config`) to the server this
        backend will start for `base_model`. False when they cannot apply: the server already runs, or the
        backend starts none (the default); the caller reports that.
        """
        return False

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
