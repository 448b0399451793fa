"""train_grpo_step end to end on the tiny model: checkpoints, bad input, empty steps, exact resume, pruning."""

from __future__ import annotations

import json
import math
import os
import random

import pytest
import torch
from safetensors.torch import load_file

from art_core.storage import Storage
from art_core.store import ModelStore
from art_core.training.checkpoints import prune_checkpoints
from art_core.training.config import TrainConfig
from art_core.training.session import clear_model_cache, trainer_session
from art_core.training.trainer import TrainingDataWarning, train_grpo_step
from art_core.trajectories import Trajectory, TrajectoryGroup
from tests.training.rollouts_hf import make_choice

CFG = TrainConfig(learning_rate=1e-2)


def _groups(seed: int, n_groups: int = 2, size: int = 4, length: int = 12) -> list[TrajectoryGroup]:
    rng = random.Random(seed)
    groups = []
    for g in range(n_groups):
        trajs = []
        for _ in range(size):
            ids = [rng.randrange(10, 4000) for _ in range(length)]
            choice = make_choice(ids, [-8.3] * length, "x", finish_reason="length")
            trajs.append(
                Trajectory(
                    messages_and_choices=[{"role": "user", "content": f"prompt {g}"}, choice], reward=rng.random()
                )
            )
        groups.append(TrajectoryGroup(trajs))
    return groups


def _adapter(store: Storage, name: str, step: int) -> dict[str, torch.Tensor]:
    return load_file(os.path.join(ModelStore(store, "p", name).checkpoint(step), "adapter_model.safetensors"))


def test_a_step_trains_the_adapter_and_writes_a_complete_checkpoint(tiny_model_path, tmp_path, fresh_trainer):
    store = Storage(str(tmp_path))
    result = train_grpo_step(
        base_model=tiny_model_path, groups=_groups(0), config=CFG, storage=store, project="p", name="m", step=0
    )
    assert result.step == 1 and result.checkpoint_path == ModelStore(store, "p", "m").checkpoint(1)
    files = set(os.listdir(result.checkpoint_path))
    assert {
        "adapter_model.safetensors",
        "adapter_config.json",
        "optimizer.pt",
        "trainer_state.json",
        "COMPLETE",
    } <= files
    config = json.load(open(os.path.join(result.checkpoint_path, "adapter_config.json")))
    assert config["r"] == 8 and "q_proj" in config["target_modules"]  # vLLM --max-lora-rank 8 loads it
    m = result.metrics
    for key in (
        "loss",
        "reward",
        "reward_std",
        "clip_fraction",
        "kl_to_sampler",
        "entropy",
        "grad_norm",
        "trainable_tokens",
        "skipped_groups",
        "seconds",
    ):
        assert math.isfinite(m[key]), key
    assert m["trainable_tokens"] == 8 * 12 and m["skipped_groups"] == 0 and m["grad_norm"] > 0
    assert 0 < m["entropy"] <= math.log(4096) + 1e-3
    # LoRA B starts at zero; one step moves it.
    assert any(v.abs().sum() > 0 for k, v in _adapter(store, "m", 1).items() if "lora_B" in k)


def test_bad_input_is_named_dropped_and_the_rest_trains(tiny_model_path, tmp_path, fresh_trainer):
    groups = _groups(1, n_groups=2, size=4)
    groups[0].trajectories[1].reward = float("nan")
    groups[1].trajectories[2] = Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}], reward=1.0)
    long_ids = list(range(100, 400))
    groups[1].trajectories[3] = Trajectory(
        messages_and_choices=[{"role": "user", "content": "hi"}, make_choice(long_ids, [-8.3] * 300, "x")], reward=0.0
    )
    groups.append(TrajectoryGroup([]))
    with pytest.warns(TrainingDataWarning) as caught:
        result = train_grpo_step(
            base_model=tiny_model_path,
            groups=groups,
            config=CFG.model_copy(update={"max_seq_len": 100}),
            storage=Storage(str(tmp_path)),
            project="p",
            name="m",
            step=0,
        )
    text = "\n".join(str(w.message) for w in caught)
    assert "group 0, trajectory 1: reward is nan" in text
    assert "group 1, trajectory 2: it has no sampled Choice" in text
    assert "group 1, trajectory 3: it is" in text and "max_seq_len 100" in text
    assert "group 2 is empty" in text
    assert result.metrics["dropped_trajectories"] == 3
    assert result.metrics["trained_trajectories"] == 5  # 3 left in group 0, 2 in group 1
    assert result.metrics["skipped_groups"] == 1  # the empty one


