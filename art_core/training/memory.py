"""Memory-aware sizing of forward passes, and the peak memory a step used.

How many tokens one forward pass may hold is a memory question: activations saved for backward grow
linearly with the tokens of a pass (the LM head's logits no longer do, see logprobs.py, and packed
attention no longer grows with the row length squared, see attention.py). So the trainer sizes a pass
from the model's shape and a budget:

    bytes per token = layers x (what one decoder layer keeps for backward)        without checkpointing
                    = layers x hidden (each layer's input) + one layer's worth    with activation checkpointing
    tokens per pass = budget / (SAFETY x bytes per token), within [MIN_TOKENS, MAX_TOKENS]

The budget is `TrainConfig.memory_budget_gib` when given; otherwise, on CUDA, FREE_FRACTION of the
device memory free once the model is loaded (vLLM sharing the GPU already holds its share; the rest is
left for the LM head's chunk buffers, the optimizer and the allocator's fragmentation), and on CPU 1 GiB
(larger passes run no faster on a CPU; the step's peak stays small beside the model).

Activation checkpointing recomputes every layer's forward in backward: about 8N instead of 6N FLOPs per
token. So on CUDA the default (`choose_checkpointing`) keeps it off whenever a pass without it still
holds the step's longest sequence and at least MIN_FULL_TOKENS tokens, and turns it on only when memory
forces it. On a CPU it stays off unless one sequence alone would keep more than a quarter of the available
memory, or 4 GiB, whichever is less (`cpu_sequence_budget`: a 6k-token tau2 episode on SmolLM2-135M would
keep about 11 GiB). The figures land in the step's metrics (`tokens_per_pass`, `passes`,
`gradient_checkpointing`, `peak_memory_gib`), so what the defaults did is visible.

    >>> per_token_bytes(hidden=3584, intermediate=18944, layers=28, kv_dim=512, dtype_bytes=2, checkpointing=True)
    741376
    >>> tokens_per_pass(budget_bytes=20 << 30, bytes_per_token=478208)
    16384
"""

from __future__ import annotations

import sys
from typing import Any

SAFETY = 1.5  # allocator rounding, LoRA intermediates, gradients in flight
MIN_TOKENS = 512
MAX_TOKENS = 16384  # beyond this a pass is no faster per token, on a GPU or a CPU
MIN_FULL_TOKENS = 1024  # passes without checkpointing smaller than this lose more to per-pass overhead
FREE_FRACTION = 0.75  # of the free CUDA memory, for activations
CPU_BUDGET_BYTES = 1 << 30
CPU_SEQUENCE_CAP_BYTES = 4 << 30  # one sequence's activations on CPU, at most: beyond it, checkpointing


def per_token_bytes(
    *, hidden: int, intermediate: int, layers: int, kv_dim: int, dtype_bytes: int, checkpointing: bool
) -> int:
    """Bytes of activations one token of a pass keeps alive for backward (an estimate, see module doc).

    One decoder layer keeps about: its input, the two norms' inputs and outputs (RMSNorm upcasts to
    float32, so in bf16 each costs about 5 x hidden of the dtype), q, k, v, rotated q and k, the attention
    output (about 16 x hidden + 4 x kv_dim in all), and the MLP's gate, up, activation and product
    (4 x intermediate). With checkpointing only each layer's input stays, plus one layer's worth while it
    is recomputed (and its gradients, hence 2x).
    """
    one_layer = (16 * hidden + 4 * kv_dim + 4 * intermediate) * dtype_bytes
    if checkpointing:
        return layers * hidden * dtype_bytes + 2 * one_layer
    return layers * one_layer


