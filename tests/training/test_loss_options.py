"""ART 2026's loss options (GSPO and the other importance levels, truncated IS, Kimi K2's tau, Dr. GRPO,
advantage balance) on two sequences of a pass, against values and gradients worked out by hand.

The batch: sequence 0 has tokens a, b with ratios 1.25 and 0.8 (mean log-ratio 0, so its GSPO ratio is 1);
sequence 1 is a single token c with ratio 3, far above any clip or cap. Advantages are +1 throughout.
"""

from __future__ import annotations

import math

import pytest
import torch

from art_core.training.advantages import balance_advantages, group_advantages
from art_core.training.config import TrainConfig
from art_core.training.losses import grpo_loss

SEQ = torch.tensor([0, 0, 1])
W = 0.5  # every token's aggregation weight


def _batch():
    new = torch.tensor([math.log(0.5), math.log(0.2), math.log(0.9)], requires_grad=True)
    old = torch.tensor([math.log(0.4), math.log(0.25), math.log(0.3)])  # ratios 1.25, 0.8, 3
    return new, old, torch.ones(3), torch.full((3,), W)


def _loss(level="token", **kw):
    new, old, adv, w = _batch()
    loss, stats = grpo_loss(
        kw.pop("loss", "clipped_ratio"),
        new,
        old,
        adv,
        w,
        epsilon=0.2,
        epsilon_high=0.2,
        seq=SEQ,
        importance_sampling_level=level,
        **kw,
    )
    loss.backward()
    return loss.item(), new.grad.tolist(), stats


def test_token_level_is_unchanged():
    # a: 1.25 > 1.2 with A > 0 -> clipped, -1.2, no gradient; b: -0.8, d/dnew = -r = -0.8; c: clipped
    value, grad, stats = _loss("token")
    assert value == pytest.approx(W * (-1.2 - 0.8 - 1.2), abs=1e-6)
    assert grad == pytest.approx([0.0, -W * 0.8, 0.0], abs=1e-6)
    assert (stats.clipped, stats.clipped_sequences, stats.sequences) == (2, 2, 2)


def test_gspo_sequence_ratio_is_clipped_per_sequence():
    # s0 = exp((log 1.25 + log 0.8) / 2) = 1 on a and b: inside the clip, loss -1 each, and d s0 / d new_a
    # = s0 / 2, so each token's gradient is -W * A * (s0/2 + s0/2) = -W; s1 = 3 (single token): clipped, no gradient.
    value, grad, stats = _loss("sequence")
    assert value == pytest.approx(W * (-1 - 1 - 1.2), abs=1e-6)
    assert grad == pytest.approx([-W, -W, 0.0], abs=1e-6)
    assert (stats.clipped, stats.clipped_sequences, stats.sequences) == (1, 1, 2)  # all of seq 1, none of seq 0
    assert stats.ratio == pytest.approx(1 + 1 + 3, abs=1e-6)


def test_average_and_geometric_average_levels():
    # average: a (1.25 + 1)/2 = 1.125, b (0.8 + 1)/2 = 0.9, c 3 -> clipped
    # d r_a/d new_a = (1.25 + 1/2)/2 = .875, d r_b/d new_a = (1/2)/2 = .25; d r_a/d new_b = .25, d r_b/d new_b = (.8 + .5)/2
    value, grad, _ = _loss("average")
    assert value == pytest.approx(W * (-1.125 - 0.9 - 1.2), abs=1e-6)
    assert grad == pytest.approx([-W * (0.875 + 0.25), -W * (0.25 + 0.65), 0.0], abs=1e-6)
    # geometric: r = exp((d_t + mean_d)/2): a sqrt(1.25), b sqrt(0.8), c exp((log3 + log3)/2) = 3 -> clipped
    # d r_a / d new_a = r_a * (1/2 + 1/4), d r_b / d new_a = r_b / 4 (and symmetrically for b)
    ra, rb = math.sqrt(1.25), math.sqrt(0.8)
    value, grad, _ = _loss("geometric_average")
    assert value == pytest.approx(W * (-ra - rb - 1.2), abs=1e-6)
    assert grad == pytest.approx([-W * (0.75 * ra + 0.25 * rb), -W * (0.25 * ra + 0.75 * rb), 0.0], abs=1e-6)


def test_truncated_importance_sampling_caps_a_ratio_far_above_it():
    # cap 1.1: weights a min(1.25, 1.1) = 1.1, b 0.8, c min(3, 1.1) = 1.1, all detached
    value, grad, stats = _loss("token", truncated_importance_sampling=1.1)
    assert value == pytest.approx(W * (-1.2 * 1.1 - 0.8 * 0.8 - 1.2 * 1.1), abs=1e-6)
    assert grad == pytest.approx([0.0, -W * 0.8 * 0.8, 0.0], abs=1e-6)
    assert stats.truncated == 2 and stats.tis_weight == pytest.approx(1.1 + 0.8 + 1.1)
    # With recomputed old logprobs the weight is policy-old / sampler: here the sampler was 4x less likely on a.
    new, old, adv, w = _batch()
    sampler = old - torch.tensor([math.log(4.0), 0.0, 0.0])
    loss, stats = grpo_loss(
        "cispo",
        new,
        old,
        adv,
        w,
        epsilon=1.0,
        epsilon_high=4.0,
        seq=SEQ,
        truncated_importance_sampling=2.0,
        sampler_logprobs=sampler,
    )
    loss.backward()
    # cispo: -clip(r) * A * new, times min(4, 2) = 2 on a and 1 on b, c
    assert loss.item() == pytest.approx(
        -W * (1.25 * 2 * math.log(0.5) + 0.8 * math.log(0.2) + 3 * math.log(0.9)), abs=1e-5
    )
    assert new.grad.tolist() == pytest.approx([-W * 1.25 * 2, -W * 0.8, -W * 3], abs=1e-6)
    assert stats.truncated == 1


