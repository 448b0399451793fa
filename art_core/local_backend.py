"""`LocalBackend`: inference, training and storage on one machine.

It starts (or reuses) one vLLM server per base model, serves step N of a model as the LoRA `name@N`
and the latest step also as `name`, trains in this process (art_core.training) and keeps checkpoints
and metrics in storage (a local folder, or s3:// with a local copy of each served checkpoint).

    backend = LocalBackend(path="./.art")
    model = TrainableModel(name="agent", project="demo", base_model="/models/tiny")
    await model.register(backend)           # base model at step 0, or the latest checkpoint in storage
    client = model.openai_client()          # talks to our vLLM server
    result = await model.train(groups)      # checkpoints/0001, now served as agent@1 and agent
    await backend.close()                   # stops the server (also done at exit and on Ctrl-C)

On a CUDA machine the server sleeps while the trainer holds the GPU, and wakes after.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
from typing import TYPE_CHECKING, Any

from art_core.backend import Backend, TrainResult
from art_core.inference.lora import AdapterManager, step_name, write_zero_adapter
from art_core.inference.server import ServerConfig, ServerError, VLLMServer
from art_core.model import Model, TrainableModel
from art_core.storage import Storage

if TYPE_CHECKING:
    from art_core.training.config import TrainConfig
    from art_core.trajectories import TrajectoryGroup

log = logging.getLogger(__name__)


def _same_model(a: str, b: str) -> bool:
    return a == b or (os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b))


class LocalBackend(Backend):
    """Serves with a vLLM server we own, trains in this process, stores under `path` (a folder or s3://)."""

    def __init__(
        self,
        path: str | None = None,
        *,
        server_config: ServerConfig | dict[str, Any] | None = None,
        server: VLLMServer | None = None,
        keep_steps: int = 3,
        cache_dir: str | None = None,
        **storage_options: Any,
    ) -> None:
        """`path`: storage root (default: ART_STORAGE_ROOT or ./.art). `server_config`: settings for the
        servers this backend starts (`model` is filled in per base model). `server`: an already running
        VLLMServer to use instead (it is not stopped by close()). `keep_steps`: adapters kept loaded per model.
        """
        if path is None:
            from art_core.settings import get_settings

            path = get_settings().storage_root
        self.storage = Storage(path, **storage_options)
        if isinstance(server_config, ServerConfig):
            server_config = server_config.model_dump(exclude={"model"}, exclude_unset=True)
        self._server_overrides: dict[str, Any] = dict(server_config or {})
        self.keep_steps = keep_steps
        self.cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "art-local-backend")
        self._servers: list[VLLMServer] = [server] if server is not None else []
        self._owned: set[int] = set()  # ids of servers this backend started (and so stops)
        self._adapters: dict[int, AdapterManager] = {}
        self._models: dict[tuple[str, str], TrainableModel] = {}
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"LocalBackend({self.storage.root!r}, servers={[s.base_url for s in self._servers]})"

    # ---- servers -------------------------------------------------------------------------------------
    def server_for(self, model: TrainableModel) -> VLLMServer:
        """The server that serves `model`'s base model (raises if the model was not registered here)."""
        for server in self._servers:
            if _same_model(server.config.model, model.base_model):
                return server
        raise RuntimeError(f"no server for base model {model.base_model!r}: register the model with this backend first")

    def _start_server(self, base_model: str) -> VLLMServer:
        for server in self._servers:
            if _same_model(server.config.model, base_model):
                return server  # a dead one is restarted by ensure_serving(), which also reloads its adapters
        fields = {
            "served_model_name": os.path.basename(base_model.rstrip("/")) or base_model,
            # CUDA: the trainer shares the GPU; vLLM's 0.9 would leave it too little once vLLM wakes up again.
            "gpu_memory_utilization": 0.6,
            **self._server_overrides,
        }
        server = VLLMServer(ServerConfig(model=base_model, **fields))
        server.start()
        self._servers.append(server)
        self._owned.add(id(server))
        return server

    def _adapter_manager(self, server: VLLMServer) -> AdapterManager:
        if id(server) not in self._adapters:
            manager = AdapterManager(server.root_url, server.headers(), keep_steps=self.keep_steps)
            manager.server_restarts = server.restarts  # a later restart means its adapters are gone
            self._adapters[id(server)] = manager
        return self._adapters[id(server)]

    async def ensure_serving(self) -> list[str]:
        """Restart any server that died (same port and key) and load its adapters again.

        Also reloads adapters into a server someone else restarted (e.g. a shared test server). Returns the
        base URLs whose adapters were reloaded; a death is logged with the tail of the server's log.
        """
        reloaded = []
        for server in self._servers:
            if not server.is_alive():
                log.warning("vLLM server %s died; restarting it.\n%s", server.base_url, server.describe_log(20))
                await asyncio.to_thread(server.ensure_running)
            manager = self._adapter_manager(server)
            if manager.server_restarts != server.restarts:
                await manager.reload_all()
                manager.server_restarts = server.restarts
                reloaded.append(server.base_url)
        return reloaded

    # ---- Backend -------------------------------------------------------------------------------------
    async def register(self, model: Model) -> None:
        """Serve `model`: the latest complete checkpoint in storage as `name@N` and `name`, else step 0 (the base)."""
        if not isinstance(model, TrainableModel):
            if model.inference_base_url:
                return  # a prompted model with its own endpoint: nothing to serve here
            raise TypeError(
                f"LocalBackend serves TrainableModels (a base model plus LoRA steps); {model.name!r} is a plain "
                "Model. Give it inference_base_url/inference_model_name of a hosted model instead."
            )
        key = (model.project, model.name)
        async with self._lock:
            for (project, name), other in self._models.items():
                if name == model.name and project != model.project and _same_model(other.base_model, model.base_model):
                    raise ValueError(
                        f"model name {model.name!r} is already served for project {project!r} on this server; "
                        "adapters are named by model name, so pick another name"
                    )
            await asyncio.to_thread(self._write_model_json, model)
            server = await asyncio.to_thread(self._start_server, model.base_model)
            await self.ensure_serving()
            step = await self.get_step(model)
            await self._serve(model, server, step)
            self._models[key] = model
        model.inference_base_url = server.base_url
        model.inference_api_key = server.api_key
        model.inference_model_name = model.name
        model._step = step  # register happens before the model knows its backend, so get_step() cannot yet run

    def _write_model_json(self, model: TrainableModel) -> None:
        path = self.storage.join(self.storage.model_path(model.project, model.name), "model.json")
        if self.storage.exists(path):
            stored = self.storage.read_json(path).get("base_model")
            if stored and stored != model.base_model:
                raise ValueError(
                    f"{model.project}/{model.name} was trained from base model {stored!r}, not {model.base_model!r}: "
                    "its checkpoints do not fit. Use another model name, or the same base model."
                )
        record = model.model_dump(mode="json", exclude={"inference_api_key", "inference_base_url"})
        self.storage.write_json(path, record)

    async def get_step(self, model: TrainableModel) -> int:
        """The latest complete checkpoint's step in storage, 0 when there is none."""
        latest = await asyncio.to_thread(self.storage.latest_checkpoint_step, model.project, model.name)
        return latest or 0

    def local_checkpoint(self, model: TrainableModel, step: int) -> str:
        """A local directory holding step `step`'s adapter (a zero adapter for step 0), copied from storage if remote."""
        if step == 0:
            digest = hashlib.sha256(os.path.abspath(model.base_model).encode()).hexdigest()[:16]
            path = os.path.join(self.cache_dir, "zero-adapters", digest)
            if not os.path.exists(os.path.join(path, "adapter_config.json")):
                write_zero_adapter(model.base_model, path)
            return path
        stored = self.storage.checkpoint_path(model.project, model.name, step)
        if not self.storage.is_complete(stored):
            have = self.storage.checkpoint_steps(model.project, model.name)
            raise FileNotFoundError(f"no complete checkpoint for step {step} at {stored} (complete steps: {have or 'none'})")
        local = os.path.join(self.cache_dir, "checkpoints", model.project, model.name, f"{step:04d}")
        return self.storage.get_dir(stored, local)

    async def _serve(self, model: TrainableModel, server: VLLMServer, step: int) -> None:
        path = await asyncio.to_thread(self.local_checkpoint, model, step)
        evicted = await self._adapter_manager(server).serve_step(model.name, step, path)
        if evicted:
            log.info("unloaded %s (keep_steps=%d)", ", ".join(step_name(model.name, s) for s in evicted), self.keep_steps)

    async def serve_step(self, model: TrainableModel, step: int) -> str:
        """Serve step `step` of `model` as `name@step` (also as `name` when no later step is loaded).

        Use it to evaluate an older step, or to pick up a checkpoint another process wrote. Returns `name@step`.
        """
        await self.ensure_serving()
        await self._serve(model, self.server_for(model), step)
        return step_name(model.name, step)

    async def train(
        self, model: TrainableModel, groups: "list[TrajectoryGroup]", config: "TrainConfig | None" = None
    ) -> TrainResult:
        """One GRPO step in a worker thread; records its metrics in history.jsonl and serves the new adapter."""
        from art_core.reporting import record_metrics
        from art_core.rollouts import reward_summary
        from art_core.training.config import TrainConfig
        from art_core.training.trainer import train_step

        if (model.project, model.name) not in self._models:
            raise RuntimeError(f"model {model.name!r} is not registered with this backend: `await model.register(backend)`")
        config = config or TrainConfig()
        server = self.server_for(model)
        if server.config.enable_lora and config.lora_rank > server.config.max_lora_rank:
            raise ValueError(
                f"lora_rank {config.lora_rank} exceeds the server's max_lora_rank {server.config.max_lora_rank}: "
                "the new adapter could not be served. Lower lora_rank or pass server_config={'max_lora_rank': ...}."
            )
        async with self._lock:
            await self.ensure_serving()
            step = await self.get_step(model)
            slept = await asyncio.to_thread(server.sleep)  # frees the GPU for the trainer; no-op on CPU
            try:
                result = await asyncio.to_thread(
                    train_step, base_model=model.base_model, groups=groups, config=config, storage=self.storage,
                    project=model.project, name=model.name, step=step,
                )  # fmt: skip
            finally:
                if slept:
                    await asyncio.to_thread(_release_cuda_cache)
                    await asyncio.to_thread(server.wake_up)
            metrics = {**reward_summary(groups), **result.metrics}
            await asyncio.to_thread(record_metrics, self.storage, model.project, model.name, result.step, metrics)
            await self.ensure_serving()  # a server that died while we trained comes back before the new step loads
            await self._serve(model, server, result.step)
        return result

    async def delete_checkpoints(self, model: TrainableModel, best_checkpoint_metric: str = "val/reward") -> list[int]:
        """Keep the latest step and the best by `best_checkpoint_metric`; delete the rest and unload their adapters."""
        from art_core.training.checkpoints import prune_checkpoints

        deleted = await asyncio.to_thread(
            prune_checkpoints, self.storage, model.project, model.name, best_metric=best_checkpoint_metric
        )
        server = self.server_for(model)
        manager = self._adapter_manager(server)
        for step in deleted:
            if server.is_alive():
                await manager.unload(step_name(model.name, step))
            else:
                manager.loaded.pop(step_name(model.name, step), None)
        return deleted

    async def close(self) -> None:
        """Stop the servers this backend started (a server passed in is left running)."""
        for server in list(self._servers):
            if id(server) in self._owned:
                await asyncio.to_thread(server.stop)
                self._owned.discard(id(server))
                self._servers.remove(server)
        self._adapters.clear()
        self._models.clear()


def _release_cuda_cache() -> None:
    """Give the trainer's cached-but-free GPU blocks back before vLLM wakes up and re-allocates."""
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


__all__ = ["LocalBackend", "ServerConfig", "ServerError", "VLLMServer"]
