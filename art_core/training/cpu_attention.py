"""Attention for bf16 training on a CPU: blocks of queries through the CPU's bf16 matrix multiply.

torch's CPU flash-attention kernel gains nothing from bf16 (it runs as fast as float32) and its backward was
48% of a Gemma 3 SFT step on a 2-core AMD EPYC (26% on an AMX Xeon). Here the queries go in blocks of
`BLOCK` against the keys they may see (all earlier keys, or the last `window` of them), so each block is a
few large matrix multiplies that oneDNN runs in bf16 at about 3x float32's rate; the softmax and its
backward are torch's fused kernels. The backward recomputes the scores block by block, as flash attention
does, so nothing of size queries x keys outlives a block.

The arithmetic is transformers' eager attention in bf16: the scores and the probabilities are rounded to
bf16 (each accumulated in float32 inside the multiply), the softmax and its backward run in float32
inside their kernels, and the keys' and values' gradients add up over blocks in float32. Measured on the
AMD EPYC (Gemma 3 270M's shapes, forward + backward, bench/cpu_attention.py): 1.3-2.2x torch's kernel
as the trainer called it before, 1.8x over all the shapes; one SFT step of 2 Gemma demonstrations 1.37x.
In float32 torch's kernel is as fast or faster on full attention, so float32 keeps it (attention.py).

    >>> import torch
    >>> q, k, v = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    >>> out = blocked_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), 8**-0.5, offset=0, window=None)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    >>> bool(torch.allclose(out.float(), ref, atol=0.05))
    True
"""

from __future__ import annotations

from typing import Iterator

import torch

BLOCK = 256  # queries a block; 128-512 measured within 10% of each other, 256 the best on windowed layers


def _blocks(n_queries: int, offset: int, window: int | None) -> Iterator[tuple[int, int, int, int, int | None]]:
    """(a, b, lo, hi, masked_from) for each block of queries a..b-1: the keys lo..hi-1 they may see, and the
    first of those (counted from lo) that some query of the block must not see, or None.

    Query i sits at key position offset + i: it sees keys up to there and, with a window W, none W or more
    positions before it.

    >>> list(_blocks(600, 0, None))[1]  # queries 256-511 see keys 0-511; 257.. are masked for some
    (256, 512, 0, 512, 257)
    >>> list(_blocks(600, 100, 128))[1]  # a window: keys 229-611, the oldest masked for the later queries
    (256, 512, 229, 612, 0)
    """
    for a in range(0, n_queries, BLOCK):
        b = min(a + BLOCK, n_queries)
        hi = offset + b
        lo = 0 if window is None else max(0, offset + a - window + 1)
        first = 0 if window is not None and lo < offset + b - window else offset + a + 1 - lo
        yield a, b, lo, hi, (first if first < hi - lo else None)


def _scores(q_block, k_t, a, b, lo, hi, masked_from, offset, window, scale):
    """Scaled scores [Hkv, G, n, keys] of queries a..b-1 against keys lo..hi-1, unseen keys at -inf."""
    hkv, g, _, d = q_block.shape
    s = torch.matmul(q_block.reshape(hkv, g * (b - a), d), k_t[:, :, lo:hi]).view(hkv, g, b - a, hi - lo)
    if masked_from is not None:
        query_pos = torch.arange(offset + a, offset + b, device=s.device)[:, None]
        key_pos = torch.arange(lo + masked_from, hi, device=s.device)[None, :]
        unseen = key_pos > query_pos
        if window is not None:
            unseen |= key_pos <= query_pos - window
        s[..., masked_from:].masked_fill_(unseen, float("-inf"))
    return s.mul_(scale)


class _BlockedAttention(torch.autograd.Function):
    """q [Hkv, G, Lq, D] (G query heads per key/value head), k and v [Hkv, Lk, D] -> [Hkv, G, Lq, D]."""

    @staticmethod
    def forward(ctx, q, k, v, scale, offset, window):
        hkv, g, n_q, d = q.shape
        out = torch.empty_like(q)
        k_t = k.transpose(1, 2).contiguous()
        for a, b, lo, hi, masked_from in _blocks(n_q, offset, window):
            p = torch.softmax(_scores(q[:, :, a:b], k_t, a, b, lo, hi, masked_from, offset, window, scale), dim=-1)
            out[:, :, a:b] = torch.matmul(p.view(hkv, g * (b - a), hi - lo), v[:, lo:hi]).view(hkv, g, b - a, d)
        ctx.save_for_backward(q, k, v)
        ctx.args = (scale, offset, window)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        scale, offset, window = ctx.args
        hkv, g, n_q, d = q.shape
        grad_q = torch.empty_like(q)
        # The keys' and values' gradients, transposed ([Hkv, D, Lk]): each block adds D x keys, and a
        # transposed product would copy the block's probabilities instead of its few rows of queries.
        grad_k_t = torch.zeros(hkv, d, k.shape[1], dtype=torch.float32, device=k.device)
        grad_v_t = torch.zeros(hkv, d, v.shape[1], dtype=torch.float32, device=v.device)
        k_t, v_t = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        for a, b, lo, hi, masked_from in _blocks(n_q, offset, window):
            rows = g * (b - a)
            q_rows = q[:, :, a:b].reshape(hkv, rows, d)
            go_rows = grad_out[:, :, a:b].reshape(hkv, rows, d)
            s = _scores(q[:, :, a:b], k_t, a, b, lo, hi, masked_from, offset, window, scale)
            p = torch.softmax(s, dim=-1).view(hkv, rows, hi - lo)
            grad_v_t[:, :, lo:hi] += torch.matmul(go_rows.transpose(1, 2), p)
            grad_p = torch.matmul(go_rows, v_t[:, :, lo:hi])
            grad_s = torch._softmax_backward_data(grad_p, p, -1, p.dtype)
            grad_q[:, :, a:b] = torch.matmul(grad_s, k[:, lo:hi]).mul_(scale).view(hkv, g, b - a, d)
            grad_k_t[:, :, lo:hi] += torch.matmul(q_rows.transpose(1, 2), grad_s)
        grad_k = grad_k_t.mul_(scale).transpose(1, 2).to(k.dtype)
        return grad_q, grad_k, grad_v_t.transpose(1, 2).to(v.dtype), None, None, None


def blocked_attention(q, k, v, scale: float, offset: int, window: int | None):
    """q [1, H, Lq, D], k and v [1, Hkv, Lk, D] -> [1, H, Lq, D]: query i attends to keys up to `offset` + i
    (lower-right causal), and with a `window` W to none W or more positions before that. Query head h uses
    key/value head h // (H / Hkv), as SDPA's enable_gqa and transformers' repeat_kv do."""
    hkv = k.shape[1]
    out = _BlockedAttention.apply(q[0].unflatten(0, (hkv, q.shape[1] // hkv)), k[0], v[0], scale, offset, window)
    return out.flatten(0, 1).unsqueeze(0)
