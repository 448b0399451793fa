"""ART's `LoRAConfig`: the LoRA adapter's shape, passed as `TrainableModel(lora_config=...)`.

Its fields map onto our TrainConfig (`art_core.training.config`): rank -> lora_rank, alpha -> lora_alpha,
dropout -> lora_dropout, target_modules -> lora_target_modules, max_seq_length -> max_seq_len. A field left
unset keeps TrainConfig's default. Unsloth's `use_gradient_checkpointing` and `random_state` have no
counterpart here; setting one is reported in a warning.

    import art_core as art
    model = art.TrainableModel(name="agent-001", project="retail", base_model="/models/tiny",
                               lora_config=art.LoRAConfig(rank=16, alpha=32))
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# LoRAConfig field -> the key of ART's `_internal_config` section that carries it (dev.py maps those keys).
_PEFT_KEYS = {"rank": "r", "alpha": "lora_alpha", "dropout": "lora_dropout", "target_modules": "target_modules"}
_UNSLOTH_ONLY = ("use_gradient_checkpointing", "random_state")


class LoRAConfig(BaseModel):
    """The LoRA adapter's shape, with ART's field names. Unset fields keep TrainConfig's defaults.

    >>> LoRAConfig(rank=8, alpha=16).to_internal_config()
    {'peft_args': {'r': 8, 'lora_alpha': 16}}
    """

    model_config = ConfigDict(extra="forbid")

    rank: int | None = Field(None, ge=1, description="LoRA rank (TrainConfig.lora_rank).")
    alpha: int | None = Field(None, ge=1, description="LoRA alpha; the update is scaled by alpha / rank.")
    dropout: float | None = Field(None, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: list[str] | None = Field(None, min_length=1, description="Module names that get an adapter.")
    max_seq_length: int | None = Field(None, ge=1, description="Longest trained sequence (TrainConfig.max_seq_len).")
    use_gradient_checkpointing: Any = Field(None, description="Unsloth's setting; no effect here (warned).")
    random_state: int | None = Field(None, description="Unsloth's adapter init seed; no effect here (warned).")

    def to_internal_config(self) -> dict[str, Any]:
        """The same settings as ART's `_internal_config` sections, which art_core.dev maps onto TrainConfig."""
        peft = {key: getattr(self, f) for f, key in _PEFT_KEYS.items() if getattr(self, f) is not None}
        out: dict[str, Any] = {"peft_args": peft} if peft else {}
        if self.max_seq_length is not None:
            out["init_args"] = {"max_seq_length": self.max_seq_length}
        return out


def merge_lora_config(
    lora_config: LoRAConfig | dict[str, Any] | None, internal: dict[str, Any] | None
) -> dict[str, Any] | None:
    """`_internal_config` with `lora_config`'s settings added; the same setting given both ways differently is
    an error (which one was meant cannot be told).

        >>> merge_lora_config(LoRAConfig(rank=4), {"peft_args": {"lora_alpha": 8}})
        {'peft_args': {'lora_alpha': 8, 'r': 4}}
    """
    if lora_config is None:
        return internal
    if isinstance(lora_config, dict):
        lora_config = LoRAConfig(**lora_config)
    elif not isinstance(lora_config, LoRAConfig):
        raise TypeError(
            f"lora_config must be an art_core.LoRAConfig or a dict of its fields, not {type(lora_config).__name__}"
        )
    unslothy = [f for f in _UNSLOTH_ONLY if getattr(lora_config, f) is not None]
    if unslothy:
        from art_core.dev import warn_unsupported

        warn_unsupported("lora_config", unslothy, "Unsloth settings with no counterpart in art_core's trainer; ignored")
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in (internal or {}).items()}
    for section, values in lora_config.to_internal_config().items():
        target = merged.setdefault(section, {})
        for key, value in values.items():
            if key in target and target[key] != value:
                raise ValueError(
                    f"lora_config sets {section}.{key}={value!r} but _internal_config sets it to "
                    f"{target[key]!r}; give it in one place"
                )
            target[key] = value
    return merged or None


__all__ = ["LoRAConfig", "merge_lora_config"]
