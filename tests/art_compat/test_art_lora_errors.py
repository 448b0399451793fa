"""ART's LoRAConfig, LocalServingUnavailableError and the submodules we cannot serve, without a server.

What an ART user relies on: `TrainableModel(lora_config=art.LoRAConfig(...))` shapes the adapter the trainer
builds (our TrainConfig's lora_* fields), a contradiction with `_internal_config` is an error, `except
art.LocalServingUnavailableError` catches our server's failures, and `art.tinker` / `art.trainer_rank` say
why they are unavailable where they are used.
"""

from __future__ import annotations

import warnings

import pytest
from pydantic import ValidationError

import art_core as art
from art_core import dev
from art_core.inference.server import ServerConfig, VLLMServer


def test_lora_config_sets_the_trainers_lora_fields_and_unset_fields_keep_defaults():
    lora = art.LoRAConfig(rank=4, alpha=8, dropout=0.1, target_modules=["q_proj", "v_proj"], max_seq_length=512)
    model = art.TrainableModel(name="m", project="p", base_model="/m", lora_config=lora)
    cfg = dev.resolve_train_config(model)
    assert (cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout) == (4, 8, 0.1)
    assert list(cfg.lora_target_modules) == ["q_proj", "v_proj"] and cfg.max_seq_len == 512

    default = art.TrainConfig()
    only_rank = dev.resolve_train_config(
        art.TrainableModel(name="m", project="p", base_model="/m", lora_config={"rank": 16})
    )
    assert only_rank.lora_rank == 16
    assert (only_rank.lora_alpha, only_rank.lora_target_modules) == (default.lora_alpha, default.lora_target_modules)
    # A train-time config still wins over the model's, as with _internal_config.
    assert dev.resolve_train_config(model, art.TrainConfig(lora_rank=2)).lora_rank == 2


def test_lora_config_with_internal_config_combines_and_a_contradiction_is_refused():
    internal = art.dev.InternalModelConfig(
        peft_args=art.dev.PeftArgs(lora_alpha=32), trainer_args=art.dev.TrainerArgs(run_name="r1")
    )
    model = art.TrainableModel(
        name="m", project="p", base_model="/m", lora_config=art.LoRAConfig(rank=8), _internal_config=internal
    )
    cfg = dev.resolve_train_config(model)
    assert (cfg.lora_rank, cfg.lora_alpha, model._run_label) == (8, 32, "r1")
    assert internal["peft_args"] == {"lora_alpha": 32}  # the caller's dict is not modified

    with pytest.raises(ValueError, match=r"peft_args\.r=8 .* sets it to 16"):
        art.TrainableModel(
            name="m",
            project="p",
            base_model="/m",
            lora_config=art.LoRAConfig(rank=8),
            _internal_config={"peft_args": {"r": 16}},
        )


def test_bad_lora_config_is_refused_naming_the_field():
    with pytest.raises(ValidationError, match="rank"):
        art.LoRAConfig(rank=0)
    with pytest.raises(ValidationError, match="dropout"):
        art.LoRAConfig(dropout=1.5)
    with pytest.raises(ValidationError, match="lora_rank"):  # a typo is not silently dropped
        art.LoRAConfig(lora_rank=8)
    with pytest.raises(TypeError, match="lora_config must be an art_core.LoRAConfig"):
        art.TrainableModel(name="m", project="p", base_model="/m", lora_config=8)


def test_unsloth_only_lora_settings_are_reported():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        art.TrainableModel(
            name="m",
            project="p",
            base_model="/m",
            lora_config=art.LoRAConfig(rank=4, use_gradient_checkpointing="unsloth", random_state=7),
        )
    text = " ".join(str(w.message) for w in caught)
    assert "use_gradient_checkpointing" in text and "random_state" in text


def test_local_serving_unavailable_error_catches_our_servers_failures():
    server = VLLMServer(ServerConfig(model="/nonexistent-model"))
    with pytest.raises(art.LocalServingUnavailableError, match="never started"):
        server.check()  # what LocalBackend calls before using a server
    assert "LocalServingUnavailableError" in art.__all__ and "LoRAConfig" in art.__all__


def test_tinker_and_trainer_rank_import_but_refuse_their_names_saying_why():
    import art_core.tinker
    import art_core.trainer_rank

    assert art.tinker is art_core.tinker and art.trainer_rank is art_core.trainer_rank
    with pytest.raises(NotImplementedError, match="Tinker API is a hosted training service.*LocalBackend"):
        from art_core.tinker import TinkerService  # noqa: F401
    with pytest.raises(NotImplementedError, match=r"art_core\.trainer_rank\.get_rank is not available: .*one device"):
        art_core.trainer_rank.get_rank()
    assert not hasattr(art_core.tinker, "__wrapped__")  # introspection still sees a plain module
