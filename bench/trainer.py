"""Training throughput and memory: our GRPO train step next to TRL's GRPOTrainer, same model, same sequences.

    .venv/bin/python bench/trainer.py            # prints the table; writes bench/results/trainer-cpu.txt
    .venv/bin/python bench/trainer.py --steps 3  # quicker
    .venv/bin/python bench/trainer.py --memory   # peak RSS of one default step, Qwen's vocabulary, CPU
    .venv/bin/python bench/trainer.py --retail --real --steps 2   # shared prefixes on vs off, retail episodes
    .venv/bin/python bench/trainer.py --retail --device cuda --shape 1.5b --retail-groups 8
    .venv/bin/python bench/trainer.py --device cuda --shape 7b   # random Qwen2.5-7B shape on one GPU
    .venv/bin/python bench/trainer.py --ranks 2  # data parallel: 1 rank vs 2 (TrainConfig.ranks), same step

CPU (the default) and --memory are described here; --device cuda is described at `cuda_bench`.

Both sides train a LoRA (r 8, alpha 16, all linear projections) on the "small" tiny model with the
same 32 sequences per step (4 groups x 8: a chat prompt plus a sampled completion of 16-128 tokens,
lengths drawn at random, as rollouts are), the same token-level clipped loss (beta 0) and AdamW.
TRL never generates here: `_generate_and_score_completions` is replaced by one that returns those
sequences, so only its training step is timed. Ours is timed as users pay for it: `train_grpo_step`
including tokenizing the trajectories and writing the checkpoint (adapter + optimizer state).

Figure: training tokens per second = real (non-padding) tokens of the step's sequences / step time,
over `--steps` steps after one warm-up step each. The two are interleaved step by step (a TRL step,
then one of ours, from a TRL callback), so a busy machine slows both alike. Ratio = ours / TRL
(target >= 1.3, issue 12).
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

LORA = dict(
    r=8,
    lora_alpha=16,
    lora_dropout=0.0,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
)
WORDS = "order item refund flight seat cabin user email status price total game board move tile".split()


def make_groups(
    tokenizer,
    n_groups: int,
    size: int,
    seed: int,
    words: tuple[int, int] = (20, 60),
    completion: tuple[int, int] = (16, 128),
    vocab: int = 4000,
):
    """Trajectory groups with sampled-looking completions (random ids below `vocab`, random lengths)."""
    from rollouts_hf import make_choice

    from art_core.trajectories import Trajectory, TrajectoryGroup

    rng = random.Random(seed)
    groups = []
    for _ in range(n_groups):
        prompt = [
            {"role": "system", "content": "You help users."},
            {"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(*words)))},
        ]
        trajs = []
        for _ in range(size):
            ids = [rng.randrange(300, vocab) for _ in range(rng.randint(*completion))]
            choice = make_choice(ids, [-8.0] * len(ids), "x", finish_reason="length")
            trajs.append(Trajectory(messages_and_choices=[*prompt, choice], reward=rng.random()))
        groups.append(TrajectoryGroup(trajs))
    return groups


def trl_batch(groups, tokenizer):
    """The same sequences in TRL's layout: left-padded prompts, right-padded completions, advantages."""

    from art_core.training.advantages import group_advantages
    from art_core.training.tokenize import render, sampled_tokens

    prompts, completions, advantages = [], [], []
    for g in groups:
        advantages += group_advantages(g.rewards())
        for t in g.trajectories:
            text = render(tokenizer, t.messages()[:-1], None, True)
            prompts.append(tokenizer.encode(text, add_special_tokens=False))
            completions.append(sampled_tokens(t.choices()[0])[0])
    masks = [[1] * len(c) for c in completions]
    batch = trl_tensors(prompts, completions, masks, advantages, tokenizer.pad_token_id)
    real = sum(map(len, prompts)) + sum(map(len, completions))
    return batch, real, len(prompts) * (max(map(len, prompts)) + max(map(len, completions)))


def trl_tensors(prompts, completions, masks, advantages, pad: int) -> dict:
    """TRL's batch layout: left-padded prompts, right-padded completions with their loss mask, advantages."""
    import torch

    lp, lc = max(map(len, prompts)), max(map(len, completions))
    batch = {
        "prompt_ids": torch.tensor([[pad] * (lp - len(p)) + p for p in prompts]),
        "prompt_mask": torch.tensor([[0] * (lp - len(p)) + [1] * len(p) for p in prompts]),
        "completion_ids": torch.tensor([c + [pad] * (lc - len(c)) for c in completions]),
        "completion_mask": torch.tensor([m + [0] * (lc - len(m)) for m in masks]),
        "advantages": torch.tensor(advantages, dtype=torch.float32),
    }
    batch["num_items_in_batch"] = batch["completion_mask"].sum()
    return batch