def test_a_step_with_nothing_to_learn_advances_and_says_why(tiny_model_path, tmp_path, fresh_trainer):
    store = Storage(str(tmp_path))
    groups = _groups(2)
    for g in groups:
        for t in g.trajectories:
            t.reward = 0.5
    train_grpo_step(
        base_model=tiny_model_path, groups=_groups(3), config=CFG, storage=store, project="p", name="m", step=0
    )
    result = train_grpo_step(
        base_model=tiny_model_path, groups=groups, config=CFG, storage=store, project="p", name="m", step=1
    )
    assert result.step == 2 and ModelStore(store, "p", "m").checkpoint_steps() == [1, 2]
    assert "no group had a reward signal" in result.metrics["nothing_trained_reason"]
    assert result.metrics["skipped_groups"] == 2 and result.metrics["trainable_tokens"] == 0
    before, after = _adapter(store, "m", 1), _adapter(store, "m", 2)
    assert all(torch.equal(before[k], after[k]) for k in before) and result.metrics["update_norm"] == 0.0


def test_resuming_from_a_checkpoint_continues_exactly(tiny_model_path, tmp_path, fresh_trainer):
    store = Storage(str(tmp_path))
    cfg = CFG.model_copy(update={"weight_decay": 0.1, "max_grad_norm": 0.5})
    for step in range(2):  # two steps in one go, the model kept in memory between them
        train_grpo_step(
            base_model=tiny_model_path,
            groups=_groups(10 + step),
            config=cfg,
            storage=store,
            project="p",
            name="one-go",
            step=step,
        )
    train_grpo_step(
        base_model=tiny_model_path, groups=_groups(10), config=cfg, storage=store, project="p", name="resumed", step=0
    )
    clear_model_cache()  # as if the process had died: step 1 must come from storage
    train_grpo_step(
        base_model=tiny_model_path, groups=_groups(11), config=cfg, storage=store, project="p", name="resumed", step=1
    )
    a, b = _adapter(store, "one-go", 2), _adapter(store, "resumed", 2)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    opt_a = torch.load(os.path.join(ModelStore(store, "p", "one-go").checkpoint(2), "optimizer.pt"))
    opt_b = torch.load(os.path.join(ModelStore(store, "p", "resumed").checkpoint(2), "optimizer.pt"))
    for k, s in opt_a["state"].items():
        assert torch.equal(s["exp_avg_sq"], opt_b["state"][k]["exp_avg_sq"])
    # A missing checkpoint is an error that says which steps exist.
    with pytest.raises(FileNotFoundError, match=r"no complete checkpoint for step 5.*complete steps: \[1, 2\]"):
        train_grpo_step(
            base_model=tiny_model_path,
            groups=_groups(0),
            config=cfg,
            storage=store,
            project="p",
            name="resumed",
            step=5,
        )


