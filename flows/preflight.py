"""The checks a flow's config needs I/O for, made once at the start of each flow, before any work.

pydantic checks a config's fields by themselves whenever one is built: in Python, from the Prefect form, or
from a stored result (ranges, names, URLs, which fields go together). What needs the disk, an import or a
server waits for `preflight(config)`, the first thing every flow does:

- the base model: 'smollm2' or a .gguf found (and converted once), a folder checked for its config.json;
- the environment loaded with its options (an `mcp` one reaches its server to list the tools): whether it
  constrains sampling, has tools, and recommends a temperature or max_tokens (EnvironmentConfig.facts);
- constrained sampling trains only with recomputed logprobs;
- the base model's chat template shows the tools to the model, where the environment has tools;
- a demonstrations file (an SFT stage's, or the SFT flow's data) exists;
- the GPUs `server.gpu_ids` places the run's vLLM server on are there (ART's dedicated mode, docs/multi-gpu.md).

A refusal is a PreflightError that names the field, raised before any server starts or anything is written.
The returned config has the resolved values (the base model's folder, the file's absolute path, max_tokens).

    >>> config = preflight(RunConfig(project="demo", model="a", base_model="smollm2", environment={"name": "retail"}))
    >>> config.base_model, config.sampling.max_tokens             # doctest: +SKIP
    ('/root/.cache/art-pipeline/models/SmolLM2-135M-Instruct.Q4_1-b179c9523d0e', 256)
"""

from __future__ import annotations

from typing import Any, TypeVar

from art_core.chat_template import ToolTemplateError, check_template_shows_tools
from art_core.gpus import check_gpu_ids
from art_core.store import ModelStore
from art_pipeline.flows.config import (
    DEFAULT_MAX_TOKENS,
    PreflightError,
    RunConfig,
    base_model_folder,
    demonstrations_file,
    looks_local,
)

C = TypeVar("C")

__all__ = ["PreflightError", "base_model", "existing_file", "preflight"]


def preflight(config: C) -> C:
    """`config` checked and resolved (see the module docstring); a config holding a RunConfig as `run` (evaluate,
    deploy, retrain) has that checked. A config class with checks of its own defines `preflighted()` (the SFT
    flow's: its base model and data file), built from `base_model` and `existing_file`. Idempotent."""
    if isinstance(config, RunConfig):
        return _run(config)  # type: ignore[return-value]
    run = getattr(config, "run", None)
    if isinstance(run, RunConfig):
        return config.model_copy(update={"run": _run(run)})  # type: ignore[attr-defined]
    own = getattr(config, "preflighted", None)
    if callable(own):
        return own()
    raise TypeError(f"preflight takes a flow's config, not {type(config).__name__}")


def _run(config: RunConfig) -> RunConfig:
    if config._checked:
        return config
    base = base_model(config.base_model)
    facts = config.environment.facts()
    update: dict[str, Any] = {"base_model": base}
    if facts.constrains_sampling and config.train.old_logprobs == "sampler":
        raise PreflightError(
            "train.old_logprobs",
            f"environment {config.environment.name!r} with options {config.environment.options} constrains "
            "sampling, and vLLM then reports logprobs after the grammar mask, so the importance ratio against them "
            "collapses and nothing is learned: set train.old_logprobs to 'recompute'",
        )
    if facts.has_tools and looks_local(base):
        # A template that drops `tools=` would train a tool task on prompts without the tools.
        try:
            check_template_shows_tools(base)
        except ToolTemplateError as e:
            raise PreflightError("base_model", str(e)) from None
    if config.sampling.max_tokens is None:
        max_tokens = facts.recommended_sampling.get("max_tokens", DEFAULT_MAX_TOKENS)
        update["sampling"] = config.sampling.model_copy(update={"max_tokens": max_tokens})
    if config.sft is not None and config.sft.demonstrations != "expert":
        demonstrations = existing_file("sft.demonstrations", config.sft.demonstrations)
        update["sft"] = config.sft.model_copy(update={"demonstrations": demonstrations})
    if config.fork_from is not None:
        check_fork(config, base)
    if config.server.gpu_ids is not None and config.inference_url is None:
        try:
            check_gpu_ids(config.server.gpu_ids, "server.gpu_ids")
        except ValueError as e:
            raise PreflightError("server.gpu_ids", str(e)) from None
    checked = config.model_copy(update=update)
    checked._checked = True
    return checked


def fork_stores(config: RunConfig) -> tuple[ModelStore, ModelStore]:
    """(source, target) of `config.fork_from`: the model forked from and this run's model."""
    fork = config.fork_from
    assert fork is not None
    source = ModelStore(fork.storage_url or config.storage_url, fork.project or config.project, fork.model)
    return source, ModelStore(config.storage_url, config.project, config.model)


def check_fork(config: RunConfig, base: str) -> None:
    """Refuse a fork whose source has no such checkpoint, was trained from another base model than `base` (the
    run's, resolved), or whose target trained already, before any work: the checks `fork_model` makes before
    it copies."""
    from art_core.fork import ForkError, plan_fork

    try:
        plan_fork(*fork_stores(config), config.fork_from.step, base)  # type: ignore[union-attr]
    except ForkError as e:
        raise PreflightError("fork_from", str(e)) from None


def base_model(value: str) -> str:
    """The folder a base model names ('smollm2', a .gguf converted once, a model folder); PreflightError if none."""
    try:
        return base_model_folder(value)
    except ValueError as e:
        raise PreflightError("base_model", str(e)) from None


def existing_file(field: str, value: str) -> str:
    """A URL as it is; a local path made absolute once it exists, else a PreflightError naming `field`."""
    try:
        return demonstrations_file(value)
    except ValueError as e:
        raise PreflightError(field, str(e)) from None
