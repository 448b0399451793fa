"""Shared prefixes computed once (prefixes.py): the same logprobs, loss and gradients as whole sequences."""

from __future__ import annotations

import random

import pytest
import torch

from art_core.storage import Storage
from art_core.training.config import TrainConfig
from art_core.training.packing import batch_logprobs, pack_sequences
from art_core.training.prefixes import Tree, build_trees
from art_core.training.tokenize import TokenizedTrajectory
from art_core.trajectories import Trajectory, TrajectoryGroup
from tests.training.rollouts_hf import make_choice

POLICY = " ".join(f"rule {i}: refunds need the order id and the customer's zip code." for i in range(8))


def test_trees_share_a_groups_common_prefix_within_the_row():
    a, b = [1] * 20 + [2, 3], [1] * 20 + [4]
    other = [1] * 20 + [5]  # the same tokens in another group: groups are not mixed
    assert [(t.prefix, t.members) for t in build_trees([a, b, other], [0, 0, 1], capacity=64)] == [
        (20, [0, 1]),
        (0, [2]),
    ]
    # Too short a common prefix: whole sequences.
    assert [t.prefix for t in build_trees([[1, 2, 3], [1, 2, 4]], [0, 0], capacity=64)] == [0, 0]
    # A row holds the prefix and 2 of the 3 suffixes: two trees, each with the prefix.
    c = [1] * 20 + [6, 6]
    trees = build_trees([a, b, c], [0, 0, 0], capacity=24)
    assert [(t.prefix, t.members) for t in trees] == [(20, [0, 2]), (0, [1])]
    # Identical rollouts: computed once.
    same = build_trees([a, list(a)], [0, 0], capacity=64)
    assert [(t.prefix, t.members) for t in same] == [(22, [0, 1])]
    # Neighbours in sorted order split runs: a sub-agent history of the group shares nothing with the rest.
    sub = [9] * 30
    assert sorted(t.prefix for t in build_trees([a, b, sub], [0, 0, 0], capacity=64)) == [0, 20]
    assert Tree(0, [1]).prefix == 0


def _seqs():
    """Two groups: one whose rollouts share 40 tokens (two of its trained tokens inside them, one sequence a copy
    of another), one with another prompt; rows must keep them apart."""
    g = torch.Generator().manual_seed(0)

    def rnd(n):
        return torch.randint(10, 4000, (n,), generator=g).tolist()

    prefix, seqs = rnd(40), []
    for k, n in enumerate([10, 25, 3, 17]):
        ids = prefix + rnd(n)
        seqs.append(TokenizedTrajectory(0, k, ids, [False] * 38 + [True] * (len(ids) - 38), [0.0] * len(ids)))
    seqs.append(TokenizedTrajectory(0, 4, list(seqs[1].input_ids), [False] * 40 + [True] * 25, [0.0] * 65))
    other = rnd(24)
    for k, n in enumerate([12, 30]):
        ids = other + rnd(n)
        seqs.append(TokenizedTrajectory(1, k, ids, [False] * 24 + [True] * n, [0.0] * len(ids)))
    return seqs


