"""Training throughput: our GRPO train step next to TRL's GRPOTrainer, same model, same sequences, one run.

    .venv/bin/python bench/trainer.py            # prints the table; writes bench/results/trainer-cpu.txt
    .venv/bin/python bench/trainer.py --steps 3  # quicker

Both sides train a LoRA (r 8, alpha 16, all linear projections) on the "small" tiny model with the
same 32 sequences per step (4 groups x 8: a chat prompt plus a sampled completion of 16-128 tokens,
lengths drawn at random, as rollouts are), the same token-level clipped loss (beta 0) and AdamW.
TRL never generates here: `_generate_and_score_completions` is replaced by one that returns those
sequences, so only its training step is timed. Ours is timed as users pay for it: `train_step`
including tokenizing the trajectories and writing the checkpoint (adapter + optimizer state).

Figure: training tokens per second = real (non-padding) tokens of the step's sequences / step time,
over `--steps` steps after one warm-up step each. The two are interleaved step by step (a TRL step,
then one of ours, from a TRL callback), so a busy machine slows both alike. Ratio = ours / TRL
(target >= 1.0).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "training"))  # make_choice

LORA = dict(r=8, lora_alpha=16, lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])  # fmt: skip
WORDS = "order item refund flight seat cabin user email status price total game board move tile".split()


def make_groups(tokenizer, n_groups: int, size: int, seed: int):
    """Trajectory groups with sampled-looking completions (random ids, random lengths 16-128)."""
    from rollouts_hf import make_choice

    from art_core.trajectories import Trajectory, TrajectoryGroup

    rng = random.Random(seed)
    groups = []
    for g in range(n_groups):
        prompt = [{"role": "system", "content": "You help users."},
                  {"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60)))}]
        trajs = []
        for _ in range(size):
            ids = [rng.randrange(300, 4000) for _ in range(rng.randint(16, 128))]
            choice = make_choice(ids, [-8.0] * len(ids), "x", finish_reason="length")
            trajs.append(Trajectory(messages_and_choices=[*prompt, choice], reward=rng.random()))
        groups.append(TrajectoryGroup(trajs))
    return groups


def trl_batch(groups, tokenizer):
    """The same sequences in TRL's layout: left-padded prompts, right-padded completions, advantages."""
    import torch

    from art_core.training.advantages import group_advantages
    from art_core.training.tokenize import render, sampled_tokens

    prompts, completions, advantages = [], [], []
    for g in groups:
        advantages += group_advantages(g.rewards())
        for t in g.trajectories:
            text = render(tokenizer, t.messages()[:-1], None, True)
            prompts.append(tokenizer.encode(text, add_special_tokens=False))
            completions.append(sampled_tokens(t.choices()[0])[0])
    pad = tokenizer.pad_token_id
    lp, lc = max(map(len, prompts)), max(map(len, completions))
    batch = {
        "prompt_ids": torch.tensor([[pad] * (lp - len(p)) + p for p in prompts]),
        "prompt_mask": torch.tensor([[0] * (lp - len(p)) + [1] * len(p) for p in prompts]),
        "completion_ids": torch.tensor([c + [pad] * (lc - len(c)) for c in completions]),
        "completion_mask": torch.tensor([[1] * len(c) + [0] * (lc - len(c)) for c in completions]),
        "advantages": torch.tensor(advantages, dtype=torch.float32),
    }
    batch["num_items_in_batch"] = batch["completion_mask"].sum()
    real = sum(map(len, prompts)) + sum(map(len, completions))
    return batch, real, len(prompts) * (lp + lc)


