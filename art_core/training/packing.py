"""Packing: sequences of different lengths share rows, with no padding and no attention across them.

Sequences are placed into rows of at most `tokens_per_row` tokens (first-fit decreasing), and each
row is one forward pass of batch size 1, so no compute is spent on padding. Segments of a row do not
see each other: position ids restart at 0 for each segment, and transformers turns restarting
position ids into a block-diagonal causal mask when no attention mask is passed
(`masking_utils.find_packed_sequence_indices`; with flash-attention on a GPU the same position ids
drive varlen kernels). tests/training/test_packing.py checks that packed logprobs equal unpacked ones.

    >>> first_fit_decreasing([5, 3, 4, 2], capacity=8)
    [[0, 1], [2, 3]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from art_core.training.tokenize import TokenizedTrajectory


def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Bins of indices whose lengths sum to at most `capacity` (a longer item gets a bin of its own)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for b, free in enumerate(room):
            if lengths[i] <= free:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(capacity - lengths[i])
    return [sorted(b) for b in bins]


@dataclass
class PackedRow:
    """One forward pass: several sequences laid end to end (all tensors on the training device)."""

    input_ids: "torch.Tensor"  # [1, L] token ids of the row
    position_ids: "torch.Tensor"  # [1, L] restarting at 0 for each segment
    target_index: "torch.Tensor"  # [N] positions of trained tokens; logits at target_index - 1 predict them
    old_logprobs: "torch.Tensor"  # [N] the sampler's logprobs of those tokens
    advantages: "torch.Tensor"  # [N] each token carries its sequence's advantage
    weights: "torch.Tensor"  # [N] aggregation weight of each token (see losses.AGGREGATIONS)
    sequences: list[int]  # indices of the packed sequences, in row order

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[1])


def pack_sequences(
    seqs: "list[TokenizedTrajectory]", weights: list[float], tokens_per_row: int, device: Any = "cpu"
) -> list[PackedRow]:
    """Pack tokenized trajectories into rows; `weights[i]` is the per-token weight of sequence i."""
    import torch

    rows = []
    for members in first_fit_decreasing([len(s) for s in seqs], tokens_per_row):
        ids: list[int] = []
        pos: list[int] = []
        target: list[int] = []
        old: list[float] = []
        adv: list[float] = []
        w: list[float] = []
        for i in members:
            s = seqs[i]
            start = len(ids)
            ids += s.input_ids
            pos += list(range(len(s)))
            for j, is_trained in enumerate(s.trainable):
                if is_trained:
                    target.append(start + j)
                    old.append(s.old_logprobs[j])
            n = s.num_trainable
            adv += [s.advantage] * n
            w += [weights[i]] * n
        rows.append(
            PackedRow(
                input_ids=torch.tensor([ids], dtype=torch.long, device=device),
                position_ids=torch.tensor([pos], dtype=torch.long, device=device),
                target_index=torch.tensor(target, dtype=torch.long, device=device),
                old_logprobs=torch.tensor(old, dtype=torch.float32, device=device),
                advantages=torch.tensor(adv, dtype=torch.float32, device=device),
                weights=torch.tensor(w, dtype=torch.float32, device=device),
                sequences=list(members),
            )
        )
    return rows


def row_logprobs(
    model: Any, row: PackedRow, *, with_entropy: bool = False
) -> "tuple[torch.Tensor, torch.Tensor | None]":
    """Logprobs [N] of the row's trained tokens under `model` (and their entropies [N] if asked).

    Only the positions that predict a trained token go through the LM head (`logits_to_keep`), which
    keeps memory at N x vocab instead of L x vocab.
    """
    import torch

    predict_at = row.target_index - 1  # [N]: the logits at p-1 predict the token at p
    out = model(input_ids=row.input_ids, position_ids=row.position_ids, logits_to_keep=predict_at, use_cache=False)
    logits = out.logits[0].float()  # [N, V]; float32 so log_softmax of bf16 logits stays accurate
    logp_all = torch.log_softmax(logits, dim=-1)
    targets = row.input_ids[0, row.target_index]  # [N]
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
