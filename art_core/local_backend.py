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

Registering a TrainableModel takes its lease (art_core.lease) before any server starts: a second run
training the same project/model in the same storage is refused, naming the run that holds it; close()
releases it. `LocalBackend(read_only=True)` serves and evaluates without a lease, and refuses to train.

On a CUDA machine the server sleeps while the trainer holds the GPU, and wakes after. ART's dedicated mode
splits the GPUs instead: `_internal_config={"trainer_gpu_ids": [0], "inference_gpu_ids": [1]}` starts the
server on GPU 1 (its CUDA_VISIBLE_DEVICES), trains on GPU 0 (`TrainConfig.ranks` = the trainer ids' number),
and the server keeps serving while a step trains (art_core.dev.gpu_split, art_core.serving.sleeps_for_training).

It is one front door to the engine the Prefect pipeline also uses: servers, names and adapters come
from art_core.serving, the layout and model.json from art_core.store, and a step is trained and recorded
by art_core.step.train_and_record. What LocalBackend adds is state: which adapters each server holds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from typing import Any, Callable

from art_core.adapters import adapter_rank, local_adapter
from art_core.backend import Backend, TrainResult
from art_core.dev import gpu_split, resolve_train_config
from art_core.gpus import check_gpu_ids
from art_core.inference.lora import AdapterManager
from art_core.inference.server import ServerConfig, ServerError, VLLMServer
from art_core.lease import ModelLease, acquire_model_lease
from art_core.model import Model, TrainableModel
from art_core.naming import step_name
from art_core.serving import ServerPool
from art_core.settings import get_settings
from art_core.sft import TrainSFTConfig, read_sft_file, sft_and_record
from art_core.step import train_and_record
from art_core.storage import Storage, copy_tree
from art_core.store import ModelStore, same_base_model
from art_core.training.checkpoints import prune_checkpoints
from art_core.training.config import TrainConfig
from art_core.trajectories import TrajectoryGroup

log = logging.getLogger(__name__)


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
        read_only: bool = False,
        **storage_options: Any,
    ) -> None:
        """`path`: storage root (default: ART_STORAGE_ROOT or ./.art). `server_config`: settings for the
        servers this backend starts (`model` is filled in per base model). `server`: an already running
        VLLMServer to use instead (it is not stopped by close()). `keep_steps`: adapters kept loaded per model.
        `read_only`: serve and evaluate models another run may be training: register takes no lease and
        writes nothing, train refuses.
        """
        if path is None:
            path = get_settings().storage_root
        if "in_process" in storage_options:  # ART's Colab switch: everything here already runs in this process
            storage_options.pop("in_process")
            log.warning(
                "LocalBackend(in_process=...) is ART's notebook switch; this backend always trains in this "
                "process and serves from its own vLLM server, so it changes nothing here"
            )
        if storage_options and "://" not in str(path):  # fsspec's local filesystem would take them without a word
            raise TypeError(
                f"LocalBackend() got unexpected keyword argument(s) {sorted(storage_options)}; it accepts path, "
                "server_config, server, keep_steps, cache_dir, read_only, in_process, and fsspec options (key, "
                "secret, endpoint_url, ...) only for an s3:// or other remote path"
            )
        self.storage = Storage(path, **storage_options)
        if isinstance(server_config, ServerConfig):
            server_config = server_config.model_dump(exclude={"model"}, exclude_unset=True)
        self._server_overrides: dict[str, Any] = dict(server_config or {})
        self.keep_steps = keep_steps
        self.cache_dir = cache_dir  # local copies of adapters (default: art_core.adapters.cache_dir())
        self._pool = ServerPool(**self._server_overrides)
        if server is not None:
            self._pool.adopt(server)
        self._adapters: dict[int, AdapterManager] = {}
        self._models: dict[tuple[str, str], TrainableModel] = {}
        self._latest: dict[tuple[str, str], int] = {}  # (project, name) -> the step served as `name`
        self._lock = asyncio.Lock()
        self.read_only = read_only
        self.run_id = f"local-{uuid.uuid4().hex[:12]}"  # this backend's run: its leases are re-entrant by it
        self._leases: dict[tuple[str, str], ModelLease] = {}  # (project, name) -> the lease register took

    def __repr__(self) -> str:
        return f"LocalBackend({self.storage.root!r}, servers={[s.base_url for s in self._pool.servers()]})"

    # ---- servers -------------------------------------------------------------------------------------
    def server_for(self, model: TrainableModel) -> VLLMServer:
        """The server that serves `model`'s base model (raises if the model was not registered here)."""
        for server in self._pool.servers():
            if same_base_model(server.config.model, model.base_model):
                return server
        raise RuntimeError(f"no server for base model {model.base_model!r}: register the model with this backend first")

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
        for server in self._pool.servers():
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
        split = gpu_split(model._internal_config)  # ART's dedicated mode: refused here before any server starts
        if split is not None:
            check_gpu_ids(split[0], "_internal_config.trainer_gpu_ids")
        key = (model.project, model.name)
        async with self._lock:
            other_run = self._models.get(key)
            if other_run is not None and other_run is not model and other_run.storage_name != model.storage_name:
                raise ValueError(
                    f"{model.project}/{model.name} is already served here for run {other_run.storage_name!r}; "
                    "the name is what the server serves, so two runs of one name need two backends (or names)"
                )
            for (project, name), other in self._models.items():
                if (
                    name == model.name
                    and project != model.project
                    and same_base_model(other.base_model, model.base_model)
                ):
                    raise ValueError(
                        f"model name {model.name!r} is already served for project {project!r} on this server; "
                        "adapters are named by model name, so pick another name"
                    )
            store = self.model_store(model)
            record = model.model_dump(
                mode="json", exclude={"inference_api_key", "inference_base_url", "base_model", "project", "name"}
            )
            lease = None  # one writer per model: a second run is refused here, before any server starts
            if not self.read_only and key not in self._leases:
                lease = await asyncio.to_thread(acquire_model_lease, store, run_id=self.run_id, run=self._run_label())
            try:
                if self.read_only:
                    await asyncio.to_thread(store.check_base_model, model.base_model)
                else:
                    await asyncio.to_thread(store.bind, model.base_model, **record)  # refuses another base model
                step = await self.get_step(model)
                rank = await asyncio.to_thread(adapter_rank, store, step)  # the server must fit the latest adapter
                server = await asyncio.to_thread(self._pool.get, model.base_model, max_lora_rank=rank)
                await self.ensure_serving()
                if step and not self.read_only:  # a crash between checkpoint and history record: write it back
                    await asyncio.to_thread(store.backfill_train_record, step)
                self._latest[key] = step  # the latest in storage, even below a step served before (storage wins)
                await self._serve(model, server, step)
            except BaseException:
                if lease is not None:
                    lease.release()  # at once, also when cancelled: a failed register holds nothing
                raise
            if lease is not None:
                self._leases[key] = lease
            self._models[key] = model
        model.inference_base_url = server.base_url
        model.inference_api_key = server.api_key
        model.inference_model_name = model.name

    async def get_step(self, model: TrainableModel) -> int:
        """The latest complete checkpoint's step in storage, 0 when there is none."""
        return await asyncio.to_thread(self.model_store(model).latest_step)

    @staticmethod
    def _run_label() -> str:
        """What a refused run's message calls this one: the script it runs (never its arguments: they may hold keys)."""
        import sys

        return f"LocalBackend in {os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else 'python'}"

    def _check_writer(self, model: TrainableModel) -> None:
        """Refuse to write `model` from a read-only backend, or after another run took its lease over."""
        if self.read_only:
            raise RuntimeError(
                f"this LocalBackend is read_only: it serves {model.project}/{model.name} without its lease and "
                "cannot train it; use LocalBackend() (read_only=False) in the run that trains"
            )
        lease = self._leases.get((model.project, model.name))
        if lease is not None:
            lease.check()  # LeaseLost when another run took the model over

    def _release_leases(self) -> None:
        for lease in self._leases.values():
            lease.release()
        self._leases.clear()

    def model_store(self, model: Model) -> ModelStore:
        """`model`'s folder in this backend's storage (history, trajectories, checkpoints; `model.log` writes here)."""
        return ModelStore(self.storage, model.project, model.storage_name)

    def served_step(self, model: TrainableModel) -> int | None:
        """The step served as `model`'s latest (`name`): set by register, train, train_sft and serve_step."""
        return self._latest.get((model.project, model.name))

    def use_server_settings(self, base_model: str, settings: dict[str, Any]) -> bool:
        """Start `base_model`'s server with these ServerConfig fields (`extra_args` are added to the backend's);
        False when that server already runs."""
        if self._pool.servers(base_model):
            return False
        if settings.get("gpu_ids") is not None:  # before the settings stick: a refused placement leaves none
            check_gpu_ids(settings["gpu_ids"], "_internal_config.inference_gpu_ids")
        target = self._pool.overrides
        extra = list(target.get("extra_args", [])) + list(settings.get("extra_args", []))
        target.update({k: v for k, v in settings.items() if k != "extra_args"})
        if extra:
            target["extra_args"] = extra
        return True

    def local_checkpoint(self, model: TrainableModel, step: int) -> str:
        """A local directory holding step `step`'s adapter (a zero adapter for step 0), copied from storage if remote."""
        return local_adapter(self.model_store(model), model.base_model, step, cache=self.cache_dir)

    async def _serve(self, model: TrainableModel, server: VLLMServer, step: int) -> None:
        path = await asyncio.to_thread(self.local_checkpoint, model, step)
        evicted = await self._adapter_manager(server).load_step(model.name, step, path)
        key = (model.project, model.name)
        if step >= self._latest.get(key, step):  # as the `name` alias: an older step evaluated leaves it
            self._latest[key] = step
        if evicted:
            log.info(
                "unloaded %s (keep_steps=%d)", ", ".join(step_name(model.name, s) for s in evicted), self.keep_steps
            )

    async def serve_step(self, model: TrainableModel, step: int) -> str:
        """Serve step `step` of `model` as `name@step` (also as `name` when no later step is loaded).

        Use it to evaluate an older step, or to pick up a checkpoint another process wrote. Returns `name@step`.
        """
        await self.ensure_serving()
        await self._serve(model, self.server_for(model), step)
        return step_name(model.name, step)

    async def train(
        self,
        model: TrainableModel,
        groups: "list[TrajectoryGroup] | None" = None,
        config: "TrainConfig | None" = None,
        _config: dict[str, Any] | None = None,
        verbose: bool = False,
        *,
        trajectory_groups: "list[TrajectoryGroup] | None" = None,
        **art_options: Any,
    ) -> TrainResult:
        """One GRPO step in a worker thread; records its metrics in history.jsonl and serves the new adapter.

        ART's backend-first form works as is: `await backend.train(model, groups, learning_rate=1e-5)`;
        keywords and `_config` take ART's names (art_core.dev maps them onto TrainConfig, and reports the
        ones without a counterpart). Afterwards `model.get_inference_name()` names the new step.
        """
        groups = list(groups if groups is not None else trajectory_groups or [])
        config = resolve_train_config(model, config, _config, art_options)

        if (model.project, model.name) not in self._models:
            raise RuntimeError(
                f"model {model.name!r} is not registered with this backend: `await model.register(backend)`"
            )
        config = config or TrainConfig()
        result = await self._train_and_serve(
            model,
            config.lora_rank,
            lambda store, step, server: train_and_record(
                store, model.base_model, groups, config, step, servers=[server]
            ),
        )
        if verbose:
            log.warning("%s trained to step %d: %s", model.name, result.step, result.metrics)
        return result

    async def train_sft(
        self,
        model: TrainableModel,
        trajectories: "list | str | os.PathLike[str]",
        config: Any = None,
        verbose: bool = False,
        train_config: "TrainConfig | None" = None,
    ) -> TrainResult:
        """Supervised fine-tuning of the model's adapter (ART's `train_sft`): checkpoint step + 1, then served.

        `trajectories` are conversations ending with an assistant message, or the path (local or s3://) of a
        chat-format JSONL file of them (art_core.sft.read_sft_file); `config` is a TrainSFTConfig (or its dict);
        `train_config` gives the LoRA shape (default: the model's). GRPO (`model.train`) continues from the step:

            await backend.train_sft(model, "demos.jsonl", TrainSFTConfig(learning_rate=1e-3, batch_size=4))
            await model.train(groups)   # checkpoint 2, trained from SFT's checkpoint 1
        """
        if isinstance(trajectories, (str, os.PathLike)):
            trajectories = read_sft_file(os.fspath(trajectories))

        if (model.project, model.name) not in self._models:
            raise RuntimeError(
                f"model {model.name!r} is not registered with this backend: `await model.register(backend)`"
            )
        config = config if isinstance(config, TrainSFTConfig) else TrainSFTConfig(**(config or {}))
        train_config = resolve_train_config(model, train_config)
        examples = list(trajectories)
        result = await self._train_and_serve(
            model,
            train_config.lora_rank,
            lambda store, step, server: sft_and_record(
                store, model.base_model, examples, config, train_config, step, servers=[server]
            ),
        )
        if verbose:
            log.warning("%s fine-tuned to step %d: %s", model.name, result.step, result.metrics)
        return result

    async def _train_and_serve(
        self,
        model: TrainableModel,
        lora_rank: int,
        train: "Callable[[ModelStore, int, VLLMServer], TrainResult]",
    ) -> TrainResult:
        """`train(store, step, server)` from the model's latest step in a worker thread (GRPO or SFT: the server
        sleeps while the trainer holds the GPU), then the new step served as `name@step` and `name`."""
        self._check_writer(model)
        store = self.model_store(model)
        async with self._lock:
            # The server's max_lora_rank follows the LoRA rank (a running server is restarted wider if needed).
            server = await asyncio.to_thread(self._pool.get, model.base_model, max_lora_rank=lora_rank)
            await self.ensure_serving()
            step = await self.get_step(model)
            result = await asyncio.to_thread(train, store, step, server)
            await self.ensure_serving()  # a server that died while we trained comes back before the new step loads
            await self._serve(model, server, result.step)  # served_step: rollouts now sample the new step
        return result

    async def delete_checkpoints(self, model: TrainableModel, best_checkpoint_metric: str = "val/reward") -> list[int]:
        """Keep the latest step and the best by `best_checkpoint_metric`; delete the rest and unload their adapters."""
        self._check_writer(model)
        deleted = await asyncio.to_thread(
            prune_checkpoints, self.storage, model.project, model.storage_name, best_metric=best_checkpoint_metric
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
        """Stop the servers this backend started (a server passed in is left running); release the models' leases."""
        await asyncio.to_thread(self._pool.close)
        await asyncio.to_thread(self._release_leases)
        self._adapters.clear()
        self._models.clear()

    # ---- ART compatibility: ART's experimental backend methods and sync `with LocalBackend() as b:` ----
    def __enter__(self) -> "LocalBackend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pool.close()  # close() without an event loop: stopping servers is synchronous
        self._release_leases()
        self._adapters.clear()
        self._models.clear()

    @staticmethod
    def _s3_root(s3_bucket: str | None, prefix: str | None) -> str:
        """s3://{bucket}/[{prefix}], the bucket being `s3_bucket` or BACKUP_BUCKET (ART's variable)."""
        bucket = s3_bucket or os.environ.get("BACKUP_BUCKET")
        if not bucket:
            raise ValueError("no S3 bucket: pass s3_bucket=... or set BACKUP_BUCKET (ART's variable)")
        return "s3://" + "/".join([bucket.removeprefix("s3://").strip("/"), *([prefix.strip("/")] if prefix else [])])

    def _s3_model_dir(self, model: Model, s3_bucket: str | None, prefix: str | None) -> str:
        return "/".join([self._s3_root(s3_bucket, prefix), model.project, "models", model.storage_name])

    async def _experimental_push_to_s3(
        self,
        model: Model,
        *,
        s3_bucket: str | None = None,
        prefix: str | None = None,
        verbose: bool = False,
        delete: bool = False,
    ) -> str:
        """ART's backup: copy the model's folder (checkpoints, history, trajectories) to
        s3://{bucket}/[{prefix}/]{project}/models/{name}; returns that URL. `delete` also removes remote
        files that are gone here."""
        remote = self._s3_model_dir(model, s3_bucket, prefix)
        local = self.model_store(model).root
        target = Storage(remote.rsplit(f"/{model.project}/models/", 1)[0])
        await asyncio.to_thread(self._sync_tree, self.storage, local, target, remote, delete)
        if verbose:
            log.warning("pushed %s to %s", local, remote)
        return remote

    async def _experimental_pull_from_s3(
        self,
        model: Model,
        *,
        s3_bucket: str | None = None,
        prefix: str | None = None,
        verbose: bool = False,
        delete: bool = False,
    ) -> str:
        """ART's restore: copy s3://{bucket}/[{prefix}/]{project}/models/{name} into this backend's storage
        (before `register`, so training resumes at the latest pulled step; after it, that step is served)."""
        remote = self._s3_model_dir(model, s3_bucket, prefix)
        source = Storage(remote.rsplit(f"/{model.project}/models/", 1)[0])
        local = self.model_store(model).root
        if not source.exists(remote):
            log.warning("nothing to pull: %s does not exist", remote)
            return remote
        await asyncio.to_thread(self._sync_tree, source, remote, self.storage, local, delete)
        if isinstance(model, TrainableModel) and (model.project, model.name) in self._models:
            step = await self.get_step(model)
            self._latest[(model.project, model.name)] = step  # the pulled latest, as register would take it
            if step:
                await self.serve_step(model, step)
        if verbose:
            log.warning("pulled %s into %s", remote, local)
        return remote

    async def _experimental_fork_checkpoint(
        self,
        model: Model,
        from_model: str,
        from_project: str | None = None,
        from_s3_bucket: str | None = None,
        not_after_step: int | None = None,
        verbose: bool = False,
        prefix: str | None = None,
    ) -> int:
        """ART's checkpoint forking: start `model` as `from_model` (of `from_project`, default the same project)
        stood at its latest checkpoint at or before `not_after_step` (art_core.fork); returns that step.

        The source is read from this backend's storage, or from s3://{from_s3_bucket}/[{prefix}/] when given.
        Call it before `register` (registered after, the forked step is served at once). Calling it again for
        the same fork does nothing, so a script that forks and then trains can be rerun and resumes; a model
        that has trained already is refused (art_core.fork.ForkError) with nothing changed."""
        from art_core.fork import fork_model

        project = from_project or model.project
        storage = Storage(self._s3_root(from_s3_bucket, prefix)) if from_s3_bucket else self.storage
        source = ModelStore(storage, project, from_model)
        step = await asyncio.to_thread(
            fork_model, source, self.model_store(model), not_after_step, getattr(model, "base_model", None)
        )
        if isinstance(model, TrainableModel) and (model.project, model.name) in self._models:
            self._latest[(model.project, model.name)] = step
            await self.serve_step(model, step)
        if verbose:
            log.warning("forked %s/%s step %d into %s/%s", project, from_model, step, model.project, model.name)
        return step

    @staticmethod
    def _sync_tree(src: Storage, src_dir: str, dst: Storage, dst_dir: str, delete: bool) -> None:
        """Copy every file under src_dir to dst_dir (through each storage's fsspec filesystem).

        The lease folder stays where it is: it names the run training the model in that storage, not here."""
        copied = copy_tree(src, src_dir, dst, dst_dir, keep=lambda rel: not rel.startswith("lease/"))
        dst_dir = dst_dir.rstrip("/")
        if delete and dst.fs.exists(dst_dir):
            dbase = dst.fs._strip_protocol(dst_dir)
            for f in dst.fs.find(dst_dir):
                rel = f[len(dbase) :].lstrip("/")
                if rel not in copied and not rel.startswith("lease/"):
                    dst.fs.rm(f)


__all__ = ["LocalBackend", "ServerConfig", "ServerError", "VLLMServer"]
