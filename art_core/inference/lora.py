"""LoRA adapters in a running vLLM server: one per training step, served as `name@step`, and `name` = latest.

The server must run with `--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` (VLLMServer does
both). Loading is a POST to /v1/load_lora_adapter and takes about 10 ms on the tiny model. `load_adapter`
is the one loader: `AdapterManager` (LocalBackend's, with memory) and art_core.adapters.load_checkpoint
(the pipeline's, one step at a time) both load through it, so a refusal reads the same from either door.

    >>> adapters = AdapterManager(server.root_url, server.headers(), keep_steps=3)        # doctest: +SKIP
    >>> await adapters.load_step("agent", 1, "/art/demo/models/agent/checkpoints/0001")  # doctest: +SKIP
    >>> adapters.served()                                                                # doctest: +SKIP
    ['agent@1', 'agent']

Step 0 is the base model. So that `name@0` and `name` can be asked for before any training (and so
every step is served the same way), step 0 is served as a zero adapter (`write_zero_adapter`): its
LoRA B matrices are zero, so it answers exactly as the base model.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
from typing import Iterable

from art_core.inference import http_client
from art_core.naming import parse_step_name, step_name  # the naming rule (re-exported by art_core.inference)

# Qwen2/Llama-style projection names; a zero adapter targets whichever of these the base model has.
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class AdapterError(RuntimeError):
    """The server refused to load or unload an adapter; the message carries its answer and what to do."""


# ---- the zero adapter (step 0) ---------------------------------------------------------------------
def _safetensors_shapes(path: str) -> dict[str, list[int]]:
    """Tensor names and shapes from a .safetensors header (no tensor data read, no torch needed)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def write_zero_adapter(
    base_model: str, out_dir: str, rank: int = 1, target_modules: Iterable[str] = DEFAULT_TARGET_MODULES
) -> str:
    """Write a peft LoRA adapter whose B matrices are zero (it changes nothing) for the local `base_model`.

    >>> write_zero_adapter("/models/tiny", "/tmp/tiny-step0")   # doctest: +SKIP
    '/tmp/tiny-step0'
    """
    import numpy as np
    from safetensors.numpy import save_file

    files = (
        [f for f in sorted(os.listdir(base_model)) if f.endswith(".safetensors")] if os.path.isdir(base_model) else []
    )
    if not files:
        raise FileNotFoundError(
            f"no .safetensors weights in {base_model!r}: step 0 needs the base model as a local directory"
        )
    targets = set(target_modules)
    tensors: dict[str, np.ndarray] = {}
    found: set[str] = set()
    for fname in files:
        for key, shape in _safetensors_shapes(os.path.join(base_model, fname)).items():
            parts = key.split(".")
            if len(parts) < 3 or parts[-1] != "weight" or parts[-2] not in targets or len(shape) != 2:
                continue
            module = ".".join(parts[:-1])
            out_features, in_features = shape
            tensors[f"base_model.model.{module}.lora_A.weight"] = np.zeros((rank, in_features), np.float32)
            tensors[f"base_model.model.{module}.lora_B.weight"] = np.zeros((out_features, rank), np.float32)
            found.add(parts[-2])
    if not tensors:
        raise ValueError(f"none of the target modules {sorted(targets)} found in {base_model!r}")
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": os.path.abspath(base_model),
        "r": rank,
        "lora_alpha": rank,
        "lora_dropout": 0.0,
        "target_modules": sorted(found),
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
    }
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return out_dir


# ---- loading and unloading: the one loader both doors use ---------------------------------------------
# What a replica that does not share our files is asked to load for step 0: it builds the zero adapter of
# its own base model (art_core.inference.middleware resolves it, with storage URLs, inside the server).
ZERO_ADAPTER_SOURCE = "art:zero-adapter"


def _refusal(action: str, root_url: str, status: int, text: str) -> AdapterError:
    """The one error for a server's refusal: what was refused, the server's answer, and what to do about it."""
    hint = ""
    if "max_lora_rank" in text or "greater than" in text:
        hint = " The adapter's rank is larger than the server's --max-lora-rank: start it with a larger one."
    elif status == 404:
        hint = " The server needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True."
    return AdapterError(f"the server at {root_url} refused to {action}: {status} {text[:300]}.{hint}")


