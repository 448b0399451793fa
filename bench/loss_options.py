"""Reward curves of three GRPO losses side by side: token-level (ART's default), GSPO and Dr. GRPO.

    python bench/loss_options.py --seeds 0 1 2          # appends to bench/results/loss-options-cpu.txt
    python bench/loss_options.py --seeds 0 --steps 4 --no-write

The model is the real one (SmolLM2-135M-Instruct from the registry, served in the dtype our servers pick for this CPU) on the free-text
word quiz, through the library door (TrainableModel + LocalBackend). Per seed, one vLLM server serves
three LoRA adapters trained from the same base, one per loss; every step each of them rolls out the same
training scenarios (their rollouts run concurrently, so vLLM batches them), then each trains on its own
groups. Only the loss differs:

- token:  the token-level clipped ratio (PPO/GRPO; ART's default), epsilon 0.2;
- gspo:   importance_sampling_level='sequence' (GSPO's length-normalised sequence ratio) with the
          paper's clip range 3e-4 / 4e-4;
- drgrpo: normalize_by_length=False (a constant normaliser instead of the token count) and
          scale_rewards=False (no division by the group's std), Dr. GRPO's two changes.

All three recompute the old logprobs with the policy before the step (ART's precalculate_logprobs), so
the sampler/trainer mismatch of the sampled logprobs cannot clip GSPO's tight range by itself. The base
model is evaluated once per seed (the three start from the same weights); each trained adapter is
evaluated on the same held-out scenarios. Printed: the train reward per step (the curve), the clipped
fractions, the held-out reward and pass^k, and seconds per phase.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.real_model import TASKS, TEMPERATURE, _served_dtype, add_run_arguments, append_result, evaluate  # noqa: E402

TASK = "word-quiz"
METHODS = {
    "token": {},
    "gspo": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
    "drgrpo": {"normalize_by_length": False, "scale_rewards": False},
}


async def one_seed(seed: int, model_dir: str, args: argparse.Namespace) -> dict:
    import art_core as art
    from art_core.envs import load_environment
    from art_core.local_backend import LocalBackend

    lr, _, max_tokens = TASKS[TASK]
    env = load_environment(TASK)
    train = env.scenarios("train")
    order = list(range(len(train)))
    random.Random(seed).shuffle(order)
    held_out = env.scenarios("val")[: args.eval_scenarios]
    root = tempfile.mkdtemp(prefix=f"loss-options-{seed}-")
    backend = LocalBackend(
        path=os.path.join(root, "art"),
        cache_dir=os.path.join(root, "cache"),
        server_config={"seed": seed, "log_path": os.path.join(root, "vllm.log")},
    )
    models = {m: art.TrainableModel(name=f"{m}-{seed}", project="loss-options", base_model=model_dir) for m in METHODS}
    configs = {
        m: art.TrainConfig(learning_rate=lr, old_logprobs="recompute", seed=seed, **extra)
        for m, extra in METHODS.items()
    }
    out = {m: {"curve": [], "clip": [], "seq_clip": []} for m in METHODS}
    times = {"server start": 0.0, "eval base": 0.0, "gather": 0.0, "train": 0.0, "eval trained": 0.0}

    def rollouts(model, scenarios, n: int):
        client, name = model.openai_client(), model.get_inference_name()
        return [
            art.TrajectoryGroup(
                env.rollout(client, name, s, max_tokens=max_tokens, temperature=TEMPERATURE) for _ in range(n)
            )
            for s in scenarios
        ]

    try:
        t = time.perf_counter()
        for model in models.values():
            await model.register(backend)
        times["server start"] = time.perf_counter() - t
        t = time.perf_counter()
        first = next(iter(models.values()))
        base = await evaluate(env, first.openai_client(), first.get_inference_name(), held_out, args.trials, max_tokens)
        times["eval base"] = time.perf_counter() - t
        for step in range(args.steps):
            batch = [train[i] for i in order[step * args.groups : (step + 1) * args.groups]]
            t = time.perf_counter()
            gathered = await asyncio.gather(
                *(
                    art.gather_trajectory_groups(rollouts(model, batch, args.group_size), pbar_desc=None)
                    for model in models.values()
                )
            )
            times["gather"] += time.perf_counter() - t
            t = time.perf_counter()
            for (m, model), groups in zip(models.items(), gathered):
                out[m]["curve"].append(statistics.mean(r for g in groups for r in g.rewards()))
                result = await model.train(groups, configs[m])
                out[m]["clip"].append(_metric(result.metrics, "clip_fraction"))
                out[m]["seq_clip"].append(_metric(result.metrics, "sequence_clip_fraction"))
            times["train"] += time.perf_counter() - t
            print(
                f"  seed {seed} step {step + 1}: "
                + ", ".join(f"{m} {out[m]['curve'][-1]:.3f}" for m in METHODS)
                + f" ({time.strftime('%H:%M:%S')})",
                flush=True,
            )
        t = time.perf_counter()
        finals = await asyncio.gather(
            *(
                evaluate(env, model.openai_client(), model.get_inference_name(), held_out, args.trials, max_tokens)
                for model in models.values()
            )
        )
        times["eval trained"] = time.perf_counter() - t
        for m, final in zip(METHODS, finals):
            out[m]["final"] = final
    finally:
        await backend.close()
    return {"seed": seed, "base": base, "methods": out, "times": times}


def _metric(metrics: dict, name: str) -> float:
    return float(metrics.get(name, metrics.get(f"train/{name}", float("nan"))))


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    add_run_arguments(p)
    p.add_argument("--save", help="write each seed's result as JSON to this path ({seed} is replaced)")
    p.add_argument("--combine", nargs="+", help="report seeds saved earlier with --save instead of running")
    args = p.parse_args()
    from art_core.base_models import smollm2

    model_dir = args.model_dir or ("" if args.combine else str(smollm2()))
    lines = [
        f"== {TASK}: token vs GSPO vs Dr. GRPO, SmolLM2-135M-Instruct (served {_served_dtype()}), library door; "
        f"{args.steps} steps x {args.groups} groups x {args.group_size}, lr {TASKS[TASK][0]}, temperature "
        f"{TEMPERATURE}, old logprobs recomputed; held out: {args.eval_scenarios} val scenarios x {args.trials} "
        f"tries; {platform.machine()}, {os.cpu_count()} cores =="
    ]
    results = []
    for path in args.combine or []:  # seeds run earlier, one process each (--save)
        with open(path) as f:
            results.append(json.load(f))
    for seed in [] if args.combine else args.seeds:
        r = asyncio.run(one_seed(seed, model_dir, args))
        if args.save:
            with open(args.save.format(seed=seed), "w") as f:
                json.dump(r, f)
        results.append(r)
    for r in results:
        b = r["base"]
        k = max(b["pass"], key=int)
        lines.append(f"seed {r['seed']}: base reward {b['reward']:.3f} pass^{k} {b['pass'][k]:.3f}")
        for m, o in r["methods"].items():
            f = o["final"]
            lines.append(
                f"  {m:<7} train curve {_fmt(o['curve'])} -> held out {f['reward']:.3f} pass^{k} "
                f"{f['pass'][k]:.3f} (gain {f['reward'] - b['reward']:+.3f}); clip fraction per step "
                f"{_fmt(o['clip'])}" + (f", sequences clipped {_fmt(o['seq_clip'])}" if m == "gspo" else "")
            )
        lines.append("        seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in r["times"].items()))
    if len(results) > 1:
        lines.append(
            "mean over seeds, side by side (train reward per step; held-out reward, its spread between seeds):"
        )
        for m in METHODS:
            curves = [r["methods"][m]["curve"] for r in results]
            finals = [r["methods"][m]["final"]["reward"] for r in results]
            mean_curve = [statistics.mean(c[i] for c in curves) for i in range(min(map(len, curves)))]
            lines.append(
                f"  {m:<7} {_fmt(mean_curve)}  held out {statistics.mean(finals):.3f} "
                f"(spread {max(finals) - min(finals):.3f})"
            )
        bases = [r["base"]["reward"] for r in results]
        lines.append(f"  base    held out {statistics.mean(bases):.3f} (spread {max(bases) - min(bases):.3f})")
    print("\n".join(lines))
    if not args.no_write:
        append_result("loss-options-cpu.txt", lines)


if __name__ == "__main__":  # vLLM-related code must be guarded (spawned processes re-import __main__)
    main()
