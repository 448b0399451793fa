"""Sliding-window attention in the trainer (float32 on a CPU, and CUDA; a CPU in bf16 attends as
bench/cpu_attention.py times): blocks of W queries against the keys their window reaches, against
one SDPA over all the keys with a band mask (what the trainer did before), forward + backward.

The shape is Gemma 3 270M's (4 query heads, 1 key/value head, head dim 256, window 512) on a retail
demonstration's length (4.4k tokens), with and without a shared prefix (a 3.3k-token context, then a 1.1k
suffix). Both sides are checked to agree before they are timed.

    python bench/sliding_window.py [--length 4400] [--dtype fp32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from art_core.training.attention import _attend, _windowed_attention


def _time(blocked: bool, case: tuple, repeats: int) -> float:
    """The best of `repeats` forward + backward passes, after one to warm up."""
    _run(blocked, *case)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        _run(blocked, *case)
        best = min(best, time.perf_counter() - t0)
    return best


def _run(blocked, q, k, v, grad, context, window):
    """One forward + backward; the output and the queries' gradient."""
    q.grad = k.grad = v.grad = None
    attend = _windowed_attention if blocked else _attend
    out = attend(q, k, v, q.shape[-1] ** -0.5, context, window, True)
    out.backward(grad)
    return out.detach(), q.grad.clone()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=int, default=4400)
    p.add_argument("--context", type=int, default=3300, help="shared-prefix length of the second case")
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="fp32")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    torch.manual_seed(0)
    heads, kv_heads, dim, w = 4, 1, 256, args.window
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.dtype}, window {w}")
    for context in (0, args.context):
        n_q = args.length - context
        q = torch.randn(1, heads, n_q, dim, dtype=dtype, requires_grad=True)
        k = torch.randn(1, kv_heads, args.length, dim, dtype=dtype, requires_grad=True)
        v = torch.randn(1, kv_heads, args.length, dim, dtype=dtype, requires_grad=True)
        grad = torch.randn(1, heads, n_q, dim, dtype=dtype)

        case = (q, k, v, grad, context, w)
        (o1, g1), (o2, g2) = _run(False, *case), _run(True, *case)
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        assert torch.allclose(o1.float(), o2.float(), atol=tol), "blocked and masked outputs differ"
        assert torch.allclose(g1.float(), g2.float(), atol=tol * float(g1.abs().max())), "gradients differ"
        masked = _time(False, case, args.repeats)
        blocked = _time(True, case, args.repeats)
        what = f"{n_q} queries" + (f" after a {context}-token shared prefix" if context else "")
        print(f"{what}: masked {masked * 1e3:.0f} ms, blocked {blocked * 1e3:.0f} ms, {masked / blocked:.2f}x")


if __name__ == "__main__":
    main()
