"""Chunked log-probs through the LM head equal the plain full-vocabulary computation, gradients included,
and never keep a [positions x vocabulary] tensor for backward."""

from __future__ import annotations

import pytest
import torch

from art_core.training.logprobs import default_chunk_tokens, token_logprobs


def _plain(hidden, head, targets):
    logp_all = torch.log_softmax(head(hidden).float(), dim=-1)
    return logp_all.gather(-1, targets[:, None])[:, 0], -(logp_all.exp() * logp_all).sum(-1)


def _grads(fn, hidden, head, targets, upstream):
    hidden = hidden.detach().clone().requires_grad_(True)
    for p in head.parameters():
        p.grad = None
    logp, entropy = fn(hidden, head, targets)
    (logp * upstream).sum().backward()  # per-token weights, as a GRPO loss has
    grads = {n: p.grad.clone() for n, p in head.named_parameters() if p.requires_grad}  # a frozen head has none
    return logp.detach(), entropy.detach(), hidden.grad, grads


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_chunked_equals_plain_with_gradients(bias, chunk):
    torch.manual_seed(0)
    head = torch.nn.Linear(32, 300, bias=bias)  # a trainable head, so its gradient is checked too
    hidden, targets = torch.randn(50, 32), torch.randint(0, 300, (50,))
    upstream = torch.randn(50)
    want = _grads(_plain, hidden, head, targets, upstream)
    got = _grads(
        lambda h, m, t: token_logprobs(h, m, t, with_entropy=True, chunk_tokens=chunk), hidden, head, targets, upstream
    )
    for a, b in zip(want[:3], got[:3]):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)
    for name in want[3]:
        assert torch.allclose(want[3][name], got[3][name], atol=1e-5, rtol=1e-5), name


def test_a_head_that_is_not_a_plain_linear_takes_the_checkpointed_path():
    torch.manual_seed(1)
    head = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 90))
    hidden, targets, upstream = torch.randn(20, 16), torch.randint(0, 90, (20,)), torch.randn(20)
    want = _grads(_plain, hidden, head, targets, upstream)
    got = _grads(
        lambda h, m, t: token_logprobs(h, m, t, with_entropy=True, chunk_tokens=6), hidden, head, targets, upstream
    )
    for a, b in zip(want[:3], got[:3]):
        assert torch.allclose(a, b, atol=1e-5)
    assert all(torch.allclose(want[3][n], got[3][n], atol=1e-5) for n in want[3])


def test_backward_keeps_no_positions_x_vocabulary_tensor():
    """What autograd saves for backward is what a pass holds until its backward: the plain path keeps
    full [N, V] log-softmax outputs; the chunked one keeps only tensors that are alive anyway (the [N, d]
    states, the [V, d] head weight) and an [N] vector."""
    torch.manual_seed(2)
    n, d, vocab = 400, 16, 5000
    head = torch.nn.Linear(d, vocab, bias=False).requires_grad_(False)  # a LoRA run freezes the head
    hidden = torch.randn(n, d, requires_grad=True)
    targets = torch.randint(0, vocab, (n,))

    def largest_saved(fn) -> int:
        sizes = []

        def pack(t):
            sizes.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(hidden * 1.0, head, targets)[0].sum().backward()
        return max(sizes)

    assert largest_saved(_plain) >= n * vocab  # the problem the chunked path solves
    assert largest_saved(lambda h, m, t: token_logprobs(h, m, t, chunk_tokens=64)) <= vocab * d < n * vocab


def test_default_chunk_bounds_one_float32_logits_buffer():
    assert default_chunk_tokens(151_936, "cpu") * 151_936 * 4 <= 128 << 20
    assert default_chunk_tokens(151_936, "cuda") * 151_936 * 4 <= 1 << 30
    assert default_chunk_tokens(4096, "cpu") == 8192  # a small vocabulary: a whole pass in one chunk


@pytest.mark.gpu
def test_chunked_equals_plain_in_bfloat16_on_cuda():
    torch.manual_seed(3)
    head = torch.nn.Linear(256, 151_936, bias=False, device="cuda", dtype=torch.bfloat16).requires_grad_(False)
    hidden = torch.randn(3000, 256, device="cuda", dtype=torch.bfloat16)
    targets = torch.randint(0, 151_936, (3000,), device="cuda")
    upstream = torch.randn(3000, device="cuda")
    want = _grads(lambda h, m, t: _plain(h, m, t), hidden, head, targets, upstream)
    got = _grads(lambda h, m, t: token_logprobs(h, m, t, with_entropy=True), hidden, head, targets, upstream)
    assert torch.allclose(want[0], got[0], atol=1e-3) and torch.allclose(want[1], got[1], atol=1e-2)
    assert torch.allclose(want[2].float(), got[2].float(), atol=1e-2, rtol=1e-2)
