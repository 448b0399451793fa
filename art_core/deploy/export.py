"""Export a trained step's LoRA adapter, with a model card, to `{model}/exports/{step:04d}/` in storage.

Only the adapter travels (adapter_config.json, adapter weights, tokenizer files if the trainer saved
them); optimizer and trainer state stay with the checkpoint. The COMPLETE marker is written last, so
a half-finished export is never taken for a finished one.

    >>> export_adapter(Storage("./.art"), "demo", "agent-001", step=3, base_model="/models/tiny")  # doctest: +SKIP
    '/abs/.art/demo/models/agent-001/exports/0003'
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from art_core.storage import CHECKPOINT_MARKER, Storage
from art_core.store import ModelStore, step_dir

# Trainer state that must not ship with an exported adapter.
_STATE_PREFIXES = ("optimizer", "scheduler", "rng_state", "trainer_state", "training_args", CHECKPOINT_MARKER)


def model_card(
    *,
    project: str,
    name: str,
    step: int,
    base_model: str,
    metrics: dict[str, Any],
    evals: list[dict[str, Any]] | None = None,
    lora_rank: int = 8,
) -> str:
    """The README.md that goes with an exported adapter: what it is, how it was measured, how to serve it."""
    from art_core.inference.server import SERVER_KEEP_ALIVE_S
    from art_core.serving import server_lora_rank

    lines = [
        f"# {name} (step {step})",
        "",
        f"A LoRA adapter trained with GRPO by art-pipeline (project `{project}`) on top of `{base_model}`.",
        f"Exported {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        "## Metrics at this step",
        "",
    ]
    lines += [f"- `{k}`: {v:.4g}" if isinstance(v, float) else f"- `{k}`: {v}" for k, v in sorted(metrics.items())]
    if not metrics:
        lines.append("- none recorded")
    for ev in evals or []:
        passes = ", ".join(
            f"pass^{k} {v:.3f}" for k, v in sorted(ev.get("pass_k", {}).items(), key=lambda kv: int(kv[0]))
        )
        lines.append(
            f"- eval on `{ev['split']}` ({ev['scenarios']} scenarios x {ev['trials']}): reward {ev['reward']:.3f}"
            + (f"; {passes}" if passes else "")
        )
    lines += [
        "",
        "## Serve it",
        "",
        "```bash",
        f"VLLM_HTTP_TIMEOUT_KEEP_ALIVE={SERVER_KEEP_ALIVE_S} python -m vllm.entrypoints.openai.api_server \\",
        f"  --model {base_model} --enable-lora --max-lora-rank {server_lora_rank(lora_rank)} "
        f"--lora-modules {name}=<this folder>",
        "```",
        "",
        f'then call it with the `openai` SDK as `model="{name}"`, or run '
        f"`python -m art_core.deploy.serve --storage <root> --project {project} --model {name} --step {step}`.",
    ]
    return "\n".join(lines) + "\n"


def export_adapter(
    storage: Storage, project: str, name: str, step: int, base_model: str, destination: str | None = None
) -> str:
    """Copy step `step`'s adapter files and a model card to `destination` (default `exports/{step:04d}`)."""
    store = ModelStore(storage, project, name)
    src = store.checkpoint(step)
    if not store.is_complete(step):
        have = store.checkpoint_steps()
        raise FileNotFoundError(f"no complete checkpoint for step {step} at {src}; complete steps: {have or 'none'}")
    dest = (destination or store.path("exports", step_dir(step))).rstrip("/")
    storage.delete(dest)  # a previous, maybe half-finished export of the same step
    copied = []
    for entry in storage.fs.ls(src, detail=True):
        fname = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        if entry["type"] != "file" or fname.startswith(_STATE_PREFIXES):
            continue
        target = f"{dest}/{fname}"
        if storage.is_local:
            import os

            os.makedirs(dest, exist_ok=True)
        storage.fs.copy(entry["name"], target)
        copied.append(fname)
    if "adapter_config.json" not in copied:
        raise FileNotFoundError(f"checkpoint {src} holds no adapter_config.json: is it a peft adapter?")
    metrics = store.step_metrics(step, prefix="")
    metrics = {k: v for k, v in metrics.items() if "/" in k}
    evals = [ev] if (ev := store.read_eval(step)) else []
    rank = int(json.loads(storage.read_text(f"{dest}/adapter_config.json")).get("r", 8))
    card = model_card(
        project=project, name=name, step=step, base_model=base_model, metrics=metrics, evals=evals, lora_rank=rank
    )
    storage.write_text(f"{dest}/README.md", card)
    storage.write_text(
        f"{dest}/export.json",
        json.dumps(
            {"project": project, "model": name, "step": step, "base_model": base_model, "files": sorted(copied)},
            indent=2,
        ),
    )
    storage.write_text(f"{dest}/{CHECKPOINT_MARKER}", "ok\n")
    return dest
