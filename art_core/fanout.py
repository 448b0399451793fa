"""Rollouts spread over several inference replicas, balanced by load, in this process or on Ray.

A step's rollouts go to N endpoints that all serve the step's adapter under the same name:

- replicas given by URL (a cluster's nodes, `python -m art_core.replica`), or started by us: in this
  process (ServerPool) or, with `on="ray"`, as Ray actors placed by the cluster (one GPU each on GPU nodes);
- balanced by load: each rollout takes the endpoint with the fewest rollouts in flight when it starts
  (art_core.rollouts.Balancer; at most 64 run at once, so later rollouts go wherever earlier ones
  finished first); on Ray the driver
  hands out whole groups the same way, a few per replica at a time;
- a replica that does not share this machine's files gets each adapter as a storage URL and fetches it
  itself (art_core.adapters.adapter_source), never as a local path.

    replicas = Replicas(count=2, on="ray")                       # or Replicas(urls=["http://a:8000/v1", ...])
    endpoints = replicas.endpoints("/models/tiny", max_lora_rank=8)
    groups = roll_out(spec, endpoints, "agent@3", scenarios, replicas)   # list[TrajectoryGroup], in order

Each trajectory records the replica that served it (`metadata["replica"]`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from art_core.serving import Endpoint, ServerPool, chosen_settings, discover_endpoint

if TYPE_CHECKING:
    from art_core.envs.base import Scenario
    from art_core.inference.server import ServerOptions
    from art_core.rollouts import RolloutSpec
    from art_core.trajectories import TrajectoryGroup

log = logging.getLogger(__name__)


class Replicas(BaseModel):
    """Which inference replicas a step's rollouts spread over, and where the rollouts run.

    urls: replicas given by base URL (their key: ART_INFERENCE_API_KEY); when empty, `count` replicas
    are started: in this process's ServerPool (`on="process"`) or as Ray actors (`on="ray"`).
    """

    model_config = ConfigDict(frozen=True)

    urls: tuple[str, ...] = ()
    count: int = Field(1, ge=1)
    on: Literal["process", "ray"] = "process"
    ray_address: str | None = None

    def endpoints(
        self,
        base_model: str,
        *,
        max_lora_rank: int = 8,
        pool: ServerPool | None = None,
        options: ServerOptions | dict[str, Any] | None = None,
    ) -> list[Endpoint]:
        """The endpoints of every replica, started (or widened for the LoRA rank) where needed; a replica started
        here gets `options` (the run's server settings, as its one server would), and one running with other
        settings is started again with these (none given: the running ones are kept)."""
        if self.urls:
            from art_core.settings import get_settings

            key = get_settings().inference_api_key
            return [discover_endpoint(u, key.get_secret_value() if key else None) for u in self.urls]
        if self.on == "ray":
            return RAY_REPLICAS.endpoints(base_model, self.count, max_lora_rank, self.ray_address, options)
        from art_core.serving import PROCESS_POOL

        pool = pool or PROCESS_POOL
        servers = [
            pool.get(base_model, max_lora_rank=max_lora_rank, replica=i, options=options) for i in range(self.count)
        ]
        return [Endpoint.of(s) for s in servers]


# ---- Ray ---------------------------------------------------------------------------------------------
_RAY_LOCK = threading.Lock()


def connect_ray(address: str | None = None):
    """`ray`, initialised once per process: `address` joins a cluster; None starts a local one.

    Workers import this checkout (PYTHONPATH) and inherit the settings that keep them offline and quiet.
    """
    import ray

    with _RAY_LOCK:
        if not ray.is_initialized():
            repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            env = {k: v for k, v in os.environ.items() if k.startswith(("ART_", "AWS_", "LITELLM_", "WANDB_", "HF_"))}
            env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
            env.setdefault("TOKENIZERS_PARALLELISM", "false")
            ray.init(
                address=address,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                runtime_env={"env_vars": env},
            )
            log.info("Ray: %s", "joined " + address if address else "started a local cluster")
    return ray


class RayReplicaPool:
    """vLLM replicas as Ray actors, per base model, kept for the life of this process (like ServerPool)."""

    def __init__(self) -> None:
        self._actors: dict[tuple[str, int], Any] = {}
        self._settings: dict[tuple[str, int], dict[str, Any]] = {}  # the server settings each actor started with
        self._keys: dict[str, str] = {}  # base model -> the key the replicas share (never stored)
        self._lock = threading.Lock()

    def endpoints(
        self,
        base_model: str,
        count: int,
        max_lora_rank: int,
        address: str | None,
        options: ServerOptions | dict[str, Any] | None = None,
    ) -> list[Endpoint]:
        ray = connect_ray(address)
        from art_core.replica import ReplicaActor

        wanted = chosen_settings(options)
        with self._lock:
            key = self._keys.setdefault(base_model, secrets.token_urlsafe(24))
            local = address is None  # our own one-node cluster: the replicas stay on loopback
            overrides: dict[str, Any] = {**wanted, "api_key": key}
            if not local:
                overrides["host"] = "0.0.0.0"
            gpus = 1 if _cluster_has_gpus(ray) else 0
            calls = []
            for i in range(count):
                actor = self._actors.get((base_model, i))
                if actor is not None and wanted and self._settings.get((base_model, i)) != wanted:  # as ServerPool
                    log.warning(
                        "restarting Ray replica %d of %s with the run's server settings %s", i, base_model, wanted
                    )
                    _stop_actor(ray, actor)
                    actor = None
                if actor is None:
                    actor = (
                        ray.remote(ReplicaActor)
                        .options(num_cpus=0, num_gpus=gpus, max_concurrency=2)
                        .remote(base_model, max_lora_rank, overrides)
                    )
                    self._actors[(base_model, i)] = actor
                    self._settings[(base_model, i)] = wanted
                calls.append(actor.widen.remote(max_lora_rank))
            addresses = ray.get(calls)
        return [Endpoint(base_url=url, api_key=key, base_name=name, shares_files=False) for url, name in addresses]

    def close(self) -> None:
        """Stop every replica actor of this process."""
        if not self._actors:
            return
        import ray

        with self._lock:
            for actor in self._actors.values():
                _stop_actor(ray, actor)
            self._actors.clear()
            self._settings.clear()


def _stop_actor(ray: Any, actor: Any) -> None:
    """Stop a replica actor's server, then the actor; whatever fails (a dead actor) is past caring."""
    with contextlib.suppress(Exception):
        ray.get(actor.stop.remote(), timeout=60)
    with contextlib.suppress(Exception):
        ray.kill(actor)


def _cluster_has_gpus(ray: Any) -> bool:
    return ray.cluster_resources().get("GPU", 0) > 0


RAY_REPLICAS = RayReplicaPool()


def shutdown_ray() -> None:
    """Stop this process's replica actors and leave the Ray cluster (a local one started here stops)."""
    RAY_REPLICAS.close()
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _group_on_ray(
    spec_json: str, endpoint: dict[str, Any], model: str, scenario_json: str, group_size: int, seed: int | None
) -> str:
    """In a Ray worker: one group's rollouts on one endpoint; returned as JSON (failures kept, not raised).
    `seed`: the group's seed (art_core.rollouts.group_seeds), so Ray samples what a process would."""
    from art_core.envs.base import Scenario
    from art_core.rollouts import RolloutSpec, rollout_groups

    spec = RolloutSpec.model_validate_json(spec_json)
    ep = Endpoint(**endpoint)
    groups = asyncio.run(
        rollout_groups(
            spec.load_environment(),
            [ep],
            model,
            [Scenario.model_validate_json(scenario_json)],
            group_size,
            max_exceptions=group_size,
            sampling=spec.sampling,
            pbar_desc=None,
            seeds=None if seed is None else [seed],
        )
    )
    return groups[0].model_dump_json()


def roll_out_on_ray(
    spec: "RolloutSpec", endpoints: list[Endpoint], model: str, scenarios: "list[Scenario]", address: str | None = None
) -> "list[TrajectoryGroup]":
    """Every scenario's group as a Ray task, a few per replica at a time (the least busy replica gets the
    next group); groups return in scenario order. More failed rollouts than spec.max_exceptions raise
    TooManyExceptions, as in-process rollouts do."""
    from art_core.gather import TooManyExceptions, exception_limit
    from art_core.rollouts import group_seeds
    from art_core.trajectories import TrajectoryGroup

    ray = connect_ray(address)
    task = ray.remote(num_cpus=0, max_retries=0)(_group_on_ray)
    per_replica = max(1, math.ceil(len(scenarios) / (2 * len(endpoints))))
    spec_json = spec.model_dump_json()
    seeds = group_seeds(spec.sampling.get("seed"), scenarios)
    fields = [{**e.model_dump(), "api_key": e.api_key} for e in endpoints]
    queue, running = deque(enumerate(scenarios)), {}
    load, results = [0] * len(endpoints), [None] * len(scenarios)
    while queue or running:
        while queue and min(load) < per_replica:
            e = min(range(len(endpoints)), key=lambda k: load[k])
            i, s = queue.popleft()
            seed = None if seeds is None else seeds[i]
            running[task.remote(spec_json, fields[e], model, s.model_dump_json(), spec.group_size, seed)] = (i, e)
            load[e] += 1
        done, _ = ray.wait(list(running), num_returns=1)
        for ref in done:
            i, e = running.pop(ref)
            load[e] -= 1
            results[i] = TrajectoryGroup.model_validate_json(ray.get(ref))
    groups: list[TrajectoryGroup] = [g for g in results if g is not None]
    failures = [x for g in groups for x in g.exceptions]
    total = len(scenarios) * spec.group_size
    if len(failures) > exception_limit(spec.max_exceptions, total):
        raise TooManyExceptions(
            f"{len(failures)} rollouts failed, more than max_exceptions={spec.max_exceptions} "
            f"allows; first failure: {failures[0].type}: {failures[0].message}"
        )
    return groups
