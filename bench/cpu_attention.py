"""The trainer's CPU attention in bf16: blocks of queries through the bf16 matrix multiply
(art_core/training/cpu_attention.py) against torch's CPU flash-attention kernel as the trainer called it before
(per segment, sliding-window layers in blocks of W queries, calls over fewer than 768 keys in float32),
forward + backward.

Shapes are Gemma 3 270M's (4 query heads, 1 key/value head, head dim 256, window 512) at a retail
demonstration's lengths: a whole 4.4k-token conversation, a 1.1k-token suffix after a 3.3k-token shared prefix,
and short segments. Both sides are first checked against a float64 reference (largest error relative to the
largest value, output and the three gradients), then timed: the best of --repeats after one warm-up.

    python bench/cpu_attention.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from art_core.training.attention import _attend
from art_core.training.cpu_attention import blocked_attention

CASES = [  # (queries, shared-prefix keys before them, window)
    (4400, 0, None),
    (4400, 0, 512),
    (1100, 3300, None),
    (1100, 3300, 512),
    (700, 0, 512),
    (134, 0, None),
]
TOLERANCE = 0.1  # bf16 rounding: both sides measured at 2e-3 to 4e-2 here; a wrong mask or gradient is of order 1


def _torch_kernel(q, k, v, scale, offset, window):
    """The trainer's CPU bf16 attention before: SDPA per segment, sliding-window layers in blocks of W queries,
    and any call over fewer than 768 keys upcast to float32 (torch's bf16 kernel was slowest there)."""
    if window is None:
        return _sdpa(q, k, v, scale, offset, None)
    outs = []
    for a in range(0, q.shape[2], window):
        b = min(a + window, q.shape[2])
        k0, k1 = max(0, offset + a - window + 1), offset + b
        outs.append(_sdpa(q[:, :, a:b], k[:, :, k0:k1], v[:, :, k0:k1], scale, offset + a - k0, window))
    return torch.cat(outs, dim=2)


def _sdpa(q, k, v, scale, offset, window):
    if k.shape[2] >= 768:
        return _attend(q, k, v, scale, offset, window, True)
    return _attend(q.float(), k.float(), v.float(), scale, offset, window, True).to(q.dtype)


def _reference(q, k, v, scale, offset, window):
    mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(offset)
    if window is not None:
        mask = mask.triu(offset - window + 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)


def _run(attend, tensors, grad, offset, window):
    q, k, v = tensors
    q.grad = k.grad = v.grad = None
    out = attend(q, k, v, q.shape[-1] ** -0.5, offset, window)
    out.backward(grad)
    return [out.detach(), q.grad, k.grad, v.grad]


def _best(attend, tensors, grad, offset, window, repeats):
    _run(attend, tensors, grad, offset, window)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        _run(attend, tensors, grad, offset, window)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, bf16, Gemma 3 270M attention shapes", flush=True
    )
    total = {"torch": 0.0, "blocked": 0.0}
    for n_q, offset, window in CASES:
        n_k = n_q + offset
        tensors = [
            torch.randn(1, heads, n, 256, dtype=torch.bfloat16, requires_grad=True)
            for heads, n in ((4, n_q), (1, n_k), (1, n_k))
        ]
        grad = torch.randn(1, 4, n_q, 256, dtype=torch.bfloat16)
        exact = [t.detach().double().requires_grad_() for t in tensors]
        reference = _run(_reference, exact, grad.double(), offset, window)
        line = f"{n_q:5} queries" + (f" after {offset} shared" if offset else "") + f", window {window}:"
        times = {}
        for name, attend in (("torch", _torch_kernel), ("blocked", blocked_attention)):
            got = _run(attend, tensors, grad, offset, window)
            err = max(float((g.double() - r).abs().max() / r.abs().max()) for g, r in zip(got, reference))
            assert err < TOLERANCE, f"{name} differs from float64 by {err:.1e}"
            times[name] = _best(attend, tensors, grad, offset, window, args.repeats)
            total[name] += times[name]
            line += f"  {name} {times[name] * 1e3:.0f} ms (error {err:.1e})"
        print(f"{line}  {times['torch'] / times['blocked']:.2f}x")
    print(
        f"all cases: torch {total['torch']:.2f} s, blocked {total['blocked']:.2f} s, {total['torch'] / total['blocked']:.2f}x"
    )


if __name__ == "__main__":
    main()
