"""The KL penalty's reference policy: the base model, or a stored LoRA adapter (ART's kl_ref_adapter_path).

The reference adapter is loaded once beside the trained one in the same peft model (peft holds several
adapters; only the active one computes), so its logprobs cost one more forward pass and no second copy of
the base weights:

    with reference_policy(model, config.kl_ref_adapter_path):     # doctest: +SKIP
        ref, _ = batch_logprobs(model, part)                      # under torch.no_grad()

Without a path the reference is the base model (the adapter switched off), as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from typing import Any, Iterator

from art_core.storage import Storage


def _local_adapter(path: str, tmp: str) -> str:
    """A local folder holding the adapter at `path` (a local folder, or a storage URI copied into `tmp`)."""
    if os.path.isdir(path):
        return path
    storage = Storage(path)
    if storage.is_local or not storage.exists(path):
        raise FileNotFoundError(
            f"kl_ref_adapter_path {path!r} is not a folder nor a stored one: give a checkpoint folder "
            "(with adapter_config.json and adapter_model.safetensors), local or s3://"
        )
    return storage.get_dir(path, tmp)


def adapter_name(path: str) -> str:
    """The peft adapter name a reference path is loaded under (stable per path).

    >>> adapter_name("/ckpts/0003")
    'kl_ref_324200132b'
    """
    return "kl_ref_" + hashlib.sha1(path.encode()).hexdigest()[:10]


@contextlib.contextmanager
def reference_policy(model: Any, path: str | None) -> Iterator[None]:
    """Make `model` (a peft model whose trained adapter is 'default') compute the reference policy inside."""
    if path is None:
        with model.disable_adapter():
            yield
        return
    name = adapter_name(path)
    if name not in model.peft_config:
        with tempfile.TemporaryDirectory(prefix="art-klref-") as tmp:
            local = _local_adapter(path, tmp)
            if not os.path.exists(os.path.join(local, "adapter_config.json")):
                raise FileNotFoundError(f"kl_ref_adapter_path {path!r} has no adapter_config.json: not a LoRA adapter")
            model.load_adapter(local, adapter_name=name, is_trainable=False)
    trained = [p for p in model.parameters() if p.requires_grad]
    model.set_adapter(name)
    try:
        yield
    finally:
        model.set_adapter("default")
        # peft's set_adapter toggles requires_grad by adapter: the trained one must stay trainable.
        for p in trained:
            p.requires_grad_(True)
