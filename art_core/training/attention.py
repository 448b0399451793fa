"""Attention over packed rows without a dense block-diagonal mask, so a row's cost grows with its length.

A packed row holds several sequences (segments) end to end; each token may attend only to earlier
tokens of its own segment. transformers builds that as a dense [rows, 1, L, L] mask from restarting
position ids, and SDPA then attends over all L x L pairs: memory and work grow with the row length
squared, which is why rows used to be kept short (4 x hidden size) and why 7B rows of 14k tokens ran out
of memory. Here the trainer switches the model, for the length of a step, to an attention function
registered with transformers ("art_packed") that is told where the segments are:

    "segments"  SDPA once per segment (causal), on any device: work and memory grow with the sum of
                the segments' squared lengths, not the row's; a row may be as long as a whole pass.
                A suffix of a shared prefix (prefixes.py) attends to the prefix's keys and its own,
                through a lower-right causal mask. On a CPU in bf16 a segment attends through
                cpu_attention.py instead (blocks of queries through the bf16 matrix multiply, 1.3-2.2x
                torch's CPU kernel, whose bf16 runs no faster than its float32).
    "flex"      CUDA with torch's flex_attention: one compiled kernel per layer over a block mask built
                from the segment ids (and each suffix's prefix); blocks that cross segments are skipped.
    "mask"      transformers' own dense block-diagonal mask (the behaviour before; short rows).

Nothing is registered as a mask function for "art_packed", so transformers builds no mask at all.

Sliding-window layers (Gemma 3: 5 of every 6 layers see only the last 512 tokens; Mistral) get the window
transformers passes them: a query attends to keys less than `sliding_window` positions back, in its own segment
and shared prefix, as the model and vLLM compute it. Such layers attend per segment in "flex" mode too (its one
block mask is the full-attention one). A model whose attention caps its logits (Gemma 2's softcapping) is refused.

    >>> with packed_attention(model, "segments"):                                   # doctest: +SKIP
    ...     hidden = decoder(input_ids=ids, position_ids=pos, **attention_kwargs(pos, "segments")).last_hidden_state
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import torch

ATTENTION_NAME = "art_packed"
_REGISTERED = False
_COMPILED_FLEX: Any = None


def flex_available(device_type: str) -> bool:
    """True where flex_attention can serve training: a CUDA device and a torch that ships it."""
    if device_type != "cuda":
        return False
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def choose_attention(requested: str, device_type: str) -> str:
    """The attention mode a step uses: 'auto' is flex on CUDA where available, else per-segment SDPA.

    >>> choose_attention("auto", "cpu")
    'segments'
    """
    if requested == "auto":
        return "flex" if flex_available(device_type) else "segments"
    if requested == "flex" and not flex_available(device_type):
        raise ValueError("packed_attention='flex' needs a CUDA device and torch's flex_attention; use 'auto'")
    return requested


def segment_bounds(position_ids: "torch.Tensor") -> list[tuple[int, int, int]]:
    """(row, start, end) of every segment of packed rows: a segment starts where the position id is 0.

    >>> import torch
    >>> segment_bounds(torch.tensor([[0, 1, 2, 0, 1], [0, 1, 0, 1, 2]]))
    [(0, 0, 3), (0, 3, 5), (1, 0, 2), (1, 2, 5)]
    """
    rows, length = position_ids.shape
    starts = (position_ids == 0).nonzero().tolist()  # one host sync per pass
    out = []
    for i, (r, s) in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) and starts[i + 1][0] == r else None
        out.append((r, s, nxt[1] if nxt else length))
    return out


def _segment_attention(query, key, value, scaling, segments, sliding_window=None):
    """query [B, H, L, D], key/value [B, Hkv, L, D] -> [B, H, L, D], attending within each segment.

    `segments` are (row, start, end, context_start, context_end): a segment with a context (a shared prefix,
    prefixes.py) attends to the context's keys, then to its own causally: SDPA over the concatenated keys with
    a lower-right causal mask, the positions a query of its unshared sequence would attend to. With a
    `sliding_window` W, a query also sees only keys fewer than W positions before its own.
    """
    import torch

    gqa = query.shape[1] != key.shape[1]
    # CPU bf16: torch's CPU flash-attention kernel runs bf16 no faster than float32, its backward slowest of
    # all; blocks of queries through the bf16 matrix multiply are 1.3-2.2x faster (cpu_attention.py).
    cpu_bf16 = query.device.type == "cpu" and query.dtype == torch.bfloat16
    by_row: dict[int, list] = {}
    for r, s, e, cs, ce in segments:
        q = query[r : r + 1, :, s:e]
        if ce == s:  # no context, or the first suffix right after its prefix: the keys are one slice
            k, v = key[r : r + 1, :, cs:e], value[r : r + 1, :, cs:e]
        else:
            k = torch.cat([key[r : r + 1, :, cs:ce], key[r : r + 1, :, s:e]], dim=2)
            v = torch.cat([value[r : r + 1, :, cs:ce], value[r : r + 1, :, s:e]], dim=2)
        if cpu_bf16:
            from art_core.training.cpu_attention import blocked_attention

            out = blocked_attention(q, k, v, scaling, ce - cs, sliding_window)
        elif sliding_window is None:
            out = _attend(q, k, v, scaling, ce - cs, None, gqa)
        else:  # keys within one window come out as one block, attended causally (_attend drops the window)
            out = _windowed_attention(q, k, v, scaling, ce - cs, sliding_window, gqa)
        by_row.setdefault(r, []).append(out)
    return torch.cat([torch.cat(by_row[r], dim=2) for r in range(query.shape[0])], dim=0)


def _attend(q, k, v, scaling, offset, window, gqa):
    """SDPA of queries q over keys k, query i sitting at key position `offset` + i (lower-right causal: it sees
    keys up to there); with a `window` W, also none before key position `offset` + i - W + 1."""
    import torch
    import torch.nn.functional as F

    if window is not None and k.shape[2] <= window:  # every query's window holds all its keys
        window = None
    mask = None
    if offset or window is not None:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril(offset)
        if window is not None:
            mask = mask.triu(offset - window + 1)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=mask is None, scale=scaling, enable_gqa=gqa
    )


def _windowed_attention(q, k, v, scaling, offset, window, gqa):
    """`_attend` with a sliding window, over blocks of `window` queries, each against only the keys its window
    reaches (at most 2W - 1). One masked SDPA over all the keys computes every query against every key (an
    explicit mask lets no kernel skip a block): for Gemma 3's 4.4k-token retail rows and W 512, blocks compute
    about a quarter of that."""
    import torch

    outs = []
    for a in range(0, q.shape[2], window):
        b = min(a + window, q.shape[2])
        k0, k1 = max(0, offset + a - window + 1), offset + b  # the keys queries a..b-1 may see
        outs.append(_attend(q[:, :, a:b], k[:, :, k0:k1], v[:, :, k0:k1], scaling, offset + a - k0, window, gqa))
    return torch.cat(outs, dim=2)


def _flex_attention(query, key, value, scaling, block_mask):
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    global _COMPILED_FLEX
    if _COMPILED_FLEX is None:
        # Uncompiled flex_attention materialises the scores; compiled, it is one fused kernel per call.
        # dynamic=None: the first shape compiles static, a second one recompiles with dynamic lengths, so
        # passes of different lengths do not each compile (nor fall back to eager at the recompile limit).
        _COMPILED_FLEX = torch.compile(flex_attention)
    gqa = query.shape[1] != key.shape[1]
    return _COMPILED_FLEX(query, key, value, block_mask=block_mask, scale=scaling, enable_gqa=gqa)


def art_packed_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """The attention function transformers calls in "art_packed" mode; returns ([B, L, H, D], None)."""
    if dropout:
        raise ValueError("art_packed attention does not implement attention dropout (Qwen2 and Llama train without)")
    if kwargs.get("softcap"):
        raise ValueError(
            "art_packed attention does not cap attention logits (this model's attention softcapping, Gemma 2's); "
            "train it with TrainConfig(packed_attention='mask')"
        )
    block_mask = kwargs.get("art_block_mask")
    segments = kwargs.get("art_segments")
    window = kwargs.get("sliding_window")
    if block_mask is not None and window is None:
        out = _flex_attention(query, key, value, scaling, block_mask)
    elif segments is not None:  # flex mode passes the segments too, for its sliding-window layers
        out = _segment_attention(query, key, value, scaling, segments, window)
    else:
        # Fail loud: without segment bounds this function would attend across the row's sequences.
        raise RuntimeError("art_packed attention was called without art_segments/art_block_mask (see attention.py)")
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface

        AttentionInterface.register(ATTENTION_NAME, art_packed_attention)
        _REGISTERED = True


def attention_kwargs(
    position_ids: "torch.Tensor", mode: str, segments: "list[tuple[int, int, int, int, int]] | None" = None
) -> dict[str, Any]:
    """The keyword arguments a decoder forward needs in `mode` ('segments', 'flex'; 'mask' needs none).

    `segments` (packing.PackedBatch.segments) say where the segments are and which shared prefix each
    attends to; without them they are read from the restarting position ids (no shared prefixes).
    """
    if mode == "mask":
        return {}
    if segments is None:
        segments = [(r, s, e, s, s) for r, s, e in segment_bounds(position_ids)]
    if mode == "segments":
        return {"art_segments": segments}
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    rows, length = position_ids.shape
    # doc [R, L]: each token's segment; context [R, L]: the segment of the prefix it also attends to (-1: none).
    doc = torch.full((rows, length), -1, dtype=torch.int32)
    context = torch.full((rows, length), -1, dtype=torch.int32)
    first = {(r, s): k for k, (r, s, _e, _cs, _ce) in enumerate(segments)}
    for k, (r, s, e, cs, ce) in enumerate(segments):
        doc[r, s:e] = k
        if ce > cs:
            context[r, s:e] = first[(r, cs)]
    doc, context = doc.to(position_ids.device), context.to(position_ids.device)

    def same_segment_causal(b, h, q, kv):
        # A prefix lies before its suffixes in the row, so q >= kv holds for all of it.
        return ((doc[b, q] == doc[b, kv]) | (context[b, q] == doc[b, kv])) & (q >= kv)

    with torch.no_grad():
        mask = create_block_mask(
            same_segment_causal, B=rows, H=None, Q_LEN=length, KV_LEN=length, device=position_ids.device
        )
    return {"art_block_mask": mask, "art_segments": segments}


@contextlib.contextmanager
def packed_attention(model: Any, mode: str) -> Iterator[None]:
    """Run the block with the model's attention in `mode` ('segments'/'flex': "art_packed"; 'mask': as is).

    Set for the whole step, not per forward: activation checkpointing recomputes the layers during
    backward, and they must recompute with the same attention.
    """
    if mode == "mask":
        yield
        return
    _register()
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    before = causal_lm.config._attn_implementation
    causal_lm.set_attn_implementation(ATTENTION_NAME)
    try:
        yield
    finally:
        causal_lm.set_attn_implementation(before)
