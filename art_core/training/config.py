"""Training configuration: one pydantic model, each field documented once, defaults in code.

Defaults follow ART (OpenPipe) unless the field's description names another peer; the peers' own
defaults are summarised in docs/design.md ("GRPO choices"). Change one knob per experiment:

    >>> cfg = TrainConfig(learning_rate=2e-3, scale_rewards=False)   # prime-rl style advantages
    >>> cfg.lora_rank, cfg.loss, cfg.aggregation
    (8, 'clipped_ratio', 'token_mean')

Fields under "experimental" may change meaning between releases.

Two classes carry ART's name `TrainConfig`, as in ART: this one is `art.TrainConfig` (art_core.TrainConfig),
and `art_core.dev.TrainConfig` is `art.dev.TrainConfig`, the TypedDict of `_config` keywords that
`art_core.dev.resolve_train_config` maps onto this one.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

# The registries stay the one source of names: the Literals below are built from them, so a loss added
# to LOSSES shows up in the JSON schema (Prefect's UI draws a drop-down from its `enum`) without an edit here.
# losses.py imports torch only inside its functions, so this import keeps the config light.
from art_core.training.importance import IMPORTANCE_LEVELS
from art_core.training.losses import AGGREGATIONS, LOSSES

DEFAULT_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

LossName = Literal.__getitem__(tuple(LOSSES))  # type: ignore[misc]  # Literal["clipped_ratio", "cispo"]
AggregationName = Literal.__getitem__(tuple(AGGREGATIONS))  # type: ignore[misc]
LevelName = Literal.__getitem__(tuple(IMPORTANCE_LEVELS))  # type: ignore[misc]


class TrainConfig(BaseModel):
    """Settings for one GRPO step. Defaults follow ART (see docs/design.md), except where noted."""

    # A misspelt knob fails loud instead of being ignored; ART's name `kl_penalty_coef` fills `beta`.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

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
        # A plain default (pydantic copies it per instance), so the JSON schema and Prefect's form show it.
        list(DEFAULT_LORA_TARGETS),
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
    advantage_balance: float = Field(
        0.0,
        ge=-1,
        le=1,
        description="ART's balance of positive and negative advantages, in [-1, 1]: b > 0 multiplies negative "
        "advantages by 1 - b, b < 0 multiplies positive ones by 1 + b; 1 trains only on positive advantages, -1 only "
        "on negative ones, 0 (default) leaves them as they are. History: advantage_positive, advantage_negative.",
    )

    # ---- loss (ART/TRL: token-level clipped ratio, eps 0.2, no KL) ----
    loss: LossName = Field("clipped_ratio", description="Name of a loss in art_core.training.losses.LOSSES.")
    aggregation: AggregationName = Field(
        "token_mean",
        description="How token losses become one number (art_core.training.losses.AGGREGATIONS): 'token_mean' "
        "averages over every trainable token of the step (ART; TRL's 'dapo'), 'sequence_mean' averages each "
        "sequence first (TRL's 'grpo'), 'constant_norm' divides the token sum by sequences x max_seq_len (Dr.GRPO).",
    )
    epsilon: float = Field(0.2, ge=0, description="Lower clip: the ratio may fall to 1 - epsilon (ART, TRL).")
    epsilon_high: float | None = Field(
        None, ge=0, description="Upper clip: ratio up to 1 + epsilon_high; None means epsilon (ART, TRL). DAPO: 0.28."
    )
    importance_sampling_level: LevelName = Field(
        "token",
        description="Importance ratio of the loss (art_core.training.importance): 'token' exp(new - old) per token "
        "(PPO, GRPO, ART default); 'sequence' exp(mean log-ratio over the sequence) on each of its tokens, so the "
        "clip keeps or drops whole sequences (GSPO, which uses small epsilons such as 3e-4 / 4e-4); 'average' "
        "(token + sequence ratio) / 2 and 'geometric_average' sqrt(token x sequence ratio) (ART). History: "
        "clip_fraction (tokens) and sequence_clip_fraction.",
    )
    truncated_importance_sampling: float | None = Field(
        None,
        gt=0,
        description="Truncated importance sampling (ART, Yao et al. 2025): multiply each token's loss by the "
        "detached min(w, this cap), where w = exp(policy old logprob - sampler logprob) with "
        "old_logprobs='recompute' (the trainer/vLLM mismatch, which grows when steps run off-policy), else the "
        "loss's own ratio. None disables it. History: tis_truncated_fraction, tis_weight_mean.",
    )
    normalize_by_length: bool = Field(
        True,
        description="False is Dr. GRPO's loss: token losses summed and divided by a constant (sequences x the "
        "longest sequence, aggregation 'constant_norm') instead of by each step's token count; pair it with "
        "scale_rewards=False for Dr. GRPO's advantages. True keeps `aggregation`.",
    )
    kimi_k2_tau: float | None = Field(
        None,
        ge=0,
        description="Kimi K2's term (ART): each token's advantage becomes A - tau * (new - old) with the "
        "log-ratio detached, pulling the policy back towards the sampler; None disables it. History: kimi_k2_shift.",
    )
    beta: float = Field(
        0.0,
        ge=0,
        validation_alias=AliasChoices("beta", "kl_penalty_coef"),
        description="KL penalty weight (ART's kl_penalty_coef): k3 KL to the base model, or to kl_ref_adapter_path "
        "when set; 0 disables it. History: kl.",
    )
    kl_ref_adapter_path: str | None = Field(
        None,
        description="A LoRA adapter folder (a checkpoint of this or another run, local path or storage URI) the KL "
        "penalty measures against instead of the base model (ART's kl_ref_adapter_path); needs beta > 0.",
    )
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
        description="Packed row length: sequences are packed into rows of at most this many tokens, so no compute "
        "goes to padding; a longer sequence gets a row of its own. None: one row per forward pass when "
        "packed_attention keeps segments apart without a mask (attention then costs the sum of the segments' "
        "squared lengths, whatever the row's length); with packed_attention='mask', 4 x the model's hidden "
        "size, at least 512, because that mask is dense and its cost grows with the row length squared.",
    )
    tokens_per_forward: int | None = Field(
        None,
        ge=8,
        description="Tokens of one forward pass (rows x the longest row); a step runs as many passes as it needs, "
        "accumulating gradients. None: sized from the model's shape and memory_budget_gib "
        "(art_core.training.memory), between 512 and 16384; the step's metrics say what was used "
        "(tokens_per_pass, passes, peak_memory_gib).",
    )
    memory_budget_gib: float | None = Field(
        None,
        gt=0,
        description="Memory for activations (sizes passes and decides checkpointing). None: three quarters of the "
        "CUDA memory free once the model is loaded (vLLM on the same GPU keeps its share), or 1 GiB on CPU.",
    )
    gradient_checkpointing: bool | None = Field(
        None,
        description="Recompute each decoder layer's activations in backward instead of keeping them: about a "
        "third more compute for a fraction of the activation memory, so passes hold many more tokens. None: on "
        "CUDA, on only when a pass without it would not hold the step's longest sequence (and at least 1024 "
        "tokens) in memory_budget_gib; on CPU (where compute is the limit), only when one sequence alone would keep "
        "more than a quarter of the available memory.",
    )
    packed_attention: Literal["auto", "segments", "flex", "mask"] = Field(
        "auto",
        description="How packed sequences are kept apart in attention (art_core.training.attention): 'flex' "
        "(CUDA flex_attention over a block mask), 'segments' (SDPA per sequence, any device), 'mask' "
        "(transformers' dense block-diagonal mask: memory grows with the row length squared). 'auto': flex "
        "on CUDA where torch has it, else segments.",
    )
    share_prefixes: bool = Field(
        True,
        description="Compute the tokens a group's sequences share (system prompt, tools, the user's opening) once "
        "per packed row instead of once per sequence (art_core.training.prefixes): each sequence's rest attends to "
        "the shared prefix, so loss and gradients are the unshared ones. Needs packed_attention 'segments' or "
        "'flex' and lora_dropout 0; otherwise the step packs whole sequences and says why in "
        "metrics['prefix_sharing_off_reason']. History: tokens_computed vs tokens_in_batch.",
    )
    logit_chunk_tokens: int | None = Field(
        None,
        ge=1,
        description="Positions whose logits are computed at once (art_core.training.logprobs): no "
        "[positions x vocabulary] tensor exists for a whole pass. None: 128 MiB of float32 logits per chunk on "
        "CPU, 1 GiB on CUDA.",
    )

    # ---- ranks (art_core.training.distributed, docs/multi-gpu.md) ----
    ranks: int = Field(
        1,
        ge=1,
        description="Processes one train step runs on, data parallel: one per GPU (gloo processes on CPU). Each "
        "trains a share of the step's sequences, LoRA gradients are summed, so loss, gradients and checkpoint "
        "equal the 1-rank step's; checkpoints resume on any number of ranks. >1 spawns that many local workers "
        "per step; under torchrun, WORLD_SIZE sets it. A step sent to a GPU work pool is tagged gpus:N and fails at "
        "once on a worker that sees fewer GPUs; scripts/launch-cluster.sh --train-ranks N sizes the SkyPilot node.",
    )
    ranks_on: Literal["local", "ray"] = Field(
        "local",
        description="Where a step's ranks run (ranks > 1): 'local' spawns them on this machine; 'ray' starts them as "
        "Ray actors on the cluster at RAY_ADDRESS (a local one when unset), one GPU each where the cluster has GPUs, "
        "so one step spans nodes. Storage every node reaches (s3://) when the ranks run on other nodes.",
    )
    shard_base: Literal["auto", "off", "on"] = Field(
        "auto",
        description="With ranks > 1, shard the frozen base model's weights over the step's ranks with FSDP2 "
        "(art_core.training.fsdp): each rank keeps 1/ranks of every decoder layer and gathers a layer only while it "
        "runs, for a base whose weights do not fit one GPU. LoRA weights, their gradients and AdamW's state stay whole "
        "on every rank, so loss, gradients and checkpoint equal the 1-rank step's. 'auto': on only on CUDA, where "
        "the whole model would leave a rank too little memory for one pass (art_core.training.memory); 'on' forces it "
        "(needs ranks > 1); 'off' keeps a whole replica on every rank.",
    )

    # ---- precision and reproducibility ----
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="Base model weights: 'auto' is float32 on CPU and bfloat16 on a GPU."
    )
    seed: int = Field(0, description="Seed for the LoRA initialisation and shuffling.")

    # ---- experimental ----
    experimental_fused_lora: bool = Field(
        True,
        description="Experimental: run LoRA projections as one base matmul plus an in-place low-rank update in the "
        "activations' dtype (art_core.training.fused_lora) instead of peft's forward; False restores peft's.",
    )
    experimental_compute_entropy: bool = Field(
        True, description="Experimental: report the policy entropy on trained tokens (costs a softmax over the vocab)."
    )

    @field_validator("loss", mode="before")
    @classmethod
    def _known_loss(cls, value: Any) -> Any:
        # Before the Literal check, so the error names the registry and its choices in one line.
        if isinstance(value, str) and value not in LOSSES:
            raise ValueError(f"unknown loss {value!r}: use one of {', '.join(sorted(LOSSES))}")
        return value

    @field_validator("aggregation", mode="before")
    @classmethod
    def _known_aggregation(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in AGGREGATIONS:
            raise ValueError(f"unknown aggregation {value!r}: use one of {', '.join(sorted(AGGREGATIONS))}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "TrainConfig":
        if not self.normalize_by_length:
            if "aggregation" in self.model_fields_set and self.aggregation != "constant_norm":
                raise ValueError(
                    f"normalize_by_length=False is aggregation='constant_norm' (Dr. GRPO), but aggregation="
                    f"{self.aggregation!r} was also given: drop one of them"
                )
            self.aggregation = "constant_norm"
        if self.kl_ref_adapter_path and self.beta <= 0:
            raise ValueError("kl_ref_adapter_path is the KL penalty's reference: set beta (kl_penalty_coef) > 0 too")
        if self.ranks_on == "ray" and self.ranks == 1:
            raise ValueError("ranks_on='ray' starts a step's ranks as Ray actors, but ranks is 1: set ranks > 1")
        if self.shard_base == "on" and self.ranks == 1:
            raise ValueError(
                "shard_base='on' shards the base model over the step's ranks, but ranks is 1: set ranks > 1 "
                "(or shard_base 'auto'/'off')"
            )
        return self

    @property
    def clip_high(self) -> float:
        """The upper clip epsilon in effect."""
        return self.epsilon if self.epsilon_high is None else self.epsilon_high
