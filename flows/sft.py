"""The sft flow: supervised fine-tuning from a chat-format JSONL file, one cached task per epoch.

    python -c "from art_pipeline.flows.sft import sft, SFTRunConfig; sft(SFTRunConfig(data='train.jsonl', ...))"

Each epoch trains the model's LoRA adapter from its latest checkpoint and writes the next one, so the
train flow (GRPO) with the same storage, project, model and LoRA settings continues from the last SFT
checkpoint, its step numbering included (give it `steps` = SFT epochs + GRPO steps; it rolls out nothing for
the steps SFT checkpointed). Running the flow again with the same data and settings trains nothing: its
epochs map to the same checkpoints, recorded under `{model}/sft/`, and each epoch task ends Cached when its
checkpoint exists; a crashed run resumes at the first epoch without one.
"""

from __future__ import annotations

from typing import Callable

from prefect import flow
from pydantic import BaseModel, Field, field_validator

from art_core.settings import get_settings
from art_core.sft import SFTSpec, check_fork_keeps_sft, sft_plan
from art_core.store import ModelRef, ModelStore
from art_core.training.config import TrainConfig
from art_pipeline.flows.config import NAME_FORM, PreflightError, RunConfig, _Strict, storage_root
from art_pipeline.flows.lifetime import guard_temporary_server, training_lease
from art_pipeline.flows.preflight import base_model, existing_file, preflight
from art_pipeline.tasks.results import result_storage_for, with_result_storage
from art_pipeline.tasks.sft import build_demonstrations, sft_step


class SFTRunConfig(_Strict):
    """One SFT run (the Prefect form is drawn from this model)."""

    FORM_FIRST = ("project", "model", "base_model", "data", "sft")
    FORM_EXPERT = ("inference_url",)

    storage_url: str = Field(
        default_factory=lambda: get_settings().storage_root,
        description="Storage root: a local folder or s3://bucket/prefix (default ART_STORAGE_ROOT or ./.art).",
    )
    project: str = Field(description="Project name (folder under the storage root).", json_schema_extra=NAME_FORM)
    model: str = Field(
        description="Model name: the run trains this model's adapter, the one GRPO trains.", json_schema_extra=NAME_FORM
    )
    base_model: str = Field(
        description="'smollm2' (SmolLM2-135M-Instruct, what `make demo` trains), a model folder, a .gguf file or a hub id."
    )
    data: str = Field(description="Chat-format JSONL: {'messages': [...], 'tools': [...]} per line; local or s3://.")
    sft: SFTSpec = Field(default_factory=SFTSpec, description="Epochs, batch size and learning-rate schedule.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="LoRA shape and optimizer (as for GRPO).")
    inference_url: str | None = Field(None, description="A vLLM server of ours on this machine sleeps while training.")

    @field_validator("storage_url")
    @classmethod
    def _storage(cls, v: str) -> str:
        return storage_root(v)

    @field_validator("base_model", "data")
    @classmethod
    def _stripped(cls, v: str) -> str:
        return v.strip()  # resolved and checked by preflight (the model's folder, the file's absolute path)

    def preflighted(self) -> SFTRunConfig:
        """This config with its base model resolved and its data file found (what `preflight` runs)."""
        return self.model_copy(
            update={"base_model": base_model(self.base_model), "data": existing_file("data", self.data)}
        )


class SFTSummary(BaseModel):
    """What an SFT run did: the checkpoint of each epoch, the loss, its seconds, and which epochs were trained now."""

    start_step: int
    checkpoints: dict[int, str]
    losses: dict[int, float]
    trained_steps: list[int]
    # Each epoch's training seconds; an epoch found done reports those of the run that trained it (its record).
    seconds: dict[int, float] = {}


@flow(name="sft", log_prints=True)
def sft(config: SFTRunConfig) -> SFTSummary:
    """Fine-tune `config.model` on `config.data` for `config.sft.epochs` epochs; resume whatever is done."""
    guard_temporary_server()
    config = preflight(config)  # the base model resolved, the data file found: before any work
    ref = ModelRef(
        storage_url=config.storage_url, project=config.project, model=config.model, base_model=config.base_model
    )
    store = ref.store()
    with training_lease(store) as lease:  # one writer per model: a second run is refused before any work
        store.bind(ref.base_model, trainable=True)  # refuses a model trained from another base, before any work
        return _sft(config, ref, store, lease.check)


def _sft(config: SFTRunConfig, ref: ModelRef, store: ModelStore, check_lease: Callable[[], None]) -> SFTSummary:
    _, start = sft_plan(store, config.data, config.sft)
    summary = SFTSummary(start_step=start, checkpoints={}, losses={}, trained_steps=[])
    for epoch in range(config.sft.epochs):
        step = start + epoch
        check_lease()  # LeaseLost if another run took this model over
        # The task's own state says Cached when the checkpoint existed; its result is the TrainStepResult.
        state = sft_step(
            ref, config.data, config.sft, epoch, step, config.train, config.inference_url, return_state=True
        )
        result = state.result()
        summary.checkpoints[result.step] = result.checkpoint_uri
        summary.losses[result.step] = float(result.metrics.get("loss", result.metrics.get("sft/loss", 0.0)))
        summary.seconds[result.step] = float(result.metrics.get("seconds", result.seconds))
        if result.trained:
            summary.trained_steps.append(result.step)
        print(
            f"sft epoch {epoch + 1}/{config.sft.epochs}: checkpoint {result.step}, loss "
            f"{summary.losses[result.step]:.4f}{'' if result.trained else ' (checkpoint existed)'}"
        )
    return summary


def sft_stage(config: RunConfig, ref: ModelRef, check_lease: Callable[[], None] = lambda: None) -> SFTSummary:
    """The train flow's first stage (config.sft): its demonstrations, then its epochs; resumes what is done.

    Runs inside the train flow, under its lease; the checkpoints it writes are the ones GRPO continues from."""
    assert config.sft is not None
    stage, store = config.sft, ref.store()
    data = stage.demonstrations
    if data == "expert":  # cached on (environment, split, seed, limit) and the expert's code: a rerun reads its file
        from art_core.envs.experts import demonstration_options

        build = with_result_storage(build_demonstrations, result_storage_for(config.storage_url))
        args = (
            config.storage_url,
            config.project,
            config.environment.name,
            stage.demonstrations_split,
            int(config.environment.options.get("seed", 0)),  # the environment's: it picks the database and tasks
            stage.demonstrations_limit,
            demonstration_options(config.environment.name, config.environment.options),  # tau2's data folder
        )
        data = build(*args)
        if not store.storage.exists(data):  # the cache outlived its file: build it again
            data = build.with_options(refresh_cache=True)(*args)
    if config.fork_from is not None:  # a fork meant to find its SFT done: refused before any epoch otherwise
        fork = config.fork_from
        at = f"step {fork.step}" if fork.step else "its latest checkpoint"
        try:
            check_fork_keeps_sft(store, data, stage.spec(), f"{fork.model} (forked at {at})")
        except ValueError as e:
            raise PreflightError("fork_from", str(e)) from None
    run = SFTRunConfig(
        storage_url=config.storage_url,
        project=config.project,
        model=config.model,
        base_model=config.base_model,
        data=data,
        sft=stage.spec(),
        train=config.train,
        inference_url=config.inference_url,
    )
    return _sft(run, ref, store, check_lease)
