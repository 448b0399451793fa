"""Rollouts over several replicas, without a server: which replica each rollout takes, and how a replica
that does not share our files is told where an adapter is (and fetches it from storage itself)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from art_core.adapters import ZERO_ADAPTER_SOURCE, adapter_source, fetch_adapter
from art_core.envs.base import Environment, Scenario
from art_core.rollouts import Balancer, balanced_rollout
from art_core.serving import Endpoint
from art_core.storage import Storage
from art_core.store import ModelStore
from art_core.trajectories import Trajectory


class SlowEnv(Environment):
    """Replica a answers in 0.05 s, replica b in 0.01 s: the faster one should get more of the work."""

    name = "slow"

    def scenarios(self, split):
        return [Scenario(id="s")]

    async def rollout(self, client, model, scenario, **sampling):
        await asyncio.sleep(0.05 if "a:1" in str(client.base_url) else 0.01)
        return Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}], reward=1.0)


def endpoints(*hosts: str, shares_files: bool = True) -> list[Endpoint]:
    return [
        Endpoint(base_url=f"http://{h}/v1", api_key="k", base_name="tiny", shares_files=shares_files) for h in hosts
    ]


def test_each_rollout_takes_the_least_busy_replica_and_records_it():
    async def main():
        balancer = Balancer(endpoints("a:1", "b:2"))
        limit = asyncio.Semaphore(4)  # as gather_trajectory_groups does: a few at a time, the rest wait

        async def one():
            async with limit:
                return await balanced_rollout(SlowEnv(), balancer, "m@0", Scenario(id="s"))

        done = await asyncio.gather(*(one() for _ in range(40)))
        await balancer.close()
        return done, balancer

    done, balancer = asyncio.run(main())
    by = [t.metadata["replica"] for t in done]
    assert set(by) == {"http://a:1/v1", "http://b:2/v1"}
    assert by.count("http://b:2/v1") > by.count("http://a:1/v1"), "the faster replica frees up sooner and gets more"
    assert balancer.in_flight == [0, 0] and sum(balancer.served) == 40


def test_no_endpoint_is_refused():
    with pytest.raises(ValueError, match="no inference endpoint"):
        Balancer([])


def _checkpoint(root: str, step: int, scratch) -> Storage:
    """Storage at `root` holding a complete checkpoint `step` of model p/m (written from `scratch`)."""
    storage = Storage(root)
    store = ModelStore(storage, "p", "m")
    local = os.path.join(str(scratch), f"src-{step}")
    os.makedirs(local, exist_ok=True)
    with open(os.path.join(local, "adapter_config.json"), "w") as f:
        json.dump({"r": 8}, f)
    storage.put_dir(local, store.checkpoint(step))
    return storage


def test_a_replica_elsewhere_is_given_storage_urls_never_local_paths(tmp_path, moto_s3):
    storage = _checkpoint(moto_s3, 2, tmp_path)
    store = ModelStore(storage, "p", "m")
    remote = endpoints("gpu-node:8000", shares_files=False)[0]
    assert adapter_source(remote, store, "/models/tiny", 2) == store.checkpoint(2)
    assert adapter_source(remote, store, "/models/tiny", 0) == ZERO_ADAPTER_SOURCE
    with pytest.raises(FileNotFoundError, match="complete steps: \\[2\\]"):
        adapter_source(remote, store, "/models/tiny", 3)
    # ...and the replica turns the URL into a local copy, once, with the checkpoint's files.
    local = fetch_adapter(store.checkpoint(2), "/models/tiny", cache=str(tmp_path / "cache"))
    assert local.startswith(str(tmp_path / "cache")) and os.path.exists(os.path.join(local, "adapter_config.json"))
    assert fetch_adapter(store.checkpoint(2), "/models/tiny", cache=str(tmp_path / "cache")) == local


def test_local_storage_cannot_reach_a_replica_elsewhere(tmp_path):
    store = ModelStore(_checkpoint(str(tmp_path / "runs"), 1, tmp_path), "p", "m")
    with pytest.raises(ValueError, match="s3://bucket/prefix"):
        adapter_source(endpoints("gpu-node:8000", shares_files=False)[0], store, "/models/tiny", 1)
    assert adapter_source(endpoints("127.0.0.1:8000")[0], store, "/models/tiny", 1) == store.checkpoint(1)


def test_the_middleware_rewrites_a_storage_url_to_the_fetched_copy(tmp_path, moto_s3, monkeypatch):
    from art_core.inference.middleware import with_fetched_adapter

    monkeypatch.setenv("ART_ADAPTER_CACHE", str(tmp_path / "cache"))
    store = ModelStore(_checkpoint(moto_s3, 1, tmp_path), "p", "m")
    body = json.dumps({"lora_name": "m@1", "lora_path": store.checkpoint(1), "load_inplace": True}).encode()
    out = json.loads(asyncio.run(with_fetched_adapter(body)))
    assert out["lora_name"] == "m@1" and out["lora_path"].startswith(str(tmp_path / "cache"))
    assert asyncio.run(with_fetched_adapter(json.dumps({"lora_name": "x", "lora_path": "/a/folder"}).encode())) is None


def test_replicas_started_here_get_the_runs_server_settings():
    """A run's `server` settings (dtype, weight_swap, extra_args, ...) reach every replica it starts, as they reach
    its one server: they were dropped for replicas, which then served with the defaults."""
    from art_core.fanout import Replicas
    from art_core.inference.server import ServerOptions

    class Pool:
        def __init__(self):
            self.asked = []

        def get(self, base_model, *, max_lora_rank=8, replica=0, options=None):
            self.asked.append((replica, options))
            return type("Server", (), {"base_url": f"http://r{replica}:1/v1", "api_key": "k", "served_model_name": "m"})

    pool, settings = Pool(), ServerOptions(dtype="float32", weight_swap=False)
    found = Replicas(count=2).endpoints("/models/tiny", pool=pool, options=settings)
    assert [e.base_url for e in found] == ["http://r0:1/v1", "http://r1:1/v1"]
    assert pool.asked == [(0, settings), (1, settings)]
