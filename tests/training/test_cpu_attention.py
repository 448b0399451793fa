"""The CPU bf16 attention (cpu_attention.py): the masks and gradients of causal, shared-prefix and sliding-window
attention, against a float64 reference; and a bf16 model trained through it agrees with float32."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from art_core.training import cpu_attention
from art_core.training.cpu_attention import blocked_attention

# (queries, keys before them (a shared prefix), window): windows narrower and wider than a block, windows
# reaching into the prefix or not, a single query, and keys that all fit one window.
CASES = [
    (70, 0, None),
    (70, 25, None),
    (70, 0, 12),
    (70, 25, 12),
    (70, 25, 40),
    (1, 30, None),
    (1, 30, 8),
    (20, 5, 64),
]


def _reference(q, k, v, scale, offset, window):
    mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(offset)
    if window is not None:
        mask = mask.triu(offset - window + 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)


def _forward_backward(attend, q, k, v, grad, offset, window):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = attend(q, k, v, 0.3, offset, window)
    out.backward(grad)
    return [out.detach(), q.grad, k.grad, v.grad]


def _inputs(n_q, offset, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    # 6 query heads on 2 key/value heads: query head h reads key/value head h // 3.
    shapes = [(1, 6, n_q, 16), (1, 2, n_q + offset, 16), (1, 2, n_q + offset, 16), (1, 6, n_q, 16)]
    return [torch.randn(*s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


@pytest.mark.parametrize("n_q,offset,window", CASES)
def test_blocked_attention_computes_what_the_masked_reference_does(monkeypatch, n_q, offset, window):
    """In float32 the blocked algorithm must agree to rounding: a key masked one position off, or a gradient
    block added to the wrong keys, shows at 1e-2 or more. Blocks of 16 queries: 70 queries make five."""
    monkeypatch.setattr(cpu_attention, "BLOCK", 16)
    q, k, v, grad = _inputs(n_q, offset, torch.float32)
    expected = _forward_backward(_reference, *(t.double() for t in (q, k, v, grad)), offset, window)
    got = _forward_backward(blocked_attention, q, k, v, grad, offset, window)
    for name, a, b in zip(("output", "queries' grad", "keys' grad", "values' grad"), got, expected):
        assert a.dtype == torch.float32
        assert torch.allclose(a.double(), b, atol=1e-5 * float(b.abs().max())), name


@pytest.mark.parametrize("n_q,offset,window", [(600, 0, None), (300, 200, 128)])
def test_blocked_attention_in_bf16_agrees_within_bf16_rounding(n_q, offset, window):
    """The trainer's case: bf16 on a CPU, the default block size. The scores and probabilities are rounded to
    bf16 as transformers' eager attention rounds them; the gradients of keys and values add up in float32."""
    q, k, v, grad = _inputs(n_q, offset, torch.bfloat16, seed=1)
    expected = _forward_backward(_reference, *(t.double() for t in (q, k, v, grad)), offset, window)
    got = _forward_backward(blocked_attention, q, k, v, grad, offset, window)
    for name, a, b in zip(("output", "queries' grad", "keys' grad", "values' grad"), got, expected):
        assert a.dtype == torch.bfloat16
        error = float((a.double() - b).abs().max() / b.abs().max())
        assert error < 3e-2, (name, error)  # measured 2e-3 to 1.6e-2 on Gemma 3's shapes (bench/cpu_attention.py)


def test_a_bf16_model_trains_through_it_as_float32_does():
    """A random Gemma 3 (a sliding-window layer and a full one) in bf16 under the trainer's packed attention, with
    a shared prefix: its logprobs and gradients agree with the float32 model's (which attends through torch's
    kernel) within bf16 rounding; the blocked attention is what the bf16 pass ran."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from art_core.training.attention import packed_attention
    from art_core.training.packing import batch_logprobs, pack_sequences
    from art_core.training.tokenize import TokenizedTrajectory

    config = Gemma3TextConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=64,
        sliding_window=48,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).train()
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(5, 500, (300,), generator=g).tolist()
    seqs = [
        TokenizedTrajectory(0, i, ids, [False] * 290 + [True] * (len(ids) - 290), [0.0] * len(ids))
        for i, ids in enumerate(prefix + torch.randint(5, 500, (n,), generator=g).tolist() for n in (150, 90))
    ]
    calls = []
    real = cpu_attention.blocked_attention

    def counted(*args):
        calls.append(args[0].dtype)
        return real(*args)

    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype).zero_grad(set_to_none=True)
        (part,) = pack_sequences(seqs, [1.0, 1.0], 4096, tokens_per_forward=8192, share_prefixes=True)
        assert part.num_tokens < sum(len(s.input_ids) for s in seqs)  # the prefix is computed once
        with packed_attention(model, "segments"), pytest.MonkeyPatch.context() as mp:
            mp.setattr(cpu_attention, "blocked_attention", counted)
            logp = batch_logprobs(model, part, attention="segments")[0]
            logp.sum().backward()
        grad = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        results[dtype] = (logp.detach().float(), grad)
    assert calls and set(calls) == {torch.bfloat16}  # float32 kept torch's kernel
    (lp32, g32), (lp16, g16) = results[torch.float32], results[torch.bfloat16]
    assert (lp16 - lp32).abs().mean() < 0.05, (lp16 - lp32).abs().mean()
    assert F.cosine_similarity(g16, g32, dim=0) > 0.99
