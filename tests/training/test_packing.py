"""Packing: sequences share rows without seeing each other, so packed logprobs equal unpacked ones."""

from __future__ import annotations

import torch

from art_core.training.packing import batch_logprobs, first_fit_decreasing, pack_sequences
from art_core.training.tokenize import TokenizedTrajectory


def test_first_fit_decreasing_fills_rows():
    assert first_fit_decreasing([5, 3, 4, 2], capacity=8) == [[0, 1], [2, 3]]
    assert first_fit_decreasing([10, 2], capacity=8) == [[0], [1]]  # too long: a row of its own


def _seqs(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [TokenizedTrajectory(0, 0, torch.randint(10, 4000, (n,), generator=g).tolist(),
                                [False] * 2 + [True] * (n - 2), [0.0] * n) for n in lengths]  # fmt: skip


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
