"""bf16 training on CPUs that compute bf16: the choice is deterministic where it must be, and bf16 agrees
with float32 on the real model (per-token log-probs and a train step's loss) within stated tolerances."""

from __future__ import annotations

import random

import pytest
import torch

from art_core.storage import Storage
from art_core.training import trainer
from art_core.training.config import TrainConfig
from art_core.training.precision import MIN_BF16_HIDDEN, choose_train_dtype, cpu_has_bf16
from art_core.training.session import clear_model_cache
from art_core.trajectories import Trajectory, TrajectoryGroup
from tests.training.rollouts_hf import make_choice

# bf16 against float32 on SmolLM2-135M-Instruct, measured on an AMX Xeon: mean 0.055, p99 0.24, max 0.27 nats
# per token (exp(0.055) = a 1.06 importance ratio, well inside the loss's 0.2 clip; the vLLM server on such a
# CPU samples in bf16 too, so a bf16 trainer is nearer the sampler than a float32 one).
LOGPROB_MEAN_TOLERANCE = 0.08  # nats, mean |difference| over every token
LOGPROB_P99_TOLERANCE = 0.4  # nats, 99th percentile
LOSS_TOLERANCE = 0.02  # relative, one GRPO step's loss


def test_dtype_choice():
    assert choose_train_dtype("float32", "cuda", 4096, 11008)[0] == "float32"  # the user's word stands
    assert choose_train_dtype("bfloat16", "cpu", 64, 128)[0] == "bfloat16"
    assert choose_train_dtype("auto", "cuda", 64, 128)[0] == "bfloat16"
    # The tiny test models train in float32 on every CPU kind: their numerics never depend on the machine.
    dtype, why = choose_train_dtype("auto", "cpu", MIN_BF16_HIDDEN - 1, 4 * MIN_BF16_HIDDEN)
    assert dtype == "float32" and why
    dtype, why = choose_train_dtype("auto", "cpu", 576, 1536)
    if not cpu_has_bf16():
        assert dtype == "float32" and "no bf16 instructions" in why
    else:
        assert dtype in ("float32", "bfloat16") and "x float32 on this CPU" in why


def _token_logprobs(path: str, dtype: torch.dtype, ids: list[int]) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def _groups(tokenizer, seed: int) -> list[TrajectoryGroup]:
    rng = random.Random(seed)
    words = "order refund flight seat user email status price total item".split()
    groups = []
    for _ in range(2):
        prompt = [{"role": "user", "content": " ".join(rng.choice(words) for _ in range(30))}]
        trajs = []
        for _ in range(4):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 60)))
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            trajs.append(
                Trajectory(
                    messages_and_choices=[*prompt, make_choice(ids, [-2.0] * len(ids), text)],
                    reward=rng.random(),
                )
            )
        groups.append(TrajectoryGroup(trajs))
    return groups


def test_bf16_agrees_with_float32_on_the_real_model(smollm2_path, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    text = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": "You are a customer-service agent for an online shop."},
            {"role": "user", "content": "I want to return the blue kettle from order W2378156, it leaks."},
            {"role": "assistant", "content": "I can help. Please confirm your email so I can find the order."},
        ],
        tokenize=False,
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    diff = (
        _token_logprobs(smollm2_path, torch.float32, ids) - _token_logprobs(smollm2_path, torch.bfloat16, ids)
    ).abs()
    print(
        f"bf16 vs float32 per-token logprob: mean {diff.mean():.4f}, p99 {diff.quantile(0.99):.4f}, max {diff.max():.4f}"
    )
    assert diff.mean() < LOGPROB_MEAN_TOLERANCE
    assert diff.quantile(0.99) < LOGPROB_P99_TOLERANCE

    groups = _groups(tokenizer, 0)
    losses = {}
    for dtype in ("float32", "bfloat16"):
        clear_model_cache()
        m = trainer.train_grpo_step(
            base_model=smollm2_path,
            groups=groups,
            config=TrainConfig(learning_rate=1e-4, dtype=dtype),
            storage=Storage(str(tmp_path / dtype)),
            project="p",
            name="m",
            step=0,
        ).metrics
        assert m["bf16"] == (dtype == "bfloat16")
        losses[dtype] = m["loss"]
    clear_model_cache()
    print(f"one step's loss: float32 {losses['float32']:.5f}, bf16 {losses['bfloat16']:.5f}")
    assert losses["bfloat16"] == pytest.approx(losses["float32"], rel=LOSS_TOLERANCE, abs=1e-3)
