"""The model learns: GRPO steps with LoRA raise a learnable reward, end to end on CPU (about 1-2 min each).

The vLLM test is the product's loop: rollouts go through the OpenAI endpoint of the vLLM server
LocalBackend starts; each step trains the LoRA (art_core.training) and LocalBackend hot-loads the
adapter, so step k+1 samples from `name@k+1`. The transformers test checks the trainer alone, sampling
with `generate` from the trainer's own model.

The environment: reward = the share of sampled tokens that fall in a fixed set S of 400 tokens (about
10% of the vocabulary, so the untrained model scores about 0.1-0.13). S is chosen where a random
model can go: the 400 tokens whose output embeddings point furthest along one fixed random direction,
so steering the last hidden state along that direction, which a LoRA can learn, raises the reward.
(A set with no such direction, like "ids below 400", we measured creep from 0.10 to 0.12-0.15 in
20 steps: too slow and noisy for a test.)

The model is the session's tiny model with its final norm's weight set to 4 (rollouts_hf.sharpen): the
tiny model's logits span about +-1, so no LoRA on it can move its next-token distribution far from
uniform; 4x lets the same LoRA reach it.
"""

from __future__ import annotations

import asyncio

import pytest

from art_core import TrainableModel, Trajectory, TrajectoryGroup
from art_core.training.config import TrainConfig
from tests.training.rollouts_hf import sample_groups, sharpen, target_set

pytestmark = pytest.mark.slow

PROMPTS = ["hello there", "what is the order status", "book a flight", "play a game"]
STEPS = 20


@pytest.fixture(scope="module")
def sharpened_model(tiny_model_path, tmp_path_factory) -> str:
    return sharpen(tiny_model_path, str(tmp_path_factory.mktemp("models") / "tiny-sharpened"))


def share_in(choice, tokens: set[int]) -> float:
    ids = [int(t.token.removeprefix("token_id:")) for t in choice.logprobs.content]
    return sum(i in tokens for i in ids) / len(ids)


def test_grpo_with_lora_raises_the_reward_with_transformers_sampling(sharpened_model, tmp_path, fresh_trainer):
    """The trainer alone, without a server: sampling by transformers generate from the trainer's own model."""
    from transformers import AutoTokenizer

    from art_core.storage import Storage
    from art_core.training.session import loaded_model
    from art_core.training.trainer import train_grpo_step

    tokenizer = AutoTokenizer.from_pretrained(sharpened_model)
    targets = target_set(sharpened_model)
    store, config, rewards = Storage(str(tmp_path)), TrainConfig(learning_rate=2e-2, seed=0), []
    train_grpo_step(base_model=sharpened_model, groups=[], config=config, storage=store, project="p", name="hf", step=0)
    for step in range(1, 13):
        policy = loaded_model(sharpened_model).model  # the LoRA model as trained so far
        groups = sample_groups(
            policy, tokenizer, PROMPTS, 8, 16, lambda ids: sum(i in targets for i in ids) / len(ids), seed=step
        )
        rewards.append(sum(g.rewards()[i] for g in groups for i in range(len(g))) / 32)
        train_grpo_step(
            base_model=sharpened_model, groups=groups, config=config, storage=store, project="p", name="hf", step=step
        )
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(f"transformers sampling: mean reward first 3 steps {first:.3f}, last 3 steps {last:.3f}")
    assert last > first + 0.06 and last > 1.5 * first, rewards


@pytest.mark.vllm
async def test_grpo_with_lora_raises_the_reward_through_vllm(sharpened_model, tmp_path):
    from art_core.local_backend import LocalBackend

    backend = LocalBackend(
        path=str(tmp_path / "store"),
        cache_dir=str(tmp_path / "cache"),
        server_config={"seed": 0, "log_path": str(tmp_path / "vllm.log")},
    )
    model = TrainableModel(name="learner", project="learning", base_model=sharpened_model)
    config = TrainConfig(learning_rate=3e-2, seed=0)
    rewards = []
    targets = target_set(sharpened_model)
    try:
        await model.register(backend)
        client = model.openai_client()

        async def group(prompt: str, step: int, name: str | None = None, n: int = 8) -> TrajectoryGroup:
            messages = [{"role": "user", "content": prompt}]
            r = await client.chat.completions.create(
                model=name or model.get_inference_name(),
                messages=messages,
                n=n,
                max_tokens=16,
                temperature=1.0,
                seed=1000 * step + PROMPTS.index(prompt),
                logprobs=True,
                extra_body={"return_tokens_as_token_ids": True},
            )
            return TrajectoryGroup(
                Trajectory(messages_and_choices=[*messages, c], reward=share_in(c, targets)) for c in r.choices
            )

        for step in range(STEPS):
            groups = await asyncio.gather(*(group(p, step) for p in PROMPTS))
            rewards.append(sum(t.reward for g in groups for t in g) / sum(len(g) for g in groups))
            result = await model.train(groups, config)
            assert result.step == step + 1 and model.get_inference_name() == f"learner@{step + 1}"
            print(
                f"step {step}: reward {rewards[-1]:.3f} loss {result.metrics['loss']:.4f} "
                f"kl_to_sampler {result.metrics['kl_to_sampler']:.5f} seconds {result.metrics['seconds']:.2f}"
            )

        async def held_out(name: str) -> float:
            # 4 prompts x 64 samples on seeds no training step used: the training curve's points are 32
            # samples each and move by +-0.03 from step to step, and which samples a step draws follows from
            # every earlier update (a 1e-6 difference in the adapter flips bf16 sampling on some CPUs).
            groups = await asyncio.gather(*(group(p, 10_000 + k, name, n=32) for p in PROMPTS for k in range(2)))
            return sum(t.reward for g in groups for t in g) / sum(len(g) for g in groups)

        base_name = backend.server_for(model).served_model_name  # the untrained base model
        base, trained = await held_out(base_name), await held_out(model.get_inference_name())
    finally:
        await backend.close()
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(
        f"mean reward: first 3 steps {first:.3f}, last 3 steps {last:.3f}; held out: base {base:.3f}, trained {trained:.3f}"
    )
    # Measured on an AMX Xeon (bf16 server): base 0.120, trained 0.169 (the curve's last 3 steps 0.147, another
    # run 0.201). 256 held-out samples of 16 tokens put the standard error near 0.006 (estimated), so +0.025
    # is about four of them: a trainer that does not learn fails, and the bar leaves room for the run-to-run
    # spread of what is learned.
    assert trained > base + 0.025 and trained > 1.2 * base, (base, trained, rewards)
