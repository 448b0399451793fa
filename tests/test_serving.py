"""The serving rules both front doors share: names, LoRA ranks, server settings (no server started here)."""

from __future__ import annotations

import pytest

from art_core.naming import step_name
from art_core.serving import base_served_name, server_config, server_lora_rank


def test_one_naming_rule_for_steps_and_the_base_model():
    assert step_name("agent", 0) == "agent@0"  # step 0 is the zero adapter: exists before any training
    assert base_served_name("/models/Qwen2.5-7B-Instruct/") == "Qwen2.5-7B-Instruct"
    assert server_config("/models/tiny").served_model_name == "tiny"


@pytest.mark.parametrize(("rank", "server"), [(1, 8), (8, 8), (12, 16), (16, 16), (64, 64), (100, 128)])
def test_server_lora_rank_follows_the_adapter_rank(rank, server):
    assert server_lora_rank(rank) == server
    assert server_config("/models/tiny", max_lora_rank=rank).max_lora_rank == server


def test_server_overrides_win_but_never_shrink_the_lora_rank():
    cfg = server_config("/models/tiny", max_lora_rank=16, overrides={"max_lora_rank": 8, "gpu_memory_utilization": 0.5})
    assert cfg.max_lora_rank == 16 and cfg.gpu_memory_utilization == 0.5
    with pytest.raises(ValueError, match="larger than vLLM serves"):
        server_lora_rank(1024)
