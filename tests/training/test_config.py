"""TrainConfig as a form: choices are enums drawn from the loss registries, defaults show in the schema."""

from __future__ import annotations

import pytest

from art_core.training.config import DEFAULT_LORA_TARGETS, TrainConfig
from art_core.training.losses import AGGREGATIONS, LOSSES


def test_loss_and_aggregation_are_choices_taken_from_the_registries():
    props = TrainConfig.model_json_schema()["properties"]
    # Prefect's UI draws a drop-down from `enum`; free text would let a typo through to a run.
    assert props["loss"]["enum"] == list(LOSSES) and props["loss"]["default"] == "clipped_ratio"
    assert props["aggregation"]["enum"] == list(AGGREGATIONS) and props["aggregation"]["default"] == "token_mean"
    assert props["packed_attention"]["enum"] == ["auto", "segments", "flex", "mask"]
    assert TrainConfig(loss="cispo", aggregation="sequence_mean").loss == "cispo"
    with pytest.raises(ValueError, match="unknown loss 'ppo2': use one of cispo, clipped_ratio"):
        TrainConfig(loss="ppo2")


def test_lora_targets_default_is_in_the_schema_and_not_shared_between_configs():
    assert TrainConfig.model_json_schema()["properties"]["lora_target_modules"]["default"] == DEFAULT_LORA_TARGETS
    a, b = TrainConfig(), TrainConfig()
    a.lora_target_modules.append("lm_head")
    assert b.lora_target_modules == DEFAULT_LORA_TARGETS and TrainConfig().lora_target_modules == DEFAULT_LORA_TARGETS


def test_a_config_round_trips_through_json():
    cfg = TrainConfig(loss="cispo", memory_budget_gib=2.5, gradient_checkpointing=True, packed_attention="mask")
    assert TrainConfig.model_validate_json(cfg.model_dump_json()) == cfg
