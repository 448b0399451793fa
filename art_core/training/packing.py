"""Packing: sequences of different lengths share rows, with no padding and no attention across them.

Sequences are placed into rows of at most `tokens_per_row` tokens (first-fit decreasing); rows are
stacked into forward passes of at most `tokens_per_forward` tokens, padded only up to the longest row
of the pass (first-fit rows are nearly full, so little goes to padding). Segments of a row do not see
each other: position ids restart at 0 for each segment (the padding is a segment of its own). The
trainer attends within segments without a mask (attention.py: SDPA per segment, or flex_attention on
CUDA), so a row may be as long as a pass; a model used as loaded gets transformers' block-diagonal
causal mask from the restarting position ids (`masking_utils.find_packed_sequence_indices`).
tests/training/test_packing.py checks that packed logprobs equal unpacked ones in every mode.

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
class PackedBatch:
    """One forward pass: rows of sequences laid end to end (all tensors on the training device)."""

    input_ids: "torch.Tensor"  # [R, L] token ids; rows shorter than L end in padding
    position_ids: "torch.Tensor"  # [R, L] restarting at 0 for each segment (and for the padding)
    target_row: "torch.Tensor"  # [N] row of each trained token
    target_pos: "torch.Tensor"  # [N] its position; the hidden state at target_pos - 1 predicts it
    old_logprobs: (
        "torch.Tensor"  # [N] the sampler's logprobs of those tokens (the policy's with old_logprobs="recompute")
    )
    advantages: "torch.Tensor"  # [N] each token carries its sequence's advantage
    weights: "torch.Tensor"  # [N] aggregation weight of each token (see losses.AGGREGATIONS)
    sequences: list[int]  # indices of the packed sequences
    real_tokens: int  # tokens that are not padding
    seq: "torch.Tensor | None" = None  # [N] each token's sequence as a position in `sequences` (0..S-1)
    sampler_logprobs: "torch.Tensor | None" = None  # [N] vLLM's logprobs, kept when old_logprobs are recomputed

    @property
    def num_tokens(self) -> int:
        return self.real_tokens


def pack_sequences(
    seqs: "list[TokenizedTrajectory]",
    weights: list[float],
    tokens_per_row: int,
    device: Any = "cpu",
    tokens_per_forward: int | None = None,
    pad_id: int = 0,
) -> list[PackedBatch]:
    """Pack tokenized trajectories into rows and rows into forward passes; `weights[i]` weighs sequence i's tokens.

    `tokens_per_forward` None puts one row in each pass.
    """
    import torch

    rows = first_fit_decreasing([len(s) for s in seqs], tokens_per_row)
    lengths = [sum(len(seqs[i]) for i in r) for r in rows]
    order = sorted(range(len(rows)), key=lambda r: -lengths[r])  # similar lengths share a pass: less padding
    passes: list[list[int]] = []
    for r in order:
        if passes:
            cur = passes[-1]
            width = max(lengths[r], max(lengths[x] for x in cur))
            if tokens_per_forward is not None and width * (len(cur) + 1) <= tokens_per_forward:
                cur.append(r)
                continue
        passes.append([r])

    out = []
    for members in passes:
        width = max(lengths[r] for r in members)
        ids, pos = [], []
        t_row, t_pos, old, adv, w, seq_ids, t_seq = [], [], [], [], [], [], []
        for ri, r in enumerate(members):
            row_ids: list[int] = []
            row_pos: list[int] = []
            for i in rows[r]:
                s = seqs[i]
                start = len(row_ids)
                row_ids += s.input_ids
                row_pos += list(range(len(s)))
                for j, is_trained in enumerate(s.trainable):
                    if is_trained:
                        t_row.append(ri)
                        t_pos.append(start + j)
                        old.append(s.old_logprobs[j])
                adv += [s.advantage] * s.num_trainable
                t_seq += [len(seq_ids)] * s.num_trainable
                w += [weights[i]] * s.num_trainable
                seq_ids.append(i)
            pad = width - len(row_ids)
            ids.append(row_ids + [pad_id] * pad)
            pos.append(row_pos + list(range(pad)))
        out.append(
            PackedBatch(
                input_ids=torch.tensor(ids, dtype=torch.long, device=device),
                position_ids=torch.tensor(pos, dtype=torch.long, device=device),
                target_row=torch.tensor(t_row, dtype=torch.long, device=device),
                target_pos=torch.tensor(t_pos, dtype=torch.long, device=device),
                old_logprobs=torch.tensor(old, dtype=torch.float32, device=device),
                advantages=torch.tensor(adv, dtype=torch.float32, device=device),
                weights=torch.tensor(w, dtype=torch.float32, device=device),
                sequences=seq_ids,
                real_tokens=sum(lengths[r] for r in members),
                seq=torch.tensor(t_seq, dtype=torch.long, device=device),
            )
        )
    return out


def batch_logprobs(
    model: Any,
    batch: PackedBatch,
    *,
    with_entropy: bool = False,
    attention: str = "mask",
    chunk_tokens: int | None = None,
) -> "tuple[torch.Tensor, torch.Tensor | None]":
    """Logprobs [N] of the batch's trained tokens under `model` (and their entropies [N] if asked).

    Runs the decoder for hidden states, then the LM head only on the positions that predict a trained
    token, `chunk_tokens` positions at a time (logprobs.py), so no [positions x vocabulary] tensor
    exists for the whole pass. `attention` is the packed-attention mode the model was switched to
    (attention.packed_attention): 'segments' and 'flex' get the segment bounds they need; 'mask' (the
    default, for a model used as loaded) leaves transformers to build its block-diagonal mask from the
    restarting position ids. Works on a peft model (LoRA layers sit inside the decoder, and
    `disable_adapter()` still applies) and on a plain causal LM.
    """
    from art_core.training.attention import attention_kwargs
    from art_core.training.logprobs import token_logprobs

    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = causal_lm.get_decoder(), causal_lm.get_output_embeddings()
    hidden = decoder(
        input_ids=batch.input_ids,
        position_ids=batch.position_ids,
        use_cache=False,
        **attention_kwargs(batch.position_ids, attention),
    ).last_hidden_state
    h = hidden[batch.target_row, batch.target_pos - 1]  # [N, d]: the state before each trained token
    targets = batch.input_ids[batch.target_row, batch.target_pos]  # [N]
    return token_logprobs(h, head, targets, with_entropy=with_entropy, chunk_tokens=chunk_tokens)
