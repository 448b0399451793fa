"""`deploy_model`: put a trained step where users serve it, with ART's names.

    deployment = await deploy_model(deploy_to="together", model=model, step=step, wait_for_completion=True)
    deployment.endpoint, deployment.model_name, deployment.status
    # 'https://api.together.ai/v1', 'you/demo-agent-001-3', 'ready'

Targets (`deploy_to`):
- `vllm`: our own vLLM server with the step's adapter loaded under the model's name (stop it with
  `deployment.stop()`); or, given `inference_url`, a running server of ours, the step loaded as `name@step`.
- `merged`: the adapter merged into the base weights, saved as safetensors next to the export
  (`exports/{step:04d}-merged/`): any vLLM or transformers loads it, no LoRA support needed.
- `together`: the adapter archived to S3, handed to Together's upload API (its official SDK) by a
  presigned URL, and the upload job polled until ready or failed (art_core.deploy.together).
- `wandb`: the adapter logged as a W&B `lora` artifact `{project}/{name}:step{N}`, served by W&B
  Inference as `wandb-artifact:///{entity}/{project}/{name}:step{N}` (art_core.deploy.wandb_lora).

Every target first checks what it can without uploading anything (the step, the base model the
service serves, the key), then exports the adapter with its model card to storage; a target that
fails after that raises DeployError naming the export, which stays as it is.
Keys come from `api_key` or the environment (TOGETHER_API_KEY, WANDB_API_KEY); they are never stored,
returned or logged.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any


from art_core.deploy.result import TARGETS, Deployment, DeployError, Target
from art_core.storage import Storage
from art_core.store import ModelStore


def _identity(model: Any, storage: Storage | str | None) -> tuple[str, str, str, Storage]:
    """(project, name, base_model, storage) of a TrainableModel or a ModelRef."""
    is_ref = hasattr(model, "storage_url")  # a ModelRef names the model `model`, a TrainableModel `name`
    name = getattr(model, "model" if is_ref else "name", None)
    project, base = getattr(model, "project", None), getattr(model, "base_model", None)
    if not (isinstance(name, str) and project and base):
        raise TypeError(f"model must be a TrainableModel or a ModelRef (project, name, base_model), got {model!r}")
    if storage is None:
        if hasattr(model, "store"):  # a ModelRef's storage_url; a Model's backend storage, else ART_STORAGE_ROOT
            storage = model.store().storage
        else:
            from art_core.settings import get_settings

            storage = get_settings().storage_root
    return project, name, base, storage if isinstance(storage, Storage) else Storage(storage)


def _check_step(storage: Storage, project: str, name: str, step: int | None) -> int:
    store = ModelStore(storage, project, name)
    have = store.checkpoint_steps()
    if step is None:
        if not have:
            raise DeployError(f"{project}/{name} has no trained step under {storage.root}: train it first")
        return have[-1]
    if isinstance(step, bool) or not isinstance(step, int) or step < 1 or not store.is_complete(step):
        raise DeployError(
            f"step {step!r} of {project}/{name} does not exist (no complete checkpoint at "
            f"{store.checkpoint(step) if isinstance(step, int) else store.path('checkpoints')}); "
            f"complete steps: {have or 'none'}"
        )
    return step


async def deploy_model(
    deploy_to: Target | None = None,
    model: Any = None,
    step: int | None = None,
    *,
    wait_for_completion: bool = True,
    storage: Storage | str | None = None,
    base_model: str | None = None,
    api_key: str | None = None,
    upload_to: str | None = None,
    entity: str | None = None,
    poll_interval_s: float = 15.0,
    timeout_s: float = 900.0,
    port: int = 0,
    inference_url: str | None = None,
    verbose: bool = False,
    provider: Target | None = None,
) -> Deployment:
    """Deploy step `step` (default: the latest) of `model` to `deploy_to`; returns where it answers.

    model: a TrainableModel (its backend's storage) or a ModelRef. base_model: the base's name as the
    service knows it (`Qwen/Qwen2.5-72B-Instruct`) when the model was trained from a local copy; default
    the model's own. upload_to: an s3:// prefix for Together's archive when storage is a local folder.
    inference_url: for `vllm`, a running vLLM server of ours to load the step into (api_key: its key).
    wait_for_completion: poll the service until the model is ready or failed (Together). `provider` is
    ART's newer name for `deploy_to`.

        d = await deploy_model("merged", model, step=3)       # d.uri: the merged folder, d.status 'saved'
    """
    target = deploy_to or provider
    if target not in TARGETS:
        raise ValueError(f"deploy_to={target!r} is not a target: use one of {', '.join(TARGETS)}")
    project, name, base, storage = _identity(model, storage)
    step = _check_step(storage, project, name, step)
    served_base = base_model or base

    # Everything that can be refused is refused here, before anything leaves this machine.
    if target == "together":
        from art_core.deploy import together

        key = together.preflight(served_base, api_key, storage, upload_to)
    elif target == "wandb":
        from art_core.deploy import wandb_lora

        key = wandb_lora.preflight(served_base, api_key)
    elif target == "merged":
        from art_core.deploy.merge import preflight

        preflight(base)
        key = None
    else:
        key = None

    from art_core.deploy.export import export_adapter

    export_uri = await asyncio.to_thread(export_adapter, storage, project, name, step, base)
    common = dict(target=target, step=step, export_uri=export_uri)
    if target == "vllm" and inference_url:
        from art_core import adapters, serving

        endpoint = await asyncio.to_thread(serving.discover_endpoint, inference_url, api_key)
        served = await asyncio.to_thread(
            adapters.load_checkpoint, endpoint, ModelStore(storage, project, name), base, step
        )
        return Deployment(
            model_name=served,
            endpoint=endpoint.base_url,
            status="serving",
            message=f"{endpoint.base_url} serves step {step} as {served!r}",
            **common,
        )
    if target == "vllm":
        from art_core.deploy.serve import serve_adapter

        server = await asyncio.to_thread(serve_adapter, storage, project, name, step, base, port=port, api_key=api_key)
        d = Deployment(
            model_name=name,
            endpoint=server.base_url,
            status="serving",
            message=f"vLLM serving {name} (step {step}) at {server.base_url}; deployment.stop() ends it",
            **common,
        )
        d._server = server
        return d
    if target == "merged":
        from art_core.deploy.merge import merge_adapter

        try:
            uri = await asyncio.to_thread(merge_adapter, storage, project, name, step, base)
        except Exception as e:  # out of memory, a base that does not fit the adapter, storage errors
            raise DeployError(
                f"merging step {step} into {base} failed: {e}. The adapter export is intact at {export_uri}."
            ) from e
        return Deployment(
            model_name=name,
            status="saved",
            uri=uri,
            message=(
                f"merged weights at {uri}: python -m vllm.entrypoints.openai.api_server --model <local copy> "
                f"--served-model-name {name}"
            ),
            **common,
        )
    if target == "together":
        from art_core.deploy import together

        return await together.deploy(
            storage,
            project,
            name,
            step,
            served_base,
            export_uri,
            key,
            upload_to=upload_to,
            wait=wait_for_completion,
            poll_interval_s=poll_interval_s,
            timeout_s=timeout_s,
            verbose=verbose,
        )
    from art_core.deploy import wandb_lora

    return await asyncio.to_thread(
        wandb_lora.deploy,
        storage,
        project,
        name,
        step,
        served_base,
        export_uri,
        key,
        entity=entity or os.environ.get("WANDB_ENTITY"),
        verbose=verbose,
    )
