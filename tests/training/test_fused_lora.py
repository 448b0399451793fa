"""Fused LoRA linears give peft's outputs and gradients, and step aside wherever peft's forward must run."""

from __future__ import annotations

import pytest
import torch

from art_core.training.fused_lora import fused_lora


def _lora_model(path: str, dtype: torch.dtype, dropout: float = 0.0):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    lora = LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=dropout,
        task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    model = get_peft_model(model, lora)
    with torch.no_grad():  # peft starts B at zero, which would hide a wrong B gradient or update
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model


def _run(model, ids, fused: bool):
    model.zero_grad(set_to_none=True)
    with fused_lora(model, enabled=fused) as n:
        logits = model(input_ids=ids).logits.float()
        weights = torch.linspace(-1, 1, logits.shape[1])  # each position its own upstream gradient
        (logits.log_softmax(-1)[..., 7] * weights).sum().backward()
    grads = {k: p.grad.float().clone() for k, p in model.named_parameters() if p.requires_grad}
    return n, logits.detach(), grads


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 6e-2)])
def test_fused_equals_peft_with_gradients(tiny_model_path, dtype, tol):
    model = _lora_model(tiny_model_path, dtype)
    ids = torch.randint(0, 200, (2, 24))
    n_plain, want, want_g = _run(model, ids, fused=False)
    n_fused, got, got_g = _run(model, ids, fused=True)
    assert n_plain == 0 and n_fused > 0
    # bf16 activations round differently on every CPU kind (AVX2, AVX512-BF16, AMX): compare with a tolerance
    # relative to the tensors' scale, never exactly.
    scale = want.abs().max()
    assert (got - want).abs().max() <= tol * scale
    assert want_g.keys() == got_g.keys() and len(want_g) == 2 * n_fused
    for k in want_g:
        a, b = want_g[k], got_g[k]
        assert a.dtype == b.dtype and a.shape == b.shape
        assert (a - b).norm() <= tol * a.norm() + 1e-8, k
    # The adapter parameters keep their dtype (peft keeps them float32 beside a bf16 base).
    assert all(p.dtype == torch.float32 for k, p in model.named_parameters() if "lora_" in k)


def test_fused_steps_aside_for_disabled_adapters_and_dropout(tiny_model_path):
    model = _lora_model(tiny_model_path, torch.float32)
    ids = torch.randint(0, 200, (1, 16))
    model.eval()
    with torch.no_grad():
        with model.disable_adapter():
            base = model(input_ids=ids).logits
            with fused_lora(model):
                assert torch.equal(model(input_ids=ids).logits, base)  # a KL reference sees the base model
        with fused_lora(model):
            adapted = model(input_ids=ids).logits
        assert not torch.allclose(adapted, base)
    # After the block peft's own forward is back on every layer.
    assert all("forward" not in m.__dict__ for m in model.modules())

    dropped = _lora_model(tiny_model_path, torch.float32, dropout=0.5)
    dropped.train()
    torch.manual_seed(1)
    plain = dropped(input_ids=ids).logits
    torch.manual_seed(1)
    with fused_lora(dropped):
        same = dropped(input_ids=ids).logits  # dropout is not fused: peft's forward draws the same mask
    assert torch.equal(plain, same)
