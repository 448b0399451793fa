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
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch


@dataclass
class TokenLoss:
    """What a policy loss returns: the loss per token and which tokens the clip acted on."""

    per_token: "torch.Tensor"  # [N] float
    clipped: "torch.Tensor"  # [N] bool


def clipped_ratio(
    new_logprobs: "torch.Tensor",
    old_logprobs: "torch.Tensor",
    advantages: "torch.Tensor",
    *,
    epsilon: float,
    epsilon_high: float,
) -> TokenLoss:
    """PPO/GRPO token-level clipped importance ratio against the sampler's logprobs (ART `ppo=True`, TRL).

    loss_t = -min(r_t * A_t, clip(r_t, 1 - epsilon, 1 + epsilon_high) * A_t),  r_t = exp(new_t - old_t)

    >>> import torch
    >>> out = clipped_ratio(torch.tensor([0.0]), torch.tensor([0.0]), torch.tensor([1.0]), epsilon=0.2, epsilon_high=0.2)
    >>> out.per_token.tolist()
    [-1.0]
    """
    ratio = (new_logprobs - old_logprobs).exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon_high) * advantages
    per_token = -unclipped.minimum(clipped)
    # The clip acted where it removed the gradient: ratio pushed past the bound in the advantage's direction.
    was_clipped = ((ratio < 1 - epsilon) & (advantages < 0)) | ((ratio > 1 + epsilon_high) & (advantages > 0))
    return TokenLoss(per_token=per_token, clipped=was_clipped)


def cispo(
    new_logprobs: "torch.Tensor",
    old_logprobs: "torch.Tensor",
    advantages: "torch.Tensor",
    *,
    epsilon: float,
    epsilon_high: float,
) -> TokenLoss:
    """CISPO / ART's newer `ppo=False` loss: REINFORCE weighted by a clipped, detached importance ratio.

    loss_t = -clip(r_t, 1 - epsilon, 1 + epsilon_high).detach() * A_t * new_t. Every token keeps a gradient;
    ART uses epsilon 1.0 and epsilon_high 4.0 with it.
    """
    ratio = (new_logprobs - old_logprobs).exp().detach()
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

    def add(self, other: "LossStats") -> None:
        self.loss += other.loss
        self.tokens += other.tokens
        self.clipped += other.clipped
        self.kl += other.kl
        self.ratio += other.ratio


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
) -> tuple["torch.Tensor", LossStats]:
    """The weighted loss of one row's trainable tokens (all tensors [N]) and its statistics.

    Summing the returned losses over the rows of a step gives the step loss (the weights already hold
    the aggregation), so `loss.backward()` per row accumulates exactly.

    >>> import torch
    >>> z = torch.zeros(2)
    >>> loss, stats = grpo_loss("clipped_ratio", z, z, torch.tensor([1.0, -1.0]), torch.full((2,), 0.5), epsilon=0.2, epsilon_high=0.2)
    >>> float(loss), stats.tokens
    (0.0, 2)
    """
    if loss_name not in LOSSES:
        raise ValueError(f"unknown loss {loss_name!r}: use one of {', '.join(sorted(LOSSES))}")
    out = LOSSES[loss_name](new_logprobs, old_logprobs, advantages, epsilon=epsilon, epsilon_high=epsilon_high)
    per_token = out.per_token
    kl_sum = 0.0
    if beta > 0:
        if ref_logprobs is None:
            raise ValueError("beta > 0 needs the reference (base model) logprobs")
        kl = kl_k3(new_logprobs, ref_logprobs)
        per_token = per_token + beta * kl
        kl_sum = float(kl.detach().sum())
    loss = (per_token * weights).sum()
    stats = LossStats(
        loss=float(loss.detach()),
        tokens=int(new_logprobs.numel()),
        clipped=float(out.clipped.float().sum()),
        kl=kl_sum,
        ratio=float((new_logprobs - old_logprobs).detach().exp().sum()),
    )
    return loss, stats
