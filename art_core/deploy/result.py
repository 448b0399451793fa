"""What a deploy target returns or raises, in a module of its own: every target module uses these, and the
module that dispatches to the targets imports those modules (a leaf keeps the imports one-way)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

Target = Literal["vllm", "merged", "together", "wandb"]
TARGETS: tuple[str, ...] = ("vllm", "merged", "together", "wandb")
Status = Literal["ready", "serving", "saved", "queued", "running", "failed", "offline", "stopped"]


class DeployError(RuntimeError):
    """A deployment that failed; the message says what to fix and where the local export is."""


class UnsupportedBaseModelError(DeployError, ValueError):
    """The target does not serve adapters of this base model (refused before any upload)."""


def refuse_unserved_base(service: str, base_model: str, supported: tuple[str, ...] | list[str]) -> None:
    """UnsupportedBaseModelError unless `service` serves LoRA adapters of `base_model` (checked before any upload)."""
    if base_model not in supported:
        raise UnsupportedBaseModelError(
            f"{service} does not serve LoRA adapters of {base_model!r}. Supported base models: {', '.join(supported)}. "
            f"If the model was trained from a local copy of one of them, pass its {service} name as base_model=...; "
            "otherwise deploy to 'merged' or 'vllm'."
        )


def require_sdk(module: str, what: str) -> None:
    """DeployError unless the target's SDK (`module`) imports; `what` names it in the message."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as e:
        raise DeployError(f"{what} is not installed: pip install 'art-pipeline[pipeline]'") from e


class Deployment(BaseModel):
    """Where a deployed step answers. ART's `DeploymentResult.inference_model_name` and `LoRADeploymentJob`
    (status, job_id, model_name, failure_reason) map onto these fields."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    target: Target
    step: int
    model_name: str = Field(description="Pass this as `model=` to the endpoint's chat API.")
    endpoint: str | None = Field(None, description="OpenAI-compatible base URL; None for `merged` (files to serve).")
    status: Status = Field(
        description="ready/serving: answers now; saved: files written; queued/running: the "
        "service is still loading it; offline: logged to an offline W&B run, to sync; stopped: "
        "a vllm deployment's server was stopped"
    )
    export_uri: str = Field(description="The adapter export with its model card in storage (kept on failure).")
    uri: str | None = Field(None, description="What the target holds: merged folder, W&B artifact, Together archive.")
    job_id: str | None = None
    failure_reason: str | None = None
    message: str = ""

    _server: Any = PrivateAttr(default=None)

    @property
    def inference_model_name(self) -> str:
        """ART's name for `model_name` (art.utils.deployment.DeploymentResult)."""
        return self.model_name

    def stop(self) -> None:
        """Stop the vLLM server a `vllm` deployment started (nothing to stop for the other targets)."""
        if self._server is not None:
            self._server.stop()
            self._server = None
            self.status = "stopped"