def test_a_learning_rate_changed_between_steps_is_the_one_used(tiny_model_path, tmp_path, fresh_trainer):
    """Step 1 trains at its own learning rate, whether the optimizer stayed in memory or came back from checkpoint
    1 (whose saved state carries step 0's rate): Adam's update is linear in the rate, so twice the rate moves the
    adapter twice as far from the same checkpoint."""
    store = Storage(str(tmp_path))
    lr = 1e-3
    moved, reported = {}, {}
    for name, step1_lr, reload in (("kept", lr, False), ("reloaded", 2 * lr, True)):
        train_grpo_step(
            base_model=tiny_model_path, groups=_groups(20), config=CFG, storage=store, project="p", name=name, step=0
        )
        if reload:
            clear_model_cache()
        reported[name] = train_grpo_step(
            base_model=tiny_model_path,
            groups=_groups(21),
            config=CFG.model_copy(update={"learning_rate": step1_lr}),
            storage=store,
            project="p",
            name=name,
            step=1,
        )
        saved = torch.load(os.path.join(ModelStore(store, "p", name).checkpoint(2), "optimizer.pt"))
        assert [g["lr"] for g in saved["param_groups"]] == [step1_lr]
        one, two = _adapter(store, name, 1), _adapter(store, name, 2)
        moved[name] = {k: two[k] - one[k] for k in one if "lora_B" in k}
        # update_norm: how far the step moved the adapter, as the two saved checkpoints differ
        norm = sum(float((two[k].float() - one[k].float()).square().sum()) for k in one) ** 0.5
        assert reported[name].metrics["update_norm"] == pytest.approx(norm, rel=1e-2) and norm > 0
    assert all(torch.equal(_adapter(store, "kept", 1)[k], v) for k, v in _adapter(store, "reloaded", 1).items())
    for k, v in moved["kept"].items():
        assert v.abs().sum() > 0
        assert torch.allclose(moved["reloaded"][k], 2 * v, rtol=1e-3, atol=1e-7), k


def test_prune_keeps_the_latest_and_the_best(tmp_path):
    store = Storage(str(tmp_path))
    src = tmp_path / "src"
    src.mkdir()
    (src / "adapter_model.safetensors").write_bytes(b"w")
    for step in range(1, 6):
        store.put_dir(str(src), ModelStore(store, "p", "m").checkpoint(step))
    history = ModelStore(store, "p", "m").history
    for step, val in [(1, 0.2), (2, 0.7), (3, 0.4), (4, None), (5, 0.1)]:
        record = {"step": step, "reward": 0.5}
        if val is not None:
            record["val/reward"] = val
        store.append_jsonl(history, record)
    assert prune_checkpoints(store, "p", "m", best_metric="val/reward") == [1, 3, 4]
    assert ModelStore(store, "p", "m").checkpoint_steps() == [2, 5]
    assert prune_checkpoints(store, "p", "m") == []


def test_kl_penalty_against_the_base_model_and_several_optimizer_steps(tiny_model_path, tmp_path, fresh_trainer):
    store = Storage(str(tmp_path))
    one = train_grpo_step(
        base_model=tiny_model_path,
        groups=_groups(4),
        config=CFG.model_copy(update={"beta": 0.1}),
        storage=store,
        project="p",
        name="a",
        step=0,
    )
    # Step 0 starts from a zero LoRA B: the policy is the base model, so KL to it is exactly 0.
    assert one.metrics["kl"] == 0.0
    two = train_grpo_step(
        base_model=tiny_model_path,
        groups=_groups(4),
        config=CFG.model_copy(update={"beta": 0.1, "num_optimizer_steps": 2}),
        storage=store,
        project="p",
        name="b",
        step=0,
    )
    # The second mini-batch runs after one AdamW step: the policy has left the base model.
    assert two.metrics["kl"] > 0 and two.metrics["kl_to_sampler"] > 0
    assert (one.metrics["optimizer_steps"], two.metrics["optimizer_steps"]) == (1, 2)


def test_checkpoints_live_in_s3_and_resume_from_there(tiny_model_path, s3_root, fresh_trainer):
    store = Storage(s3_root)
    train_grpo_step(
        base_model=tiny_model_path, groups=_groups(5), config=CFG, storage=store, project="p", name="m", step=0
    )
    clear_model_cache()
    result = train_grpo_step(
        base_model=tiny_model_path, groups=_groups(6), config=CFG, storage=store, project="p", name="m", step=1
    )
    assert result.checkpoint_path == f"{s3_root}/p/models/m/checkpoints/0002"
    assert ModelStore(store, "p", "m").checkpoint_steps() == [1, 2]
    assert store.exists(store.join(result.checkpoint_path, "adapter_model.safetensors"))
    assert prune_checkpoints(store, "p", "m") == [1]  # no val/reward in history: the latest is kept