def test_kimi_k2_tau_moves_advantages_by_the_detached_log_ratio():
    tau = 0.5
    da, db = math.log(1.25), math.log(0.8)
    value, grad, stats = _loss("token", loss="cispo", kimi_k2_tau=tau)
    adv = [1 - tau * da, 1 - tau * db, 1 - tau * math.log(3)]
    # cispo with epsilon 0.2: weights clip(1.25) = 1.2, 0.8, clip(3) = 1.2; d/dnew = -weight * A'
    assert grad == pytest.approx([-W * 1.2 * adv[0], -W * 0.8 * adv[1], -W * 1.2 * adv[2]], abs=1e-6)
    assert stats.kimi_shift == pytest.approx(tau * (abs(da) + abs(db) + math.log(3)), abs=1e-6)


def test_a_single_token_sequence_is_its_own_sequence_ratio():
    new = torch.tensor([math.log(0.55)], requires_grad=True)
    old = torch.tensor([math.log(0.5)])
    for level in ("token", "sequence", "average", "geometric_average"):
        new.grad = None
        loss, _ = grpo_loss(
            "clipped_ratio",
            new,
            old,
            torch.tensor([-1.0]),
            torch.ones(1),
            epsilon=0.2,
            epsilon_high=0.2,
            seq=torch.tensor([0]),
            importance_sampling_level=level,
        )
        loss.backward()
        assert loss.item() == pytest.approx(1.1, abs=1e-6), level  # r = 1.1, A = -1: -(r * A)
        assert new.grad.tolist() == pytest.approx([1.1], abs=1e-6), level  # -A * r


def test_all_equal_rewards_give_no_signal_under_every_option():
    for scale in (True, False):
        assert group_advantages([0.3, 0.3, 0.3], scale_by_std=scale) is None
    assert balance_advantages(None, 0.5) is None
    # Dr. GRPO keeps the raw centred reward; a zero advantage gives zero loss and gradient at every level.
    assert group_advantages([1.0, 0.0], scale_by_std=False) == [0.5, -0.5]
    new, old, _, w = _batch()
    for level in ("token", "sequence", "average", "geometric_average"):
        new.grad = None
        loss, _ = grpo_loss(
            "clipped_ratio",
            new,
            old,
            torch.zeros(3),
            w,
            epsilon=0.2,
            epsilon_high=0.2,
            seq=SEQ,
            importance_sampling_level=level,
            truncated_importance_sampling=2.0,
        )
        loss.backward()
        assert loss.item() == 0 and new.grad.abs().sum() == 0, level


def test_advantage_balance_scales_one_side():
    assert balance_advantages([1.0, -1.0, 0.5], 0.5) == [1.0, -0.5, 0.5]
    assert balance_advantages([1.0, -1.0], -0.25) == [0.75, -1.0]
    assert balance_advantages([1.0, -1.0], 1.0) == [1.0, 0.0]  # only positives train (zeros are dropped)


def test_config_options_defaults_and_errors():
    cfg = TrainConfig()
    assert (
        cfg.importance_sampling_level,
        cfg.truncated_importance_sampling,
        cfg.normalize_by_length,
        cfg.kimi_k2_tau,
        cfg.advantage_balance,
        cfg.kl_ref_adapter_path,
        cfg.aggregation,
    ) == ("token", None, True, None, 0.0, None, "token_mean")
    assert TrainConfig(normalize_by_length=False).aggregation == "constant_norm"  # Dr. GRPO
    assert TrainConfig(kl_penalty_coef=0.1).beta == 0.1  # ART's name
    with pytest.raises(ValueError, match="drop one of them"):
        TrainConfig(normalize_by_length=False, aggregation="sequence_mean")
    with pytest.raises(ValueError, match="set beta"):
        TrainConfig(kl_ref_adapter_path="/x")
    with pytest.raises(ValueError, match="importance_sampling_level"):
        TrainConfig(importance_sampling_level="seq")
    props = TrainConfig.model_json_schema()["properties"]
    assert props["importance_sampling_level"]["enum"] == ["token", "sequence", "average", "geometric_average"]
    for name in (
        "importance_sampling_level",
        "truncated_importance_sampling",
        "normalize_by_length",
        "kimi_k2_tau",
        "advantage_balance",
        "kl_ref_adapter_path",
        "beta",
    ):
        assert props[name]["description"], name
