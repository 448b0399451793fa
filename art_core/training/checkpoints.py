"""Checkpoints: the LoRA adapter, the optimizer state and the trainer state of one step, in storage.

`checkpoints/{step:04d}/` holds, at its top level:

    adapter_model.safetensors, adapter_config.json   the peft adapter; vLLM loads the folder as a LoRA
    optimizer.pt                                      AdamW state, so a resumed run continues exactly
    trainer_state.json                                step, base model, config and metrics of the step
    tokenizer.json, tokenizer_config.json, ...        the base model's tokenizer and chat template, so a
                                                      checkpoint folder is usable on its own (as in ART)
    COMPLETE                                          written last by Storage.put_dir; without it the
                                                      checkpoint does not exist for anyone

    >>> path = save_checkpoint(storage, "proj", "agent", 3, model, optimizer, {"step": 3})   # doctest: +SKIP
    >>> prune_checkpoints(storage, "proj", "agent", best_metric="val/reward")                 # doctest: +SKIP
    [1, 2]
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from typing import Any

from art_core.storage import CHECKPOINT_MARKER, Storage
from art_core.store import ModelStore

log = logging.getLogger(__name__)

OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "trainer_state.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def save_checkpoint(
    storage: Storage,
    project: str,
    name: str,
    step: int,
    model: Any,
    optimizer: Any,
    state: dict[str, Any],
    tokenizer: Any = None,
) -> str:
    """Write adapter + optimizer + trainer state (+ the tokenizer's files) as checkpoint `step`; returns its path."""
    import torch

    path = ModelStore(storage, project, name).checkpoint(step)
    with tempfile.TemporaryDirectory(prefix="art-ckpt-") as tmp:
        # peft writes adapter_config.json + adapter_model.safetensors at the top; only the trained adapter
        # (a KL reference adapter loaded beside it would otherwise be saved into a subfolder of every checkpoint).
        model.save_pretrained(tmp, selected_adapters=["default"])
        torch.save(optimizer.state_dict(), os.path.join(tmp, OPTIMIZER_FILE))
        with open(os.path.join(tmp, STATE_FILE), "w") as f:
            json.dump(state, f, indent=2, sort_keys=True, default=str)
        if tokenizer is not None:
            # Before put_dir, which writes the COMPLETE marker last: a complete checkpoint always has them.
            tokenizer.save_pretrained(tmp)
        if storage.exists(path):
            # A rerun of this step (or a half-written leftover): take its marker away before replacing files.
            storage.delete(storage.join(path, CHECKPOINT_MARKER))
        storage.put_dir(tmp, path)
    return path


def load_checkpoint(storage: Storage, project: str, name: str, step: int, model: Any, optimizer: Any) -> dict[str, Any]:
    """Load checkpoint `step` into a peft `model` and its `optimizer`; returns the trainer state."""
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    store = ModelStore(storage, project, name)
    path = store.checkpoint(step)
    if not store.is_complete(step):
        have = store.checkpoint_steps()
        raise FileNotFoundError(
            f"no complete checkpoint for step {step} at {path} (complete steps: {have or 'none'}). Train from the "
            "latest complete step (backend.get_step), or from step 0 to start over."
        )
    with tempfile.TemporaryDirectory(prefix="art-ckpt-") as tmp:
        local = storage.get_dir(path, tmp)
        weights = load_file(os.path.join(local, ADAPTER_WEIGHTS))
        result = set_peft_model_state_dict(model, weights)
        unexpected = getattr(result, "unexpected_keys", None)
        if unexpected:
            raise ValueError(f"checkpoint {path} does not fit this LoRA config (unexpected keys {unexpected[:3]}...)")
        device = next(p.device for p in model.parameters())
        optimizer.load_state_dict(torch.load(os.path.join(local, OPTIMIZER_FILE), map_location=device))
        with open(os.path.join(local, STATE_FILE)) as f:
            return json.load(f)


def _metric(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key, (record.get("metrics") or {}).get(key))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def prune_checkpoints(storage: Storage, project: str, name: str, best_metric: str = "val/reward") -> list[int]:
    """Delete every complete checkpoint except the latest and the best by `best_metric`; returns deleted steps.

    The best is the highest value of `best_metric` among history.jsonl records ({"step": N, metric: v, ...},
    flat or under "metrics") whose step still has a checkpoint; a tie goes to the later step. With no such
    record only the latest is kept, and a warning says so. Higher is better.
    """
    store = ModelStore(storage, project, name)
    steps = store.checkpoint_steps()
    if len(steps) <= 1:
        return []
    latest = steps[-1]
    history = store.read_history()
    scores: dict[int, float] = {}
    for record in history:
        value, step = _metric(record, best_metric), record.get("step")
        if value is not None and isinstance(step, int) and step in steps:
            scores[step] = value  # a later record for the same step wins
    keep = {latest}
    if scores:
        keep.add(max(scores, key=lambda s: (scores[s], s)))
    else:
        log.warning(
            "no %r in history.jsonl for any checkpoint of %s/%s: keeping only the latest", best_metric, project, name
        )
    deleted = []
    for step in steps:
        if step in keep:
            continue
        path = store.checkpoint(step)
        storage.delete(storage.join(path, CHECKPOINT_MARKER))  # marker first: a crash leaves an ignored dir
        storage.delete(path)
        deleted.append(step)
    return deleted