def time_both(
    model_path: str, groups, batch, steps: int, workdir: str, tokens_per_row: int | None = None
) -> tuple[list[float], list[float]]:
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
    from art_core.training.trainer import train_grpo_step

    n = batch["prompt_ids"].shape[0]
    store = Storage(os.path.join(workdir, "store"))
    config = TrainConfig(
        learning_rate=1e-3, lora_rank=LORA["r"], lora_alpha=LORA["lora_alpha"], tokens_per_row=tokens_per_row
    )

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
            train_grpo_step(
                base_model=model_path,
                groups=groups,
                config=config,
                storage=store,
                project="bench",
                name="ours",
                step=len(self.ours),
            )
            self.ours.append(time.perf_counter() - t0)

    args = GRPOConfig(
        output_dir=os.path.join(workdir, "trl"),
        per_device_train_batch_size=n,
        num_generations=8,
        gradient_accumulation_steps=1,
        max_steps=steps + 1,
        learning_rate=1e-3,
        beta=0.0,
        epsilon=0.2,
        max_completion_length=int(batch["completion_ids"].shape[1]),
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
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


QWEN_VOCAB = 151_936
# Qwen2.5 shapes: hidden, layers, heads, kv heads, MLP, tied embeddings.
SHAPES = {
    "1.5b": dict(
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
        tie_word_embeddings=True,
    ),
    "7b": dict(
        hidden_size=3584,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        intermediate_size=18944,
        tie_word_embeddings=False,
    ),
    "14b": dict(
        hidden_size=5120,
        num_hidden_layers=48,
        num_attention_heads=40,
        num_key_value_heads=8,
        intermediate_size=13824,
        tie_word_embeddings=False,
    ),
    "memory": dict(
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=512,
        tie_word_embeddings=True,
    ),
}
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense, per GPU


def build_shaped_model(path: str, shape: str, device: str) -> tuple[str, int]:
    """A random-weight Qwen2 model of `shape` with Qwen's vocabulary and the tiny chat tokenizer; (path, parameters).

    The tokenizer only renders prompts: completions are sampled ids drawn from the whole vocabulary.
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from art_core.testing.tiny_model import build_tiny_model

    tiny = build_tiny_model(path + "-tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    config = Qwen2Config(
        vocab_size=QWEN_VOCAB,
        max_position_embeddings=32768,
        rope_theta=1e6,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        **SHAPES[shape],
    )
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in bf16 directly: a float32 14B model would need 59 GB first
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(config)  # random init on the device: seconds even at 14B
    finally:
        torch.set_default_dtype(default)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    GenerationConfig.from_pretrained(tiny).save_pretrained(path)
    del model
    return path, params


def _memory_child(model_path: str, n_groups: int) -> None:
    """One default train step on the shaped model; prints tokens and this process's peak RSS as JSON."""
    import json

    from transformers import AutoTokenizer

    from art_core.storage import Storage
    from art_core.training.config import TrainConfig
    from art_core.training.memory import peak_rss_bytes
    from art_core.training.trainer import train_grpo_step

    groups = make_groups(
        AutoTokenizer.from_pretrained(model_path),
        n_groups,
        8,
        seed=0,
        words=(25, 35),
        completion=(150, 210),
        vocab=QWEN_VOCAB - 1,
    )
    with tempfile.TemporaryDirectory(prefix="bench-mem-") as store:
        t0 = time.perf_counter()
        result = train_grpo_step(
            base_model=model_path,
            groups=groups,
            config=TrainConfig(learning_rate=1e-3),
            storage=Storage(store),
            project="bench",
            name="mem",
            step=0,
        )
    m = result.metrics
    print(
        json.dumps(
            {
                "tokens": m["tokens"],
                "sequences": m["trained_trajectories"],
                "seconds": time.perf_counter() - t0,
                "peak_rss_gib": peak_rss_bytes() / (1 << 30),
                "tokens_per_pass": m["tokens_per_pass"],
                "passes": m["passes"],
                "step_peak_gib": m["peak_memory_gib"],
            }
        )
    )


def memory_bench(out: str) -> None:
    """Peak RSS of one default step on a random model with Qwen's vocabulary (hidden 256, 2 layers), CPU.

    Each size runs in a fresh subprocess, so its peak RSS (VmHWM) is that of loading the model plus one
    default train step, nothing else. Target (issue 12): 64 sequences (~13.8k tokens) under 2.5 GiB.
    """
    import json
    import subprocess

    import torch

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as workdir:
        path, params = build_shaped_model(os.path.join(workdir, "qwen-vocab"), "memory", "cpu")
        for n_groups in (2, 4, 8):
            proc = subprocess.run(
                [sys.executable, __file__, "--memory-child", path, "--groups", str(n_groups)],
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    lines = [
        f"bench/trainer.py --memory  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  torch {torch.__version__}, "
        f"{_machine()} (shared, no GPU)",
        f"model: random Qwen2, vocabulary {QWEN_VOCAB}, hidden 256, 2 layers, tied embeddings ({params / 1e6:.1f}M "
        "parameters), LoRA r 8 on all projections, fp32; one default TrainConfig step per fresh process",
        "peak RSS = the process's VmHWM: python + torch + the model + one step (target: 64 sequences under 2.5 GiB)",
    ]
    for r in rows:
        lines.append(
            f"  {r['sequences']:3d} sequences {r['tokens']:6d} tokens: peak RSS {r['peak_rss_gib']:.2f} GiB "
            f"(the step's own peak {r['step_peak_gib']:.2f} GiB), {r['passes']} pass(es) of <= "
            f"{r['tokens_per_pass']} tokens, {r['seconds']:.1f} s"
        )
    per_token = (rows[-1]["peak_rss_gib"] - rows[0]["peak_rss_gib"]) / max(rows[-1]["tokens"] - rows[0]["tokens"], 1)
    lines.append(
        f"growth: {per_token * (1 << 30) / 1e3:.1f} kB per token between the smallest and largest step "
        "(before issue 12: ~1.5 MB per token, 20.8 GiB at 13.8k tokens)"
    )
    _write(lines, out)


def _machine() -> str:
    """The CPU model, core count and memory of this machine, for the record."""
    name, mem = platform.machine(), ""
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), name)
        with open("/proc/meminfo") as f:
            mem = f", {int(f.readline().split()[1]) / (1 << 20):.0f} GiB RAM"
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} CPUs{mem}"


