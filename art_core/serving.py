"""The serving layer both front doors share: servers per process and endpoints (a step's adapter: adapters.py).

`LocalBackend` (the library) and the Prefect tasks (the pipeline) sample through these functions, so a
model is served the same way whichever door trained it:

- step N of model `name` is the LoRA adapter `name@N`; step 0 is a zero adapter (it answers exactly as
  the base model), so `name@0` exists before any training;
- the base model itself answers to `base_served_name(base_model)` (the folder's name);
- a server's `max_lora_rank` follows the run's LoRA rank (rounded up to a rank vLLM accepts); a running
  server whose limit is too small is restarted with a larger one (same port and key);
- on CUDA a server started here leaves the trainer room (`gpu_memory_utilization` 0.6) and sleeps while
  it trains (`art_core.step.train_and_record`), unless `gpu_ids` gives it GPUs the trainer does not use
  (ART's dedicated mode: `sleeps_for_training`); then it takes vLLM's own share and keeps serving.

    pool = ServerPool()                                      # LocalBackend owns one; tasks use PROCESS_POOL
    server = pool.get("/models/tiny", max_lora_rank=16)      # started once, reused afterwards
    endpoint = Endpoint.of(server)
    name = load_checkpoint(endpoint, ModelStore(root, "demo", "agent"), "/models/tiny", step=2)   # 'agent@2'

`load_checkpoint` and the rest of a step's adapter (where it lives, local copies, the zero adapter) are in
art_core.adapters; they load through art_core.inference.lora.load_adapter, the one loader LocalBackend's
AdapterManager uses too: one error (AdapterError) and one hint, whichever door loads.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from art_core.inference import http_client
from art_core.inference.http_client import REQUEST_TIMEOUT_S
from art_core.inference.server import (
    LOOPBACK_HOSTS,
    ServerConfig,
    ServerDied,
    ServerOptions,
    VLLMServer,
    live_servers,
    openai_client,
)
from art_core.settings import get_settings
from art_core.store import same_base_model

if TYPE_CHECKING:
    from art_core.training.config import TrainConfig

log = logging.getLogger(__name__)

# Ranks vLLM 0.32 accepts for --max-lora-rank.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
# CUDA: the trainer shares the GPU; vLLM's own 0.9 leaves it too little once vLLM wakes up again.
TRAINING_GPU_SHARE = 0.6


def base_served_name(base_model: str) -> str:
    """The one name a base model answers to on every server we start: its folder's name.

    >>> base_served_name("/models/Qwen2.5-7B-Instruct/")
    'Qwen2.5-7B-Instruct'
    """
    return os.path.basename(base_model.rstrip("/")) or base_model


def server_lora_rank(rank: int) -> int:
    """The smallest --max-lora-rank vLLM accepts that serves adapters of rank `rank`.

    >>> server_lora_rank(12)
    16
    """
    for allowed in VLLM_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise ValueError(f"LoRA rank {rank} is larger than vLLM serves (at most {VLLM_LORA_RANKS[-1]})")


class Endpoint(BaseModel):
    """An OpenAI-compatible vLLM server: where it is, its key (never stored) and its base model's name."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    api_key: str | None = Field(None, exclude=True, repr=False)
    base_name: str
    # True when the server reads this machine's files: adapters are loaded by local path. False for a
    # replica elsewhere (a Ray actor, a cluster node): it fetches each adapter from storage itself.
    shares_files: bool = True

    @classmethod
    def of(cls, server: "VLLMServer") -> "Endpoint":
        return cls(base_url=server.base_url, api_key=server.api_key, base_name=server.served_model_name)

    def client(self, **kwargs: Any):
        """An `openai.AsyncOpenAI` for this server (`art_core.inference.server.openai_client`: no retries, except
        one resend of a request whose idle connection was dropped)."""
        kwargs.setdefault("timeout", REQUEST_TIMEOUT_S)
        return openai_client(self.base_url, self.api_key, **kwargs)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def root_url(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1")


def on_this_machine(url: str) -> bool:
    """True when `url`'s host is loopback: the server there reads this machine's files.

    >>> on_this_machine("http://127.0.0.1:8000/v1"), on_this_machine("http://gpu-node:8000/v1")
    (True, False)
    """
    return httpx.URL(url).host in LOOPBACK_HOSTS


def discover_endpoint(base_url: str, api_key: str | None = None) -> Endpoint:
    """An Endpoint for a running server, its base model's name read from /v1/models (the entry with no parent).

    >>> discover_endpoint("http://127.0.0.1:8000/v1", "key").base_name   # doctest: +SKIP
    'tiny'
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = http_client.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=30.0)
    except httpx.HTTPError as e:
        raise ConnectionError(f"inference server {base_url} is unreachable ({e}); start it or fix inference_url") from e
    if r.status_code == 401:
        raise PermissionError(f"inference server {base_url} refused the key: set ART_INFERENCE_API_KEY to its key")
    r.raise_for_status()
    bases = [m["id"] for m in r.json()["data"] if not m.get("parent")]
    if not bases:
        raise RuntimeError(f"inference server {base_url} lists no base model in /v1/models")
    return Endpoint(
        base_url=base_url.rstrip("/"), api_key=api_key, base_name=bases[0], shares_files=on_this_machine(base_url)
    )


# ---- servers ---------------------------------------------------------------------------------------
def server_config(
    base_model: str, *, max_lora_rank: int = 8, overrides: dict[str, Any] | None = None, **fields: Any
) -> "ServerConfig":
    """How every server we start for training is configured. `overrides` (a user's server settings) and
    `fields` win, except that max_lora_rank never drops below what the adapters need."""
    overrides = {**(overrides or {}), **fields}
    rank = max(max_lora_rank, int(overrides.pop("max_lora_rank", None) or 1))
    gpu_ids = overrides.get("gpu_ids")
    fields = {
        "served_model_name": base_served_name(base_model),
        # The trainer keeps its model on GPU 0 between steps (rank 0 trains in this process): a server there
        # leaves it room; one on GPUs of its own takes vLLM's own share.
        **({"gpu_memory_utilization": TRAINING_GPU_SHARE} if gpu_ids is None or 0 in gpu_ids else {}),
        **overrides,
        "max_lora_rank": server_lora_rank(rank),
    }
    return ServerConfig(model=base_model, **fields)


def live_server_at(base_url: str) -> "VLLMServer | None":
    """A VLLMServer this process started (by anyone) that answers at `base_url`, if any."""
    want = base_url.rstrip("/")
    return next((s for s in live_servers() if s.base_url.rstrip("/") == want), None)


class ServerPool:
    """vLLM servers per base model (one, or `replicas` of them), started on first use; `close()` stops
    those it started.

    `LocalBackend` owns a pool; the Prefect tasks share `PROCESS_POOL` (one per worker process), so a fully
    cached run never starts a server at all.
    """

    def __init__(self, **overrides: Any) -> None:
        self.overrides = overrides  # ServerConfig fields for every server started here
        self._servers: dict[tuple[str, int], "VLLMServer"] = {}  # (base model, replica index) -> server
        self._owned: set[int] = set()
        self._lock = threading.Lock()

    def servers(self, base_model: str | None = None) -> list["VLLMServer"]:
        """Every server of the pool, or those of one base model (replica 0 first)."""
        if base_model is None:
            return list(self._servers.values())
        key = self._key(base_model)
        return [s for (b, _), s in sorted(self._servers.items(), key=lambda kv: kv[0][1]) if b == key]

    def _key(self, base_model: str) -> str:
        return next((b for b, _ in self._servers if same_base_model(b, base_model)), base_model)

    def adopt(self, server: "VLLMServer") -> "VLLMServer":
        """Use a server someone else started for its base model (close() leaves it running)."""
        with self._lock:
            self._servers[(self._key(server.config.model), 0)] = server
        return server

    def get(
        self,
        base_model: str,
        *,
        max_lora_rank: int = 8,
        replica: int = 0,
        options: "ServerOptions | dict[str, Any] | None" = None,
    ) -> "VLLMServer":
        """The running server for `base_model` (started, restarted if dead, or widened for the LoRA rank);
        `replica` > 0 names further servers of the same model (each on a port of its own). `options` (a run's
        server settings, e.g. its dtype) apply to a server started here; a running server started with other
        settings is restarted with these (same port and key)."""
        wanted = chosen_settings(options)
        with self._lock:
            key = (self._key(base_model), replica)
            server = self._servers.get(key)
            if server is not None and id(server) in self._owned and wanted:
                changed = {k: v for k, v in wanted.items() if getattr(server.config, k) != v}
                if changed:
                    log.warning(
                        "restarting the vLLM server at %s with the run's server settings %s", server.base_url, changed
                    )
                    server.config = server.config.model_copy(update=changed)
                    server.restart()
            if server is None:
                overrides = {**self.overrides, **wanted}
                server = VLLMServer(server_config(base_model, max_lora_rank=max_lora_rank, overrides=overrides))
                server.check_gpus()  # a refused placement leaves nothing in the pool
                self._servers[key] = server
                self._owned.add(id(server))
                server.start()
                log.info(
                    "started a vLLM server for %s at %s (pid %s, log %s)",
                    base_model,
                    server.base_url,
                    server.pid,
                    server.log_path,
                )
                return server
            return keep_serving(server, max_lora_rank)

    def close(self, only: "list[VLLMServer] | None" = None) -> None:
        """Stop the servers this pool started (adopted ones keep running) and forget them all; `only`: just
        these of the pool's servers."""
        named = None if only is None else {id(s) for s in only}
        with self._lock:
            for key, server in list(self._servers.items()):
                if named is not None and id(server) not in named:
                    continue
                if id(server) in self._owned:
                    server.stop()
                    self._owned.discard(id(server))
                del self._servers[key]


def keep_serving(server: "VLLMServer", max_lora_rank: int) -> "VLLMServer":
    """`server`, restarted wider when adapters of `max_lora_rank` exceed its --max-lora-rank, or restarted
    when it died (same port and key both ways; callers reload adapters, `server.restarts` changed)."""
    needed = server_lora_rank(max_lora_rank)
    if server.config.enable_lora and not server.weight_swap and server.config.max_lora_rank < needed:
        log.warning(
            "restarting the vLLM server at %s with max_lora_rank %d (was %d) for LoRA rank %d",
            server.base_url,
            needed,
            server.config.max_lora_rank,
            max_lora_rank,
        )
        server.config = server.config.model_copy(update={"max_lora_rank": needed})
        server.restart()
    elif not server.is_alive():
        log.warning("%s\nRestarting it (same port and key).", ServerDied.of(server))
        server.ensure_running()
    return server


PROCESS_POOL = ServerPool()  # the Prefect tasks' servers: one per base model per worker process


def endpoint_for(
    base_model: str,
    inference_url: str | None = None,
    *,
    max_lora_rank: int = 8,
    pool: ServerPool | None = None,
    options: "ServerOptions | dict[str, Any] | None" = None,
) -> Endpoint:
    """The endpoint at `inference_url` (key from ART_INFERENCE_API_KEY), else this process's own server
    (started with `options`, the run's server settings)."""
    if inference_url:
        key = get_settings().inference_api_key
        return discover_endpoint(inference_url, key.get_secret_value() if key else None)
    return Endpoint.of((pool or PROCESS_POOL).get(base_model, max_lora_rank=max_lora_rank, options=options))


def chosen_settings(options: "ServerOptions | dict[str, Any] | None") -> dict[str, Any]:
    """The server settings a run chose explicitly, as ServerConfig fields (unset fields keep the pool's and
    ServerConfig's defaults); what ServerPool and the Ray replicas compare with a running server's settings.

    >>> chosen_settings({"dtype": "float32"})
    {'dtype': 'float32'}
    """
    if options is None:
        return {}
    if isinstance(options, dict):
        return dict(options)
    return options.model_dump(exclude_unset=True)


def trainer_gpus(config: "TrainConfig") -> set[int] | None:
    """The GPUs (as this process numbers them) a train step with `config` takes on this machine: rank r trains on
    cuda:r, so 0..ranks-1; None when Ray places the ranks (any GPU of the node may be one).

    >>> trainer_gpus(TrainConfig(ranks=2))                     # doctest: +SKIP
    {0, 1}
    """
    return None if config.ranks_on == "ray" else set(range(config.ranks))


def sleeps_for_training(server: "VLLMServer", config: "TrainConfig") -> bool:
    """Whether `server` must sleep while a step with `config` trains in this process: yes when they may share a
    GPU (the server's gpu_ids unset, or meeting the trainer's GPUs); no on GPUs of its own, where it keeps serving.

    >>> sleeps_for_training(server_on([1]), TrainConfig(ranks=1))    # GPU 1 vs the trainer's GPU 0   # doctest: +SKIP
    False
    """
    ids, trainer = server.config.gpu_ids, trainer_gpus(config)
    return ids is None or trainer is None or bool(trainer & set(ids))


def servers_sharing(
    base_model: str, inference_url: str | None = None, pool: ServerPool | None = None
) -> list["VLLMServer"]:
    """The servers a trainer in this process shares its device with: the one at `inference_url` if this
    process runs it, else the pool's server for the base model (none when the server lives elsewhere)."""
    if inference_url:
        server = live_server_at(inference_url)
        return [server] if server is not None else []
    return [s for s in (pool or PROCESS_POOL).servers(base_model) if s.is_alive()]