def _masked_groups() -> list[TrajectoryGroup]:
    """Rollouts as constrained decoding reports them: every sampled token at logprob ~0 (after the mask)."""
    rng = random.Random(7)
    groups = []
    for g in range(2):
        trajs = []
        for _ in range(4):
            ids = [rng.randrange(10, 4000) for _ in range(6)]
            trajs.append(
                Trajectory(
                    messages_and_choices=[
                        {"role": "user", "content": f"move {g}"},
                        make_choice(ids, [0.0] * 6, "x", finish_reason="stop"),
                    ],
                    reward=rng.random(),
                )
            )
        groups.append(TrajectoryGroup(trajs))
    return groups


def test_recomputed_old_logprobs_keep_learning_after_constrained_sampling(tiny_model_path, tmp_path, fresh_trainer):
    """With the sampler's masked logprobs the ratio collapses to ~exp(-8) and the clip mutes the step;
    old_logprobs="recompute" measures the ratio against the policy itself, so it starts at exactly 1."""
    store = Storage(str(tmp_path))
    sampler = train_grpo_step(
        base_model=tiny_model_path,
        groups=_masked_groups(),
        config=CFG,
        storage=store,
        project="p",
        name="sampler",
        step=0,
    ).metrics
    clear_model_cache()
    recompute = train_grpo_step(
        base_model=tiny_model_path,
        groups=_masked_groups(),
        config=CFG.model_copy(update={"old_logprobs": "recompute"}),
        storage=store,
        project="p",
        name="recompute",
        step=0,
    ).metrics
    assert sampler["ratio_mean"] < 0.01 and sampler["clip_fraction"] > 0.3
    assert recompute["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert recompute["clip_fraction"] == 0.0 and recompute["kl_to_sampler"] == pytest.approx(0.0, abs=1e-6)
    assert recompute["grad_norm"] > 10 * sampler["grad_norm"]


def test_a_checkpoint_carries_the_base_models_tokenizer(tiny_model_path, tmp_path, fresh_trainer):
    from transformers import AutoTokenizer

    result = train_grpo_step(
        base_model=tiny_model_path,
        groups=_groups(8),
        config=CFG,
        storage=Storage(str(tmp_path)),
        project="p",
        name="m",
        step=0,
    )
    files = set(os.listdir(result.checkpoint_path))
    assert {"tokenizer.json", "tokenizer_config.json"} <= files
    base, saved = AutoTokenizer.from_pretrained(tiny_model_path), AutoTokenizer.from_pretrained(result.checkpoint_path)
    chat = [{"role": "user", "content": "where is order 1234?"}]
    assert saved.apply_chat_template(chat, tokenize=False) == base.apply_chat_template(chat, tokenize=False)
    assert saved.encode("refund the flight, please") == base.encode("refund the flight, please")


def test_memory_savers_change_memory_not_results(tiny_model_path, tmp_path, fresh_trainer):
    """Activation checkpointing, many small passes and the dense-mask attention train the same adapter as
    the defaults (per-segment attention, one pass), and the metrics say what each run chose."""
    store = Storage(str(tmp_path))
    runs = {
        "default": CFG,
        "savers": CFG.model_copy(
            update={"gradient_checkpointing": True, "tokens_per_forward": 64, "tokens_per_row": 64}
        ),
        "mask": CFG.model_copy(update={"packed_attention": "mask", "logit_chunk_tokens": 5}),
    }
    adapters, metrics = {}, {}
    for name, cfg in runs.items():
        metrics[name] = train_grpo_step(
            base_model=tiny_model_path, groups=_groups(9), config=cfg, storage=store, project="p", name=name, step=0
        ).metrics
        adapters[name] = _adapter(store, name, 1)
    for name in ("savers", "mask"):
        for key in ("loss", "grad_norm", "entropy", "kl_to_sampler"):
            assert metrics[name][key] == pytest.approx(metrics["default"][key], rel=1e-4, abs=1e-7), (name, key)
        # Adam's first step is lr x sign(gradient): a float-rounding difference flips only the entries
        # whose gradient is ~0, so compare element by element with that allowance.
        for key, value in adapters["default"].items():
            differ = (value - adapters[name][key]).abs().gt(1e-5).float().mean().item()
            assert differ < 0.01, (name, key, differ)
    d, s = metrics["default"], metrics["savers"]
    assert d["gradient_checkpointing"] == 0 and s["gradient_checkpointing"] == 1  # CPU default: off
    assert d["passes"] == 1 and d["tokens_per_row"] == d["tokens_per_pass"] >= 512  # memory-sized, one row
    assert s["tokens_per_pass"] == 64 and s["passes"] > 1
    assert all(0 < m["peak_memory_gib"] < 64 for m in metrics.values())


def test_tokens_per_pass_follow_the_memory_budget(tiny_model_path, tmp_path, fresh_trainer):
    from art_core.training.trainer import pass_shape

    with trainer_session(tiny_model_path, CFG, Storage(str(tmp_path)), "p", "a", 0) as session:
        model = session.model
    cpu = torch.device("cpu")
    small = pass_shape(model, CFG.model_copy(update={"memory_budget_gib": 0.001}), cpu)
    large = pass_shape(model, CFG.model_copy(update={"memory_budget_gib": 0.5}), cpu)
    fixed = pass_shape(model, CFG.model_copy(update={"tokens_per_forward": 3000, "packed_attention": "mask"}), cpu)
    assert small[0] == 512 and large[0] > small[0]  # clamped at the floor, grows with the budget
    assert fixed == (3000, 512, False, "mask")  # a dense mask keeps rows short: 4 x hidden, at least 512
    # On CPU nothing is recomputed, unless one sequence alone would fill a quarter of the available memory.
    assert pass_shape(model, CFG, cpu, longest=4096)[2] is False
    assert pass_shape(model, CFG, cpu, longest=10**9)[2] is True
    # ... and never more than 4 GiB, however much memory the machine has: the MCP-RL notebook's trainer step
    # peaked at 4.6 GiB RSS on SmolLM2 without the cap (3.2k-token episodes), 2.4 GiB with it.
    from art_core.training.memory import CPU_SEQUENCE_CAP_BYTES, SAFETY, cpu_sequence_budget, model_per_token_bytes

    assert 0 < cpu_sequence_budget() <= CPU_SEQUENCE_CAP_BYTES == 4 << 30
    full = model_per_token_bytes(model.config, next(model.parameters()).element_size(), checkpointing=False)
    past_cap = int(1.05 * CPU_SEQUENCE_CAP_BYTES / (SAFETY * full))
    assert pass_shape(model, CFG, cpu, longest=past_cap)[2] is True


def _qwen_vocab_model(tiny_model_path: str, path: str) -> str:
    """The tiny model's tokenizer in front of a random model with Qwen's 151,936-token vocabulary."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    config = Qwen2Config(
        vocab_size=151_936,
        hidden_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=1024,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.gpu
def test_default_step_on_cuda_uses_flex_checkpoints_only_when_needed_and_stays_small(
    tiny_model_path, tmp_path, fresh_trainer
):
    """64 sequences x 600 tokens with Qwen's vocabulary: full float32 logits alone would take 23 GiB."""
    path = _qwen_vocab_model(tiny_model_path, str(tmp_path / "qwen-vocab"))
    rng = random.Random(12)
    groups = [
        TrajectoryGroup(
            Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": f"prompt {g}"},
                    make_choice(
                        [rng.randrange(300, 151_000) for _ in range(600)], [-11.0] * 600, "x", finish_reason="length"
                    ),
                ],
                reward=rng.random(),
            )
            for _ in range(8)
        )
        for g in range(8)
    ]
    store = Storage(str(tmp_path / "store"))
    default = train_grpo_step(
        base_model=path, groups=groups, config=CFG, storage=store, project="p", name="d", step=0
    ).metrics
    plain = train_grpo_step(
        base_model=path,
        groups=groups,
        storage=store,
        project="p",
        name="s",
        step=0,
        config=CFG.model_copy(update={"packed_attention": "segments", "gradient_checkpointing": False}),
    ).metrics
    tight = train_grpo_step(
        base_model=path,
        groups=groups,
        storage=store,
        project="p",
        name="t",
        step=0,
        config=CFG.model_copy(update={"memory_budget_gib": 0.05}),
    ).metrics
    # The card has room: nothing is recomputed. A budget too small for a whole sequence turns checkpointing on.
    assert default["gradient_checkpointing"] == 0 and default["tokens"] > 38_000
    assert tight["gradient_checkpointing"] == 1 and tight["tokens_per_pass"] < default["tokens_per_pass"]
    assert default["peak_memory_gib"] < 6, default
    assert tight["loss"] == pytest.approx(default["loss"], rel=0.05, abs=1e-4)
    assert default["loss"] == pytest.approx(plain["loss"], rel=0.05, abs=1e-4)
    assert default["grad_norm"] == pytest.approx(plain["grad_norm"], rel=0.05)


