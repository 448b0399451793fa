"""Run reports as Prefect artifacts and files in storage: metrics table, reward curve, evaluation report.

The content comes from art_core.reporting (no Prefect there); this module only publishes it. Files go
to `{model}/reports/` in storage so they outlive the Prefect database; artifacts link to them.
"""

from __future__ import annotations

import base64
import contextvars
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from art_core.evaluate import EvalReport
from art_core.reporting import display_table, eval_markdown, log_wandb, metrics_table, read_history, reward_curve
from art_core.store import ModelRef


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")


def eval_reports(ref: ModelRef, split: str = "val") -> list[EvalReport]:
    """Every readable stored evaluation of the model on `split`, by step (a damaged file is named in a warning,
    skipped)."""
    out = []
    for record in ref.store().read_evals(split):
        try:
            out.append(EvalReport.model_validate(record))
        except ValueError:
            continue
    return out


def publish_run_report(ref: ModelRef, wandb: bool = True, split: str = "val") -> dict[str, str]:
    """Write the reward curve, metrics table and eval report (the evaluations on `split`, the run's eval split)
    to storage and as artifacts; returns their paths."""
    storage = ref.storage()
    rows = metrics_table(read_history(storage, ref.project, ref.model))
    store = ref.store()
    paths = {
        "reward_curve": store.reports("reward_curve.png"),
        "eval_report": store.reports("eval.md"),
        "history": store.history,
    }
    # Drawn again only when the history shows other rewards (a resumed or cached run adds none).
    png = reward_curve(storage, paths["reward_curve"], rows, title=f"{ref.project}/{ref.model}: reward per step")
    evals = eval_reports(ref, split)
    report = eval_markdown(evals, title=f"{ref.model}: evaluation")
    storage.write_text(paths["eval_report"], report)

    key = artifact_key(ref.project, ref.model)
    image = base64.b64encode(png).decode()
    _at_once(
        # Reward first and 3 decimals: the UI shows columns in this order, and the reward is what users look for.
        lambda: create_table_artifact(
            key=f"{key}-metrics",
            table=display_table(rows),
            description=f"Metrics per step of {ref.model} (history.jsonl at {paths['history']})",
        ),
        lambda: create_markdown_artifact(
            key=f"{key}-reward-curve",
            markdown=(
                f"# Reward per step\n\n![reward curve](data:image/png;base64,{image})\n\n"
                f"PNG: `{paths['reward_curve']}`\n"
            ),
            description=f"Reward curve of {ref.model}",
        ),
        lambda: create_markdown_artifact(
            key=f"{key}-eval", markdown=report, description=f"Evaluation report of {ref.model}"
        ),
    )
    if wandb:
        paths["wandb"] = log_wandb(ref.project, ref.model, rows, sample_groups=_samples(ref, rows))
    return paths


def _at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls in threads at the same time, each in a copy of this run's context (the artifacts belong
    to the flow run); their results in order, or the first error. Three artifacts are three round trips to
    the Prefect API: a fully cached re-run spent a fifth of its time waiting on them one after another."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(contextvars.copy_context().run, call) for call in calls]
        return [f.result() for f in futures]


def _samples(ref: ModelRef, rows: list[dict], groups: int = 2) -> list:
    """(step, group) pairs from the last trained step's rollouts, for W&B's sample table."""
    trained = [r["step"] for r in rows if "train/reward" in r]
    if not trained:
        return []
    store = ref.store()
    stored = store.read_groups(store.trajectories("train", trained[-1] - 1), damaged="warn") or []  # None: missing
    return [(trained[-1], g) for g in stored[:groups]]
