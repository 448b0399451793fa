"""Models: `Model` (something you can sample from) and `TrainableModel` (a base model plus LoRA steps).

Rollout code talks to a model through a plain OpenAI client, exactly as to a hosted model:

    model = TrainableModel(name="agent-001", project="retail", base_model="/models/tiny")
    await model.register(LocalBackend(path="./.art"))
    client = model.openai_client()
    reply = await client.chat.completions.create(model=model.get_inference_name(), messages=[...])
    await model.train(groups)            # one GRPO step; the server now answers with the new adapter
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from art_core.storage import validate_name

if TYPE_CHECKING:
    import openai

    from art_core.backend import Backend, TrainResult
    from art_core.training.config import TrainConfig
    from art_core.trajectories import TrajectoryGroup

ConfigT = TypeVar("ConfigT", bound=BaseModel | None)


class Model(BaseModel, Generic[ConfigT]):
    """A model served behind an OpenAI-compatible endpoint (a prompted baseline, or a trainable one)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    project: str
    config: ConfigT | None = None
    trainable: bool = False
    inference_base_url: str | None = None
    inference_api_key: str | None = Field(default=None, exclude=True, repr=False)  # a secret: never stored
    inference_model_name: str | None = None

    _backend: "Backend | None" = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        return validate_name(v, "model name")

    @field_validator("project")
    @classmethod
    def _check_project(cls, v: str) -> str:
        return validate_name(v, "project")

    async def register(self, backend: "Backend") -> None:
        """Attach to a backend, which starts serving this model. Calling it again is harmless."""
        if self._backend is backend:
            return
        if self.config is not None:
            self.config.model_dump_json()  # a config that cannot be stored fails here, not mid-run
        await backend.register(self)
        self._backend = backend

    @property
    def backend(self) -> "Backend":
        if self._backend is None:
            raise RuntimeError(f"model {self.name!r} is not registered: call `await model.register(backend)` first")
        return self._backend

    def openai_client(self, **kwargs: Any) -> "openai.AsyncOpenAI":
        """An `openai.AsyncOpenAI` pointed at this model's endpoint."""
        import openai

        if not self.inference_base_url:
            raise RuntimeError(
                f"model {self.name!r} has no endpoint yet: register it with a backend, or set inference_base_url"
            )
        kwargs.setdefault("timeout", 1200)
        kwargs.setdefault("max_retries", 0)  # retries would hide a dead server; our callers decide
        return openai.AsyncOpenAI(base_url=self.inference_base_url, api_key=self.inference_api_key or "none", **kwargs)

    def get_inference_name(self, step: int | None = None) -> str:
        """The name to pass as `model=` in chat calls."""
        return self.inference_model_name or self.name


class TrainableModel(Model[ConfigT]):
    """A base model trained with LoRA; step N is served as `name@N`, and `name` is always the latest step."""

    base_model: str
    trainable: bool = True
    _step: int = PrivateAttr(default=0)

    async def get_step(self) -> int:
        """The latest trained step (0 before any training)."""
        self._step = await self.backend.get_step(self)
        return self._step

    def get_inference_name(self, step: int | None = None) -> str:
        """`name@step` for the given step, by default the latest known one."""
        return f"{self.name}@{self._step if step is None else step}"

    async def train(self, groups: "list[TrajectoryGroup]", config: "TrainConfig | None" = None) -> "TrainResult":
        """One training step on these groups (ART's `model.train`); same as `backend.train(self, ...)`."""
        result = await self.backend.train(self, groups, config)
        self._step = result.step
        return result

    async def delete_checkpoints(self, best_checkpoint_metric: str = "val/reward") -> list[int]:
        """Keep the latest step and the best one by a validation metric; delete the rest. Returns deleted steps."""
        return await self.backend.delete_checkpoints(self, best_checkpoint_metric)