def test_a_pass_out_of_memory_reruns_the_step_with_checkpointing(tiny_model_path, tmp_path, fresh_trainer, monkeypatch):
    """Passes sized by the defaults without checkpointing that run out of CUDA memory are not the user's
    problem: the step starts again from its checkpoint with checkpointing on, and trains what a
    checkpointed step trains (the half-updated adapter of the failed try is not kept)."""
    from art_core.training import trainer

    store = Storage(str(tmp_path))
    first = train_grpo_step(
        base_model=tiny_model_path, groups=_groups(1), config=CFG, storage=store, project="p", name="a", step=0
    )
    real, calls = trainer.run_passes, []

    def flaky(model, optimizer, *args, **kw):
        calls.append(model.get_base_model().is_gradient_checkpointing)
        if len(calls) == 1:
            real(model, optimizer, *args, **kw)  # a whole update lands before the failure
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(model, optimizer, *args, **kw)

    monkeypatch.setattr(trainer, "run_passes", flaky)
    retried = train_grpo_step(
        base_model=tiny_model_path, groups=_groups(2), config=CFG, storage=store, project="p", name="a", step=first.step
    ).metrics
    monkeypatch.setattr(trainer, "run_passes", real)
    assert calls == [False, True]
    assert retried["out_of_memory_retries"] == 1 and retried["gradient_checkpointing"] == 1
    clear_model_cache()
    plain = train_grpo_step(
        base_model=tiny_model_path,
        groups=_groups(2),
        storage=store,
        project="p",
        name="a",
        step=first.step,
        config=CFG.model_copy(update={"gradient_checkpointing": True}),
    ).metrics
    assert retried["loss"] == pytest.approx(plain["loss"], rel=1e-4, abs=1e-6)
    assert retried["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-4)
    assert retried["tokens"] == plain["tokens"] and retried["passes"] == plain["passes"]

    # A user's explicit choice is theirs: the error surfaces.
    monkeypatch.setattr(trainer, "run_passes", lambda *a, **k: (_ for _ in ()).throw(torch.OutOfMemoryError("x")))
    with pytest.raises(torch.OutOfMemoryError):
        train_grpo_step(
            base_model=tiny_model_path,
            groups=_groups(2),
            storage=store,
            project="p",
            name="b",
            step=0,
            config=CFG.model_copy(update={"gradient_checkpointing": False}),
        )
