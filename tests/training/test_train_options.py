"""Loss options through train_grpo_step on the tiny model: the KL penalty against a stored adapter, and a GSPO +
truncated-IS + Dr. GRPO step whose metrics say the options acted."""

from __future__ import annotations

import math
import os

import pytest

from art_core.storage import Storage
from art_core.training.config import TrainConfig
from art_core.training.trainer import train_grpo_step
from tests.training.test_trainer import _groups

CFG = TrainConfig(learning_rate=1e-2)


def test_kl_penalty_measures_against_a_stored_adapter(tiny_model_path, tmp_path, fresh_trainer):
    store = Storage(str(tmp_path))
    ref = train_grpo_step(
        base_model=tiny_model_path, groups=_groups(0), config=CFG, storage=store, project="p", name="ref", step=0
    )
    # A fresh LoRA (B = 0) is the base model: its KL to the base is 0, its KL to the trained adapter is not.
    to_base = train_grpo_step(
        base_model=tiny_model_path,
        groups=_groups(1),
        config=CFG.model_copy(update={"beta": 0.1}),
        storage=store,
        project="p",
        name="a",
        step=0,
    )
    cfg = CFG.model_copy(update={"beta": 0.1, "kl_ref_adapter_path": ref.checkpoint_path})
    to_ref = train_grpo_step(
        base_model=tiny_model_path, groups=_groups(1), config=cfg, storage=store, project="p", name="b", step=0
    )
    assert to_base.metrics["kl"] == pytest.approx(0.0, abs=1e-7)
    assert to_ref.metrics["kl"] > 1e-4
    assert not [f for f in os.listdir(to_ref.checkpoint_path) if f.startswith("kl_ref")]  # only the trained adapter
    # The trained adapter stays the one that trains: a second step from checkpoint 1 still moves it.
    again = train_grpo_step(
        base_model=tiny_model_path, groups=_groups(2), config=cfg, storage=store, project="p", name="b", step=1
    )
    assert again.metrics["grad_norm"] > 0 and math.isfinite(again.metrics["loss"])
    with pytest.raises(FileNotFoundError, match="kl_ref_adapter_path"):
        train_grpo_step(
            base_model=tiny_model_path,
            groups=_groups(2),
            storage=store,
            project="p",
            name="c",
            step=0,
            config=cfg.model_copy(update={"kl_ref_adapter_path": str(tmp_path / "nowhere")}),
        )


def test_gspo_truncated_is_and_dr_grpo_report_what_they_did(tiny_model_path, tmp_path, fresh_trainer):
    cfg = TrainConfig(
        learning_rate=1e-2,
        importance_sampling_level="sequence",
        truncated_importance_sampling=1.5,
        normalize_by_length=False,
        scale_rewards=False,
        kimi_k2_tau=0.1,
        advantage_balance=0.5,
        old_logprobs="recompute",
    )
    groups = _groups(3)
    for group in groups:  # the sampler said -9.5 where the (near-uniform) tiny policy says about -8.3
        for traj in group.trajectories:
            for item in traj.messages_and_choices[-1].logprobs.content:
                item.logprob = -9.5
    m = train_grpo_step(
        base_model=tiny_model_path,
        groups=groups,
        config=cfg,
        storage=Storage(str(tmp_path)),
        project="p",
        name="m",
        step=0,
    ).metrics
    for key in (
        "sequence_clip_fraction",
        "tis_truncated_fraction",
        "tis_weight_mean",
        "kimi_k2_shift",
        "advantage_positive",
        "advantage_negative",
    ):
        assert math.isfinite(m[key]), key
    # w = exp(policy old - sampler) is around exp(1.2) = 3.3 (the random policy is not quite uniform): mostly capped.
    assert m["tis_truncated_fraction"] > 0.5 and m["tis_weight_mean"] <= 1.5 + 1e-6
    # Dr. GRPO: raw centred rewards in [-1, 1]; balance 0.5 halves the negative ones.
    assert 0 < m["advantage_positive"] <= 1 and -0.5 <= m["advantage_negative"] < 0
    assert m["grad_norm"] > 0