def _per_sequence(model, parts, mode):
    """Each sequence's trained-token logprobs, by sequence index."""
    out = {}
    for part in parts:
        logp = batch_logprobs(model, part, attention=mode)[0]
        for k, i in enumerate(part.sequences):
            out[i] = logp[part.seq == k]
    return out


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("mode", ["segments", "flex"])
def test_shared_prefix_logprobs_and_gradients_equal_whole_sequences(tiny_model_path, mode, monkeypatch):
    """float32: per-token logprobs and every weight gradient of a weighted sum of them, shared vs unshared.

    'flex' runs flex_attention uncompiled on the CPU here, logprobs only (the CUDA test below compiles it and
    checks gradients too): the block mask's logic is what is checked."""
    from transformers import AutoModelForCausalLM

    from art_core.training import attention

    if mode == "flex":
        from torch.nn.attention.flex_attention import flex_attention

        monkeypatch.setattr(attention, "_COMPILED_FLEX", flex_attention)
        monkeypatch.setattr(attention, "flex_available", lambda device_type: True)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).train()
    seqs = _seqs()
    results = {}
    for share in (False, True):
        parts = pack_sequences(seqs, [1.0] * len(seqs), 4096, tokens_per_forward=8192, share_prefixes=share)
        model.zero_grad(set_to_none=True)
        # flex_attention has no backward on the CPU: its mask is checked on the logprobs alone.
        with attention.packed_attention(model, mode), torch.set_grad_enabled(mode != "flex"):
            logps = _per_sequence(model, parts, mode)
            if mode != "flex":
                sum((lp * (i + 1)).sum() for i, lp in logps.items()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[share] = (parts, torch.cat([logps[i] for i in sorted(logps)]).detach(), grads)
    (plain, lp0, g0), (shared, lp1, g1) = results[False], results[True]
    total = sum(len(s) for s in seqs)
    assert sum(p.real_tokens for p in plain) == sum(p.in_batch_tokens for p in shared) == total
    # group 0's 40 shared tokens once instead of 5 times, group 1's 24 once instead of twice
    assert sum(p.real_tokens for p in shared) == total - 4 * 40 - 24 and shared[0].shared_prefixes == 2
    assert torch.allclose(lp1, lp0, atol=1e-5)
    assert g0.keys() == g1.keys() and len(g0) > (20 if mode == "segments" else -1)
    for name, grad in g0.items():
        # float32 sums in another order: within 1e-5 of each tensor's largest entry (sums of hundreds of terms)
        assert torch.allclose(g1[name], grad, atol=1e-5 * float(grad.abs().max()), rtol=1e-4), name


def test_a_mask_mode_model_refuses_a_shared_batch(tiny_model_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    part = pack_sequences(_seqs(), [1.0] * 7, 4096, share_prefixes=True)[0]
    with pytest.raises(ValueError, match="segments"):
        batch_logprobs(model, part, attention="mask")


def _episodes(seed: int, n_groups: int = 3, size: int = 4) -> list[TrajectoryGroup]:
    """Customer-service-shaped groups: a long policy, the customer's opening, then two sampled turns with the
    customer's reply between. Group 1's rollouts all open with the same two sampled tokens (trained tokens in
    the shared prefix)."""
    rng = random.Random(seed)
    groups = []
    for g in range(n_groups):
        opening = [
            {"role": "system", "content": POLICY},
            {"role": "user", "content": f"Hi, I want a refund for order #{1000 + g}."},
        ]
        same_start = [rng.randrange(10, 4000) for _ in range(2)] if g == 1 else []
        trajs = []
        for _ in range(size):
            first = same_start + [rng.randrange(10, 4000) for _ in range(rng.randint(4, 20))]
            second = [rng.randrange(10, 4000) for _ in range(rng.randint(4, 20))]
            messages = [
                *opening,
                make_choice(first, [-7.5 - 0.1 * rng.random() for _ in first], "a", finish_reason="stop"),
                {"role": "user", "content": "my zip code is 12345"},
                make_choice(second, [-7.5 - 0.1 * rng.random() for _ in second], "b", finish_reason="stop"),
            ]
            trajs.append(Trajectory(messages_and_choices=messages, reward=rng.random()))
        groups.append(TrajectoryGroup(trajs))
    return groups


def _step(path, tmp_path, config, name):
    """One step from a fresh adapter: its metrics and the gradient it applied (Adam's first moment / (1 - beta1))."""
    from art_core.training import trainer
    from art_core.training.session import clear_model_cache, loaded_model

    clear_model_cache()
    metrics = trainer.train_grpo_step(
        base_model=path,
        groups=_episodes(0),
        config=config,
        storage=Storage(str(tmp_path / name)),
        project="p",
        name=name,
        step=0,
    ).metrics
    optimizer = loaded_model(path).optimizer
    grads = [
        optimizer.state[p]["exp_avg"] / (1 - config.adam_beta1) for g in optimizer.param_groups for p in g["params"]
    ]
    return metrics, grads


BASE = TrainConfig(learning_rate=1e-3, max_grad_norm=None, dtype="float32")  # float32 on a GPU too


@pytest.mark.parametrize(
    "options",
    [
        {},  # the defaults: one row per pass, groups share rows, fused LoRA
        # the KL reference and old-logprob passes, checkpointing, peft's LoRA forward, GSPO's sequence ratio
        dict(
            beta=0.05,
            old_logprobs="recompute",
            gradient_checkpointing=True,
            experimental_fused_lora=False,
            importance_sampling_level="sequence",
            truncated_importance_sampling=2.0,
        ),
        # rows too short for a whole group: its tree splits, each part repeating the prefix; several passes
        dict(tokens_per_row=330, tokens_per_forward=660, aggregation="sequence_mean"),
    ],
    ids=["defaults", "kl-recompute-checkpointing-peft", "split-rows"],
)
def test_a_step_with_shared_prefixes_trains_what_the_unshared_step_trains(
    tiny_model_path, tmp_path, options, fresh_trainer
):
    config = BASE.model_copy(update=options)
    shared, g_shared = _step(tiny_model_path, tmp_path, config, "shared")
    plain, g_plain = _step(tiny_model_path, tmp_path, config.model_copy(update={"share_prefixes": False}), "plain")
    assert plain["prefix_sharing_off_reason"] == "TrainConfig.share_prefixes is False"
    assert "prefix_sharing_off_reason" not in shared
    assert plain["tokens_computed"] == plain["tokens_in_batch"] == shared["tokens_in_batch"] == shared["tokens"]
    # 12 episodes of ~270 tokens, ~230 of them the group's: 0.38 of the tokens computed (rows of 330
    # tokens hold the prefix and two suffixes: each group computes its prefix twice).
    ratio = shared["tokens_computed"] / shared["tokens_in_batch"]
    assert ratio < (0.7 if "tokens_per_row" in options else 0.45), shared
    assert shared["shared_prefixes"] >= 3
    for key in ("loss", "grad_norm", "entropy", "kl_to_sampler", "clip_fraction", "ratio_mean", "kl"):
        if key in plain:
            assert shared[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-6), key
    assert shared["trainable_tokens"] == plain["trainable_tokens"]
    for a, b in zip(g_shared, g_plain):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-6 * float(b.abs().max()))


def test_bf16_shared_prefixes_agree_within_bf16_rounding(tiny_model_path, tmp_path, fresh_trainer):
    """bf16 weights (the CPU attends through cpu_attention.py): sharing changes only rounding."""
    config = BASE.model_copy(update={"dtype": "bfloat16"})
    shared, g_shared = _step(tiny_model_path, tmp_path, config, "shared")
    plain, g_plain = _step(tiny_model_path, tmp_path, config.model_copy(update={"share_prefixes": False}), "plain")
    assert shared["bf16"] == 1 and shared["tokens_computed"] < shared["tokens_in_batch"]
    assert shared["loss"] == pytest.approx(plain["loss"], rel=2e-2, abs=1e-3)
    assert shared["grad_norm"] == pytest.approx(plain["grad_norm"], rel=5e-2)
    flat_s, flat_p = (
        torch.cat([g.float().flatten() for g in g_shared]),
        torch.cat([g.float().flatten() for g in g_plain]),
    )
    assert torch.nn.functional.cosine_similarity(flat_s, flat_p, dim=0) > 0.99


def test_sharing_falls_back_to_whole_sequences_where_it_cannot_share(tiny_model_path, tmp_path, fresh_trainer):
    for options, why in [
        (dict(packed_attention="mask"), "packed_attention 'mask'"),
        (dict(lora_dropout=0.1), "lora_dropout"),
    ]:
        metrics, _ = _step(tiny_model_path, tmp_path, BASE.model_copy(update=options), "fallback")
        assert why in metrics["prefix_sharing_off_reason"]
        assert metrics["tokens_computed"] == metrics["tokens_in_batch"] and metrics["shared_prefixes"] == 0


@pytest.mark.gpu
def test_shared_prefixes_under_compiled_flex_attention_on_cuda(tiny_model_path):
    from transformers import AutoModelForCausalLM

    from art_core.training.attention import packed_attention

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).cuda().train()
    seqs = _seqs()
    out = {}
    for mode, share in [("segments", False), ("flex", True), ("segments", True)]:
        parts = pack_sequences(seqs, [1.0] * len(seqs), 4096, "cuda", 8192, share_prefixes=share)
        model.zero_grad(set_to_none=True)
        with packed_attention(model, mode):
            logps = _per_sequence(model, parts, mode)
            sum((lp * (i + 1)).sum() for i, lp in logps.items()).backward()
        out[(mode, share)] = (
            torch.cat([logps[i] for i in sorted(logps)]).detach(),
            model.model.layers[0].self_attn.q_proj.weight.grad.clone(),
        )
    ref = out[("segments", False)]
    for key, (logp, grad) in out.items():
        assert torch.allclose(logp, ref[0], atol=1e-4), key
        assert torch.allclose(grad, ref[1], atol=1e-3, rtol=1e-3), key