def load_adapter(root_url: str, headers: dict[str, str], name: str, source: str) -> None:
    """Serve the adapter at `source` as `name` (replacing what `name` served before): one POST, about 10 ms.

    `source` is a local adapter folder, or for a server that does not share our files a storage URL or
    ZERO_ADAPTER_SOURCE (the server fetches it). Raises AdapterError with the server's answer and a hint.

    >>> load_adapter("http://127.0.0.1:8000", {}, "agent@2", "/art/demo/models/agent/checkpoints/0002")  # doctest: +SKIP
    """
    if "://" not in source and source != ZERO_ADAPTER_SOURCE:  # a local folder: check it before the server does
        if not os.path.exists(os.path.join(source, "adapter_config.json")):
            raise AdapterError(f"{source!r} holds no adapter_config.json: it is not a peft LoRA adapter directory")
        source = os.path.abspath(source)
    r = http_client.post(
        f"{root_url.rstrip('/')}/v1/load_lora_adapter",
        json={"lora_name": name, "lora_path": source, "load_inplace": True},  # new or already served: both work
        headers=headers,
        timeout=300.0,
    )
    if r.status_code >= 400:
        raise _refusal(f"load adapter {name!r} from {source}", root_url, r.status_code, r.text)


def unload_adapter(root_url: str, headers: dict[str, str], name: str) -> bool:
    """Stop serving adapter `name`; False if the server did not serve it."""
    r = http_client.post(
        f"{root_url.rstrip('/')}/v1/unload_lora_adapter", json={"lora_name": name}, headers=headers, timeout=300.0
    )
    if r.status_code == 404:
        return False
    if r.status_code >= 400:
        raise _refusal(f"unload adapter {name!r}", root_url, r.status_code, r.text)
    return True


class AdapterManager:
    """The adapters of one server, with memory: aliases the latest step, evicts old steps, and loads them all
    again into a restarted server (which forgot them). LocalBackend keeps one per server."""

    def __init__(self, root_url: str, headers: dict[str, str] | None = None, keep_steps: int = 3) -> None:
        if keep_steps < 1:
            raise ValueError("keep_steps must be at least 1 (the latest step is always served)")
        self.root_url = root_url.rstrip("/")
        self.headers = dict(headers or {})
        self.keep_steps = keep_steps
        self.loaded: dict[str, str] = {}  # served name -> adapter directory, in load order
        self.server_restarts = 0  # the server's restart count when these were loaded (LocalBackend compares)

    async def load(self, name: str, path: str) -> None:
        """Serve the adapter at `path` (a local directory) as `name`, replacing what `name` served before."""
        await asyncio.to_thread(load_adapter, self.root_url, self.headers, name, path)
        self.loaded.pop(name, None)
        self.loaded[name] = os.path.abspath(path)

    async def unload(self, name: str) -> bool:
        """Stop serving `name`; False if it was not served."""
        self.loaded.pop(name, None)
        return await asyncio.to_thread(unload_adapter, self.root_url, self.headers, name)

    def steps(self, name: str) -> list[int]:
        """Steps of model `name` served now, ascending."""
        return sorted(p[1] for n in self.loaded if (p := parse_step_name(n)) and p[0] == name)

    def served(self) -> list[str]:
        return list(self.loaded)

    async def load_step(self, name: str, step: int, path: str) -> list[int]:
        """Serve `path` as `name@step`, and as `name` when no later step is loaded; unload steps beyond
        `keep_steps`. Returns the steps that were unloaded.
        """
        await self.load(step_name(name, step), path)
        latest = max(self.steps(name))
        if step >= latest:
            await self.load(name, path)
        evicted = []
        for old in self.steps(name)[: -self.keep_steps]:
            if old == step:  # an older step asked for on purpose stays until newer ones push it out
                continue
            await self.unload(step_name(name, old))
            evicted.append(old)
        return evicted

    async def reload_all(self) -> None:
        """Load every remembered adapter again (after the server restarted and forgot them)."""
        remembered = list(self.loaded.items())
        self.loaded.clear()
        for name, path in remembered:
            await self.load(name, path)
