"""Prefect tasks: export a step's adapter with a model card, and serve a step with vLLM.

Neither is cached: an export is cheap and should reflect the metrics recorded so far, and a served
endpoint is a live process.
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from art_core.deploy import export_adapter as export_adapter_to_storage
from art_core.deploy import serve_adapter
from tasks.specs import ModelRef


@task(name="export_adapter", task_run_name="export step {step}", cache_policy=NO_CACHE, persist_result=False)
def export_adapter(ref: ModelRef, step: int, destination: str | None = None) -> str:
    """Copy step `step`'s adapter and a model card to storage; returns the export's URI."""
    uri = export_adapter_to_storage(ref.storage(), ref.project, ref.model, step, ref.base_model, destination)
    get_run_logger().info("exported %s step %d with its model card to %s", ref.model, step, uri)
    return uri


@task(name="serve_step", task_run_name="serve step {step}", cache_policy=NO_CACHE, persist_result=False)
def serve_step(ref: ModelRef, step: int, port: int = 0, api_key: str | None = None):
    """Start a vLLM server with step `step` answering to the model's name; returns the running server."""
    server = serve_adapter(ref.storage(), ref.project, ref.model, step, ref.base_model, port=port, api_key=api_key)
    get_run_logger().info("serving %s (step %d) at %s", ref.model, step, server.base_url)
    return server
