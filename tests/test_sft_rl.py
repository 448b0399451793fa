"""SFT then GRPO through the library door, as ART's sft-rl notebook does: `backend.train_sft` on the retail expert's
demonstrations (a JSONL file), then `model.train` on groups the environment rolled out with the fine-tuned step.
The tiny random model learns nothing here; the test is about the mechanics: numbering, serving, history."""

from __future__ import annotations

import asyncio

import pytest

import art_core as art
from art_core.sft import TrainSFTConfig
from art_core.store import ModelStore


@pytest.mark.vllm
async def test_sft_on_expert_demonstrations_then_a_grpo_step(vllm_server, tiny_model_path, tmp_path):
    from art_core.envs import load_environment
    from art_core.envs.customer_service.expert import build_demonstrations
    from art_core.local import LocalBackend

    data = tmp_path / "retail-demos.jsonl"
    # build_demonstrations runs its own event loop (asyncio.run): from async code, in a thread
    demos = await asyncio.to_thread(build_demonstrations, "retail", limit=2, out=data)
    assert len(demos.rows) == 2
    backend = LocalBackend(path=str(tmp_path / ".art"), server=vllm_server)
    model = art.TrainableModel(name="cs", project="sft-rl", base_model=tiny_model_path)
    await model.register(backend)

    sft = await backend.train_sft(model, str(data), TrainSFTConfig(learning_rate=1e-3, batch_size=2))
    assert sft.step == 1 and model.get_inference_name() == "cs@1"  # the SFT checkpoint is what rollouts sample

    env = load_environment("retail", max_turns=2)
    scenario = env.scenarios("train")[0]
    client = model.openai_client()
    group = art.TrajectoryGroup(
        env.rollout(client, model.get_inference_name(), scenario, max_tokens=16, temperature=1.0) for _ in range(2)
    )
    groups = await art.gather_trajectory_groups([group], pbar_desc=None)
    for i, trajectory in enumerate(groups[0].trajectories):  # a signal whatever the random model said
        trajectory.reward = float(i)
    trained = await model.train(groups, config=art.TrainConfig(learning_rate=1e-3))
    assert trained.step == 2 and model.get_inference_name() == "cs@2"  # GRPO continues SFT's numbering

    history = ModelStore(backend.storage, "sft-rl", "cs").read_history()
    assert [r["step"] for r in history if "sft/loss" in r] == [1]
    assert [r["step"] for r in history if "train/loss" in r] == [2]
    await backend.close()
