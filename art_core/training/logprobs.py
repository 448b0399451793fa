"""Log-probabilities (and entropies) of target tokens through the LM head, a chunk of positions at a time.

The plain way, `log_softmax(head(h))`, holds [positions x vocabulary] float32 logits, their log-softmax
and, in backward, their gradient: with Qwen's 151,936-token vocabulary that is 1.8 MB per position and
copy, which is what ran a 13.8k-token CPU step to 20 GiB and a 1.5B GPU step to 75 GiB. Here the head
runs on at most `chunk_tokens` positions at a time, in forward *and* backward:

    forward   per chunk: logits [C, V] -> logsumexp [C] -> logp of the target, entropy (optional)
              keeps only the hidden states [N, d] (already alive in the graph) and logsumexp [N]
    backward  per chunk: recompute logits, softmax p = exp(logits - lse), d logp / d logits = onehot - p,
              then grad_h = grad_logits @ W (and grad_W, grad_b when the head itself trains)

so the peak extra memory is a few [C, V] float32 buffers whatever the number of positions; the price
is one more head matmul in backward (skipped when everything fits one chunk: then the softmax is kept).
The result equals the plain computation within float rounding, gradients included
(tests/training/test_logprobs.py).

    >>> logp, entropy = token_logprobs(hidden, lm_head, targets, with_entropy=True)   # doctest: +SKIP
    >>> logp.shape, entropy.shape                                                     # doctest: +SKIP
    (torch.Size([N]), torch.Size([N]))

Why not liger-kernel's fused linear cross-entropy on CUDA: it computes the input gradient during the
forward and, in backward, scales it by one upstream gradient (the first element of grad_output, as its
own docstring warns), which is right for a mean or sum cross-entropy but wrong for a GRPO loss, where
every token carries its own weight (advantage x ratio x aggregation weight). This function gives each
token its own gradient with the same memory bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Float32 logits of one chunk: 128 MiB on CPU (a bigger chunk runs no faster there); on a GPU larger
# matmuls run closer to peak, and 1 GiB is small beside its memory.
CHUNK_BYTES = {"cpu": 128 << 20, "cuda": 1 << 30}


def default_chunk_tokens(vocab_size: int, device_type: str) -> int:
    """Positions per chunk so one float32 [chunk x vocabulary] buffer stays within CHUNK_BYTES.

    >>> default_chunk_tokens(151_936, "cpu")
    220
    """
    budget = CHUNK_BYTES.get(device_type, CHUNK_BYTES["cpu"])
    return max(16, budget // (4 * vocab_size))


def _linear_logits(h: "torch.Tensor", weight: "torch.Tensor", bias: "torch.Tensor | None") -> "torch.Tensor":
    import torch.nn.functional as F

    return F.linear(h, weight, bias).float()  # float32 so the softmax of bf16 logits stays accurate


def _make_function():
    import torch

    class ChunkedLinearLogprob(torch.autograd.Function):
        """logp[i] = log_softmax(h[i] @ W.T + b)[t[i]], chunk by chunk; entropy is a metric (no gradient)."""

        @staticmethod
        def forward(ctx, hidden, weight, bias, targets, chunk, want_entropy, keep_probs):  # type: ignore[override]
            n = hidden.shape[0]
            logp = hidden.new_empty(n, dtype=torch.float32)
            lse = hidden.new_empty(n, dtype=torch.float32)
            entropy = hidden.new_empty(n, dtype=torch.float32) if want_entropy else None
            kept_probs = None
            for s in range(0, n, chunk):
                e = min(s + chunk, n)
                logits = _linear_logits(hidden[s:e], weight, bias)  # [C, V]
                # One exp over [C, V] serves the log-sum-exp, the entropy and the kept softmax alike.
                peak = logits.amax(dim=-1)
                probs = (logits - peak[:, None]).exp_()
                total = probs.sum(dim=-1)
                lse_c = peak + total.log()
                lse[s:e] = lse_c
                logp[s:e] = logits.gather(-1, targets[s:e, None])[:, 0] - lse_c
                if want_entropy or keep_probs:
                    probs.div_(total[:, None])
                    if want_entropy:
                        # H = -sum p (z - lse) = lse - sum p z; bmm sums without another [C, V] buffer.
                        entropy[s:e] = lse_c - torch.bmm(probs[:, None, :], logits[:, :, None]).view(-1)
                    if keep_probs:
                        kept_probs = probs  # one chunk only: keep the softmax and skip the recompute
            ctx.chunk = chunk
            ctx.kept_probs = kept_probs
            ctx.save_for_backward(hidden, weight, bias, targets, lse)
            if entropy is None:
                return logp, None
            ctx.mark_non_differentiable(entropy)
            return logp, entropy

        @staticmethod
        def backward(ctx, grad_logp, grad_entropy):  # type: ignore[override]
            hidden, weight, bias, targets, lse = ctx.saved_tensors
            need_h, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
            n, chunk = hidden.shape[0], ctx.chunk
            grad_h = torch.empty_like(hidden) if need_h else None
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
            grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
            rows = torch.arange(min(chunk, n), device=hidden.device)
            for s in range(0, n, chunk):
                e = min(s + chunk, n)
                if ctx.kept_probs is not None:
                    probs = ctx.kept_probs
                    ctx.kept_probs = None  # backward runs once; free it as soon as it is consumed
                else:
                    probs = _linear_logits(hidden[s:e], weight, bias).sub_(lse[s:e, None]).exp_()
                g = grad_logp[s:e].float()
                # d logp_t / d logits = onehot(t) - p, times the upstream gradient of each position.
                grad_logits = probs.mul_(-g[:, None])
                grad_logits[rows[: e - s], targets[s:e]] += g
                gl = grad_logits.to(hidden.dtype)
                if need_h:
                    grad_h[s:e] = gl @ weight
                if need_w:
                    grad_w.addmm_(gl.t().float(), hidden[s:e].float())
                if need_b:
                    grad_b += grad_logits.sum(0)
            return (
                grad_h,
                grad_w.to(weight.dtype) if need_w else None,
                grad_b.to(bias.dtype) if need_b else None,
                None,
                None,
                None,
                None,
            )

    return ChunkedLinearLogprob


_FUNCTION: Any = None


def token_logprobs(
    hidden: "torch.Tensor",
    head: Any,
    targets: "torch.Tensor",
    *,
    with_entropy: bool = False,
    chunk_tokens: int | None = None,
) -> "tuple[torch.Tensor, torch.Tensor | None]":
    """log p(targets[i] | hidden[i]) under the LM head `head`, [N] float32, and entropies [N] if asked.

    `hidden` is [N, d] (the states that predict each target), `targets` [N] token ids. `head` is the
    model's output embedding: a plain `nn.Linear` takes the chunked autograd path above; any other
    module (a wrapped or quantised head) is run chunk by chunk under activation checkpointing, which
    bounds memory the same way at the cost of autograd's own softmax buffers per chunk.

    >>> import torch
    >>> head = torch.nn.Linear(4, 10, bias=False)
    >>> logp, _ = token_logprobs(torch.randn(3, 4), head, torch.tensor([1, 2, 3]), chunk_tokens=2)
    >>> logp.shape
    torch.Size([3])
    """
    import torch

    global _FUNCTION
    weight = getattr(head, "weight", None)
    if chunk_tokens is None:
        vocab = weight.shape[0] if weight is not None else int(head(hidden[:1]).shape[-1])
        chunk_tokens = default_chunk_tokens(vocab, hidden.device.type)
    if type(head) is torch.nn.Linear:
        if _FUNCTION is None:
            _FUNCTION = _make_function()
        # With one chunk, keeping its softmax for backward costs no more than the recompute's buffer would.
        keep = (
            hidden.shape[0] <= chunk_tokens
            and torch.is_grad_enabled()
            and (hidden.requires_grad or head.weight.requires_grad)
        )
        return _FUNCTION.apply(hidden, head.weight, head.bias, targets, int(chunk_tokens), with_entropy, keep)
    return _checkpointed_logprobs(hidden, head, targets, with_entropy, int(chunk_tokens))


def _checkpointed_logprobs(hidden, head, targets, with_entropy: bool, chunk: int):
    import torch
    from torch.utils.checkpoint import checkpoint

    def one(h, t):
        logp_all = torch.log_softmax(head(h).float(), dim=-1)
        return logp_all.gather(-1, t[:, None])[:, 0]

    parts, entropies = [], []
    for s in range(0, hidden.shape[0], chunk):
        h, t = hidden[s : s + chunk], targets[s : s + chunk]
        parts.append(checkpoint(one, h, t, use_reentrant=False) if torch.is_grad_enabled() else one(h, t))
        if with_entropy:
            with torch.no_grad():
                logp_all = torch.log_softmax(head(h.detach()).float(), dim=-1)
                entropies.append(-(logp_all.exp() * logp_all).sum(-1))
    logp = torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)
    entropy = (torch.cat(entropies) if entropies else logp.new_zeros(0)) if with_entropy else None
    return logp, entropy
