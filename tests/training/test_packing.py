"""Packing: sequences share rows without seeing each other, so packed logprobs equal unpacked ones."""

from __future__ import annotations

import torch

from art_core.training.packing import first_fit_decreasing, pack_sequences, row_logprobs
from art_core.training.tokenize import TokenizedTrajectory


def test_first_fit_decreasing_fills_rows():
    assert first_fit_decreasing([5, 3, 4, 2], capacity=8) == [[0, 1], [2, 3]]
    assert first_fit_decreasing([10, 2], capacity=8) == [[0], [1]]  # too long: a row of its own


def test_packed_logprobs_equal_unpacked(tiny_model_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    g = torch.Generator().manual_seed(0)
    seqs = []
    for n in (7, 12, 5):
        ids = torch.randint(10, 4000, (n,), generator=g).tolist()
        seqs.append(TokenizedTrajectory(0, 0, ids, [False] * 2 + [True] * (n - 2), [0.0] * n))
    rows = pack_sequences(seqs, [1.0, 1.0, 1.0], tokens_per_row=64)
    assert len(rows) == 1 and rows[0].num_tokens == 24
    with torch.no_grad():
        packed, _ = row_logprobs(model, rows[0])
        alone = torch.cat([row_logprobs(model, pack_sequences([s], [1.0], 64)[0])[0] for s in seqs])
        # Without restarting positions the later segments would attend to the earlier ones:
        leaky = rows[0]
        leaky_pos = torch.arange(leaky.num_tokens)[None]
        out = model(input_ids=leaky.input_ids, position_ids=leaky_pos).logits[0].log_softmax(-1)
        leaked = out[leaky.target_index - 1].gather(-1, leaky.input_ids[0, leaky.target_index][:, None])[:, 0]
    assert torch.allclose(packed, alone, atol=1e-5)
    assert not torch.allclose(leaked, alone, atol=1e-3)
