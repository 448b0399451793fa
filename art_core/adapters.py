"""A step's adapter, wherever it lives, as a server loads it: resolution, local copies, and the one load call.

Step N of model `name` is the checkpoint folder `checkpoints/{N:04d}` in the model's storage; step 0 is a zero
adapter (written once per base model). A server that shares this machine's files is given a local folder (the
checkpoint itself, or a copy of one on S3); a replica on another node is given the storage URL and fetches it
(`fetch_adapter`). `load_checkpoint` is the pipeline door's load, through the one loader
(art_core.inference.lora.load_adapter) that LocalBackend's AdapterManager uses too.

    name = load_checkpoint(Endpoint.of(server), ModelStore(root, "demo", "agent"), "/models/tiny", step=2)  # 'agent@2'
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from typing import TYPE_CHECKING, Any

from art_core.inference.lora import ZERO_ADAPTER_SOURCE, load_adapter  # the one adapter loader
from art_core.naming import step_name

if TYPE_CHECKING:
    from art_core.serving import Endpoint
    from art_core.store import ModelStore


def cache_dir() -> str:
    """Where local copies of adapters live: ART_ADAPTER_CACHE, else a folder in the temp dir."""
    return os.environ.get("ART_ADAPTER_CACHE") or os.path.join(tempfile.gettempdir(), "art-adapters")


def zero_adapter(base_model: str, cache: str | None = None) -> str:
    """A local folder with the zero adapter (step 0) for `base_model`, written once."""
    from art_core.inference.lora import write_zero_adapter  # numpy and safetensors: loaded when used

    digest = hashlib.sha256(os.path.abspath(base_model).encode()).hexdigest()[:16]
    path = os.path.join(cache or cache_dir(), "zero", digest)
    if not os.path.exists(os.path.join(path, "adapter_config.json")):
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        write_zero_adapter(base_model, tmp)
        try:
            os.replace(tmp, path)
        except OSError:  # another process won the race; its copy is the same
            pass
    return path


def local_adapter(store: "ModelStore", base_model: str, step: int, cache: str | None = None) -> str:
    """A local folder holding step `step`'s adapter: the zero adapter at 0, the checkpoint (or a copy of it)."""
    if step == 0:
        return zero_adapter(base_model, cache)
    uri = _complete_checkpoint(store, step)
    return uri if store.storage.is_local else _local_copy(store.storage, uri, cache)


def _complete_checkpoint(store: "ModelStore", step: int) -> str:
    uri = store.checkpoint(step)
    if not store.is_complete(step):
        have = store.checkpoint_steps()
        raise FileNotFoundError(f"no complete checkpoint for step {step} at {uri} (complete steps: {have or 'none'})")
    return uri


def _local_copy(storage: Any, uri: str, cache: str | None = None) -> str:
    """A local copy of the stored checkpoint folder `uri`, made once (copied aside, then renamed into place,
    so a copy cut short is never taken for a whole one)."""
    local = os.path.join(cache or cache_dir(), "copies", hashlib.sha1(uri.encode()).hexdigest()[:16])
    if not os.path.exists(local):
        tmp = f"{local}.tmp-{os.getpid()}-{threading.get_ident()}"
        storage.get_dir(uri, tmp)
        try:
            os.replace(tmp, local)
        except OSError:  # another process won the race; its copy is the same, ours goes
            shutil.rmtree(tmp, ignore_errors=True)
    return local


def adapter_source(endpoint: Endpoint, store: "ModelStore", base_model: str, step: int) -> str:
    """What `endpoint` is told to load for step `step`: a local folder when it shares our files, else the
    checkpoint's storage URL (the replica fetches it) or, at step 0, ZERO_ADAPTER_SOURCE."""
    if endpoint.shares_files:
        return local_adapter(store, base_model, step)
    if step == 0:
        return ZERO_ADAPTER_SOURCE
    if store.storage.is_local:
        raise ValueError(
            f"the replica at {endpoint.base_url} does not share this machine's files, so it cannot read the local "
            f"storage root {store.storage.root!r}: store the run on S3 (storage_url='s3://bucket/prefix')"
        )
    return _complete_checkpoint(store, step)


def fetch_adapter(source: str, base_model: str, cache: str | None = None) -> str:
    """Inside a replica: the local folder for an adapter named by storage URL or ZERO_ADAPTER_SOURCE.

    A plain path is returned as it is. Credentials for S3 come from the replica's environment.
    """
    if source == ZERO_ADAPTER_SOURCE:
        return zero_adapter(base_model, cache)
    if "://" not in source or source.startswith("file://"):
        return source.removeprefix("file://")
    from art_core.storage import Storage

    storage = Storage(source)
    if not storage.is_complete(source):
        raise FileNotFoundError(f"no complete checkpoint at {source} (its COMPLETE marker is missing)")
    return _local_copy(storage, source, cache)


def adapter_rank(store: "ModelStore", step: int) -> int:
    """The LoRA rank of checkpoint `step` (from its adapter_config.json); 1 for step 0's zero adapter."""
    if step == 0:
        return 1
    path = store.storage.join(store.checkpoint(step), "adapter_config.json")
    try:
        return int(json.loads(store.storage.read_text(path)).get("r") or 8)
    except (OSError, ValueError, TypeError):
        return 8


def load_checkpoint(endpoint: Endpoint, store: "ModelStore", base_model: str, step: int) -> str:
    """Load checkpoint `step` of the model into `endpoint` as `name@step` and return that name (step 0: the
    zero adapter). The pipeline's door: no `name` alias and no eviction (LocalBackend's AdapterManager has those).

    Loaded every time (about 10 ms): another run may have loaded other weights under the same name. A refusal
    raises AdapterError (art_core.inference.lora.load_adapter).
    """
    name = step_name(store.name, step)
    load_adapter(endpoint.root_url, endpoint.headers(), name, adapter_source(endpoint, store, base_model, step))
    return name
