"""The GRPO loss and its gradient on a three-token batch, against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from art_core.training.config import TrainConfig
from art_core.training.losses import AGGREGATIONS, grpo_loss, sampler_kl


def _batch():
    new = torch.tensor([math.log(0.5), math.log(0.3), math.log(0.15)], requires_grad=True)
    old = torch.tensor([math.log(0.4), math.log(0.3), math.log(0.2)])  # ratios 1.25, 1.0, 0.75
    adv = torch.tensor([1.0, -1.0, -2.0])
    return new, old, adv


def test_clipped_ratio_loss_and_gradient_by_hand():
    new, old, adv = _batch()
    w = torch.tensor(AGGREGATIONS["token_mean"]([3]) * 3)  # 1/3 each
    loss, stats = grpo_loss("clipped_ratio", new, old, adv, w, epsilon=0.2, epsilon_high=0.2)
    # token 0: A>0, r=1.25 > 1.2 -> clipped: -1.2, no gradient
    # token 1: r=1 -> -r*A = 1.0, d/dnew = -A*r = 1
    # token 2: A<0, r=.75 < .8 -> clipped: -(.8*-2) = 1.6, no gradient
    assert loss.item() == pytest.approx((-1.2 + 1.0 + 1.6) / 3, abs=1e-6)
    loss.backward()
    assert new.grad.tolist() == pytest.approx([0.0, 1 / 3, 0.0], abs=1e-6)
    assert stats.clipped == 2 and stats.tokens == 3


def test_sequence_mean_weighs_sequences_not_tokens():
    new, old, adv = _batch()
    # tokens 0,1 belong to a 2-token sequence, token 2 to a 1-token one: weights 1/4, 1/4, 1/2
    seq_w = AGGREGATIONS["sequence_mean"]([2, 1])
    w = torch.tensor([seq_w[0], seq_w[0], seq_w[1]])
    loss, _ = grpo_loss("clipped_ratio", new, old, adv, w, epsilon=0.2, epsilon_high=0.2)
    assert loss.item() == pytest.approx(-1.2 / 4 + 1.0 / 4 + 1.6 / 2, abs=1e-6)
    loss.backward()
    assert new.grad.tolist() == pytest.approx([0.0, 0.25, 0.0], abs=1e-6)


def test_k3_kl_penalty_adds_its_value_and_gradient():
    new, old, adv = _batch()
    ref = torch.tensor([math.log(0.25), math.log(0.3), math.log(0.15)])  # d = ref - new = log .5, 0, 0
    w = torch.full((3,), 1 / 3)
    loss, stats = grpo_loss(
        "clipped_ratio", new, old, adv, w, epsilon=0.2, epsilon_high=0.2, beta=0.1, ref_logprobs=ref
    )
    k3 = 0.5 - math.log(0.5) - 1  # exp(d) - d - 1 = 0.193147
    assert loss.item() == pytest.approx((-1.2 + 1.0 + 1.6 + 0.1 * k3) / 3, abs=1e-6)
    assert stats.kl == pytest.approx(k3, abs=1e-6)
    loss.backward()
    # d k3 / d new = 1 - exp(d) = 0.5 on token 0
    assert new.grad.tolist() == pytest.approx([0.1 * 0.5 / 3, 1 / 3, 0.0], abs=1e-6)


def test_kl_to_sampler_estimates_the_divergence_on_the_samplers_tokens():
    """The trainer's kl_to_sampler metric: tokens drawn by the sampler q, scored by q and by the trainer p.
    Its mean must approach the exact KL(q || p), and one token the trainer finds far less likely must add
    about its log-ratio, not swamp the step (retail step 4 logged 1.34 nats a token from one such token)."""
    gen = torch.Generator().manual_seed(0)
    q = torch.softmax(torch.randn(50, generator=gen) * 2, 0).double()
    p = torch.softmax(torch.log(q) + torch.randn(50, generator=gen, dtype=torch.float64) * 0.5, 0)
    exact = float((q * (q.log() - p.log())).sum())
    drawn = torch.multinomial(q, 200_000, replacement=True, generator=gen)
    estimate = float(sampler_kl(q.log()[drawn], p.log()[drawn]).mean())
    assert estimate == pytest.approx(exact, rel=0.05)

    old = torch.zeros(10_000, dtype=torch.float64) - 0.1
    new = old.clone()
    new[0] = old[0] - 9.6  # one token 9.6 nats apart, the rest identical
    assert float(sampler_kl(old, new).mean()) == pytest.approx((math.exp(-9.6) + 9.6 - 1) / 10_000, rel=1e-6)
    assert float(sampler_kl(old, new).mean()) < 0.001


def test_asymmetric_clip_and_cispo():
    new, old, adv = _batch()
    w = torch.full((3,), 1.0)
    loss, stats = grpo_loss("clipped_ratio", new, old, adv, w, epsilon=0.2, epsilon_high=0.28)
    assert loss.item() == pytest.approx(-1.25 + 1.0 + 1.6, abs=1e-6)  # r=1.25 is inside 1.28 now
    assert stats.clipped == 1
    new, old, adv = _batch()
    loss, _ = grpo_loss("cispo", new, old, adv, w, epsilon=1.0, epsilon_high=4.0)
    loss.backward()
    assert new.grad.tolist() == pytest.approx([-1.25, 1.0, 1.5], abs=1e-6)  # -clip(r) * A, r detached


def test_unknown_names_fail_with_the_choices():
    with pytest.raises(ValueError, match="unknown loss 'ppo2'.*clipped_ratio"):
        TrainConfig(loss="ppo2")
    with pytest.raises(ValueError, match="unknown aggregation"):
        TrainConfig(aggregation="mean")
    with pytest.raises(ValueError, match="extra"):
        TrainConfig(learning_rte=1e-3)
