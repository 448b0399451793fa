"""Metrics a run leaves behind: history.jsonl per step, a table of it, the reward curve, an eval report, W&B.

history.jsonl holds one record per (step, phase): `{"step": 3, "recorded_at": ..., "train/reward": 0.4,
"train/loss": ...}` or `{"step": 3, "val/reward": ..., "val/pass^1": ...}`, the format ART's
`delete_checkpoints(best_checkpoint_metric="val/reward")` reads.

    rows = metrics_table(read_history(storage, "demo", "agent-001"))
    png = reward_curve_png(rows)                 # bytes of a PNG (matplotlib, no display needed)
    md = eval_markdown(reports)                  # markdown table of reward and pass^k per step
"""

from __future__ import annotations

import io
import math
import os
from typing import Any, Iterable

from art_core.storage import Storage


def history_path(storage: Storage, project: str, name: str) -> str:
    return storage.model(project, name).history


def read_history(storage: Storage, project: str, name: str) -> list[dict[str, Any]]:
    """Every record of history.jsonl, in the order written ([] before the first step)."""
    return storage.model(project, name).read_history()


def record_metrics(
    storage: Storage, project: str, name: str, step: int, metrics: dict[str, Any], prefix: str = "train/"
) -> dict[str, Any]:
    """Append one record for `step` (keys get `prefix` unless they already carry a '/'); returns its metrics.

    >>> record_metrics(Storage("/tmp/art"), "demo", "agent", 1, {"loss": 0.5})
    {'train/loss': 0.5}
    """
    return storage.model(project, name).record(step, metrics, prefix)


def step_metrics(storage: Storage, project: str, name: str, step: int, prefix: str = "train/") -> dict[str, Any]:
    """The metrics recorded for `step` whose keys start with `prefix` (the latest record wins)."""
    return storage.model(project, name).step_metrics(step, prefix)


def metrics_table(history: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per step, merging that step's records (later ones win), sorted by step; no timestamps."""
    rows: dict[int, dict[str, Any]] = {}
    for rec in history:
        step = int(rec["step"])
        row = rows.setdefault(step, {"step": step})
        row.update({k: v for k, v in rec.items() if k not in ("step", "recorded_at")})
    return [rows[s] for s in sorted(rows)]


def _column_rank(name: str) -> tuple[int, str]:
    """Reward first (train, then each split), then pass^k, then the other reward figures, then the rest."""
    phase, _, metric = name.rpartition("/")
    phase_rank = {"train": 0, "val": 1, "test": 2}.get(phase, 3)
    if metric == "reward":
        return (0, f"{phase_rank}")
    if metric.startswith("pass^"):
        return (1, f"{phase_rank}-{metric}")
    if metric.startswith("reward"):
        return (2, f"{phase_rank}-{metric}")
    return (3, name)


def display_table(rows: list[dict[str, Any]], digits: int = 3) -> list[dict[str, Any]]:
    """`metrics_table` rows for people: step, then reward columns, then the rest; floats rounded to `digits`.

    >>> display_table([{"step": 1, "train/loss": 0.123456, "train/reward": 0.4567891, "val/pass^1": 0.25}])
    [{'step': 1, 'train/reward': 0.457, 'val/pass^1': 0.25, 'train/loss': 0.123}]
    """
    columns = sorted({k for r in rows for k in r} - {"step"}, key=_column_rank)

    def show(v: Any) -> Any:
        if isinstance(v, float) and math.isfinite(v):
            return round(v, digits) if abs(v) >= 10**-digits or v == 0 else float(f"{v:.{digits}g}")
        return v

    return [{"step": r.get("step"), **{c: show(r.get(c)) for c in columns}} for r in rows]


def reward_curve_png(rows: list[dict[str, Any]], title: str = "reward per step") -> bytes:
    """A PNG of train/reward (and val/reward where measured) against step."""
    import matplotlib

    matplotlib.use("Agg")  # no display on workers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    for key, style in (("train/reward", "o-"), ("val/reward", "s--")):
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
        if pts:
            ax.plot(*zip(*pts), style, label=key)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # train/reward at step N is the reward of the rollouts step N was trained on (sampled from step N - 1).
    ax.set_xlabel("step (checkpoint)")
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def eval_markdown(reports: list[Any], title: str = "Evaluation", baseline: Any | None = None) -> str:
    """A markdown report: one row per evaluated step (EvalReport objects or dicts), best reward in bold."""
    reports = [r if isinstance(r, dict) else r.model_dump() for r in reports]
    if baseline is not None:
        baseline = baseline if isinstance(baseline, dict) else baseline.model_dump()
    all_rows = ([baseline] if baseline else []) + reports
    if not all_rows:
        return f"# {title}\n\nNothing was evaluated.\n"
    ks = sorted({int(k) for r in all_rows for k in r.get("pass_k", {})})
    best = max(r["reward"] for r in reports) if reports else None
    head = "| model | step | split | scenarios x trials | reward |" + "".join(f" pass^{k} |" for k in ks)
    lines = [f"# {title}", "", head, "|" + "---|" * (5 + len(ks))]
    for r in all_rows:
        reward = f"{r['reward']:.3f}"
        if r is not baseline and best is not None and r["reward"] == best:
            reward = f"**{reward}**"
        passes = "".join(f" {r['pass_k'].get(k, r['pass_k'].get(str(k), float('nan'))):.3f} |" for k in ks)
        label = f"{r['model']} (baseline)" if r is baseline else r["model"]
        lines.append(f"| {label} | {r['step']} | {r['split']} | {r['scenarios']} x {r['trials']} | {reward} |{passes}")
    if baseline and reports:
        delta = reports[-1]["reward"] - baseline["reward"]
        lines += ["", f"Last step vs baseline: {delta:+.3f} mean reward."]
    return "\n".join(lines) + "\n"


def log_wandb(
    project: str,
    name: str,
    rows: list[dict[str, Any]],
    sample_groups: list[Any] | None = None,
    directory: str | None = None,
) -> str:
    """Log the metrics table (and sample trajectories) to W&B; offline when WANDB_API_KEY is unset.

    Returns the run's local directory. The key is read by wandb from the environment, never passed here.
    """
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    mode = "online" if os.environ.get("WANDB_API_KEY") and os.environ.get("WANDB_MODE") != "offline" else "offline"
    directory = directory or os.environ.get("WANDB_DIR") or os.getcwd()
    os.makedirs(directory, exist_ok=True)
    run = wandb.init(project=project, name=name, dir=directory, mode=mode, reinit="finish_previous")
    try:
        for row in rows:
            run.log({k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float))}, step=row["step"])
        if sample_groups:
            table = wandb.Table(columns=["step", "scenario", "reward", "last_message"])
            for step, group in sample_groups:
                for t in group.trajectories:
                    msgs = t.messages()
                    table.add_data(
                        step,
                        str(group.metadata.get("scenario_id", "")),
                        t.reward,
                        str(msgs[-1].get("content", ""))[:500] if msgs else "",
                    )
            run.log({"samples": table})
        return run.dir
    finally:
        run.finish()
