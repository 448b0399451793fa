"""A real model learns, through the ART-style library: SmolLM2-135M-Instruct on word-quiz and price-lookup.

    python bench/real_model.py --task word-quiz --seeds 0 1 2          # appends to bench/results/real-model-cpu.txt
    python bench/real_model.py --task price-lookup --seeds 0 --steps 6 --no-write

Per seed, in fresh storage: the base model (step 0) is evaluated on held-out (val) scenarios, `trials`
tries each; `steps` GRPO steps train a LoRA adapter (`TrainableModel` + `LocalBackend`, the same code a
user writes); the last step is evaluated on the same scenarios. Printed: reward and pass^k (a try passes
at reward 1.0) of both, and wall time per phase. The seed sets the order of the training scenarios and
the trainer's seed; the held-out scenarios are the same for every seed, so the spread between seeds is
the noise a gain must beat.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TASKS = {
    # task -> (learning rate, old_logprobs, max_tokens): found by the runs recorded in bench/results.
    "word-quiz": (2e-3, "sampler", 24),
    "price-lookup": (2e-3, "recompute", 32),
}
TEMPERATURE = 0.7  # at 1.0 the 135M model mostly writes nonsense; at 0.7 its rewards vary within a group


async def evaluate(env, client, name: str, scenarios, trials: int, max_tokens: int) -> dict:
    """Mean reward and pass^k (all k tries at reward 1.0) over `scenarios`, `trials` tries each."""
    import art_core as art

    groups = await art.gather_trajectory_groups(
        (
            art.TrajectoryGroup(
                env.rollout(client, name, s, max_tokens=max_tokens, temperature=TEMPERATURE) for _ in range(trials)
            )
            for s in scenarios
        ),
        pbar_desc=None,
    )
    rewards = [[t.reward for t in g.trajectories] for g in groups]
    flat = [r for rs in rewards for r in rs]
    passes = {k: statistics.mean(all(r >= 1.0 for r in rs[:k]) for rs in rewards) for k in range(1, trials + 1)}
    return {"reward": statistics.mean(flat), "pass": passes}


async def one_seed(
    task: str, seed: int, model_dir: str, steps: int, groups: int, group_size: int, eval_scenarios: int, trials: int
) -> dict:
    import art_core as art
    from art_core.envs import load_environment
    from art_core.local_backend import LocalBackend

    lr, old_logprobs, max_tokens = TASKS[task]
    env = load_environment(task)
    train = env.scenarios("train")
    order = list(range(len(train)))
    import random

    random.Random(seed).shuffle(order)
    held_out = env.scenarios("val")[:eval_scenarios]
    root = tempfile.mkdtemp(prefix=f"real-{task}-{seed}-")
    backend = LocalBackend(
        path=os.path.join(root, "art"),
        cache_dir=os.path.join(root, "cache"),
        server_config={"seed": seed, "log_path": os.path.join(root, "vllm.log")},
    )
    model = art.TrainableModel(name=f"{task}-{seed}", project="real-model", base_model=model_dir)
    times: dict[str, float] = {}
    try:
        t = time.perf_counter()
        await model.register(backend)
        client = model.openai_client()
        times["server start"] = time.perf_counter() - t
        t = time.perf_counter()
        base = await evaluate(env, client, model.get_inference_name(), held_out, trials, max_tokens)
        times["eval base"] = time.perf_counter() - t
        curve, gather_s, train_s = [], 0.0, 0.0
        config = art.TrainConfig(learning_rate=lr, old_logprobs=old_logprobs, seed=seed)
        for step in range(steps):
            batch = [train[i] for i in order[step * groups : (step + 1) * groups]]
            t = time.perf_counter()
            got = await art.gather_trajectory_groups(
                (
                    art.TrajectoryGroup(
                        env.rollout(
                            client, model.get_inference_name(), s, max_tokens=max_tokens, temperature=TEMPERATURE
                        )
                        for _ in range(group_size)
                    )
                    for s in batch
                ),
                pbar_desc=None,
            )
            gather_s += time.perf_counter() - t
            curve.append(statistics.mean(r for g in got for r in g.rewards()))
            t = time.perf_counter()
            await model.train(got, config)
            train_s += time.perf_counter() - t
            print(f"  seed {seed} step {step + 1}: train reward {curve[-1]:.3f}", flush=True)
        times["gather"], times["train"] = gather_s, train_s
        t = time.perf_counter()
        final = await evaluate(env, client, model.get_inference_name(), held_out, trials, max_tokens)
        times["eval trained"] = time.perf_counter() - t
    finally:
        await backend.close()
    return {"seed": seed, "base": base, "final": final, "curve": curve, "times": times}


def _served_dtype() -> str:
    """The dtype our servers pick here when none is set (ServerOptions.dtype): float32 without bf16 instructions."""
    from art_core.inference.server import cpu_has_bf16

    return (
        "in vLLM's default bfloat16 (this CPU has AVX512-BF16)" if cpu_has_bf16() else "float32 (no bf16 instructions)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=sorted(TASKS), default="word-quiz")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    add_run_arguments(p)
    args = p.parse_args()
    from art_core.base_models import smollm2

    model_dir = args.model_dir or str(smollm2())
    lines = [
        f"== {args.task}: SmolLM2-135M-Instruct (GGUF Q4_1 dequantized, served {_served_dtype()}), library door "
        f"(TrainableModel + LocalBackend); {args.steps} steps x {args.groups} groups x {args.group_size}, "
        f"lr {TASKS[args.task][0]}, temperature {TEMPERATURE}; held out: {args.eval_scenarios} val scenarios x "
        f"{args.trials} tries; {platform.processor() or platform.machine()}, {os.cpu_count()} cores =="
    ]
    results = []
    for seed in args.seeds:
        r = asyncio.run(
            one_seed(
                args.task, seed, model_dir, args.steps, args.groups, args.group_size, args.eval_scenarios, args.trials
            )
        )
        results.append(r)
        b, f = r["base"], r["final"]
        ks = sorted(b["pass"])
        lines.append(
            f"seed {seed}: base reward {b['reward']:.3f} pass^k {[round(b['pass'][k], 3) for k in ks]} -> "
            f"trained reward {f['reward']:.3f} pass^k {[round(f['pass'][k], 3) for k in ks]} "
            f"(gain {f['reward'] - b['reward']:+.3f}); train curve {[round(c, 2) for c in r['curve']]}"
        )
        lines.append("        seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in r["times"].items()))
        print(lines[-2], lines[-1], sep="\n", flush=True)
    if len(results) > 1:
        gains = [r["final"]["reward"] - r["base"]["reward"] for r in results]
        finals = [r["final"]["reward"] for r in results]
        bases = [r["base"]["reward"] for r in results]
        lines.append(
            f"mean gain {statistics.mean(gains):+.3f} (min {min(gains):+.3f}); spread between seeds: "
            f"base {max(bases) - min(bases):.3f}, trained {max(finals) - min(finals):.3f}"
        )
    print("\n".join(lines))
    if not args.no_write:
        append_result("real-model-cpu.txt", lines)


def append_result(name: str, lines: list[str]) -> None:
    """Append a dated block of lines to bench/results/{name}."""
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name)
    with open(out, "a") as f:
        f.write(time.strftime("%Y-%m-%d ") + "\n".join(lines) + "\n\n")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments a real-model run shares between the benches: steps, group shape, held-out size, model."""
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--eval-scenarios", type=int, default=40)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--model-dir", default=None, help="default: the registry's SmolLM2-135M-Instruct (converted once)")
    p.add_argument("--no-write", action="store_true", help="print only; do not append to bench/results")


if __name__ == "__main__":  # vLLM-related code must be guarded (spawned processes re-import __main__)
    main()
