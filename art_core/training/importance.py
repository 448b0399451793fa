"""Importance ratios at ART's four levels, and truncated importance sampling, each a named function.

All take per-token tensors of one packed pass (shape [N], the trainable tokens) and `seq` [N], the
index of each token's sequence within the pass (0..S-1; a sequence never spans two passes), and
return the ratio per token (shape [N]) that the policy loss uses in place of exp(new - old):

    token              r_t = exp(new_t - old_t)                                     (PPO, GRPO; default)
    sequence           s_i = exp(mean over i's tokens of (new - old)), on each token of i  (GSPO)
    average            (r_t + s_i) / 2                                               (ART)
    geometric_average  sqrt(r_t * s_i)                                               (ART)

GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization") takes the length-normalised sequence
log-ratio so one ratio stands for the sequence and the clip keeps or drops whole sequences: every token of
sequence i carries the same s_i, so clipping it per token clips the sequence. The paper averages over
sequences (aggregation='sequence_mean' here); ART keeps its token mean, as the default here does.

    >>> import torch
    >>> new, old, seq = torch.tensor([0.2, 0.0, 0.5]), torch.zeros(3), torch.tensor([0, 0, 1])
    >>> [round(x, 4) for x in IMPORTANCE_LEVELS["sequence"](new, old, seq).tolist()]   # exp(0.1), exp(0.1), exp(0.5)
    [1.1052, 1.1052, 1.6487]

torch is imported inside the functions, so TrainConfig can list the names without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch


def sequence_mean_per_token(values: "torch.Tensor", seq: "torch.Tensor") -> "torch.Tensor":
    """Each token gets the mean of `values` over its sequence (gradients flow to every token of it).

    >>> import torch
    >>> sequence_mean_per_token(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1])).tolist()
    [2.0, 2.0, 5.0]
    """
    import torch

    n_seq = int(seq.max()) + 1 if seq.numel() else 0
    sums = torch.zeros(n_seq, dtype=values.dtype, device=values.device).index_add(0, seq, values)
    counts = torch.bincount(seq, minlength=n_seq).to(values.dtype)
    return (sums / counts)[seq]


def token_level(new: "torch.Tensor", old: "torch.Tensor", seq: "torch.Tensor") -> "torch.Tensor":
    """PPO/GRPO: each token's own ratio exp(new_t - old_t). Default."""
    return (new - old).exp()


def sequence_level(new: "torch.Tensor", old: "torch.Tensor", seq: "torch.Tensor") -> "torch.Tensor":
    """GSPO: exp of the sequence's mean log-ratio on every token of the sequence."""
    return sequence_mean_per_token(new - old, seq).exp()


def average_level(new: "torch.Tensor", old: "torch.Tensor", seq: "torch.Tensor") -> "torch.Tensor":
    """ART's 'average': the arithmetic mean of the token ratio and its sequence's ratio."""
    return (token_level(new, old, seq) + sequence_level(new, old, seq)) / 2


def geometric_average_level(new: "torch.Tensor", old: "torch.Tensor", seq: "torch.Tensor") -> "torch.Tensor":
    """ART's 'geometric_average': sqrt(token ratio x sequence ratio), i.e. exp of the mean of both log-ratios."""
    diff = new - old
    return ((diff + sequence_mean_per_token(diff, seq)) / 2).exp()


LevelFn = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor"], "torch.Tensor"]
IMPORTANCE_LEVELS: dict[str, LevelFn] = {
    "token": token_level,
    "sequence": sequence_level,
    "average": average_level,
    "geometric_average": geometric_average_level,
}


def truncated_is_weight(
    ratio: "torch.Tensor",
    cap: float,
    *,
    policy_old: "torch.Tensor | None" = None,
    sampler: "torch.Tensor | None" = None,
) -> "torch.Tensor":
    """Truncated importance sampling (Yao et al. 2025, ART's `truncated_importance_sampling`): a detached
    weight min(w_t, cap) multiplied into each token's policy loss.

    With the policy's own old logprobs (old_logprobs='recompute') w_t = exp(policy_old_t - sampler_t): how
    far the trainer's policy and the sampler (vLLM, possibly steps behind) disagree on the sampled token.
    Without them (the sampler's logprobs are the old ones) w_t is the loss's own ratio, as in ART.

    >>> import torch
    >>> truncated_is_weight(torch.tensor([0.5, 3.0]), 2.0).tolist()
    [0.5, 2.0]
    """
    if policy_old is not None and sampler is not None:
        w = (policy_old - sampler).exp()
    else:
        w = ratio
    return w.detach().clamp(max=cap)
