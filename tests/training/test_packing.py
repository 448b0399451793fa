"""Packing: sequences share rows without seeing each other, so packed logprobs equal unpacked ones."""

from __future__ import annotations

import pytest
import torch

from art_core.training.packing import batch_logprobs, first_fit_decreasing, pack_sequences
from art_core.training.tokenize import TokenizedTrajectory


def test_first_fit_decreasing_fills_rows():
    assert first_fit_decreasing([5, 3, 4, 2], capacity=8) == [[0, 1], [2, 3]]
    assert first_fit_decreasing([10, 2], capacity=8) == [[0], [1]]  # too long: a row of its own


def _seqs(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        TokenizedTrajectory(
            0, 0, torch.randint(10, 4000, (n,), generator=g).tolist(), [False] * 2 + [True] * (n - 2), [0.0] * n
        )
        for n in lengths
    ]


def test_packed_logprobs_equal_unpacked(tiny_model_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    seqs = _seqs([7, 12, 5, 9, 3])
    # rows of <= 16 tokens: [12], [9, 7], [5, 3]; stacked into one pass of 3 rows padded to 16
    parts = pack_sequences(seqs, [1.0] * 5, tokens_per_row=16, tokens_per_forward=64)
    assert len(parts) == 1 and tuple(parts[0].input_ids.shape) == (3, 16) and parts[0].num_tokens == 36
    with torch.no_grad():
        packed, _ = batch_logprobs(model, parts[0])
        alone = {i: batch_logprobs(model, pack_sequences([s], [1.0], 64)[0])[0] for i, s in enumerate(seqs)}
        # The same tokens through the plain model, one sequence at a time, as a cross-check of the head path.
        ref = [model(input_ids=torch.tensor([s.input_ids])).logits[0].log_softmax(-1) for s in seqs]
    expected = torch.cat([alone[i] for i in parts[0].sequences])
    assert torch.allclose(packed, expected, atol=1e-5)
    for i, s in enumerate(seqs):
        direct = ref[i][1:-1].gather(-1, torch.tensor(s.input_ids[2:])[:, None])[:, 0]  # tokens 2.. are trained
        assert torch.allclose(alone[i], direct, atol=1e-5)
    # Without restarting positions the later segments would attend to the earlier ones:
    leaky = pack_sequences(seqs, [1.0] * 5, tokens_per_row=16, tokens_per_forward=64)[0]
    leaky.position_ids = torch.arange(16).expand(3, 16).clone()
    with torch.no_grad():
        leaked, _ = batch_logprobs(model, leaky)
    assert not torch.allclose(leaked, expected, atol=1e-3)


def test_one_row_per_pass_when_asked():
    parts = pack_sequences(_seqs([7, 12, 5]), [1.0] * 3, tokens_per_row=12, tokens_per_forward=None)
    assert [tuple(p.input_ids.shape) for p in parts] == [(1, 12), (1, 12)]


def _trainable_model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).train()  # train mode: the trainer's forward


def test_attention_modes_agree_with_one_sequence_at_a_time_gradients_included(tiny_model_path):
    """Per-segment attention over long rows (a whole pass in one row) gives the unpacked logprobs and the
    same gradients as transformers' dense block-diagonal mask."""
    from art_core.training.attention import packed_attention

    model = _trainable_model(tiny_model_path)
    seqs = _seqs([7, 12, 5, 9, 3, 30], seed=1)
    with torch.no_grad():
        alone = {i: batch_logprobs(model, pack_sequences([s], [1.0], 64)[0])[0] for i, s in enumerate(seqs)}
    results = {}
    for mode, per_row in [("mask", 16), ("segments", 16), ("segments", 4096)]:
        parts = pack_sequences(seqs, [1.0] * 6, tokens_per_row=per_row, tokens_per_forward=4096)
        model.zero_grad(set_to_none=True)
        with packed_attention(model, mode):
            logps = [batch_logprobs(model, p, attention=mode)[0] for p in parts]
            sum(lp.sum() for lp in logps).backward()
        expected = torch.cat([alone[i] for p in parts for i in p.sequences])
        assert torch.allclose(torch.cat(logps).detach(), expected, atol=1e-5), (mode, per_row)
        results[(mode, per_row)] = model.model.layers[0].self_attn.q_proj.weight.grad.clone()
    assert tuple(parts[0].input_ids.shape) == (1, 66)  # one row of 66 tokens, no padding
    reference = results[("mask", 16)]
    for key, grad in results.items():
        assert torch.allclose(grad, reference, atol=1e-5), key
    assert model.config._attn_implementation == "sdpa"  # the switch is undone after the block


@pytest.mark.gpu
def test_flex_attention_agrees_with_per_segment_attention_on_cuda(tiny_model_path):
    from art_core.training.attention import packed_attention

    model = _trainable_model(tiny_model_path).cuda()
    seqs = _seqs([200, 120, 330, 45, 9], seed=2)
    parts = pack_sequences(seqs, [1.0] * 5, tokens_per_row=1024, tokens_per_forward=1024, device="cuda")
    out = {}
    for mode in ("segments", "flex"):
        model.zero_grad(set_to_none=True)
        with packed_attention(model, mode):
            logp = batch_logprobs(model, parts[0], attention=mode)[0]
            logp.sum().backward()
        out[mode] = (logp.detach(), model.model.layers[0].self_attn.q_proj.weight.grad.clone())
    assert torch.allclose(out["flex"][0], out["segments"][0], atol=1e-4)
    assert torch.allclose(out["flex"][1], out["segments"][1], atol=1e-3, rtol=1e-3)
