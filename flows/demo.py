"""The demo: a few steps of the train flow on the tiny model, local Prefect, local storage.

    python -m flows.demo                  # or `make demo`; --steps 5, --storage ./.art, --fresh ...

Builds the tiny offline model in ./.models/tiny if it is missing, starts a vLLM server for it, trains
the model on tic-tac-toe for a few GRPO steps with every step a Prefect task (results cached in
./.art/.prefect/results), and ends with the reward per step, where the checkpoints and reports are,
and how to look at the run in the Prefect UI. Running it again finishes from the cache in seconds.

Without PREFECT_API_URL, Prefect starts a temporary local server for the run and keeps its database
in ~/.prefect, so `prefect server start` afterwards shows the runs; with PREFECT_API_URL set (a server
you started), the run appears there live.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Train the tiny model on tic-tac-toe for a few steps with the Prefect train flow.")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--storage", default="./.art", help="storage root: a folder or s3://bucket/prefix")
    p.add_argument("--model-dir", default="./.models/tiny", help="where the tiny model is (built if missing)")
    p.add_argument("--project", default="demo")
    p.add_argument("--model", default="agent-001")
    p.add_argument("--fresh", action="store_true", help="delete this model's checkpoints and cached work first")
    args = p.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from art_core.testing.tiny_model import build_tiny_model

    if not os.path.exists(os.path.join(args.model_dir, "config.json")):
        print(f"building the tiny model in {args.model_dir} ...")
        build_tiny_model(args.model_dir)

    from flows.config import RunConfig

    config = RunConfig(
        project=args.project, model=args.model, base_model=args.model_dir, storage_url=args.storage,
        environment={"name": "tic-tac-toe", "options": {"constrain_moves": True}},
        steps=args.steps, groups_per_step=4, group_size=8, train={"learning_rate": 2e-3, "old_logprobs": "recompute"},
        sampling={"max_tokens": 8}, eval_every=args.steps, eval={"scenarios": 8, "trials": 2},
    )  # fmt: skip
    if args.fresh and "://" not in config.storage_url:
        shutil.rmtree(os.path.join(config.storage_url, config.project, "models", config.model), ignore_errors=True)
        shutil.rmtree(os.path.join(config.storage_url, ".prefect"), ignore_errors=True)
    api = os.environ.get("PREFECT_API_URL")
    print(f"Prefect: {api or 'a temporary local server (database in ~/.prefect)'}; storage: {config.storage_url}")
    print("a vLLM server for the tiny model starts when the first rollout needs it (20 s or more on CPU) ...")

    from flows.train import train
    from art_core.serving import PROCESS_POOL

    t0 = time.perf_counter()
    try:
        summary = train(config)
    finally:
        PROCESS_POOL.close()  # the vLLM server this process started for the rollouts
    _print_summary(config, summary, time.perf_counter() - t0, api)


def _print_summary(config, summary, seconds: float, api: str | None) -> None:
    from flows.reporting import artifact_key

    key = artifact_key(config.project, config.model)
    print(f"\n== {config.project}/{config.model}: {config.steps} steps in {seconds:.0f} s ==")
    print("step  train reward  checkpoint")
    for step in sorted(summary.rewards):
        note = "" if step in summary.trained_steps else "  (already there: not trained again)"
        print(f"{step:>4}  {summary.rewards[step]:>12.3f}  {summary.checkpoints.get(step, '-')}{note}")
    for step, reward in sorted(summary.evaluations.items()):
        print(f"eval step {step} on {config.eval.split}: reward {reward:.3f}")
    print("\nreports:")
    for name, path in summary.report_paths.items():
        print(f"  {name:<13} {path}")
    print(f"\nPrefect artifacts: {key}-metrics (table), {key}-reward-curve (PNG), {key}-eval (markdown)")
    ui = api.removesuffix("/api") if api else "http://127.0.0.1:4200"
    print("\nopen the UI:")
    if not api:
        print("  .venv/bin/prefect server start       # then browse", ui)
    else:
        print(f"  browse {ui}")
    print("  runs, task states (Cached on a re-run) and artifacts are under Runs and Artifacts")
    print("\nrun `python -m flows.demo` again: it finishes from the cache without rolling out or training;")
    print("`--steps 5` continues from the last checkpoint. Deployments and workers: deployments/README.md")


if __name__ == "__main__":  # vLLM-related code must be guarded (spawned processes re-import __main__)
    main()