def time_both(model_path: str, groups, batch, steps: int, workdir: str, tokens_per_row: int | None = None) -> tuple[list[float], list[float]]:
    """Step times of ours and TRL's, interleaved (TRL step, our step, TRL step, ...) so both see the same load.

    TRL runs its own training loop; a callback times each of its steps and runs one of ours right after.
    """
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from art_core.storage import Storage
    from art_core.training.config import TrainConfig
    from art_core.training.trainer import train_step

    n = batch["prompt_ids"].shape[0]
    store = Storage(os.path.join(workdir, "store"))
    config = TrainConfig(learning_rate=1e-3, lora_rank=LORA["r"], lora_alpha=LORA["lora_alpha"], tokens_per_row=tokens_per_row)

    class FixedBatchGRPO(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):  # no generation: the bench's sequences
            return {k: v.clone() for k, v in batch.items()}

    class Interleave(TrainerCallback):
        def __init__(self) -> None:
            self.trl: list[float] = []
            self.ours: list[float] = []

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.trl.append(time.perf_counter() - self.t0)
            t0 = time.perf_counter()
            train_step(base_model=model_path, groups=groups, config=config, storage=store, project="bench",
                       name="ours", step=len(self.ours))  # fmt: skip
            self.ours.append(time.perf_counter() - t0)

    args = GRPOConfig(
        output_dir=os.path.join(workdir, "trl"), per_device_train_batch_size=n, num_generations=8,
        gradient_accumulation_steps=1, max_steps=steps + 1, learning_rate=1e-3, beta=0.0, epsilon=0.2,
        max_completion_length=int(batch["completion_ids"].shape[1]), logging_steps=10_000, save_strategy="no",
        report_to="none", use_cpu=True, bf16=False, seed=0, dataloader_num_workers=0,
        disable_tqdm=True,
    )  # fmt: skip
    timer = Interleave()
    trainer = FixedBatchGRPO(
        model=AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32),
        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["unused"] * (n * (steps + 2))}),
        processing_class=AutoTokenizer.from_pretrained(model_path),
        peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA),
        callbacks=[timer],
    )
    trainer.train()
    return timer.ours[1:], timer.trl[1:]  # the first of each loads or compiles: a warm-up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tokens-per-row", type=int, default=None, help="TrainConfig.tokens_per_row (default: auto)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "trainer-cpu.txt"))
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from transformers import AutoTokenizer

    from art_core.testing.tiny_model import build_tiny_model, model_info

    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as workdir:
        model_path = build_tiny_model(os.path.join(workdir, "small"), size="small")
        params = model_info(model_path)["parameters"]
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        groups = make_groups(tokenizer, n_groups=4, size=8, seed=0)
        batch, real_tokens, padded_tokens = trl_batch(groups, tokenizer)
        ours, trl = time_both(model_path, groups, batch, args.steps, workdir, args.tokens_per_row)

    ours_s, trl_s = statistics.median(ours), statistics.median(trl)
    ours_tps, trl_tps = real_tokens / ours_s, real_tokens / trl_s
    lines = [
        f"bench/trainer.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  torch {torch.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} threads",
        f"model: tiny 'small' ({params / 1e6:.1f}M parameters), LoRA r 8 on all projections, fp32 CPU",
        f"step: 32 sequences (4 groups x 8), {real_tokens} real tokens; TRL pads them to {padded_tokens} "
        f"({padded_tokens / real_tokens:.2f}x), ours packs them without padding",
        f"median of {args.steps} steps after a warm-up step each, interleaved (TRL, ours, TRL, ...) in this run:",
        f"  ours (art_core train_step, incl. tokenize + checkpoint write; tokens_per_row {args.tokens_per_row or 'auto'}): "
        f"{ours_s:.3f} s/step  {ours_tps:8.0f} tokens/s",
        f"  TRL GRPOTrainer (training step only, no generation):           {trl_s:.3f} s/step  {trl_tps:8.0f} tokens/s",
        f"  step times (s): ours {[round(t, 2) for t in ours]}, TRL {[round(t, 2) for t in trl]}",
        f"ratio ours/TRL: {ours_tps / trl_tps:.2f}  (target >= 1.0)",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
