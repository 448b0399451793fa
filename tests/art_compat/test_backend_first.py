"""ART 2026's backend-first loop: after `await backend.train(model, groups, ...)` rollouts sample the new step.

Before this, `model.get_inference_name()` kept saying `name@0` after backend.train: every later rollout
silently sampled the untrained step, and once step 0 was unloaded (keep_steps) rollouts failed with 404.
"""

from __future__ import annotations

import pytest

import art_core as art
from art_core.local import LocalBackend

pytestmark = pytest.mark.vllm


async def rollout(model: art.TrainableModel) -> art.Trajectory:
    client = model.openai_client()
    messages = [{"role": "user", "content": "Say something."}]
    completion = await client.chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_completion_tokens=8
    )
    choice = completion.choices[0]
    ids = [int(t.token.removeprefix("token_id:")) for t in choice.logprobs.content]
    # The model that answered is the one rollouts asked for: the reply names it.
    return art.Trajectory(
        messages_and_choices=[*messages, choice],
        reward=sum(i % 7 for i in ids) / 48,
        metadata={"served_by": completion.model},
    )


async def test_the_inference_name_follows_the_step_after_backend_train(vllm_server, tiny_model_path, tmp_path):
    backend = LocalBackend(path=str(tmp_path / ".art"), server=vllm_server, keep_steps=1)
    model = art.TrainableModel(name="follow", project="backend-first", base_model=tiny_model_path)
    await model.register(backend)
    for expected in (1, 2, 3):
        groups = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(rollout(model) for _ in range(4))], pbar_desc=None
        )
        assert {t.metadata["served_by"] for t in groups[0]} == {f"follow@{expected - 1}"}
        result = await backend.train(model, groups, learning_rate=1e-3)
        await model.log(groups, metrics=result.metrics, step=result.step, split="train")
        assert result.step == expected and model.get_inference_name() == f"follow@{expected}"
        if len(set(groups[0].rewards())) > 1:
            assert result.metrics["grad_norm"] > 0
    # keep_steps=1: the older steps are unloaded, and rollouts still work because they ask for the latest.
    assert (await rollout(model)).metadata["served_by"] == "follow@3"
    await backend.close()
