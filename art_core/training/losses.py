"""Policy losses, the KL penalty and token aggregation for GRPO, each a named function.

A loss maps per-token tensors (shape [N], the trainable tokens of a packed row) to a per-token loss;
an aggregation maps the step's sequences to one weight per sequence, so that

    step loss = sum over trainable tokens t of  weight[seq(t)] * (policy_loss[t] + beta * kl[t])

and gradients accumulated row by row add up to the gradient of that one number (the weights are
computed for the whole step up front, which is what makes accumulation exact).

    >>> AGGREGATIONS["token_mean"]([2, 3])          # 5 trainable tokens: each weighs 1/5
    [0.2, 0.2]
    >>> AGGREGATIONS["sequence_mean"]([2, 3])       # each sequence weighs 1/2, spread over its tokens
    [0.25, 0.16666666666666666]

A new loss is a new function registered in LOSSES, not another branch in one function.
torch is imported by the functions that need it, so `TrainConfig` can check names without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch


@dataclass
class TokenLoss:
    """What a policy loss returns: the loss per token and which tokens the clip acted on."""

    per_token: "torch.Tensor"  # [N] float
    clipped: "torch.Tensor"  # [N] bool


def clipped_ratio(
    new_logprobs: "torch.Tensor",
    ratio: "torch.Tensor",
    advantages: "torch.Tensor",
    *,
    epsilon: float,
    epsilon_high: float,
) -> TokenLoss:
    """PPO/GRPO clipped importance ratio (ART `ppo=True`, TRL); `ratio` comes from an importance level
    (importance.py: per token by default, per sequence for GSPO).

    loss_t = -min(r_t * A_t, clip(r_t, 1 - epsilon, 1 + epsilon_high) * A_t)

    >>> import torch
    >>> out = clipped_ratio(torch.tensor([0.0]), torch.tensor([1.0]), torch.tensor([1.0]), epsilon=0.2, epsilon_high=0.2)
    >>> out.per_token.tolist()
    [-1.0]
    """
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon_high) * advantages
    per_token = -unclipped.minimum(clipped)
    # The clip acted where it removed the gradient: ratio pushed past the bound in the advantage's direction.
    was_clipped = ((ratio < 1 - epsilon) & (advantages < 0)) | ((ratio > 1 + epsilon_high) & (advantages > 0))
    return TokenLoss(per_token=per_token, clipped=was_clipped)


def cispo(
    new_logprobs: "torch.Tensor",
    ratio: "torch.Tensor",
    advantages: "torch.Tensor",
    *,
    epsilon: float,
    epsilon_high: float,
) -> TokenLoss:
    """CISPO / ART's newer `ppo=False` loss: REINFORCE weighted by a clipped, detached importance ratio.

    loss_t = -clip(r_t, 1 - epsilon, 1 + epsilon_high).detach() * A_t * new_t. Every token keeps a gradient;
    ART uses epsilon 1.0 and epsilon_high 4.0 with it.
    """
    ratio = ratio.detach()
    weight = ratio.clamp(1 - epsilon, 1 + epsilon_high)
    per_token = -weight * advantages * new_logprobs
    return TokenLoss(per_token=per_token, clipped=(ratio < 1 - epsilon) | (ratio > 1 + epsilon_high))


LossFn = Callable[..., TokenLoss]
LOSSES: dict[str, LossFn] = {"clipped_ratio": clipped_ratio, "cispo": cispo}


def kl_k3(new_logprobs: "torch.Tensor", ref_logprobs: "torch.Tensor") -> "torch.Tensor":
    """Schulman's k3 estimator of KL(policy || reference) per token: exp(d) - d - 1 with d = ref - new.

    Always >= 0, unbiased, and low-variance; ART, verl and SkyRL use it against the base model.

    >>> import torch
    >>> kl_k3(torch.tensor([-1.0]), torch.tensor([-1.0])).tolist()
    [0.0]
    """
    d = ref_logprobs - new_logprobs
    return d.exp() - d - 1


def sampler_kl(sampler_logprobs: "torch.Tensor", new_logprobs: "torch.Tensor") -> "torch.Tensor":
    """Per-token k3 estimate of KL(sampler || trainer) on tokens the sampler drew: r - 1 - log r, r = p_new / p_old.

    The tokens were drawn by the sampler, so the sampler is the estimator's first argument: a token the
    trainer finds far less likely than the sampler did adds about the log-ratio, not its exponential.
    The reverse form, exp(old - new) - (old - new) - 1, is not unbiased for either direction on these
    samples and lets one such token dominate a step: on retail step 4, one token of 12,383 (9.6 nats
    apart, a turn after a non-canonically tokenized one, tokenize.py) read as 1.34 nats per token, against
    0.006 here.

    >>> import torch
    >>> sampler_kl(torch.tensor([-1.0, -0.5]), torch.tensor([-1.0, -0.5])).tolist()
    [0.0, 0.0]
    """
    return kl_k3(sampler_logprobs, new_logprobs)


# ---- aggregation: per-sequence weights from the count of trainable tokens in each sequence ----


def token_mean(token_counts: list[int]) -> list[float]:
    """Every trainable token of the step weighs the same: 1 / total (ART; TRL 'dapo'). Default."""
    total = sum(token_counts)
    return [1.0 / total] * len(token_counts)


def sequence_mean(token_counts: list[int]) -> list[float]:
    """Each sequence weighs 1 / sequences, split evenly over its tokens (TRL 'grpo', SkyRL 'sequence_mean').

    Short sequences' tokens weigh more; Dr.GRPO argues this biases towards short correct answers.
    """
    n = len(token_counts)
    return [1.0 / (n * c) for c in token_counts]


def constant_norm(token_counts: list[int]) -> list[float]:
    """Token sum divided by sequences x the longest sequence's token count (Dr.GRPO, TRL 'dr_grpo')."""
    denom = len(token_counts) * max(token_counts)
    return [1.0 / denom] * len(token_counts)


