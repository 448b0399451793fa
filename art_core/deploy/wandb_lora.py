"""Deploy a step's LoRA adapter to W&B: a `lora` artifact that W&B Inference serves for some base models.

The artifact is named as ART names it: `{project}/{name}`, version aliases `step{N}` and `latest`, with
the base model in its metadata (`wandb.base_model`, which W&B Inference reads). W&B Inference then
answers to `wandb-artifact:///{entity}/{project}/{name}:step{N}` at https://api.inference.wandb.ai/v1.

    d = await deploy_model("wandb", model, step=3, base_model="Qwen/Qwen2.5-14B-Instruct")
    d.model_name   # 'wandb-artifact:///my-team/demo/agent-001:step3'

WANDB_API_KEY is read from the environment unless given; with WANDB_MODE=offline no key is needed and
the artifact stays in the offline run (status "offline"; `wandb sync` uploads it later).
"""

from __future__ import annotations

import os
import tempfile


from art_core.deploy.result import Deployment, DeployError, refuse_unserved_base, require_sdk
from art_core.storage import Storage

# Base models W&B Inference serves LoRA adapters for (the list ART checks, art.utils.deployment.wandb).
SUPPORTED_BASE_MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "OpenPipe/Qwen3-14B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
)
INFERENCE_URL = "https://api.inference.wandb.ai/v1"
STORAGE_REGION = "coreweave-us"  # where W&B Inference loads adapters from


def _offline() -> bool:
    return os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun")


def preflight(base_model: str, api_key: str | None) -> str | None:
    """Refuse a base W&B does not serve and a missing key, before anything is logged; returns the key."""
    refuse_unserved_base("W&B Inference", base_model, SUPPORTED_BASE_MODELS)
    key = api_key or os.environ.get("WANDB_API_KEY")
    if not key and not _offline():
        raise DeployError(
            "WANDB_API_KEY is not set: export it (or store it in the Prefect Secret block the deploy "
            "flow names), or set WANDB_MODE=offline to log the artifact locally"
        )
    require_sdk("wandb", "wandb")
    return key


def served_name(entity: str, project: str, name: str, step: int) -> str:
    """The model name W&B Inference answers to for this artifact version."""
    return f"wandb-artifact:///{entity}/{project}/{name}:step{step}"


def deploy(
    storage: Storage,
    project: str,
    name: str,
    step: int,
    base_model: str,
    export_uri: str,
    api_key: str | None,
    entity: str | None = None,
    verbose: bool = False,
) -> Deployment:
    """Log the export as artifact `{project}/{name}:step{step}`; returns the deployment."""
    import wandb

    offline = _offline()
    kept = f"The adapter export is intact at {export_uri}"
    with tempfile.TemporaryDirectory(prefix="art-wandb-") as tmp:
        local = storage.get_dir(export_uri, os.path.join(tmp, "export"))
        settings = wandb.Settings(api_key=api_key) if api_key and not offline else None
        try:
            run = wandb.init(
                project=project,
                entity=entity,
                job_type="deploy",
                name=f"deploy-{name}-step{step}",
                settings=settings,
                reinit="create_new",
                # Read now: wandb settles its directory once per process, so a WANDB_DIR set later is ignored.
                dir=os.environ.get("WANDB_DIR") or None,
            )
        except Exception as e:
            raise DeployError(f"could not start a W&B run in project {project!r}: {e}. {kept}.") from e
        try:
            artifact = wandb.Artifact(
                name,
                type="lora",
                storage_region=STORAGE_REGION,
                metadata={
                    "wandb.base_model": base_model,
                    "project": project,
                    "model": name,
                    "step": step,
                    "export_uri": export_uri,
                },
            )
            artifact.add_dir(local)
            logged = run.log_artifact(artifact, aliases=[f"step{step}", "latest"])
            if not offline:
                logged.wait()
            entity = entity or (None if offline else run.entity)
            run_dir = run.dir
        except Exception as e:
            raise DeployError(f"logging the W&B artifact {project}/{name}:step{step} failed: {e}. {kept}.") from e
        finally:
            run.finish()
    model_name = served_name(entity or "<entity>", project, name, step)
    uri = f"{project}/{name}:step{step}"
    if offline:
        message = (
            f"artifact {uri} logged to the offline run in {os.path.dirname(run_dir)}; `wandb sync` it, then "
            f"W&B Inference serves it as {model_name}"
        )
    else:
        message = f"W&B Inference serves {uri} as {model_name} at {INFERENCE_URL}"
    if verbose:
        print(message)
    return Deployment(
        target="wandb",
        step=step,
        model_name=model_name,
        endpoint=INFERENCE_URL,
        status="offline" if offline else "ready",
        export_uri=export_uri,
        uri=uri,
        message=message,
    )