def model_per_token_bytes(model_config: Any, dtype_bytes: int, checkpointing: bool) -> int:
    """`per_token_bytes` from a transformers config (Qwen2/Llama-style field names)."""
    hidden = int(getattr(model_config, "hidden_size", 1024))
    heads = int(getattr(model_config, "num_attention_heads", 16) or 16)
    head_dim = int(getattr(model_config, "head_dim", None) or hidden // heads)
    kv_heads = int(getattr(model_config, "num_key_value_heads", None) or heads)
    return per_token_bytes(
        hidden=hidden,
        intermediate=int(getattr(model_config, "intermediate_size", None) or 4 * hidden),
        layers=int(getattr(model_config, "num_hidden_layers", 12)),
        kv_dim=kv_heads * head_dim,
        dtype_bytes=dtype_bytes,
        checkpointing=checkpointing,
    )


def tokens_per_pass(budget_bytes: int, bytes_per_token: int) -> int:
    """Tokens of one forward pass that fit `budget_bytes`, rounded down to a multiple of 256."""
    fit = int(budget_bytes / (SAFETY * max(bytes_per_token, 1)))
    return max(MIN_TOKENS, min(MAX_TOKENS, fit // 256 * 256))


def choose_checkpointing(
    budget_bytes: int, full_bytes_per_token: int, longest: int, tokens_per_forward: int | None = None
) -> bool:
    """Whether a CUDA step needs activation checkpointing: only when a pass without it would not hold
    `tokens_per_forward` (when given), or else `longest` tokens and at least MIN_FULL_TOKENS, in `budget_bytes`.

    >>> choose_checkpointing(40 << 30, 3_000_000, longest=1500)   # 1.5B-sized layers, 40 GiB: ~9.5k tokens fit
    False
    >>> choose_checkpointing(4 << 30, 3_000_000, longest=1500)    # ~950 tokens fit: recompute instead
    True
    """
    need = tokens_per_forward if tokens_per_forward is not None else max(MIN_FULL_TOKENS, longest)
    return need * SAFETY * full_bytes_per_token > budget_bytes


def cpu_sequence_budget() -> int:
    """Bytes one sequence's activations may take on CPU before checkpointing is worth its compute: a quarter
    of the memory available now, and never more than CPU_SEQUENCE_CAP_BYTES (a pass holds at least one whole
    sequence, whatever the 1 GiB pass budget).

    The cap keeps a step's peak from growing with the machine: without it a 3.2k-token MCP episode on
    SmolLM2-135M kept 3.6 GiB of activations (the MCP-RL notebook's trainer step peaked at 4.6 GiB RSS), and a
    6k-token one about 11 GiB on a machine with 44 GiB free. Recomputing those layers cost nothing there: the
    step's passes grow with checkpointing on, so a group's shared prefix is computed once instead of once per
    small pass (2 steps: 92 s with it, 97 s without; peak 2.4 GiB).
    """
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return min(int(line.split()[1]) * 1024 // 4, CPU_SEQUENCE_CAP_BYTES)
    except OSError:
        pass
    return CPU_SEQUENCE_CAP_BYTES


def activation_budget(device: Any, budget_gib: float | None) -> int:
    """Bytes a step may spend on activations: the configured budget, else FREE_FRACTION of the free CUDA
    memory, else 1 GiB."""
    if budget_gib is not None:
        return int(budget_gib * (1 << 30))
    if getattr(device, "type", str(device)) == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        # Blocks PyTorch's allocator holds from earlier steps are free to this step too; without them the
        # second step would see less memory than the first and size its passes differently.
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int((free + cached) * FREE_FRACTION)
    return CPU_BUDGET_BYTES


class PeakMemory:
    """The peak memory of a block of work: CUDA's max allocated, or the process's peak RSS on CPU.

    On Linux the process's peak RSS (VmHWM) is reset at the start by writing 5 to /proc/self/clear_refs,
    so the figure is this step's and not the process's whole life; where that is not possible the
    figure is the process's lifetime peak (ru_maxrss), an upper bound.

    >>> with PeakMemory("cpu") as peak:                         # doctest: +SKIP
    ...     work()
    >>> peak.gib                                                # doctest: +SKIP
    1.93
    """

    def __init__(self, device: Any) -> None:
        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self.device = device
        self.gib = 0.0

    def __enter__(self) -> "PeakMemory":
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            reset_peak_rss()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.cuda:
            import torch

            self.gib = torch.cuda.max_memory_allocated(self.device) / (1 << 30)
        else:
            self.gib = peak_rss_bytes() / (1 << 30)


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (Linux); False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """This process's peak resident memory in bytes: VmHWM on Linux, else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux
