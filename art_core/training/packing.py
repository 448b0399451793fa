"""Packing: sequences of different lengths share rows, with no padding and no attention across them.

Sequences are placed into rows of at most `tokens_per_row` tokens (first-fit decreasing); rows are
stacked into forward passes of at most `tokens_per_forward` tokens, padded only up to the longest row
of the pass (first-fit rows are nearly full, so little goes to padding). Segments of a row do not see
each other: position ids restart at 0 for each segment (the padding is a segment of its own), and the
batch lists the segments' bounds. The trainer attends within segments without a mask (attention.py:
SDPA per segment, or flex_attention on CUDA), so a row may be as long as a pass; a model used as loaded
gets transformers' block-diagonal causal mask from the restarting position ids
(`masking_utils.find_packed_sequence_indices`).

With `share_prefixes` the packing unit is a tree (prefixes.py): a group's shared prefix once, then each
sequence's rest, whose positions continue from the prefix and whose segment also attends to the prefix.
tests/training/test_packing.py checks that packed logprobs equal unpacked ones in every mode, and
tests/training/test_prefix_sharing.py that shared prefixes give the unshared logprobs and gradients.

    >>> first_fit_decreasing([5, 3, 4, 2], capacity=8)
    [[0, 1], [2, 3]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from art_core.training.bins import first_fit_decreasing  # noqa: F401 (also imported from here)

if TYPE_CHECKING:
    import torch

    from art_core.training.tokenize import TokenizedTrajectory


@dataclass
class PackedBatch:
    """One forward pass: rows of sequences laid end to end (all tensors on the training device)."""

    input_ids: "torch.Tensor"  # [R, L] token ids; rows shorter than L end in padding
    position_ids: "torch.Tensor"  # [R, L] 0 at each sequence's start (and the padding's); a suffix continues its prefix
    target_row: "torch.Tensor"  # [N] row of each trained token
    target_pos: "torch.Tensor"  # [N] its position
    old_logprobs: (
        "torch.Tensor"  # [N] the sampler's logprobs of those tokens (the policy's with old_logprobs="recompute")
    )
    advantages: "torch.Tensor"  # [N] each token carries its sequence's advantage
    weights: "torch.Tensor"  # [N] aggregation weight of each token (see losses.AGGREGATIONS)
    sequences: list[int]  # indices of the packed sequences
    real_tokens: int  # tokens computed: not padding, a shared prefix counted once
    seq: "torch.Tensor | None" = None  # [N] each token's sequence as a position in `sequences` (0..S-1)
    sampler_logprobs: "torch.Tensor | None" = None  # [N] vLLM's logprobs, kept when old_logprobs are recomputed
    # [N] the position whose hidden state predicts each trained token: target_pos - 1, except a suffix's first
    # token, which its prefix's last token predicts (prefixes.py). None: target_pos - 1.
    source_pos: "torch.Tensor | None" = None
    # (row, start, end, context_start, context_end) of every segment, padding included: queries start..end-1
    # attend causally to themselves and to all of context_start..context_end-1 (a shared prefix; empty if equal).
    # None: segments are read from the restarting position ids (attention.segment_bounds).
    segments: "list[tuple[int, int, int, int, int]] | None" = None
    in_batch_tokens: int = 0  # tokens of the packed sequences, each counted whole (>= real_tokens)
    shared_prefixes: int = 0  # trees whose prefix is computed once for several sequences

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
    share_prefixes: bool = False,
    min_shared: int | None = None,
    tree_tokens: int | None = None,
) -> list[PackedBatch]:
    """Pack tokenized trajectories into rows and rows into forward passes; `weights[i]` weighs sequence i's tokens.

    `tokens_per_forward` None puts one row in each pass. `share_prefixes` lays out the tokens a group's
    sequences share once per row (prefixes.py; needs the 'segments' or 'flex' attention to keep the suffixes
    apart), `min_shared` tokens at least (default prefixes.MIN_SHARED_TOKENS), in trees of at most
    `tree_tokens` tokens (default `tokens_per_row`; a larger tree gets a row of its own, as a long sequence does).
    """
    import torch

    from art_core.training.prefixes import MIN_SHARED_TOKENS, Tree, build_trees, tree_length

    if share_prefixes:
        ids_of = [s.input_ids for s in seqs]
        capacity = max(tokens_per_row, tree_tokens or 0)
        trees = build_trees(ids_of, [s.group_index for s in seqs], capacity, min_shared or MIN_SHARED_TOKENS)
    else:
        trees = [Tree(0, [i]) for i in range(len(seqs))]
    sizes = [tree_length(t, [len(s) for s in seqs]) for t in trees]
    rows = first_fit_decreasing(sizes, tokens_per_row)  # rows of trees
    lengths = [sum(sizes[t] for t in r) for r in rows]
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
        ids, pos, segments = [], [], []
        t_row, t_pos, t_src, old, adv, w, seq_ids, t_seq = [], [], [], [], [], [], [], []
        in_batch = shared = 0
        for ri, r in enumerate(members):
            row_ids: list[int] = []
            row_pos: list[int] = []
            for tree in (trees[t] for t in rows[r]):
                p, p_start = tree.prefix, len(row_ids)
                if p:
                    shared += 1
                    row_ids += seqs[tree.members[0]].input_ids[:p]
                    row_pos += list(range(p))
                    segments.append((ri, p_start, p_start + p, p_start, p_start))
                for i in tree.members:
                    s = seqs[i]
                    start = len(row_ids)  # where token p of s sits
                    row_ids += s.input_ids[p:]
                    row_pos += list(range(p, len(s)))
                    if len(s) > p:
                        segments.append((ri, start, start + len(s) - p, p_start, p_start + p))
                    for j, is_trained in enumerate(s.trainable):
                        if is_trained:
                            at = p_start + j if j < p else start + j - p
                            t_row.append(ri)
                            t_pos.append(at)
                            t_src.append(p_start + p - 1 if p and j == p else at - 1)
                            old.append(s.old_logprobs[j])
                    adv += [s.advantage] * s.num_trainable
                    t_seq += [len(seq_ids)] * s.num_trainable
                    w += [weights[i]] * s.num_trainable
                    seq_ids.append(i)
                    in_batch += len(s)
            pad = width - len(row_ids)
            if pad:
                segments.append((ri, len(row_ids), width, len(row_ids), len(row_ids)))
            ids.append(row_ids + [pad_id] * pad)
            pos.append(row_pos + list(range(pad)))

        def tensor(values, dtype=torch.long):
            return torch.tensor(values, dtype=dtype, device=device)

        out.append(
            PackedBatch(
                input_ids=tensor(ids),
                position_ids=tensor(pos),
                target_row=tensor(t_row),
                target_pos=tensor(t_pos),
                old_logprobs=tensor(old, torch.float32),
                advantages=tensor(adv, torch.float32),
                weights=tensor(w, torch.float32),
                sequences=seq_ids,
                real_tokens=sum(lengths[r] for r in members),
                seq=tensor(t_seq),
                source_pos=tensor(t_src),
                segments=segments,
                in_batch_tokens=in_batch,
                shared_prefixes=shared,
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

    if attention == "mask" and batch.shared_prefixes:
        # transformers' mask knows restarting positions only: each suffix would attend to the ones before it.
        raise ValueError("a batch packed with shared prefixes needs attention 'segments' or 'flex', not 'mask'")
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = causal_lm.get_decoder(), causal_lm.get_output_embeddings()
    hidden = decoder(
        input_ids=batch.input_ids,
        position_ids=batch.position_ids,
        use_cache=False,
        **attention_kwargs(batch.position_ids, attention, batch.segments),
    ).last_hidden_state
    source = batch.target_pos - 1 if batch.source_pos is None else batch.source_pos
    h = hidden[batch.target_row, source]  # [N, d]: the state that predicts each trained token
    targets = batch.input_ids[batch.target_row, batch.target_pos]  # [N]
    return token_logprobs(h, head, targets, with_entropy=with_entropy, chunk_tokens=chunk_tokens)
