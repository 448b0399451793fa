"""Metrics a run leaves behind: history.jsonl per step, a table of it, the reward curve, an eval report, W&B.

history.jsonl holds one record per (step, phase): `{"step": 3, "recorded_at": ..., "train/reward": 0.4,
"train/loss": ...}` or `{"step": 3, "val/reward": ..., "val/pass^1": ...}`, the format ART's
`delete_checkpoints(best_checkpoint_metric="val/reward")` reads.

    rows = metrics_table(read_history(storage, "demo", "agent-001"))
    png = reward_curve_png(rows)                 # bytes of a PNG (matplotlib, no display needed)
    png = reward_curve(storage, path, rows)      # the same, drawn only when the stored one shows other data
    md = eval_markdown(reports)                  # markdown table of reward and pass^k per step
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import json
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


_CURVES = (("train/reward", "o-"), ("val/reward", "s--"))


def _curve_points(rows: list[dict[str, Any]]) -> dict[str, list[tuple[Any, Any]]]:
    """What the reward curve shows: (step, value) per curve, NaN and non-numbers left out."""
    return {
        key: [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
        for key, _ in _CURVES
    }


def reward_curve_png(rows: list[dict[str, Any]], title: str = "reward per step", source: str | None = None) -> bytes:
    """A PNG of train/reward (and val/reward where measured) against step.

    `source`: a text stored in the PNG (chunk `art-source`), so `reward_curve` knows what it was drawn from."""
    import matplotlib

    matplotlib.use("Agg")  # no display on workers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    points = _curve_points(rows)
    for key, style in _CURVES:
        if points[key]:
            ax.plot(*zip(*points[key]), style, label=key)
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
    fig.savefig(buf, format="png", metadata={_SOURCE_CHUNK: source} if source else None)
    plt.close(fig)
    return buf.getvalue()


_SOURCE_CHUNK = "art-source"
_PNG_END = b"IEND\xaeB`\x82"  # the last chunk of a whole PNG


def reward_curve(storage: Storage, path: str, rows: list[dict[str, Any]], title: str = "reward per step") -> bytes:
    """The reward curve PNG at `path` in storage: the stored one when it shows exactly these points and this
    title, drawn by this code; otherwise drawn (`reward_curve_png`) and written there. Returns its bytes.

    A run that adds no step (a resumed or fully cached run) shows the same points, and redrawing them cost
    a quarter of such a run, and a second of importing matplotlib in a fresh process. The key is stored
    in the PNG itself: a PNG written by anything else, cut short, or drawn from other rows is drawn again.

    >>> png = reward_curve(Storage("/tmp/art"), "/tmp/art/demo/models/a/reports/reward_curve.png", rows)  # doctest: +SKIP
    """
    shown = [title, _curve_points(rows), _CURVES, _drawing_code()]
    key = hashlib.sha256(json.dumps(shown, sort_keys=True, default=str).encode()).hexdigest()
    try:
        with storage.fs.open(path, "rb") as f:
            stored = f.read()
    except FileNotFoundError:
        stored = b""
    if stored.endswith(_PNG_END) and f"{_SOURCE_CHUNK}\0{key}".encode() in stored:
        return stored
    png = reward_curve_png(rows, title=title, source=key)
    _write_bytes(storage, path, png)
    return png


@functools.cache
def _drawing_code() -> str:
    """The source of the drawing code, so a PNG drawn by an older version of it is drawn again."""
    try:
        return "".join(inspect.getsource(f) for f in (reward_curve_png, _curve_points))
    except OSError:  # no source at hand (byte code only): draw again once per process, never show a stale one
        return os.urandom(16).hex()


def _write_bytes(storage: Storage, path: str, data: bytes) -> None:
    """Write a whole file; on a local disk via a temporary name and a rename, so readers never see half."""
    if not storage.is_local:
        with storage.fs.open(path, "wb") as f:
            f.write(data)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


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