AggregationFn = Callable[[list[int]], list[float]]
AGGREGATIONS: dict[str, AggregationFn] = {
    "token_mean": token_mean,
    "sequence_mean": sequence_mean,
    "constant_norm": constant_norm,
}


@dataclass
class LossStats:
    """Sums over a row's trainable tokens, added up across rows and divided at the end of the step."""

    loss: float = 0.0
    tokens: int = 0
    clipped: float = 0.0
    kl: float = 0.0
    ratio: float = 0.0
    sequences: int = 0
    clipped_sequences: float = 0.0  # sequences with at least one clipped token (all or none at level 'sequence')
    truncated: float = 0.0  # tokens whose truncated-IS weight hit the cap
    tis_weight: float = 0.0  # sum of truncated-IS weights
    kimi_shift: float = 0.0  # sum of |tau * (new - old)|: how far the Kimi K2 term moved the advantages

    def add(self, other: "LossStats") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def grpo_loss(
    loss_name: str,
    new_logprobs: "torch.Tensor",
    old_logprobs: "torch.Tensor",
    advantages: "torch.Tensor",
    weights: "torch.Tensor",
    *,
    epsilon: float,
    epsilon_high: float,
    beta: float = 0.0,
    ref_logprobs: "torch.Tensor | None" = None,
    seq: "torch.Tensor | None" = None,
    importance_sampling_level: str = "token",
    truncated_importance_sampling: float | None = None,
    sampler_logprobs: "torch.Tensor | None" = None,
    kimi_k2_tau: float | None = None,
) -> tuple["torch.Tensor", LossStats]:
    """The weighted loss of one pass's trainable tokens (all tensors [N]) and its statistics.

    Summing the returned losses over the passes of a step gives the step loss (the weights already hold
    the aggregation), so `loss.backward()` per pass accumulates exactly. In the order ART applies them:
    the ratio at `importance_sampling_level` (importance.py; `seq` [N] names each token's sequence
    within the pass, needed for any level but 'token'), the Kimi K2 term A_t - tau * (new_t - old_t)
    (gradient-free), the policy loss, the truncated-IS weight (importance.truncated_is_weight;
    `sampler_logprobs` are vLLM's when `old_logprobs` were recomputed), the k3 KL term times beta.

    >>> import torch
    >>> z = torch.zeros(2)
    >>> loss, stats = grpo_loss("clipped_ratio", z, z, torch.tensor([1.0, -1.0]), torch.full((2,), 0.5), epsilon=0.2, epsilon_high=0.2)
    >>> float(loss), stats.tokens
    (0.0, 2)
    """
    import torch

    from art_core.training.importance import IMPORTANCE_LEVELS, truncated_is_weight

    if loss_name not in LOSSES:
        raise ValueError(f"unknown loss {loss_name!r}: use one of {', '.join(sorted(LOSSES))}")
    if importance_sampling_level not in IMPORTANCE_LEVELS:
        raise ValueError(
            f"unknown importance_sampling_level {importance_sampling_level!r}: use one of {', '.join(IMPORTANCE_LEVELS)}"
        )
    if seq is None:
        if importance_sampling_level != "token":
            raise ValueError(
                f"importance_sampling_level={importance_sampling_level!r} needs `seq`, each token's sequence"
            )
        seq = torch.zeros_like(new_logprobs, dtype=torch.long)
    ratio = IMPORTANCE_LEVELS[importance_sampling_level](new_logprobs, old_logprobs, seq)
    kimi_shift = 0.0
    if kimi_k2_tau:
        shift = kimi_k2_tau * (new_logprobs - old_logprobs).detach()
        advantages = advantages - shift
        kimi_shift = float(shift.abs().sum())
    out = LOSSES[loss_name](new_logprobs, ratio, advantages, epsilon=epsilon, epsilon_high=epsilon_high)
    per_token = out.per_token
    truncated, tis_sum = 0.0, 0.0
    if truncated_importance_sampling is not None:
        tis = truncated_is_weight(
            ratio,
            truncated_importance_sampling,
            policy_old=old_logprobs if sampler_logprobs is not None else None,
            sampler=sampler_logprobs,
        )
        per_token = per_token * tis
        tis_sum = float(tis.sum())
        truncated = float((tis >= truncated_importance_sampling).float().sum())
    kl_sum = 0.0
    if beta > 0:
        if ref_logprobs is None:
            raise ValueError("beta > 0 needs the reference logprobs (the base model's or kl_ref_adapter_path's)")
        kl = kl_k3(new_logprobs, ref_logprobs)
        per_token = per_token + beta * kl
        kl_sum = float(kl.detach().sum())
    loss = (per_token * weights).sum()
    n_seq = int(seq.max()) + 1 if seq.numel() else 0
    clipped_seqs = torch.zeros(n_seq, device=seq.device).index_add(0, seq, out.clipped.float())
    stats = LossStats(
        loss=float(loss.detach()),
        tokens=int(new_logprobs.numel()),
        clipped=float(out.clipped.float().sum()),
        kl=kl_sum,
        ratio=float(ratio.detach().sum()),
        sequences=n_seq,
        clipped_sequences=float((clipped_seqs > 0).float().sum()),
        truncated=truncated,
        tis_weight=tis_sum,
        kimi_shift=kimi_shift,
    )
    return loss, stats


def option_metrics_start(config: Any, seqs: list[Any]) -> dict[str, float]:
    """History metrics that show a non-default advantage option acted (before the passes run)."""
    out: dict[str, float] = {}
    if config.advantage_balance:
        pos = [s.advantage for s in seqs if s.advantage > 0]
        neg = [s.advantage for s in seqs if s.advantage < 0]
        out["advantage_positive"] = sum(pos) / len(pos) if pos else 0.0
        out["advantage_negative"] = sum(neg) / len(neg) if neg else 0.0
    return out


def option_metrics_end(config: Any, total: LossStats) -> dict[str, float]:
    """History metrics of the loss options in use, from a step's summed LossStats (empty for the defaults)."""
    n = max(total.tokens, 1)
    out: dict[str, float] = {}
    if config.importance_sampling_level != "token":
        out["sequence_clip_fraction"] = total.clipped_sequences / max(total.sequences, 1)
    if config.truncated_importance_sampling is not None:
        out["tis_truncated_fraction"] = total.truncated / n
        out["tis_weight_mean"] = total.tis_weight / n
    if config.kimi_k2_tau:
        out["kimi_k2_shift"] = total.kimi_shift / n
    return out