def _trl_version() -> str:
    from importlib.metadata import version

    return version("trl")


def _write(lines: list[str], out: str) -> None:
    text = "\n".join(lines) + "\n"
    print(text, end="")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)


def cpu_bench(steps: int, tokens_per_row: int | None, out: str, real: bool = False) -> None:
    """The CPU comparison with TRL on the tiny 'small' model, or on SmolLM2-135M-Instruct with `real`
    (see the module docstring)."""
    import resource

    import torch
    from transformers import AutoTokenizer

    from art_core.testing.tiny_model import build_tiny_model, model_info

    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as workdir:
        if real:
            from art_core.base_models import smollm2

            model_path, name = str(smollm2()), "SmolLM2-135M-Instruct (registry GGUF, dequantized)"
            params, vocab = 134_515_008, 49152
        else:
            model_path = build_tiny_model(os.path.join(workdir, "small"), size="small")
            params, vocab, name = model_info(model_path)["parameters"], 4000, "tiny 'small'"
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        groups = make_groups(tokenizer, n_groups=4, size=8, seed=0, vocab=vocab)
        batch, real_tokens, padded_tokens = trl_batch(groups, tokenizer)
        ours, trl = time_both(model_path, groups, batch, steps, workdir, tokens_per_row)

    ours_s, trl_s = statistics.median(ours), statistics.median(trl)
    ours_tps, trl_tps = real_tokens / ours_s, real_tokens / trl_s
    lines = [
        f"bench/trainer.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  torch {torch.__version__}, "
        f"{_machine()}, {torch.get_num_threads()} threads",
        f"model: {name} ({params / 1e6:.1f}M parameters), LoRA r 8 on all projections, fp32 CPU",
        f"step: 32 sequences (4 groups x 8), {real_tokens} real tokens; TRL pads them to {padded_tokens} "
        f"({padded_tokens / real_tokens:.2f}x), ours packs them without padding",
        f"median of {steps} steps after a warm-up step each, interleaved (TRL, ours, TRL, ...) in this run:",
        f"  ours (art_core train_grpo_step, incl. tokenize + checkpoint write; tokens_per_row {tokens_per_row or 'auto'}): "
        f"{ours_s:.3f} s/step  {ours_tps:8.0f} tokens/s",
        f"  TRL GRPOTrainer (training step only, no generation):           {trl_s:.3f} s/step  {trl_tps:8.0f} tokens/s",
        f"  step times (s): ours {[round(t, 2) for t in ours]}, TRL {[round(t, 2) for t in trl]}",
        f"ratio ours/TRL: {ours_tps / trl_tps:.2f}  (target >= {1.5 if real else 1.3})",
        f"peak RSS of this process (both trainers, one after the other): "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB",
    ]
    _write(lines, out)


