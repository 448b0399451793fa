"""Serve a trained step behind an OpenAI-compatible vLLM server, answering to the model's name.

    server = serve_adapter(Storage("./.art"), "demo", "agent-001", step=3, base_model="./.models/tiny")
    ...                                           # openai SDK: base_url=server.base_url, model="agent-001"
    server.stop()

Or from a shell (runs until Ctrl-C):

    python -m art_core.deploy.serve --storage ./.art --project demo --model agent-001 --step 3 --port 8000
"""

from __future__ import annotations

import argparse
import time

from art_core.storage import Storage
from art_core.store import ModelStore


def serve_adapter(
    storage: Storage,
    project: str,
    name: str,
    step: int,
    base_model: str,
    port: int = 0,
    api_key: str | None = None,
    max_lora_rank: int | None = None,
):
    """Start a vLLM server (art_core.inference) with step `step`'s adapter loaded as `name`; returns it started.

    The base model answers to the same name as on every server we start (art_core.serving); the server's
    max_lora_rank follows the adapter's rank unless given.
    """
    from art_core.inference.server import VLLMServer
    from art_core.adapters import adapter_rank, local_adapter
    from art_core.serving import server_config

    store = ModelStore(storage, project, name)
    if not store.is_complete(step):
        raise FileNotFoundError(f"no complete checkpoint for step {step} at {store.checkpoint(step)}")
    local = local_adapter(store, base_model, step)
    config = server_config(
        base_model,
        max_lora_rank=max_lora_rank or adapter_rank(store, step),
        port=port,
        api_key=api_key,
        gpu_memory_utilization=None,  # serving only: vLLM takes its usual share
        weight_swap=False,  # --lora-modules needs vLLM's LoRA, which a weight-swap server (CPU's default) runs without
        extra_args=["--lora-modules", f"{name}={local}"],
    )
    return VLLMServer(config).start()


def checkpoint_to_serve(
    storage: Storage, project: str, name: str, step: int | None = None, base_model: str | None = None
) -> tuple[int, str]:
    """(step, base model) to serve for a trained model, checked before any server starts: `step` defaults to the
    latest complete checkpoint and `base_model` to model.json's. SystemExit says what to pass when one is missing."""
    store = ModelStore(storage, project, name)
    if step is None:
        step = store.latest_step()
        if step == 0:
            raise SystemExit(
                f"no checkpoints for {project}/{name} under {storage.root}: is --model or --project misspelt?"
            )
    elif not store.is_complete(step):
        raise SystemExit(f"no complete checkpoint for step {step} of {project}/{name} at {store.checkpoint(step)}")
    base = base_model or (store.read_model_json() or {}).get("base_model")
    if not base:
        raise SystemExit(f"no model.json for {project}/{name} under {storage.root}: pass --base-model")
    return step, base


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--storage", required=True, help="storage root: a folder or s3://bucket/prefix")
    p.add_argument("--project", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--step", type=int, help="default: the latest complete checkpoint")
    p.add_argument("--base-model", help="default: base_model from the model's model.json")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    storage = Storage(a.storage)
    step, base = checkpoint_to_serve(storage, a.project, a.model, a.step, a.base_model)
    server = serve_adapter(storage, a.project, a.model, step, base, port=a.port)
    print(f"serving {a.model} (step {step}) at {server.base_url}  key: {server.api_key}  (Ctrl-C stops it)")
    try:
        while server.is_alive():
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
