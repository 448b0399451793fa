"""One inference replica: a vLLM server of ours for a base model, with runtime LoRA loading, that fetches
each adapter from the run's storage (S3) by itself. Runs on a GPU node of a cluster, or as a Ray actor.

From a shell (runs until Ctrl-C or SIGTERM; the key comes from ART_INFERENCE_API_KEY):

    ART_INFERENCE_API_KEY=... python -m art_core.replica --base-model /models/Qwen2.5-7B-Instruct \\
        --host 0.0.0.0 --port 8000 --max-lora-rank 16

A run then lists it in `scale.inference_urls` ("http://NODE:8000/v1"). Because the replica does not
share the trainer's files, each step's adapter reaches it as a storage URL (art_core.adapters.adapter_source)
which the server's middleware copies locally before vLLM loads it; S3 credentials come from the
replica's own environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for MinIO or moto).

As Ray actors (art_core.fanout starts them for `scale.rollouts_on = "ray"`):

    actor = ray.remote(ReplicaActor).options(num_gpus=1).remote("/models/tiny", 16, {"api_key": key})
    base_url, base_name = ray.get(actor.address.remote())
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any


def start_replica(
    base_model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    max_lora_rank: int = 8,
    api_key: str | None = None,
    **overrides: Any,
):
    """Start a replica and wait until it answers; returns the started VLLMServer.

    A host other than loopback needs an API key: a replica open to the network without one is refused.
    """
    from art_core.inference.server import LOOPBACK_HOSTS, VLLMServer
    from art_core.serving import server_config

    if host not in LOOPBACK_HOSTS and not api_key:
        raise ValueError(f"a replica listening on {host} must have an API key: set ART_INFERENCE_API_KEY")
    fields = {"host": host, "port": port, "api_key": api_key, "allow_remote": host not in LOOPBACK_HOSTS, **overrides}
    server = VLLMServer(server_config(base_model, max_lora_rank=max_lora_rank, overrides=fields))
    return server.start()


class ReplicaActor:
    """A Ray actor holding one replica; the server dies with the actor's process (SIGKILL included)."""

    def __init__(self, base_model: str, max_lora_rank: int, overrides: dict[str, Any]) -> None:
        self.base_model, self.overrides = base_model, dict(overrides)
        self.server = start_replica(base_model, max_lora_rank=max_lora_rank, **self.overrides)

    def address(self) -> tuple[str, str]:
        """(base URL, the base model's served name)."""
        return self.server.base_url, self.server.served_model_name

    def widen(self, max_lora_rank: int) -> tuple[str, str]:
        """Restart wider when adapters of `max_lora_rank` do not fit, or restart if it died (same port, key)."""
        from art_core.serving import keep_serving

        keep_serving(self.server, max_lora_rank)
        return self.address()

    def stop(self) -> None:
        self.server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Serve a base model for rollouts, loading each step's adapter from storage."
    )
    p.add_argument(
        "--base-model", required=True, help="model folder (or hub id) the run's LoRA adapters are trained on"
    )
    p.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept other machines (needs ART_INFERENCE_API_KEY)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-lora-rank", type=int, default=16, help="the largest LoRA rank the run trains")
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="share of the GPU for vLLM (default: 0.6, leaving room for a trainer on the same GPU)",
    )
    args = p.parse_args(argv)
    overrides: dict[str, Any] = {}
    if args.gpu_memory_utilization is not None:
        overrides["gpu_memory_utilization"] = args.gpu_memory_utilization
    key = os.environ.get("ART_INFERENCE_API_KEY")
    if not key:  # a key the runs know: they authenticate with the same variable (RunConfig.scale.inference_urls)
        print("error: set ART_INFERENCE_API_KEY to the key runs will use for this replica", file=sys.stderr)
        return 2
    try:
        server = start_replica(
            args.base_model, host=args.host, port=args.port, max_lora_rank=args.max_lora_rank, api_key=key, **overrides
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"replica of {args.base_model} at {server.base_url} (pid {server.pid}, log {server.log_path})", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(5.0):
            if not server.is_alive():
                print(f"the vLLM server died; its log:\n{server.describe_log()}", file=sys.stderr, flush=True)
                return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
