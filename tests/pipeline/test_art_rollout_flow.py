"""An ART-style rollout (plain OpenAI calls inside art_core.trajectory, its reward set on
current_trajectory(), no Trajectory built by hand) trains through the train flow: real Prefect test server,
real vLLM, local storage. The rollouts stored for each step are the captured conversations."""

from __future__ import annotations

import glob

import pytest

from art_core.store import ModelStore
from tests.pipeline.test_train_flow import history, run_config, run_flow

pytestmark = pytest.mark.vllm


def test_art_style_rollout_trains_two_steps_through_the_flow(
    prefect_api, tiny_model_path, vllm_endpoint, tmp_path, monkeypatch
):
    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    cfg = run_config(
        tiny_model_path,
        str(tmp_path / "runs"),
        vllm_endpoint.base_url,
        name="art-style",
        environment={"name": "art_core.envs.art_rollout"},
        steps=2,
        eval_every=0,
        # Room for the longest word of the choice ("purple" was cut to "purp" at 4 tokens), and groups of 8:
        # with 4 groups of 4, every group scored alike in 11% of runs and no step trained.
        sampling={"max_tokens": 8, "temperature": 1.0},
        group_size=8,
    )
    assert cfg.environment.constrains_sampling  # the example answers through vLLM's choice grammar
    summary, _ = run_flow(cfg)
    assert summary.trained_steps == [1, 2]
    records = [r for r in history(cfg.storage_url, cfg) if "train/reward" in r]
    assert [r["step"] for r in records] == [1, 2]
    assert any(r.get("train/trained_trajectories", 0) > 0 for r in records), "no step had a reward signal"

    store = ModelStore(cfg.storage_url, cfg.project, cfg.model)
    first = sorted(glob.glob(store.path("trajectories", "train", "*.jsonl")))[0]  # the first step's rollouts
    groups = store.read_groups(first)
    trajectories = [t for g in groups for t in g.trajectories]
    assert len(trajectories) == cfg.groups_per_step * cfg.group_size
    for t in trajectories:
        question, answer = t.messages()
        assert question["role"] == "user" and "Which of these words is a color?" in question["content"]
        assert answer["role"] == "assistant" and answer["content"].strip() in question["content"]
        assert t.reward in (0.0, 1.0) and t.metadata["env"] == "art-rollout:color_quiz_rollout"
