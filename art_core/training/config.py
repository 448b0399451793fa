"""Training configuration: one pydantic model, each field documented once, defaults in code.

Defaults follow ART (OpenPipe) unless the field's description names another peer; the peers' own
defaults are summarised in DESIGN.md ("GRPO choices"). Change one knob per experiment:

    >>> cfg = TrainConfig(learning_rate=2e-3, scale_rewards=False)   # prime-rl style advantages
    >>> cfg.lora_rank, cfg.loss, cfg.aggregation
    (8, 'clipped_ratio', 'token_mean')

Fields under "experimental" may change meaning between releases.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class TrainConfig(BaseModel):
    """Settings for one GRPO step. Defaults follow ART (see DESIGN.md), except where noted."""

    model_config = ConfigDict(extra="forbid")  # a misspelt knob fails loud instead of being ignored

    # ---- optimiser (ART: AdamW, betas 0.9/0.99, weight decay 0.1, grad norm 0.1, constant lr) ----
    learning_rate: float = Field(5e-6, gt=0, description="AdamW learning rate (tiny models want ~1e-3).")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="AdamW beta1 (ART).")
    adam_beta2: float = Field(0.99, ge=0, lt=1, description="AdamW beta2 (ART; TRL uses 0.999).")
    adam_epsilon: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    weight_decay: float = Field(0.1, ge=0, description="AdamW decoupled weight decay on LoRA weights (ART).")
    max_grad_norm: float | None = Field(
        0.1, gt=0, description="Clip the global gradient norm to this (ART 0.1; TRL 1.0); None disables clipping."
    )
    num_optimizer_steps: int = Field(
        1,
        ge=1,
        description="Optimizer steps per train step: the step's sequences are split into this many mini-batches, "
        "each accumulating gradients over its packed rows (TRL: one per generation batch).",
    )

    # ---- LoRA (ART: r 8, alpha 16, all linear projections) ----
    lora_rank: int = Field(8, ge=1, description="LoRA rank; vLLM must be started with --max-lora-rank >= this.")
    lora_alpha: int = Field(16, ge=1, description="LoRA alpha (scaling = alpha / rank).")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout; 0 keeps steps deterministic.")
    lora_target_modules: list[str] = Field(
        default_factory=lambda: list(DEFAULT_LORA_TARGETS),
        description="Module names LoRA wraps (ART: attention and MLP projections).",
    )

    # ---- advantages ----
    scale_rewards: bool = Field(
        True, description="Divide (reward - group mean) by the group std (ART, TRL); False follows prime-rl/Dr.GRPO."
    )
    std_epsilon: float = Field(1e-6, gt=0, description="Added to the group std before dividing (ART 1e-6).")
    reward_tolerance: float = Field(
        1e-6,
        ge=0,
        description="A group whose rewards span no more than this carries no signal and is skipped (SkyRL 1e-6).",
    )
    drop_zero_advantage: bool = Field(
        True, description="Leave out trajectories whose advantage is 0 (ART): they add nothing to the policy loss."
    )

    # ---- loss (ART/TRL: token-level clipped ratio, eps 0.2, no KL) ----
    loss: str = Field("clipped_ratio", description="Name of a loss in art_core.training.losses.LOSSES.")
    aggregation: str = Field(
        "token_mean",
        description="How token losses become one number (art_core.training.losses.AGGREGATIONS): 'token_mean' "
        "averages over every trainable token of the step (ART; TRL's 'dapo'), 'sequence_mean' averages each "
        "sequence first (TRL's 'grpo'), 'constant_norm' divides the token sum by sequences x max_seq_len (Dr.GRPO).",
    )
    epsilon: float = Field(0.2, ge=0, description="Lower clip: the ratio may fall to 1 - epsilon (ART, TRL).")
    epsilon_high: float | None = Field(
        None, ge=0, description="Upper clip: ratio up to 1 + epsilon_high; None means epsilon (ART, TRL). DAPO: 0.28."
    )
    beta: float = Field(0.0, ge=0, description="KL penalty weight against the base model; 0 disables it.")
    old_logprobs: Literal["sampler", "recompute"] = Field(
        "sampler",
        description="Reference of the importance ratio. 'sampler' uses the logprobs vLLM returned (ART, TRL). "
        "'recompute' scores the sequences with the policy before this step's first update (ART's "
        "precalculate_logprobs): use it when sampling was constrained (structured outputs, forced tool calls, "
        "choice-constrained moves), because vLLM reports logprobs after the grammar mask, which the trainer "
        "cannot reproduce; the ratio would otherwise sit near 0 and the clip would stop learning.",
    )

    # ---- tokens and batching ----
    max_seq_len: int | None = Field(
        None, ge=8, description="Longest trajectory in tokens; None means the model's max_position_embeddings."
    )
    tokens_per_row: int | None = Field(
        None,
        ge=8,
        description="Packed row length: sequences are packed into rows of at most this many tokens, one row per "
        "forward pass, so no compute goes to padding; a longer sequence gets a row of its own. None: 4 x the "
        "model's hidden size, at least 512. Segments are kept apart by a block-diagonal mask that SDPA computes "
        "densely, so a row's attention costs grow with its length squared; rows this short keep that cost "
        "below the linear layers' (measured in bench/trainer.py).",
    )

    tokens_per_forward: int | None = Field(
        16384,
        ge=8,
        description="Packed rows are stacked into one forward pass while rows x the longest row stays within "
        "this many tokens (fewer, larger matrix products); None runs one row per pass. Lower it if "
        "activations run out of memory.",
    )

    # ---- precision and reproducibility ----
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="Base model weights: 'auto' is float32 on CPU and bfloat16 on a GPU."
    )
    seed: int = Field(0, description="Seed for the LoRA initialisation and shuffling.")

    # ---- experimental ----
    experimental_compute_entropy: bool = Field(
        True, description="Experimental: report the policy entropy on trained tokens (costs a softmax over the vocab)."
    )

    @model_validator(mode="after")
    def _check_names(self) -> "TrainConfig":
        # Import here: losses imports torch lazily, but its registries are plain dicts of names.
        from art_core.training.losses import AGGREGATIONS, LOSSES

        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}: use one of {', '.join(sorted(LOSSES))}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"unknown aggregation {self.aggregation!r}: use one of {', '.join(sorted(AGGREGATIONS))}")
        return self

    @property
    def clip_high(self) -> float:
        """The upper clip epsilon in effect."""
        return self.epsilon if self.epsilon_high is None else self.epsilon_high
