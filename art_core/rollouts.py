"""Roll out an environment's scenarios in groups against a served model, one training step's worth.

The pieces a step needs, each a plain function over URLs and storage paths so it can run on any
worker: how a step is rolled out (RolloutSpec), which scenarios it draws, and the rollouts themselves.
Servers and adapters are art_core.serving's; the reuse-or-roll-out decision is art_core.step's.

    endpoint = Endpoint(base_url="http://127.0.0.1:8000/v1", api_key="...", base_name="tiny")
    scenarios = scenarios_for_step(env, "train", step=2, count=4, seed=0)
    groups = await rollout_groups(env, endpoint, "agent@2", scenarios, group_size=8)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
from typing import TYPE_CHECKING, Any, AsyncIterator

from pydantic import BaseModel, ConfigDict, Field

from art_core.envs import evaluation_options, load_environment
from art_core.envs.base import Environment, Scenario
from art_core.gather import gather_trajectory_groups, trajectory_group
from art_core.storage import Storage
from art_core.store import ModelStore, file_fingerprint
from art_core.trajectories import TrajectoryGroup

if TYPE_CHECKING:
    from art_core.serving import Endpoint


class RolloutSpec(BaseModel):
    """How a step is rolled out: environment, batch shape, sampling and how many failures are tolerated.

    A small storable value (task parameter, cache key): raising `steps` or the learning rate must not
    change it, so step 0's rollouts stay cached.
    """

    # forbid: a misspelt field (`options=` for `env_options=`) would otherwise be dropped without a word
    model_config = ConfigDict(frozen=True, extra="forbid")

    environment: str
    env_options: dict[str, Any] = Field(default_factory=dict)
    groups_per_step: int = 2
    group_size: int = 4
    seed: int = 0
    sampling: dict[str, Any] = Field(default_factory=dict)
    max_exceptions: float = 0

    def load_environment(self) -> Environment:
        return load_environment(self.environment, **self.env_options)

    def for_evaluation(self, sampling: dict[str, Any]) -> RolloutSpec:
        """The spec evaluations play (and cache) under: `sampling` (the evaluation's), and the environment's
        options less those that shape only the training reward (`art_core.envs.evaluation_options`)."""
        return self.model_copy(
            update={"sampling": sampling, "env_options": evaluation_options(self.environment, self.env_options)}
        )


def checkpoint_fingerprint(storage: Storage, project: str, name: str, step: int) -> str:
    """What identifies the weights a step samples from: "base" at step 0, else the adapter file's ETag (S3)
    or size and mtime (local). A cache keyed on it misses when a checkpoint is retrained under the same name.

    >>> checkpoint_fingerprint(Storage("/tmp/art"), "demo", "agent", 0)
    'base'
    """
    if step == 0:
        return "base"
    store = ModelStore(storage, project, name)
    folder = store.checkpoint(step)
    if not store.is_complete(step):
        raise FileNotFoundError(f"checkpoint {folder} is missing or incomplete: train step {step} first")
    path = storage.join(folder, "adapter_model.safetensors")
    return file_fingerprint(storage, path if storage.exists(path) else storage.join(folder, "COMPLETE"))


def scenarios_for_step(env: Environment, split: str, step: int, count: int, seed: int = 0) -> list[Scenario]:
    """The `count` scenarios a step draws: a seeded shuffle walked in order, wrapping around.

    The same (split, step, count, seed) always gives the same scenarios, which is what lets a re-run hit
    the cache; a later step (retraining past the old last step) gets the next, fresh ones.
    """
    pool = list(env.scenarios(env.check_split(split)))
    if not pool:
        raise ValueError(f"environment {env.name!r} has no {split!r} scenarios")
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    start = step * count
    return [pool[order[(start + i) % len(pool)]] for i in range(count)]


# ---- seeded sampling: the same seed, checkpoint and scenarios roll out the same trajectories -----------------------
def derive_seed(seed: int, *parts: Any) -> int:
    """A 31-bit sampling seed derived from `seed` and `parts` (a step, a scenario id, a rollout's index):
    the same parts always give the same seed, different ones practically never do.

    >>> derive_seed(0, "step", 3) == derive_seed(0, "step", 3) != derive_seed(0, "step", 4)
    True
    """
    digest = hashlib.sha256(json.dumps([seed, *parts], default=str).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def step_sampling(sampling: dict[str, Any], step: int) -> dict[str, Any]:
    """The sampling of step `step`'s rollouts: a seed, if one is set, mixed with the step, so a step that
    draws a scenario again (the next epoch) does not replay the same random numbers on it."""
    if sampling.get("seed") is None:
        return sampling
    return {**sampling, "seed": derive_seed(sampling["seed"], "step", step)}


def group_seeds(seed: int | None, scenarios: list[Scenario]) -> list[int] | None:
    """One seed per group: from `seed`, the scenario's id and how many times it came earlier in the list
    (a step that wraps around a small pool draws a scenario twice: its two groups differ). None: unseeded."""
    if seed is None:
        return None
    seen: dict[str, int] = {}
    seeds = []
    for s in scenarios:
        seeds.append(derive_seed(seed, s.id, seen.get(s.id, 0)))
        seen[s.id] = seen.get(s.id, 0) + 1
    return seeds


async def rollout_groups(
    env: Environment,
    endpoint: "Endpoint | list[Endpoint]",
    model: str,
    scenarios: list[Scenario],
    group_size: int,
    *,
    max_exceptions: int | float = 0,
    sampling: dict[str, Any] | None = None,
    pbar_desc: str | None = "gather",
    seeds: list[int] | None = None,
) -> list[TrajectoryGroup]:
    """Roll each scenario out `group_size` times against `model`; groups in scenario order.

    Given several endpoints (replicas serving `model` under the same name), each rollout goes to the one
    with the fewest rollouts in flight (Balancer, below) and records it in its metadata. Each
    group's metadata records the scenario id, so a stored step can be traced back to its inputs.

    `sampling["seed"]` (not None) seeds every rollout on its own (`seed` of each chat call, which vLLM
    honours per request, whatever else it batches): rollout i of a group gets a seed derived from the
    group's (`group_seeds`, or `seeds` given one per group) and i, so one checkpoint rolls the same
    scenarios out the same way again, and no two rollouts of a group share random numbers.
    """
    balancer = Balancer(endpoint if isinstance(endpoint, list) else [endpoint])
    sampling = dict(sampling or {})
    seed = sampling.pop("seed", None)  # each rollout gets its own, below
    if seeds is None:
        seeds = group_seeds(seed, scenarios)

    def rollouts(g: int, s: Scenario):
        for i in range(group_size):
            seeded = {"seed": derive_seed(seeds[g], i)} if seeds is not None else {}
            yield balanced_rollout(env, balancer, model, s, **sampling, **seeded)

    try:
        pending = [
            trajectory_group(rollouts(g, s), metadata={"scenario_id": s.id, "split": s.split})
            for g, s in enumerate(scenarios)
        ]
        return await gather_trajectory_groups(pending, max_exceptions=max_exceptions, pbar_desc=pbar_desc)
    finally:
        await balancer.close()


# ---- several endpoints: the least busy one takes each rollout ---------------------------------------------------------------------
class Balancer:
    """Least-in-flight choice among endpoints, one lease per rollout (ties: the one that served fewer)."""

    def __init__(self, endpoints: list[Endpoint]) -> None:
        if not endpoints:
            raise ValueError("no inference endpoint to roll out on")
        self.endpoints = endpoints
        self.clients = [e.client() for e in endpoints]
        self.in_flight = [0] * len(endpoints)
        self.served = [0] * len(endpoints)

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[tuple[Endpoint, Any]]:
        i = min(range(len(self.endpoints)), key=lambda k: (self.in_flight[k], self.served[k]))
        self.in_flight[i] += 1
        try:
            yield self.endpoints[i], self.clients[i]
        finally:
            self.in_flight[i] -= 1
            self.served[i] += 1

    async def close(self) -> None:
        for c in self.clients:
            await c.close()


async def balanced_rollout(env: "Environment", balancer: Balancer, model: str, scenario: "Scenario", **sampling: Any):
    """One rollout on the least busy endpoint; the trajectory records which one."""
    async with balancer.lease() as (endpoint, client):
        trajectory = await env.rollout(client, model, scenario, **sampling)
    trajectory.metadata["replica"] = endpoint.base_url
    return trajectory


def reward_summary(groups: list[TrajectoryGroup]) -> dict[str, float]:
    """Mean, min and max reward, trajectory count and how many groups have no reward spread (GRPO learns nothing there)."""
    rewards = [r for g in groups for r in g.rewards()]
    flat = sum(1 for g in groups if len(set(g.rewards())) <= 1)
    return {
        "reward": sum(rewards) / len(rewards) if rewards else float("nan"),
        "reward_min": min(rewards) if rewards else float("nan"),
        "reward_max": max(rewards) if rewards else float("nan"),
        "trajectories": float(len(rewards)),
        "exceptions": float(sum(len(g.exceptions) for g in groups)),
        "groups_without_spread": float(flat),
    }
