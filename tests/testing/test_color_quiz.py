"""The demo's color quiz: splits hold different questions, the same seed gives the same ones, each
question has exactly one color, and the train flow's config accepts it as an importable environment."""

from __future__ import annotations

import pytest

from art_core.envs import load_environment
from art_core.testing.color_quiz import COLORS


def test_splits_are_disjoint_deterministic_and_have_one_color_each():
    env = load_environment("art_core.testing.color_quiz")
    splits = {s: env.scenarios(s) for s in ("train", "val", "test")}
    assert [len(v) for v in splits.values()] == [400, 100, 100]
    word_sets = {s: {frozenset(sc.data["options"]) for sc in v} for s, v in splits.items()}
    assert not word_sets["train"] & word_sets["val"] and not word_sets["train"] & word_sets["test"]
    for scenario in splits["val"]:
        options = scenario.data["options"]
        assert len(options) == 4 and [w for w in options if w in COLORS] == [scenario.data["answer"]]
    assert load_environment("art_core.testing.color_quiz").scenarios("val") == splits["val"]
    assert load_environment("art_core.testing.color_quiz", seed=1).scenarios("val") != splits["val"]
    assert env.constrains_sampling  # answers go through vLLM's grammar: train with old_logprobs="recompute"


def test_run_config_takes_it_and_asks_for_recomputed_logprobs(tiny_model_path):
    from art_pipeline.flows.config import RunConfig
    from art_pipeline.flows.preflight import preflight

    base = dict(
        project="demo", model="a", base_model=tiny_model_path, environment={"name": "art_core.testing.color_quiz"}
    )
    assert RunConfig(**base, train={"old_logprobs": "recompute"}).environment.constrains_sampling
    with pytest.raises(ValueError, match="old_logprobs"):
        preflight(RunConfig(**base))
    with pytest.raises(ValueError, match="choices"):
        preflight(
            RunConfig(
                **{**base, "environment": {"name": "art_core.testing.color_quiz", "options": {"choices": 1}}},
                train={"old_logprobs": "recompute"},
            )
        )