def ranks_bench(steps: int, ranks: int, out: str) -> None:
    """1 rank vs `ranks` ranks (TrainConfig.ranks, art_core.training.distributed) on the same step: the tiny
    'small' model, 32 sequences. Two figures per side: the whole call as a user pays it (with N > 1 ranks each
    step spawns N workers that load the model: start-up included), and its passes (metrics['passes_seconds'],
    rank 0: forward, backward, all-reduce, optimizer). On CUDA each rank takes one GPU; with one GPU, only
    --ranks 1 is measured (the multi-GPU figures are unmeasured)."""
    import torch
    from transformers import AutoTokenizer

    from art_core.storage import Storage
    from art_core.testing.tiny_model import build_tiny_model, model_info
    from art_core.training.config import TrainConfig
    from art_core.training.session import clear_model_cache
    from art_core.training.trainer import train_grpo_step

    gpus = torch.cuda.device_count()
    sides = [1] if gpus == 1 else [1, ranks]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as workdir:
        model_path = build_tiny_model(os.path.join(workdir, "small"), size="small")
        params = model_info(model_path)["parameters"]
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        groups = make_groups(tokenizer, n_groups=4, size=8, seed=0)
        _, real_tokens, _ = trl_batch(groups, tokenizer)
        for n in sides:
            clear_model_cache()
            config = TrainConfig(learning_rate=1e-3, ranks=n)
            store = Storage(os.path.join(workdir, f"store-{n}"))
            whole, passes = [], []
            for step in range(steps + 1):  # the first is a warm-up (the 1-rank side loads its model there)
                t0 = time.perf_counter()
                result = train_grpo_step(
                    base_model=model_path, groups=groups, config=config, storage=store, project="b", name="r", step=step
                )
                if step:
                    whole.append(time.perf_counter() - t0)
                    passes.append(result.metrics["passes_seconds"])
            rows[n] = (whole, passes)
    lines = [
        f"bench/trainer.py --ranks {ranks}  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  torch "
        f"{torch.__version__}, {_machine()}, {torch.get_num_threads()} threads a rank, load average "
        f"{os.getloadavg()[0]:.1f} at the end (the machine was shared)",
        f"model: tiny 'small' ({params / 1e6:.1f}M parameters), LoRA r 8, fp32; step: 32 sequences (4 groups x 8), "
        f"{real_tokens} real tokens; median of {steps} steps after a warm-up step",
    ]
    for n, (whole, passes) in rows.items():
        w, p = statistics.median(whole), statistics.median(passes)
        lines.append(
            f"  {n} rank{'s' if n > 1 else ' '}: whole call {w:6.3f} s/step {real_tokens / w:8.0f} tokens/s   "
            f"passes {p:6.3f} s/step {real_tokens / p:8.0f} tokens/s   (whole {[round(t, 2) for t in whole]})"
        )
    if len(rows) > 1:
        (w1, p1), (wn, pn) = rows[1], rows[ranks]
        lines.append(
            f"  {ranks} ranks / 1 rank tokens/s: whole call {statistics.median(w1) / statistics.median(wn):.2f}x, "
            f"passes {statistics.median(p1) / statistics.median(pn):.2f}x"
        )
    else:
        lines.append(f"  one GPU here: {ranks} ranks unmeasured")
    _write(lines, out)


