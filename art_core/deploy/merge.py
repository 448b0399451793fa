"""Merge a step's LoRA adapter into its base model and save the result as safetensors.

For servers without LoRA support (or to skip the adapter's small per-token cost): the folder is a
plain model that `python -m vllm.entrypoints.openai.api_server --model <folder>` or
`AutoModelForCausalLM.from_pretrained(<folder>)` loads as it is. It is written to
`{model}/exports/{step:04d}-merged/` in storage, its COMPLETE marker last.

    uri = merge_adapter(Storage("./.art"), "demo", "agent-001", step=3, base_model="./.models/tiny")
"""

from __future__ import annotations

import os
import tempfile

from art_core.deploy.result import DeployError
from art_core.storage import Storage
from art_core.store import ModelStore, step_dir


def preflight(base_model: str) -> None:
    """Refuse a local base model folder that is not there, and a missing transformers/peft, before any work."""
    looks_local = base_model.startswith(("/", "./", "../", "~")) or os.path.exists(base_model)
    if looks_local and not os.path.isfile(os.path.join(os.path.expanduser(base_model), "config.json")):
        raise DeployError(f"base model folder {base_model!r} has no config.json here: merging needs the base weights")
    try:
        import peft  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise DeployError("merging needs transformers and peft: pip install 'art-pipeline[train]'") from e


def merged_uri(storage: Storage, project: str, name: str, step: int) -> str:
    return ModelStore(storage, project, name).path("exports", f"{step_dir(step)}-merged")


def merge_adapter(
    storage: Storage, project: str, name: str, step: int, base_model: str, destination: str | None = None
) -> str:
    """Write base + step `step`'s adapter, merged, as a safetensors model folder; returns its URI."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from art_core.adapters import local_adapter

    adapter = local_adapter(ModelStore(storage, project, name), base_model, step)
    dest = (destination or merged_uri(storage, project, name, step)).rstrip("/")
    with tempfile.TemporaryDirectory(prefix="art-merged-") as tmp:
        base = AutoModelForCausalLM.from_pretrained(base_model, dtype="auto")  # the base's own dtype
        merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
        merged.save_pretrained(tmp, safe_serialization=True)
        AutoTokenizer.from_pretrained(base_model).save_pretrained(tmp)
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write(
                f"# {name} (step {step}), merged\n\nThe LoRA adapter of step {step} (project `{project}`) merged "
                f"into `{base_model}`: a plain model, no LoRA support needed to serve it.\n\n```bash\n"
                f"python -m vllm.entrypoints.openai.api_server --model <this folder> --served-model-name {name}\n"
                "```\n"
            )
        storage.delete(dest)  # an older, maybe half-written merge of the same step
        storage.put_dir(tmp, dest)  # the COMPLETE marker goes last
    return dest
