"""The deploy flow: export the chosen step's adapter with a model card, and/or serve it with vLLM.

    deploy_flow(DeployConfig(run=run_config))                 # the promoted (else latest) step -> exports/
    deploy_flow(DeployConfig(run=run_config, serve=True, serve_minutes=60))

The endpoint started here lives as long as the flow run (serve_minutes); for a long-lived endpoint run
`python -m art_core.deploy.serve ...` (printed by this flow) under your process manager.
"""

from __future__ import annotations

import time

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel

from art_core.deploy import read_promoted
from art_core.settings import get_settings
from flows.config import DeployConfig
from flows.overrides import warn_if_config_replaced
from flows.reporting import artifact_key
from flows.lifetime import guard_temporary_server
from flows.train import refs
from tasks import export_adapter, run_sync, serve_step


class DeploySummary(BaseModel):
    step: int
    export_uri: str | None = None
    endpoint: str | None = None
    serve_command: str


@flow(name="deploy", log_prints=True)
def deploy_flow(config: DeployConfig) -> DeploySummary:
    """Deploy one step: the one asked for, else the promoted one, else the latest."""
    warn_if_config_replaced()  # a run given a whole new config, not a few fields: say what fell back
    guard_temporary_server()  # a temporary Prefect server dies with this process, SIGKILL included
    run = config.run
    ref, _ = refs(run)
    storage = ref.storage()
    promoted = read_promoted(storage, run.project, run.model)
    step = config.step or (promoted or {}).get("step") or storage.latest_checkpoint_step(run.project, run.model)
    if not step:
        raise ValueError(f"{run.project}/{run.model} has no trained step under {storage.root}: run the train flow first")
    command = (f"python -m art_core.deploy.serve --storage {run.storage_url} --project {run.project} "
               f"--model {run.model} --step {step}")  # fmt: skip
    summary = DeploySummary(step=step, serve_command=command)
    if config.export:
        summary.export_uri = export_adapter(ref, step)
        print(f"exported step {step} with its model card to {summary.export_uri}")
    if config.serve:
        key = get_settings().inference_api_key
        server = serve_step(ref, step, config.port, key.get_secret_value() if key else None)
        try:
            reply = run_sync(_ask(server.base_url, server.api_key, run.model))
            summary.endpoint = server.base_url
            print(f"serving {run.model} (step {step}) at {server.base_url} as model={run.model!r}; it answered {reply!r}")
            time.sleep(config.serve_minutes * 60)
        finally:
            server.stop()
    print(f"to serve it for good: {command}")
    # Where the export went and how to serve it, in the UI next to the run (not only in its logs).
    lines = [f"# Deployed {run.model} step {step}", ""]
    if summary.export_uri:
        lines.append(f"- exported with its model card to `{summary.export_uri}`")
    if summary.endpoint:
        lines.append(f"- served at {summary.endpoint} as model `{run.model}` for {config.serve_minutes} min")
    lines.append(f"- serve it for good: `{command}`")
    create_markdown_artifact(key=artifact_key(run.project, run.model, "deploy"), markdown="\n".join(lines) + "\n",
                             description=f"{run.model} step {step}: {summary.export_uri or 'not exported'}")  # fmt: skip
    return summary


async def _ask(base_url: str, api_key: str | None, model: str) -> str:
    """One short chat call: the endpoint is only reported once it has answered."""
    from art_core.inference.server import openai_client

    async with openai_client(base_url, api_key) as client:
        r = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    return r.choices[0].message.content or ""
