"""Models: `Model` (something you can sample from) and `TrainableModel` (a base model plus LoRA steps).

Rollout code talks to a model through a plain OpenAI client, exactly as to a hosted model:

    model = TrainableModel(name="agent-001", project="retail", base_model="/models/tiny")
    await model.register(LocalBackend(path="./.art"))
    client = model.openai_client()
    reply = await client.chat.completions.create(model=model.get_inference_name(), messages=[...])
    result = await backend.train(model, groups, learning_rate=1e-5)   # ART 2026; or await model.train(groups)
    await model.log(groups, metrics=result.metrics, step=result.step, split="train")

A prompted model (`Model(name="openai/gpt-4.1", ...)`) may carry a provider prefix in its name; its
records are stored under a path-safe form of the name (`openai--gpt-4.1`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any, Generic, Iterable, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from art_core.naming import validate_name

if TYPE_CHECKING:
    import openai

    from art_core.backend import Backend, TrainResult
    from art_core.store import ModelStore
    from art_core.training.config import TrainConfig
    from art_core.trajectories import Trajectory, TrajectoryGroup

ConfigT = TypeVar("ConfigT", bound=BaseModel | None)
log = logging.getLogger(__name__)


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
    run_name: str | None = Field(
        None,
        description="TrainableModel (ART 0.5.20): the run's identity, its storage folder and W&B run; `name` stays "
        "the served name. Unset: the name. Model: a label in W&B only.",
    )
    report_metrics: list[str] | None = Field(
        None,
        description="Where model.log also reports: ['wandb'], or [] for nowhere; None (ART's default): W&B "
        "when WANDB_API_KEY is set (art_core.wandb_metrics).",
    )

    _backend: "Backend | None" = PrivateAttr(default=None)
    _run_label: str | None = PrivateAttr(default=None)  # ART 0.3's trainer_args.run_name: W&B's display name

    def __init__(self, **data: Any) -> None:
        _check_keywords(type(self), data)
        super().__init__(**data)

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        # A prompted model's name may name its provider ("openai/gpt-4.1"); each part must be a safe name.
        for part in v.split("/") if v else [v]:
            validate_name(part, "model name")
        return v

    @field_validator("project")
    @classmethod
    def _check_project(cls, v: str) -> str:
        return validate_name(v, "project")

    @property
    def storage_name(self) -> str:
        """The name as one path segment: '/' becomes '--' (`openai/gpt-4.1` -> `openai--gpt-4.1`)."""
        return self.name.replace("/", "--")

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
        """An `openai.AsyncOpenAI` pointed at this model's endpoint (`art_core.inference.server.openai_client`:
        no retries, our callers decide, except one resend of a request whose idle connection was dropped)."""
        from art_core.inference.http_client import REQUEST_TIMEOUT_S
        from art_core.inference.server import openai_client

        if not self.inference_base_url:
            raise RuntimeError(
                f"model {self.name!r} has no endpoint yet: register it with a backend, or set inference_base_url"
            )
        kwargs.setdefault("timeout", REQUEST_TIMEOUT_S)
        return openai_client(self.inference_base_url, self.inference_api_key, **kwargs)

    def get_inference_name(self, step: int | None = None) -> str:
        """The name to pass as `model=` in chat calls."""
        return self.inference_model_name or self.name

    async def _current_step(self) -> int:
        return 0

    async def log(
        self,
        trajectories: "Iterable[Trajectory | BaseException] | Iterable[TrajectoryGroup] | None" = None,
        split: str = "val",
        *,
        metrics: dict[str, Any] | None = None,
        step: int | None = None,
    ) -> dict[str, Any]:
        """Record a split's results in history.jsonl (and its trajectories under trajectories/{split}/).

        trajectories: groups, or loose trajectories (exceptions among them count toward exception_rate);
        metrics: more metrics for the same record (e.g. `train_result.metrics`); step: default the
        model's current step. Returns the record's metrics, keys prefixed with `{split}/`. The record also
        goes to the model's W&B run when one is configured (`report_metrics`, art_core.wandb_metrics).

            await model.log(val_groups, split="val")
            await model.log(groups, metrics=result.metrics, step=result.step, split="train")
        """
        from art_core.trajectories import Trajectory, TrajectoryGroup
        from art_core.wandb_metrics import log_record, wandb_wanted  # wandb itself loads only when wanted

        to_wandb = wandb_wanted(self.report_metrics)  # a W&B misconfiguration fails before anything is written
        items = list(trajectories or [])
        if any(isinstance(t, (Trajectory, BaseException)) for t in items):
            groups = [TrajectoryGroup(items)]
        else:
            groups = [g for g in items if g is not None]
        step = await self._current_step() if step is None else step
        values = {**summarize(groups), **(metrics or {})}
        store = self.store()
        if groups:
            await asyncio.to_thread(store.write_groups, store.trajectories(split, step), groups)
        prefix = f"{split}/"
        values = {(k[len(prefix) :] if k.startswith(prefix) else k): v for k, v in values.items()}
        record = await asyncio.to_thread(store.record, step, values, prefix)
        if to_wandb:
            label = self._run_label or self.run_name
            await asyncio.to_thread(log_record, self.project, self.storage_name, step, record, label)
        return record

    def store(self) -> "ModelStore":
        """Where this model's records live (art_core.store): its backend's storage once registered
        (`Backend.model_store`), else the settings' storage root (ART_STORAGE_ROOT, else ./.art).

            >>> Model(name="openai/gpt-4.1", project="retail").store().root   # doctest: +SKIP
            '/abs/.art/retail/models/openai--gpt-4.1'
        """
        if self._backend is not None:
            return self._backend.model_store(self)
        from art_core.store import ModelStore

        return ModelStore.in_default_root(self.project, self.storage_name)


# ART's Model/TrainableModel fields that have no counterpart here: accepted, and a warning says why.
ART_UNUSED_FIELDS = {
    "entity": "the W&B entity comes from WANDB_ENTITY or your W&B login here",
    "id": "a model is identified by project and name (and run_name) here",
    "run_id": "a model is identified by project and name (and run_name) here",
    "base_path": "records go to the backend's storage (LocalBackend(path=...)), or ART_STORAGE_ROOT before register",
}


def _check_keywords(cls: type, data: dict[str, Any]) -> None:
    """Refuse a keyword the model has no field of (TypeError naming it and what is accepted); ART's fields that
    mean nothing here are dropped with a warning saying why (ART_UNUSED_FIELDS)."""
    import warnings

    for name in [k for k in data if k in ART_UNUSED_FIELDS and k not in cls.model_fields]:
        data.pop(name)
        warnings.warn(f"{cls.__name__}({name}=...) has no effect: {ART_UNUSED_FIELDS[name]}", stacklevel=4)
    known = set(cls.model_fields) | ({"lora_config", "_internal_config"} if issubclass(cls, TrainableModel) else set())
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise TypeError(
            f"{cls.__name__}() got unexpected keyword argument(s) {unknown}; it accepts {sorted(known)} "
            f"(and ART's {sorted(ART_UNUSED_FIELDS)}, which have no effect here)"
        )


def summarize(groups: "list[TrajectoryGroup]") -> dict[str, float]:
    """ART's logged figures: mean reward, reward_std_dev (within groups, averaged), exception_rate, and the
    mean of every numeric trajectory metric and group metric.

        >>> from art_core.trajectories import Trajectory, TrajectoryGroup
        >>> summarize([TrajectoryGroup([Trajectory(reward=1.0), Trajectory(reward=0.0)])])["reward"]
        0.5
    """
    import statistics

    trajectories = [t for g in groups for t in g.trajectories]
    errors = sum(len(g.exceptions) for g in groups)
    out: dict[str, float] = {}
    if trajectories or errors:
        out["exception_rate"] = errors / (len(trajectories) + errors)
    if not trajectories:
        return out
    out["reward"] = statistics.fmean(t.reward for t in trajectories)
    stds = [statistics.pstdev(g.rewards()) for g in groups if len(g.trajectories) > 1]
    if stds:
        out["reward_std_dev"] = statistics.fmean(stds)
    sums: dict[str, list[float]] = {}
    for t in trajectories:
        for k, v in t.metrics.items():
            if isinstance(v, (int, float)):
                sums.setdefault(k, []).append(float(v))
    for g in groups:
        for k, v in g.metrics.items():
            if isinstance(v, (int, float)):
                sums.setdefault(f"group_{k}" if k in out or k in sums else k, []).append(float(v))
    out.update({k: statistics.fmean(v) for k, v in sums.items()})
    return out


class TrainableModel(Model[ConfigT]):
    """A base model trained with LoRA; step N is served as `name@N`, and `name` is always the latest step.

    `_internal_config` takes ART's `art.dev.InternalModelConfig` (constructor keyword or attribute); what
    maps onto our TrainConfig/ServerConfig is applied, the rest is reported in a warning (art_core.dev).
    `lora_config=art_core.LoRAConfig(rank=..., alpha=...)` sets the adapter's shape (art_core.lora).
    """

    base_model: str
    trainable: bool = True
    _step: int = PrivateAttr(default=0)
    _internal_config: dict[str, Any] | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        from art_core.lora import merge_lora_config  # ART's lora_config= travels as the peft/init args it sets

        _check_keywords(type(self), data)  # before lora_config is taken apart, so its errors come first
        internal = merge_lora_config(data.pop("lora_config", None), data.pop("_internal_config", None))
        super().__init__(**data)
        self._internal_config = dict(internal) if internal else None
        # ART 0.3's trainer_args.run_name labelled the trainer's run; only ART 0.5.20's run_name= moves storage.
        self._run_label = ((internal or {}).get("trainer_args") or {}).get("run_name") or None

    @field_validator("run_name")
    @classmethod
    def _check_run_name(cls, v: str | None) -> str | None:  # names the run's folder and W&B run
        return None if v is None else validate_name(v, "run_name")

    @property
    def storage_name(self) -> str:
        """The run's folder under `{project}/models/` and its W&B run id: `run_name` when given (ART 0.5.20:
        checkpoints, history and trajectories belong to the run, `name` stays the served name), else the name.

            >>> TrainableModel(name="agent", project="p", base_model="/m", run_name="lr-1e-5").storage_name
            'lr-1e-5'
        """
        return self.run_name or self.name

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:  # a trained model's name names adapters and folders: no '/'
        return validate_name(v, "model name")

    @field_validator("base_model")
    @classmethod
    def _model_folder(cls, v: str) -> str:  # a .gguf file: converted once into a cached folder both sides load
        from art_core.base_models import resolve_base_model

        return resolve_base_model(v)

    async def register(self, backend: "Backend") -> None:
        """Attach to a backend; `_internal_config`'s server settings apply if the backend starts the server."""
        if self._backend is not backend:
            self._apply_server_config(backend)
        await super().register(backend)

    def _apply_server_config(self, backend: "Backend") -> None:
        from art_core.dev import server_overrides, warn_unsupported

        overrides = server_overrides(self._internal_config)
        if overrides and not backend.use_server_settings(self.base_model, overrides):
            warn_unsupported(
                "_internal_config.engine_args",
                overrides,
                "the server for this base model is already running (or the backend starts none); "
                "these settings apply only to a server the backend starts",
            )

    async def _current_step(self) -> int:
        return await self.get_step()

    async def get_step(self) -> int:
        """The latest trained step (0 before any training)."""
        self._step = await self.backend.get_step(self)
        return self._step

    def get_inference_name(self, step: int | None = None) -> str:
        """`name@step` for the given step, by default the latest one: the step the backend serves as latest
        (`Backend.served_step`; after `backend.train(model, ...)` too), else the one this model last saw."""
        if step is None:
            served = self._backend.served_step(self) if self._backend is not None else None
            step = self._step if served is None else served
        return f"{self.name}@{step}"

    async def train(
        self,
        trajectory_groups: "Iterable[TrajectoryGroup]",
        config: "TrainConfig | None" = None,
        _config: dict[str, Any] | None = None,
        verbose: bool = False,
    ) -> "TrainResult":
        """One training step on these groups (ART's `model.train`); same as `backend.train(self, ...)`.

        config: our TrainConfig (ART's `art.TrainConfig(learning_rate=..., beta=...)` is the same class);
        _config: ART's `art.dev.TrainConfig` keys (see art_core.dev); verbose: log the step's metrics.
        """
        from art_core.dev import resolve_train_config

        resolved = resolve_train_config(self, config, _config)
        result = await self.backend.train(self, list(trajectory_groups), resolved)
        self._step = result.step
        if verbose:
            log.warning("%s trained to step %d: %s", self.name, result.step, result.metrics)
        return result

    async def train_sft(
        self, trajectories: "Iterable[Any]", config: Any = None, verbose: bool = False
    ) -> "TrainResult":
        """Supervised fine-tuning on conversations (ART's `model.train_sft`); same as `backend.train_sft(self, ...)`.

        config: `TrainSFTConfig(learning_rate=..., batch_size=..., assistant_turns=...)` (art_core.sft).
        `trajectories` may also be the path of a chat-format JSONL file (local or s3://).
        """
        data = trajectories if isinstance(trajectories, (str, os.PathLike)) else list(trajectories)
        result = await self.backend.train_sft(self, data, config, verbose=verbose)
        self._step = result.step
        return result

    async def delete_checkpoints(self, best_checkpoint_metric: str = "val/reward") -> list[int]:
        """Keep the latest step and the best one by a validation metric; delete the rest. Returns deleted steps."""
        return await self.backend.delete_checkpoints(self, best_checkpoint_metric)
