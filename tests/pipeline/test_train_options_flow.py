"""ART 2026's loss options through the train flow: three steps of GSPO with truncated IS, Dr. GRPO's
normalisation and advantages, Kimi K2's tau, advantage balance and a KL penalty, each leaving a history
metric that shows it acted. Real Prefect test server, real vLLM, local storage."""

from __future__ import annotations

import math

import pytest

from tests.pipeline.test_train_flow import history, run_config, run_flow

pytestmark = pytest.mark.vllm


def test_non_default_loss_options_train_three_steps_through_the_flow(
    prefect_api, tiny_model_path, vllm_endpoint, tmp_path, monkeypatch
):
    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    options = {
        "learning_rate": 2e-3,
        "old_logprobs": "recompute",
        "importance_sampling_level": "sequence",
        "truncated_importance_sampling": 2.0,
        "normalize_by_length": False,
        "scale_rewards": False,
        "kimi_k2_tau": 0.05,
        "advantage_balance": 0.25,
        "kl_penalty_coef": 0.02,
    }
    cfg = run_config(
        tiny_model_path,
        str(tmp_path / "runs"),
        vllm_endpoint.base_url,
        name="options",
        train=options,
        eval_every=0,
        group_size=8,  # with 4, all 6 groups of the 3 steps scored alike in 5% of runs (nothing to train on)
    )
    assert cfg.train.aggregation == "constant_norm" and cfg.train.beta == 0.02  # Dr. GRPO; ART's KL name
    summary, _ = run_flow(cfg)
    assert summary.trained_steps == [1, 2, 3]
    records = [r for r in history(cfg.storage_url, cfg) if "train/reward" in r]
    assert [r["step"] for r in records] == [1, 2, 3]
    for r in records:
        if r.get("train/trained_trajectories", 0) == 0:
            continue  # a step whose groups all scored alike trains nothing (and says why)
        for key in (
            "sequence_clip_fraction",
            "tis_truncated_fraction",
            "tis_weight_mean",
            "kimi_k2_shift",
            "advantage_positive",
            "advantage_negative",
            "kl",
        ):
            assert math.isfinite(r[f"train/{key}"]), key
        assert 0 <= r["train/sequence_clip_fraction"] <= 1 and 0 < r["train/tis_weight_mean"] <= 2.0
    assert any(r.get("train/trained_trajectories", 0) > 0 for r in records), "no step had a reward signal"
