"""ART's `PipelineTrainer` and `make_group_rollout_fn` over LocalBackend: rollouts overlap training, never more
than `max_steps_off_policy` steps behind, and each step is trained and logged."""

from __future__ import annotations

import pytest

import art_core as art
from art_core.pipeline_trainer import PipelineTrainer, make_group_rollout_fn
from art_core.store import ModelStore

pytestmark = pytest.mark.vllm


async def rollout(model: art.TrainableModel, scenario: int, config: None) -> art.Trajectory:
    messages = [{"role": "user", "content": f"Say {scenario}."}]
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_completion_tokens=6
    )
    choice = completion.choices[0]
    return art.Trajectory(messages_and_choices=[*messages, choice], reward=len(set(choice.message.content or "")) / 10)


async def test_pipeline_trainer_trains_steps_with_bounded_staleness(vllm_server, tiny_model_path, tmp_path):
    from art_core.local import LocalBackend

    backend = LocalBackend(path=str(tmp_path / ".art"), server=vllm_server)
    model = art.TrainableModel(name="piped", project="pipeline", base_model=tiny_model_path)
    await model.register(backend)
    evaluated = []

    async def evaluate(model, step, config):
        evaluated.append(step)

    trainer = PipelineTrainer(
        model,
        backend,
        make_group_rollout_fn(rollout, n=3),
        range(20),
        num_rollout_workers=2,
        min_batch_size=2,
        max_steps_off_policy=1,
        learning_rate=1e-3,
        max_steps=2,
        eval_fn=evaluate,
        eval_every_n_steps=2,
    )
    await trainer.train()
    assert await model.get_step() == 2 and evaluated == [0, 2]
    records = [
        r for r in ModelStore(backend.storage, "pipeline", "piped").read_history() if "train/steps_off_policy" in r
    ]
    assert [r["step"] for r in records] == [1, 2]
    assert all(0 <= r["train/steps_off_policy"] <= 1 for r in records)
    await backend.close()