def retail_groups(tokenizer, n_groups: int, size: int, seed: int = 0):
    """Groups of `size` retail episodes per scenario: the real policy, tools, customer and tool turns.

    Each scenario is the retail expert's demonstration (art_core.envs.customer_service.expert, the scripted
    customer and the real tools, 5-10 assistant turns). Its assistant turns become sampled Choices (the
    turn's text, tool calls in hermes format, re-tokenized, plus <|im_end|>); rollout k of a group starts each
    of its turns with 1-6 random tokens and may stop one or two turns early, so rollouts diverge at their
    first sampled token, as sampled ones do. Shared per group: the policy, the tool list and the customer's
    opening (about 1.9k tokens with SmolLM2's tokenizer).
    """
    import json

    from rollouts_hf import make_choice

    from art_core.envs.customer_service.expert import build_demonstrations
    from art_core.trajectories import Trajectory, TrajectoryGroup

    rng = random.Random(seed)
    rows = build_demonstrations("retail", limit=n_groups * 3, seed=seed).rows
    rows = sorted(rows, key=lambda r: -len(r["messages"]))[:n_groups]  # the longest: several turns each
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    vocab = min(len(tokenizer), 40_000)
    groups = []
    for row in rows:
        assistant = [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"]
        trajs = []
        for _ in range(size):
            cut = assistant[max(2, len(assistant) - 1 - rng.randint(0, 2))]  # keep >= 3 assistant turns
            items = []
            for m in row["messages"][: cut + 1]:
                if m["role"] != "assistant":
                    items.append(m)
                    continue
                text = m.get("content") or ""
                for call in m.get("tool_calls") or []:
                    fn = call["function"]
                    args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
                    text += f'<tool_call>\n{{"name": "{fn["name"]}", "arguments": {args}}}\n</tool_call>'
                ids = [rng.randrange(300, vocab) for _ in range(rng.randint(1, 6))]
                ids += tokenizer.encode(text, add_special_tokens=False) + [end]
                items.append(make_choice(ids, [-1.0 - rng.random() for _ in ids], text, finish_reason="stop"))
            trajs.append(Trajectory(messages_and_choices=items, tools=row["tools"], reward=rng.random()))
        groups.append(TrajectoryGroup(trajs))
    return groups


def trl_batch_of_sequences(groups, tokenizer, config):
    """Retail episodes in TRL's layout: the tokens before a sequence's first trained token are its prompt (left
    padded), the rest its completion (right padded), masked to exactly the tokens ours trains (the assistant
    turns, not the tool results or the customer's turns between them). The same token ids ours trains on."""

    from art_core.training.trainer import prepare_sequences

    seqs, _ = prepare_sequences(groups, tokenizer, config, 1 << 30)
    prompts, completions, masks = [], [], []
    for s in seqs:
        first = s.trainable.index(True)
        prompts.append(s.input_ids[:first])
        completions.append(s.input_ids[first:])
        masks.append([int(t) for t in s.trainable[first:]])
    return trl_tensors(prompts, completions, masks, [s.advantage for s in seqs], tokenizer.pad_token_id or 0)


def retail_bench(
    steps: int,
    out: str,
    real: bool,
    n_groups: int,
    dtype: str = "auto",
    shape: str | None = None,
    trl: bool = False,
) -> None:
    """Shared prefixes on vs off on retail episodes (`retail_groups`), same model, same groups, interleaved
    step by step (on, off, on, off, ...) after one warm-up step each; default TrainConfig otherwise.
    `trl`: then TRL's GRPOTrainer on the same sequences (`trl_batch_of_sequences`), one sequence per micro-batch
    (a 6k-token sequence padded beside others runs a CPU out of memory), float32 as TRL runs on a CPU.

    `shape` ('1.5b', '7b', ...): a random Qwen2.5-shaped model on the GPU instead (the tiny tokenizer)."""
    import resource

    import torch
    from transformers import AutoTokenizer

    from art_core.storage import Storage
    from art_core.testing.tiny_model import build_tiny_model, model_info
    from art_core.training.config import TrainConfig
    from art_core.training.trainer import train_grpo_step

    with tempfile.TemporaryDirectory(prefix="bench-retail-") as workdir:
        if shape:
            model_path, params = build_shaped_model(os.path.join(workdir, shape), shape, "cuda")
            name = f"random Qwen2.5-{shape} shape ({params / 1e9:.2f}B parameters) on {torch.cuda.get_device_name()}"
        elif real:
            from art_core.base_models import smollm2

            model_path, name = str(smollm2()), "SmolLM2-135M-Instruct (registry GGUF, dequantized)"
        else:
            model_path = build_tiny_model(os.path.join(workdir, "small"), size="small")
            name = f"tiny 'small' ({model_info(model_path)['parameters'] / 1e6:.1f}M parameters)"
        groups = retail_groups(AutoTokenizer.from_pretrained(model_path), n_groups, 8)
        store = Storage(os.path.join(workdir, "store"))
        sides = {"shared": TrainConfig(learning_rate=1e-5, dtype=dtype), "whole": None}
        sides["whole"] = sides["shared"].model_copy(update={"share_prefixes": False})
        times: dict[str, list[float]] = {k: [] for k in sides}
        metrics: dict[str, dict] = {}
        for step in range(steps + 1):
            for side, config in sides.items():
                t0 = time.perf_counter()
                metrics[side] = train_grpo_step(
                    base_model=model_path,
                    groups=groups,
                    config=config,
                    storage=store,
                    project="b",
                    name=side,
                    step=step,
                ).metrics
                if shape:
                    torch.cuda.synchronize()
                times[side].append(time.perf_counter() - t0)
                print(side, step, round(times[side][-1], 2), flush=True)
        trl_times = None
        if trl:
            batch = trl_batch_of_sequences(groups, AutoTokenizer.from_pretrained(model_path), sides["shared"])
            trl_times = _time_trl(model_path, batch, steps, "cuda" if shape else "cpu", micro_batch=1)
            print("trl", [round(t, 2) for t in trl_times], flush=True)
    m = metrics["shared"]
    lines = [
        f"bench/trainer.py --retail{' --real' if real else ''}{f' --shape {shape}' if shape else ''}  "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  "
        f"torch {torch.__version__}, {_machine()}, {torch.get_num_threads()} threads",
        f"model: {name}, LoRA r 8 on all projections, {'bf16' if m['bf16'] else 'fp32'} (dtype {dtype}), default "
        "TrainConfig (lr 1e-5); shared = share_prefixes True (the default), whole = False",
        f"step: {n_groups} retail scenarios x 8 rollouts = {m['trained_trajectories']} episodes, "
        f"{m['tokens_in_batch']} tokens in the batch ({m['trainable_tokens']} trained)",
        f"median of {steps} steps after a warm-up step each, interleaved (shared, whole, shared, ...):",
    ]
    for side in sides:
        t, x = statistics.median(times[side][1:]), metrics[side]
        lines.append(
            f"  {side:6s}: {t:7.2f} s/step  tokens computed {x['tokens_computed']:6d} of {x['tokens_in_batch']} in the "
            f"batch ({x['tokens_computed'] / x['tokens_in_batch']:.2f}), {x['tokens_in_batch'] / t:6.0f} batch tokens/s, "
            f"{x['passes']} passes of <= {x['tokens_per_pass']} tokens, step peak {x['peak_memory_gib']:.2f} GiB, "
            f"loss {x['loss']:.6f}, steps {[round(v, 2) for v in times[side][1:]]}"
        )
    whole, shared = statistics.median(times["whole"][1:]), statistics.median(times["shared"][1:])
    lines.append(f"speed-up from sharing: {whole / shared:.2f}x")
    if trl_times:
        t = statistics.median(trl_times)
        lines.append(
            f"  TRL   : {t:7.2f} s/step  GRPOTrainer {_trl_version()} on the same {m['trained_trajectories']} sequences "
            f"(prompt = the tokens before the first trained one, completion masked to the trained tokens), "
            f"micro-batch 1, fp32, {m['tokens_in_batch'] / t:6.0f} batch tokens/s, steps {[round(v, 2) for v in trl_times]}"
        )
        lines.append(
            f"ours (shared, the default) vs TRL: {t / shared:.2f}x; ours without sharing vs TRL: {t / whole:.2f}x"
        )
    lines.append(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    _write(lines, out)


def _cuda_child(
    side: str, model_path: str, steps: int, device: str, gpu_gib: float | None = None, profile: str | None = None
) -> None:
    """Time `steps` steps (after a warm-up) of one side on the bench's sequences; prints a JSON line.

    `gpu_gib`: act as a GPU of that many GiB (an 80 GiB H100 on an H200): a ballast tensor takes the rest
    before anything loads, so both sides see (and size their passes from) that much memory and run out of
    memory where such a GPU would. The reported peak leaves the ballast out.
    """
    import json

    import torch
    from transformers import AutoTokenizer

    ballast = None
    if device == "cuda" and gpu_gib is not None:
        _free, total = torch.cuda.mem_get_info()
        extra = total - int(gpu_gib * (1 << 30))
        if extra > 0:
            ballast = torch.empty(extra, dtype=torch.uint8, device="cuda")

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    groups = make_groups(tokenizer, 8, 8, seed=0, words=(300, 340), completion=(256, 1024), vocab=QWEN_VOCAB - 1)
    batch, real_tokens, _ = trl_batch(groups, tokenizer)
    result: dict = {"side": side, "tokens": real_tokens}
    try:
        if side == "ours":
            result.update(_time_ours(model_path, groups, steps, device, profile))
        else:
            result["times"] = _time_trl(model_path, batch, steps, device)
    except torch.OutOfMemoryError as exc:
        result["oom"] = str(exc).splitlines()[0]
    if device == "cuda":
        held = ballast.numel() if ballast is not None else 0
        result["peak_gib"] = (torch.cuda.max_memory_allocated() - held) / (1 << 30)
        result["device"] = torch.cuda.get_device_name()
        if held:
            result["device"] += f" capped at {gpu_gib:g} GiB"
    print(json.dumps(result))


def _time_ours(model_path: str, groups, steps: int, device: str, profile: str | None = None) -> dict:
    """`steps` timed steps after a warm-up; with `profile`, one more step under torch.profiler, whose
    busiest operators (by time on the device) are written to that file."""
    import torch

    from art_core.storage import Storage
    from art_core.training.config import TrainConfig
    from art_core.training.trainer import train_grpo_step

    times, metrics = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as store:

        def one(step: int) -> dict:
            out = train_grpo_step(
                base_model=model_path,
                groups=groups,
                config=TrainConfig(learning_rate=1e-5),
                storage=Storage(store),
                project="bench",
                name="ours",
                step=step,
            ).metrics
            if device == "cuda":
                torch.cuda.synchronize()
            return out

        for step in range(steps + 1):
            t0 = time.perf_counter()
            metrics = one(step)
            times.append(time.perf_counter() - t0)
        if profile:
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as profiler

            cuda = device == "cuda"
            activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
            with profiler(activities=activities) as prof:
                t0 = time.perf_counter()
                one(steps + 1)
                wall = time.perf_counter() - t0
            sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
            with open(profile, "w") as f:
                f.write(f"one profiled step of ours on {model_path}: {wall:.2f} s (profiler on)\n")
                f.write(prof.key_averages().table(sort_by=sort, row_limit=40, max_name_column_width=70))
    keep = ("tokens_per_pass", "passes", "peak_memory_gib", "gradient_checkpointing", "out_of_memory_retries")
    return {"times": times[1:], "metrics": {k: metrics[k] for k in keep if k in metrics}}


def _time_trl(model_path: str, batch, steps: int, device: str, micro_batch: int = 8) -> list[float]:
    """TRL's defaults for one GPU: per-device batch 8 (`micro_batch`), accumulation to the whole batch (64 on
    the GPU bench), one generation batch per step."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    n = batch["prompt_ids"].shape[0]

    class FixedBatchGRPO(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):  # the whole generation batch (64), no generation
            return {k: v.to(self.accelerator.device) for k, v in batch.items()}

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if device == "cuda":
                torch.cuda.synchronize()
            self.times.append(time.perf_counter() - self.t0)

    with tempfile.TemporaryDirectory(prefix="bench-trl-") as out:
        args = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=micro_batch,
            gradient_accumulation_steps=n // micro_batch,
            num_generations=8,
            max_steps=steps + 1,
            learning_rate=1e-5,
            beta=0.0,
            epsilon=0.2,
            logging_steps=10_000,
            max_completion_length=int(batch["completion_ids"].shape[1]),
            save_strategy="no",
            report_to="none",
            use_cpu=device == "cpu",
            bf16=device == "cuda",
            seed=0,
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        timer = Timer()
        trainer = FixedBatchGRPO(
            model=AutoModelForCausalLM.from_pretrained(
                model_path, dtype=torch.bfloat16 if device == "cuda" else torch.float32
            ),
            reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["unused"] * (n * (steps + 2))}),
            processing_class=AutoTokenizer.from_pretrained(model_path),
            peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA),
            callbacks=[timer],
        )
        trainer.train()
    return timer.times[1:]


def cuda_bench(
    shape: str,
    steps: int,
    out: str,
    device: str = "cuda",
    rounds: int = 2,
    gpu_gib: float | None = None,
    sides: tuple[str, ...] = ("trl", "ours"),
    profile: str | None = None,
) -> None:
    """One GPU: ours (default TrainConfig) and TRL GRPOTrainer on a random Qwen2.5-`shape` model, bf16.

    Step: 64 sequences (8 groups x 8), prompts of ~450 tokens, completions of 256-1024 sampled ids drawn
    from the whole 151,936-token vocabulary (~60k real tokens), LoRA r 8 on all projections. The two
    models do not fit one GPU together at 14B, so each side runs in its own process, interleaved by run
    (TRL, ours, TRL, ours): each process loads the model, takes a warm-up step and `steps` timed steps,
    and reports its peak allocated memory (weights included). MFU = 6 x parameters x tokens/s / the
    GPU's dense bf16 peak. Targets (issue 12, H100 80GB): peak 1.5B <= 24 GiB, 7B <= 40 GiB, 14B fits;
    tokens/s >= 1.5x TRL at 1.5B and 7B; MFU >= 40% at 7B. On a larger GPU, `gpu_gib` 80 makes both sides
    see an 80 GiB one (see `_cuda_child`).
    """
    import json
    import subprocess

    import torch

    runs: dict[str, list[dict]] = {"trl": [], "ours": []}
    with tempfile.TemporaryDirectory(prefix="bench-trainer-", dir=os.environ.get("BENCH_TMP")) as workdir:
        path, params = build_shaped_model(os.path.join(workdir, shape), shape, device)
        if device == "cuda":
            torch.cuda.empty_cache()
        for side in list(sides) * rounds:
            cmd = [sys.executable, __file__, "--cuda-child", side, path, "--steps", str(steps), "--device", device]
            cmd += ["--gpu-gib", str(gpu_gib)] if gpu_gib is not None else []
            cmd += ["--profile", profile] if profile and side == "ours" else []
            proc = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            runs[side].append(json.loads(lines[-1]) if lines else {"side": side, "error": proc.stderr[-2000:]})
            print(side, runs[side][-1], flush=True)
    name = next((r.get("device") for rs in runs.values() for r in rs if r.get("device")), device)
    peak_flops = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), 989e12)
    summary = {}
    lines = [
        f"bench/trainer.py --device {device} --shape {shape}  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  "
        f"{name}, torch {torch.__version__}",
        f"model: random Qwen2.5-{shape} shape ({params / 1e9:.2f}B parameters, vocabulary {QWEN_VOCAB}), bf16, LoRA r 8 "
        "on all projections; ours with the default TrainConfig, TRL with per-device batch 8 x accumulation 8",
    ]
    for side, rs in runs.items():
        times = [t for r in rs for t in r.get("times", [])]
        tokens = next((r["tokens"] for r in rs if "tokens" in r), 0)
        problems = [r.get("oom") or r.get("error", "")[-300:] for r in rs if "times" not in r]
        if not times:
            lines.append(f"  {side}: no timed step ({'; '.join(problems)})")
            continue
        sec = statistics.median(times)
        tps = tokens / sec
        summary[side] = tps
        peak = max(r.get("peak_gib", 0.0) for r in rs)
        extra = f", {rs[-1].get('metrics')}" if side == "ours" else ""
        lines.append(
            f"  {side:4s}: {tokens} tokens, {sec:.2f} s/step, {tps:8.0f} tokens/s, MFU (6N) "
            f"{6 * params * tps / peak_flops:.1%}, peak {peak:.1f} GiB, steps {[round(t, 2) for t in times]}{extra}"
        )
    if len(summary) == 2:
        lines.append(f"ratio ours/TRL: {summary['ours'] / summary['trl']:.2f}  (target >= 1.5 at 1.5B and 7B)")
    _write(lines, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tokens-per-row", type=int, default=None, help="TrainConfig.tokens_per_row (default: auto)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--shape",
        choices=["1.5b", "7b", "14b", "memory"],
        default="1.5b",
        help="with --device cuda ('memory': the small CPU memory model, to smoke-test the GPU path on CPU)",
    )
    parser.add_argument("--memory", action="store_true", help="peak RSS of one default step with Qwen's vocabulary")
    parser.add_argument("--real", action="store_true", help="CPU: SmolLM2-135M-Instruct instead of the tiny model")
    parser.add_argument(
        "--retail",
        action="store_true",
        help="shared prefixes on vs off on retail episodes (groups of 8); CPU, or a random --shape with --device cuda",
    )
    parser.add_argument("--retail-groups", type=int, default=2, help="--retail: scenarios (groups of 8) per step")
    parser.add_argument("--dtype", default="auto", help="--retail: TrainConfig.dtype")
    parser.add_argument("--trl", action="store_true", help="--retail: also TRL's GRPOTrainer on the same sequences")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--cuda-child", nargs=2, metavar=("SIDE", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument("--groups", type=int, default=8, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2, help="--device cuda: runs of each side, interleaved")
    parser.add_argument("--sides", default="trl,ours", help="--device cuda: which trainers to run (trl, ours)")
    parser.add_argument("--profile", default=None, help="--device cuda: profile one step of ours into this file")
    parser.add_argument("--gpu-gib", type=float, default=None, help="--device cuda: act as a GPU of this many GiB")
    parser.add_argument("--ranks", type=int, default=None, help="1 rank vs this many (TrainConfig.ranks), tiny model")
    parser.add_argument("--out", default=None, help="result file (default: bench/results/trainer-<mode>.txt)")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    if args.memory_child:
        _memory_child(args.memory_child, args.groups)
    elif args.cuda_child:
        _cuda_child(args.cuda_child[0], args.cuda_child[1], args.steps, args.device, args.gpu_gib, args.profile)
    elif args.retail:
        shape = args.shape if args.device == "cuda" else None
        default = f"trainer-retail-{f'cuda-{shape}' if shape else 'real-cpu' if args.real else 'cpu'}.txt"
        retail_bench(
            args.steps,
            args.out or os.path.join(results, default),
            args.real,
            args.retail_groups,
            args.dtype,
            shape,
            trl=args.trl,
        )
    elif args.ranks:
        device = "cuda" if args.device == "cuda" else "cpu"
        ranks_bench(args.steps, args.ranks, args.out or os.path.join(results, f"trainer-ranks-{device}.txt"))
    elif args.memory:
        memory_bench(args.out or os.path.join(results, "trainer-memory-cpu.txt"))
    elif args.device == "cuda" or args.shape == "memory":
        cuda_bench(
            args.shape,
            args.steps,
            args.out or os.path.join(results, f"trainer-{args.device}-{args.shape}.txt"),
            device=args.device,
            rounds=args.rounds,
            gpu_gib=args.gpu_gib,
            sides=tuple(args.sides.split(",")),
            profile=args.profile,
        )
    else:
        default = "trainer-real-cpu.txt" if args.real else "trainer-cpu.txt"
        cpu_bench(args.steps, args.tokens_per_row, args.out or os.path.join(results, default), real=args.real)


if __name__ == "__main__":
    main()
