"""LoRA linears in one pass over the output: base matmul, then the low-rank update added in place.

peft's LoRA linear computes `base(x) + lora_B(lora_A(dropout(x))) * scaling`. Each of those operations
writes a new [tokens x out_features] tensor, and when the base model is bf16 the adapter weights are
float32 (peft's default `autocast_adapter_dtype`), so x is first copied to float32, the update is a
float32 [tokens x out] tensor, the sum is float32 and is cast back to bf16. That is about 24 bytes of
memory traffic per output feature per token, on every LoRA-wrapped projection, in forward and again in
backward; at 1.5B the MLP projections spend longer moving those tensors than multiplying the base weight.

Here one autograd function does the same arithmetic with the adapter cast to the activations' dtype:

    forward    xa = x @ A.T                      [N, r]    (r = rank, small)
               y  = x @ W.T + b                  [N, out]  (the frozen base weight)
               y += scaling * xa @ B.T           in place: one read and one write of y
    backward   gB = g @ B                        [N, r]
               dx = g @ W + scaling * gB @ A     in place on dx
               dA = scaling * gB.T @ x,   dB = scaling * g.T @ xa      (float32 like the parameters)

and keeps only x (which the base matmul keeps anyway) and xa for backward. The result equals peft's
within the rounding of the activations' dtype (tests/training/test_fused_lora.py); in float32 it is the
same computation.

Only plain LoRA on an `nn.Linear` with a frozen base, no dropout, one active adapter and nothing merged
is fused; anything else (DoRA, dropout, disabled adapters for a KL reference, mixed-adapter batches)
takes peft's own forward, so the switch is always safe to turn on.

    >>> with fused_lora(peft_model):                         # doctest: +SKIP
    ...     loss = peft_model(input_ids).logits.sum()
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Iterator

_FUNCTION: Any = None


def _make_function():
    import torch
    import torch.nn.functional as F

    class LoraLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias, lora_a, lora_b, scaling):  # type: ignore[override]
            shape = x.shape
            x2 = x.reshape(-1, shape[-1])
            a = lora_a.to(x.dtype)
            b = lora_b.to(x.dtype)
            xa = x2 @ a.t()
            out = F.linear(x2, weight, bias)
            out.addmm_(xa, b.t(), alpha=scaling)
            ctx.save_for_backward(x2, weight, a, b, xa)
            ctx.scaling = scaling
            ctx.shape = shape
            ctx.param_dtypes = (lora_a.dtype, lora_b.dtype)
            return out.view(*shape[:-1], out.shape[-1])

        @staticmethod
        def backward(ctx, grad):  # type: ignore[override]
            x2, weight, a, b, xa = ctx.saved_tensors
            s = ctx.scaling
            g = grad.reshape(-1, grad.shape[-1]).to(x2.dtype)
            gb = g @ b  # [N, r]
            grad_x = None
            if ctx.needs_input_grad[0]:
                grad_x = g @ weight.to(g.dtype)
                grad_x.addmm_(gb, a, alpha=s)
                grad_x = grad_x.view(ctx.shape)
            grad_a = (gb.t() @ x2).mul_(s).to(ctx.param_dtypes[0]) if ctx.needs_input_grad[3] else None
            grad_b = (g.t() @ xa).mul_(s).to(ctx.param_dtypes[1]) if ctx.needs_input_grad[4] else None
            return grad_x, None, None, grad_a, grad_b, None

    return LoraLinear


def _fusable(layer: Any) -> str | None:
    """The active adapter's name when `layer`'s next forward can be fused, else None (peft's forward runs)."""
    import torch

    if layer.disable_adapters or layer.merged:
        return None
    active = layer.active_adapters
    if len(active) != 1:
        return None
    name = active[0]
    base = layer.base_layer
    if (
        name not in layer.lora_A
        or name in getattr(layer, "lora_variant", {})  # DoRA and other variants
        or getattr(layer, "use_dora", {}).get(name, False)
        or not isinstance(layer.lora_dropout[name], torch.nn.Identity)
        or type(base) is not torch.nn.Linear
        or base.weight.requires_grad
        or (base.bias is not None and base.bias.requires_grad)
    ):
        return None
    return name


def _fused_forward(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
    name = None if (args or kwargs) else _fusable(self)
    if name is None:
        return type(self).forward(self, x, *args, **kwargs)
    global _FUNCTION
    if _FUNCTION is None:
        _FUNCTION = _make_function()
    base = self.base_layer
    return _FUNCTION.apply(
        x, base.weight, base.bias, self.lora_A[name].weight, self.lora_B[name].weight, float(self.scaling[name])
    )


def lora_linears(model: Any) -> list[Any]:
    """The peft LoRA `Linear` layers of `model`."""
    from peft.tuners.lora.layer import Linear

    return [m for m in model.modules() if isinstance(m, Linear)]


@contextlib.contextmanager
def fused_lora(model: Any, enabled: bool = True) -> Iterator[int]:
    """Within the block, `model`'s LoRA linears run fused (see module doc); yields how many were switched.

    Per call, not at load: the cached model also serves sampling, merging and peft's own code paths,
    which should see peft's forward.
    """
    layers = lora_linears(model) if enabled else []
    for layer in layers:
        layer.forward = types.MethodType(_fused_forward, layer)
    try:
        yield len(layers)
    finally:
        for layer in layers:
            layer.__dict__.pop("forward", None)
