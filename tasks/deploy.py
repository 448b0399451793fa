"""Prefect tasks: export a step's adapter with a model card, serve a step with vLLM, deploy it to a target.

None is cached: an export is cheap and should reflect the metrics recorded so far, a served endpoint
is a live process, and a deployment changes a service. Keys never travel as task parameters: deploy_step
reads the named Prefect Secret block (or art_core reads the environment) inside the task.
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from art_core.coroutines import run_sync
from art_core.deploy import Deployment, deploy_model
from art_core.deploy import export_adapter as export_adapter_to_storage
from art_core.deploy import serve_adapter as start_adapter_server
from art_pipeline.tasks.specs import ModelRef


@task(name="export_adapter", task_run_name="export step {step}", cache_policy=NO_CACHE, persist_result=False)
def export_adapter(ref: ModelRef, step: int, destination: str | None = None) -> str:
    """Copy step `step`'s adapter and a model card to storage; returns the export's URI."""
    uri = export_adapter_to_storage(ref.storage(), ref.project, ref.model, step, ref.base_model, destination)
    get_run_logger().info("exported %s step %d with its model card to %s", ref.model, step, uri)
    return uri


@task(name="serve_adapter", task_run_name="serve step {step}", cache_policy=NO_CACHE, persist_result=False)
def serve_adapter(ref: ModelRef, step: int, port: int = 0, api_key: str | None = None):
    """Start a vLLM server of its own with step `step`'s adapter answering to the model's name (art_core.deploy.
    serve_adapter); returns the running server."""
    server = start_adapter_server(
        ref.storage(), ref.project, ref.model, step, ref.base_model, port=port, api_key=api_key
    )
    get_run_logger().info("serving %s (step %d) at %s", ref.model, step, server.base_url)
    return server


def secret_value(block: str | None) -> str | None:
    """The value of Prefect Secret block `block` (None: let art_core read the environment)."""
    if not block:
        return None
    from prefect.blocks.system import Secret

    try:
        return Secret.load(block).get()
    except ValueError as e:  # Prefect's "Unable to find block document named ..."
        raise ValueError(
            f"no Prefect Secret block named {block!r}: create it in the UI (Blocks > Secret) or with "
            f"`Secret(value=...).save({block!r})`, or leave api_key_block empty to use the environment"
        ) from e


@task(
    name="deploy_step", task_run_name="deploy step {step} to {deploy_to}", cache_policy=NO_CACHE, persist_result=False
)
def deploy_step(
    ref: ModelRef,
    step: int,
    deploy_to: str,
    served_base_model: str | None = None,
    upload_to: str | None = None,
    api_key_block: str | None = None,
    wait_for_completion: bool = True,
    port: int = 0,
    api_key: str | None = None,
) -> Deployment:
    """art_core.deploy.deploy_model for one stored step; the key comes from `api_key_block` or the environment
    (`api_key` is for our own vLLM server's key, read by the flow from its settings)."""
    key = secret_value(api_key_block) or api_key
    deployment = run_sync(
        deploy_model(
            deploy_to,
            ref,
            step,
            wait_for_completion=wait_for_completion,
            base_model=served_base_model,
            api_key=key,
            upload_to=upload_to,
            port=port,
        )
    )
    get_run_logger().info("deployed %s step %d to %s: %s", ref.model, step, deploy_to, deployment.message)
    return deployment
