"""The deploy flow: export the chosen step's adapter with a model card, and deploy it where users serve.

    deploy_flow(DeployConfig(run=run_config))                            # promoted (else latest) step -> exports/
    deploy_flow(DeployConfig(run=run_config, deploy_to="merged"))        # + base and adapter merged, safetensors
    deploy_flow(DeployConfig(run=run_config, deploy_to="together", served_base_model="Qwen/Qwen2.5-72B-Instruct",
                             api_key_block="together-api-key"))           # Together's LoRA serving
    deploy_flow(DeployConfig(run=run_config, deploy_to="vllm", serve_minutes=60))   # our own vLLM endpoint

`deploy_to` is a form field in the UI (art_core.deploy.deploy_model does the work). Keys come from the
Prefect Secret block named in `api_key_block`, else from the worker's environment; they are never flow
parameters, results or artifacts. The vLLM endpoint started here lives as long as the flow run
(serve_minutes); for a long-lived one run `python -m art_core.deploy.serve ...` (printed by this flow).
"""

from __future__ import annotations

import time

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel

from art_core.deploy import read_promoted
from art_core.settings import get_settings
from art_pipeline.flows.config import DeployConfig, DeployTarget
from art_pipeline.flows.lifetime import guard_temporary_server
from art_pipeline.flows.overrides import warn_if_config_replaced
from art_pipeline.flows.preflight import preflight
from art_pipeline.flows.reporting import artifact_key
from art_pipeline.flows.train import refs
from art_pipeline.tasks import export_adapter, run_sync
from art_pipeline.tasks.deploy import deploy_step
from art_pipeline.tasks.specs import ModelRef


class DeploySummary(BaseModel):
    step: int
    export_uri: str | None = None
    endpoint: str | None = None
    serve_command: str
    target: str | None = None
    model_name: str | None = None
    status: str | None = None
    location: str | None = None
    message: str = ""


def deploy_to_target(ref: ModelRef, step: int, target: DeployTarget, serve_minutes: float = 0.0, port: int = 0):
    """Deploy `step` to `target.deploy_to` (the deploy flow and the retrain flow's promotion both call this);
    a vLLM endpoint is checked to answer, kept up `serve_minutes`, then stopped. Returns the Deployment."""
    key = get_settings().inference_api_key if target.deploy_to == "vllm" else None
    deployment = deploy_step(
        ref,
        step,
        target.deploy_to,
        target.served_base_model,
        target.upload_to,
        target.api_key_block,
        target.wait_for_completion,
        port,
        key.get_secret_value() if key else None,
    )
    if target.deploy_to == "vllm":
        try:
            server = deployment._server
            reply = run_sync(_ask(deployment.endpoint, server.api_key, deployment.model_name))
            print(f"serving {deployment.model_name} (step {step}) at {deployment.endpoint}; it answered {reply!r}")
            time.sleep(serve_minutes * 60)
        finally:
            deployment.stop()
        deployment.message = (
            f"served {deployment.model_name} at {deployment.endpoint} for {serve_minutes:g} min, then stopped"
        )
    return deployment


@flow(name="deploy", log_prints=True)
def deploy_flow(config: DeployConfig) -> DeploySummary:
    """Deploy one step: the one asked for, else the promoted one, else the latest."""
    warn_if_config_replaced()  # a run given a whole new config, not a few fields: say what fell back
    guard_temporary_server()  # a temporary Prefect server dies with this process, SIGKILL included
    config = preflight(config)  # base model, environment: refused here, before anything is exported
    run = config.run
    ref, _ = refs(run)
    storage = ref.storage()
    promoted = read_promoted(storage, run.project, run.model)
    step = config.step or (promoted or {}).get("step") or ref.store().latest_step()
    if not step:
        raise ValueError(
            f"{run.project}/{run.model} has no trained step under {storage.root}: run the train flow first"
        )
    command = (
        f"python -m art_core.deploy.serve --storage {run.storage_url} --project {run.project} "
        f"--model {run.model} --step {step}"
    )
    summary = DeploySummary(step=step, serve_command=command)
    target = config.model_copy(update={"deploy_to": config.deploy_to or ("vllm" if config.serve else None)})
    if target.deploy_to:
        d = deploy_to_target(ref, step, target, config.serve_minutes, config.port)
        shown = d.model_dump(include={"export_uri", "endpoint", "target", "model_name", "status", "message"})
        summary = summary.model_copy(update={**shown, "location": d.uri})
        print(f"deployed step {step} to {d.target}: {d.message}")
    elif config.export:
        summary.export_uri = export_adapter(ref, step)
        print(f"exported step {step} with its model card to {summary.export_uri}")
    print(f"to serve it for good: {command}")
    # Where it went, in the UI next to the run (not only in its logs): target, step, endpoint, model name.
    lines = [f"# Deployed {run.model} step {step}" + (f" to {summary.target}" if summary.target else ""), ""]
    if summary.target:
        lines += [
            "| target | step | endpoint | model name | status | location |",
            "|---|---|---|---|---|---|",
            f"| {summary.target} | {step} | {summary.endpoint or '-'} | `{summary.model_name}` | {summary.status} "
            f"| `{summary.location or summary.export_uri}` |",
            "",
            summary.message,
            "",
        ]
    if summary.export_uri:
        lines.append(f"- exported with its model card to `{summary.export_uri}`")
    lines.append(f"- serve it for good: `{command}`")
    create_markdown_artifact(
        key=artifact_key(run.project, run.model, "deploy"),
        markdown="\n".join(lines) + "\n",
        description=f"{run.model} step {step}: {summary.target or 'export'} "
        f"{summary.endpoint or summary.location or summary.export_uri or ''}",
    )
    return summary


async def _ask(base_url: str, api_key: str | None, model: str) -> str:
    """One short chat call: the endpoint is only reported once it has answered."""
    from art_core.inference.server import openai_client

    async with openai_client(base_url, api_key) as client:
        r = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
    return r.choices[0].message.content or ""
