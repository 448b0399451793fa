"""Which dtype the trainer holds the base model in: bf16 on a GPU, and on a CPU where bf16 pays.

Most CPUs here compute bf16 natively: AMD with AVX512-BF16 and Intel with AMX (measured on a 2-core
AMX Xeon: a [2048 x 576] @ [576 x 1536] matmul at 2,316 GFLOP/s in bf16 against 259 in float32).
AVX2-only CPUs emulate bf16, slower than float32. So `TrainConfig.dtype='auto'` on a CPU

  1. stays float32 where /proc/cpuinfo lists neither avx512_bf16 nor amx_bf16,
  2. stays float32 for models with hidden size < MIN_BF16_HIDDEN (matmuls that small are bound by
     overhead, not arithmetic, and the tiny test models then train in float32 on every CPU kind),
  3. else times one matmul of the model's own MLP shape in both dtypes (about 0.1 s, once per shape and
     process) and takes bf16 when it runs at least MIN_SPEEDUP x faster.

The adapter (LoRA A and B, and AdamW's state) stays float32 whatever the base dtype (peft's default),
so only the frozen weights and activations round to bf16; log-probs are taken from float32 logits.
The choice and why is logged once per model and lands in the step's metrics (`train_dtype`).

    >>> choose_train_dtype("float32", "cpu", hidden=576, intermediate=1536)
    ('float32', 'asked for in TrainConfig.dtype')
"""

from __future__ import annotations

import functools
import logging
import time

from art_core.inference.server import cpu_has_bf16  # the servers choose their dtype from the same flags

log = logging.getLogger(__name__)

MIN_BF16_HIDDEN = 512
MIN_SPEEDUP = 1.3


@functools.lru_cache(maxsize=None)
def bf16_matmul_speedup(hidden: int, intermediate: int, tokens: int = 1024) -> float:
    """float32 time / bf16 time of one [tokens x hidden] @ [hidden x intermediate] matmul on this CPU."""
    import torch

    def best(dtype) -> float:
        a = torch.randn(tokens, hidden, dtype=dtype)
        b = torch.randn(hidden, intermediate, dtype=dtype)
        a @ b  # first call: kernel selection and packing
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
        return min(times)

    return best(torch.float32) / max(best(torch.bfloat16), 1e-9)


def choose_train_dtype(requested: str, device_type: str, hidden: int, intermediate: int) -> tuple[str, str]:
    """('float32' | 'bfloat16', why) for TrainConfig.dtype `requested` on `device_type` (see module doc)."""
    if requested in ("float32", "bfloat16"):
        return requested, "asked for in TrainConfig.dtype"
    if device_type == "cuda":
        return "bfloat16", "CUDA"
    if not cpu_has_bf16():
        return "float32", "this CPU has no bf16 instructions (AVX512-BF16 or AMX)"
    if hidden < MIN_BF16_HIDDEN:
        return "float32", f"hidden size {hidden} < {MIN_BF16_HIDDEN}: too small for bf16 to pay"
    speedup = bf16_matmul_speedup(hidden, intermediate)
    if speedup >= MIN_SPEEDUP:
        return "bfloat16", f"bf16 matmuls of this model's shape run {speedup:.1f}x float32 on this CPU"
    return "float32", f"bf16 matmuls of this model's shape run only {speedup:.2f}x float32 on this CPU"
