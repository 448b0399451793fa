"""Roll out an environment's scenarios in groups against a served model, one training step's worth.

The pieces a pipeline step needs, each a plain function over URLs and storage paths so it can run on
any worker: which scenarios a step draws, which adapter the server must have loaded, and the rollouts.

    endpoint = Endpoint(base_url="http://127.0.0.1:8000/v1", api_key="...", base_name="tiny")
    load_adapter(endpoint, "agent@2", "/data/art/demo/models/agent/checkpoints/0002")
    scenarios = scenarios_for_step(env, "train", step=2, count=4, seed=0)
    groups = await rollout_groups(env, endpoint, "agent@2", scenarios, group_size=8)
"""

from __future__ import annotations

import hashlib
import os
import random
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from art_core.envs.base import Environment, Scenario
from art_core.gather import gather_trajectory_groups, trajectory_group
from art_core.storage import Storage
from art_core.trajectories import TrajectoryGroup


class Endpoint(BaseModel):
    """An OpenAI-compatible vLLM server: where it is, its key (never stored) and its base model's name."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    api_key: str | None = Field(None, exclude=True, repr=False)
    base_name: str

    def client(self, **kwargs: Any):
        """An `openai.AsyncOpenAI` for this server (no retries: a dead server must show, not stall)."""
        import openai

        kwargs.setdefault("timeout", 600)
        kwargs.setdefault("max_retries", 0)
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "none", **kwargs)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def root_url(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1")


def discover_endpoint(base_url: str, api_key: str | None = None) -> Endpoint:
    """An Endpoint for a running server, its base model's name read from /v1/models (the entry with no parent).

    >>> discover_endpoint("http://127.0.0.1:8000/v1", "key").base_name   # doctest: +SKIP
    'tiny'
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=30.0)
    except httpx.HTTPError as e:
        raise ConnectionError(f"inference server {base_url} is unreachable ({e}); start it or fix inference_url") from e
    if r.status_code == 401:
        raise PermissionError(f"inference server {base_url} refused the key: set ART_INFERENCE_API_KEY to its key")
    r.raise_for_status()
    bases = [m["id"] for m in r.json()["data"] if not m.get("parent")]
    if not bases:
        raise RuntimeError(f"inference server {base_url} lists no base model in /v1/models")
    return Endpoint(base_url=base_url.rstrip("/"), api_key=api_key, base_name=bases[0])


def local_checkpoint(storage: Storage, checkpoint_uri: str, cache_dir: str | None = None) -> str:
    """A local folder holding the checkpoint (itself on a local root, else a copy under the cache dir)."""
    if storage.is_local:
        return checkpoint_uri
    cache_dir = cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "art", "adapters")
    # The URI names the checkpoint uniquely; a complete copy is reused, a half-copied one redone.
    digest = hashlib.sha1(checkpoint_uri.encode()).hexdigest()[:16]
    local = os.path.join(cache_dir, digest)
    if not os.path.exists(os.path.join(local, "COMPLETE")):
        storage.get_dir(checkpoint_uri, local)
    return local


def load_adapter(endpoint: Endpoint, lora_name: str, local_path: str) -> None:
    """Load (or reload in place) a LoRA adapter into the server under `lora_name`.

    >>> load_adapter(endpoint, "agent@1", "/art/demo/models/agent/checkpoints/0001")   # doctest: +SKIP
    """
    r = httpx.post(
        f"{endpoint.base_url}/load_lora_adapter",
        json={"lora_name": lora_name, "lora_path": local_path, "load_inplace": True},
        headers=endpoint.headers(),
        timeout=300.0,
    )
    if r.status_code >= 400:
        raise RuntimeError(
            f"the server at {endpoint.base_url} refused to load adapter {lora_name!r} from {local_path}: "
            f"{r.status_code} {r.text[:300]} (it needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
        )


def checkpoint_fingerprint(storage: Storage, project: str, name: str, step: int) -> str:
    """What identifies the weights a step samples from: "base" at step 0, else the adapter file's ETag (S3)
    or size and mtime (local). A cache keyed on it misses when a checkpoint is retrained under the same name.

    >>> checkpoint_fingerprint(Storage("/tmp/art"), "demo", "agent", 0)
    'base'
    """
    if step == 0:
        return "base"
    folder = storage.checkpoint_path(project, name, step)
    if not storage.is_complete(folder):
        raise FileNotFoundError(f"checkpoint {folder} is missing or incomplete: train step {step} first")
    path = storage.join(folder, "adapter_model.safetensors")
    info = storage.fs.info(path if storage.exists(path) else storage.join(folder, "COMPLETE"))
    return str(info.get("ETag") or f"{info.get('size')}-{info.get('mtime') or info.get('LastModified')}")


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


async def rollout_groups(
    env: Environment,
    endpoint: Endpoint,
    model: str,
    scenarios: list[Scenario],
    group_size: int,
    *,
    max_exceptions: int | float = 0,
    sampling: dict[str, Any] | None = None,
    pbar_desc: str | None = "gather",
) -> list[TrajectoryGroup]:
    """Roll each scenario out `group_size` times against `model` on the endpoint; groups in scenario order.

    Each group's metadata records the scenario id, so a stored step can be traced back to its inputs.
    """
    client = endpoint.client()
    sampling = sampling or {}
    try:
        pending = [
            trajectory_group(
                (env.rollout(client, model, s, **sampling) for _ in range(group_size)), scenario_id=s.id, split=s.split
            )
            for s in scenarios
        ]
        return await gather_trajectory_groups(pending, max_exceptions=max_exceptions, pbar_desc=pbar_desc)
    finally:
        await client.close()


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