def _tiny_gemma3(window: int):
    """A random Gemma 3 with one sliding-window layer (window `window`) and one full-attention layer."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=4096,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        sliding_window=window,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    return Gemma3ForCausalLM(config).train()


@pytest.mark.parametrize("share", [False, True])
def test_sliding_window_layers_attend_as_the_model_does_in_packed_and_shared_rows(share):
    """Gemma 3's sliding-window layers see the last `sliding_window` tokens only (512 in the real model, whose
    retail prompts run 4.4k tokens). Packed per-segment attention, shared prefixes or not, gives the logprobs
    transformers' own eager attention gives each sequence alone, and the gradients of their sum."""
    from art_core.training import attention

    model = _tiny_gemma3(window=8)  # the sequences run 38 to 70 tokens: the window binds
    seqs = _seqs()
    model.set_attn_implementation("eager")
    expected = []
    for s in seqs:
        ids = torch.tensor([s.input_ids])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        at = torch.tensor([t for t in range(1, len(s.input_ids)) if s.trainable[t]])
        expected.append(logp[at - 1, ids[0, at]])
    sum((lp * (i + 1)).sum() for i, lp in enumerate(expected)).backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    parts = pack_sequences(seqs, [1.0] * len(seqs), 4096, tokens_per_forward=8192, share_prefixes=share)
    with attention.packed_attention(model, "segments"):
        logps = _per_sequence(model, parts, "segments")
        sum((lp * (i + 1)).sum() for i, lp in logps.items()).backward()
    assert torch.allclose(torch.cat([logps[i] for i in sorted(logps)]), torch.cat(expected), atol=1e-5)
    for name, grad in reference.items():
        assert torch.allclose(model.get_parameter(name).grad, grad, atol=1e-5 * float(grad.abs().max()), rtol=1e-4), (
            name
        )
