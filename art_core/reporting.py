"""Metrics a run leaves behind: history.jsonl per step, a table of it, the reward curve, an eval report, W&B.

history.jsonl holds one record per (step, phase): `{"step": 3, "recorded_at": ..., "train/reward": 0.4,
"train/loss": ...}` or `{"step": 3, "val/reward": ..., "val/pass^1": ...}`, the format ART's
`delete_checkpoints(best_checkpoint_metric="val/reward")` reads.

    rows = metrics_table(read_history(storage, "demo", "agent-001"))
    png = reward_curve_png(rows)                 # bytes of a PNG (Pillow, no display needed)
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
from art_core.store import ModelStore


def read_history(storage: Storage, project: str, name: str) -> list[dict[str, Any]]:
    """Every record of history.jsonl, in the order written ([] before the first step)."""
    return ModelStore(storage, project, name).read_history()


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


# What the reward curve shows: key, colour, joined, marker (matplotlib's first two colours). The train reward is
# measured at every step, so its points are joined; evaluations are sparse (step 0 and the last, every k steps),
# and a line between two of them would draw a rise nobody measured: they are points only.
_CURVES = (("train/reward", (31, 119, 180), True, "o"), ("val/reward", (255, 127, 14), False, "s"))
_SIZE, _SCALE = (600, 350), 3  # pixels of the PNG; drawn this many times larger, then scaled down (smooth edges)


def _curve_points(rows: list[dict[str, Any]]) -> dict[str, list[tuple[Any, Any]]]:
    """What the reward curve shows: (step, value) per curve, NaN, infinities and non-numbers left out."""
    return {
        key: [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        for key, *_ in _CURVES
    }


def reward_curve_png(rows: list[dict[str, Any]], title: str = "reward per step", source: str | None = None) -> bytes:
    """A PNG of train/reward (and val/reward where measured) against step.

    Drawn with Pillow, which the trainer has loaded already: importing matplotlib for this one chart cost
    a second per process, a tenth of a short run. `source`: a text stored in the PNG (chunk `art-source`),
    so `reward_curve` knows what it was drawn from.

    >>> reward_curve_png([{"step": 1, "train/reward": 0.25}, {"step": 2, "train/reward": 0.5}])[:4]
    b'\\x89PNG'
    """
    from PIL import Image, ImageDraw, ImageFont
    from PIL.PngImagePlugin import PngInfo

    k = _SCALE
    width, height = _SIZE[0] * k, _SIZE[1] * k
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    font, small = ImageFont.load_default(size=15 * k), ImageFont.load_default(size=12 * k)
    points = _curve_points(rows)
    shown = [p for ps in points.values() for p in ps]
    # train/reward at step N is the reward of the rollouts step N was trained on (sampled from step N - 1).
    xs, xticks = _axis([x for x, _ in shown], integer=True)
    ys, yticks = _axis([y for _, y in shown])
    ylabels = [_tick_label(t, yticks) for t in yticks]
    left = k * 38 + max(draw.textlength(t, font=small) for t in ylabels)
    box = (left, k * 34, width - k * 16, height - k * 50)  # the axes: x0, y0, x1, y1

    def at(x: float, y: float) -> tuple[float, float]:
        return (
            box[0] + (x - xs[0]) / (xs[1] - xs[0]) * (box[2] - box[0]),
            box[3] - (y - ys[0]) / (ys[1] - ys[0]) * (box[3] - box[1]),
        )

    grey, tick = (230, 230, 230), 4 * k
    for t in xticks:
        x = at(t, ys[0])[0]
        draw.line([(x, box[1]), (x, box[3])], fill=grey, width=k)
        draw.line([(x, box[3]), (x, box[3] + tick)], fill="black", width=k)
        draw.text((x, box[3] + tick + 2 * k), _tick_label(t, xticks), fill="black", font=small, anchor="mt")
    for t, label in zip(yticks, ylabels):
        y = at(xs[0], t)[1]
        draw.line([(box[0], y), (box[2], y)], fill=grey, width=k)
        draw.line([(box[0] - tick, y), (box[0], y)], fill="black", width=k)
        draw.text((box[0] - tick - 3 * k, y), label, fill="black", font=small, anchor="rm")
    draw.rectangle(box, outline="black", width=k)
    for key, colour, joined, marker in _CURVES:
        line = [at(x, y) for x, y in points[key]]
        for a, b in zip(line, line[1:]) if joined else ():
            _segment(draw, a, b, colour, 2 * k)
        for x, y in line:
            r = (4 if joined else 5) * k
            shape = draw.ellipse if marker == "o" else draw.rectangle
            shape((x - r, y - r, x + r, y + r), fill=colour)
    draw.text(((box[0] + box[2]) / 2, k * 10), title, fill="black", font=font, anchor="mt")
    draw.text(((box[0] + box[2]) / 2, height - k * 8), "step (checkpoint)", fill="black", font=font, anchor="md")
    label = Image.new("RGB", (int(draw.textlength("reward", font=font)) + 2 * k, 20 * k), "white")
    ImageDraw.Draw(label).text((k, 0), "reward", fill="black", font=font)
    img.paste(label.rotate(90, expand=True), (k * 6, int((box[1] + box[3] - label.width) / 2)))
    _legend(draw, box, [c for c in _CURVES if points[c[0]]], [at(x, y) for x, y in shown], small, k)

    info = PngInfo()
    if source:
        info.add_text(_SOURCE_CHUNK, source)
    buf = io.BytesIO()
    # Each k x k block averaged: the supersampled edges come out smooth, 10x faster than a Lanczos resize.
    img.reduce(k).save(buf, format="PNG", pnginfo=info, optimize=False)
    return buf.getvalue()


def _axis(values: list[float], integer: bool = False, ticks: int = 6) -> tuple[tuple[float, float], list[float]]:
    """An axis' limits (the values with a 5% margin) and round tick values inside them (1, 2, 2.5 or 5 times a
    power of ten; whole numbers only for steps)."""
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi - lo < 1e-12:
        pad = 0.5 if integer else max(abs(lo) * 0.1, 0.05)
        lo, hi = lo - pad, hi + pad
    margin = (hi - lo) * 0.05
    lo, hi = lo - margin, hi + margin
    raw = (hi - lo) / (ticks - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * 0.999)
    if integer:
        step = max(1, math.ceil(step))
    first = math.ceil(lo / step - 1e-9)
    return (lo, hi), [i * step for i in range(first, math.floor(hi / step + 1e-9) + 1)]


def _tick_label(value: float, ticks: list[float]) -> str:
    """`value` with as many decimals as the ticks' spacing needs."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = 0
    while decimals < 6 and abs(round(step, decimals) - step) > 1e-9:
        decimals += 1
    return f"{value:.{decimals}f}"


def _segment(draw: Any, a: tuple[float, float], b: tuple[float, float], colour: Any, width: int, dash=None) -> None:
    """A line from a to b, solid or dashed (`dash`: pixels drawn, pixels skipped)."""
    if dash is None:
        draw.line([a, b], fill=colour, width=width)
        return
    length = math.dist(a, b)
    at = 0.0
    while at < length:
        end = min(at + dash[0], length)
        draw.line([_along(a, b, at / length), _along(a, b, end / length)], fill=colour, width=width)
        at = end + dash[1]


def _along(a: tuple[float, float], b: tuple[float, float], f: float) -> tuple[float, float]:
    return a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f


def _legend(draw: Any, box: tuple, curves: list, points: list[tuple[float, float]], font: Any, k: int) -> None:
    """A legend in the corner of the axes that covers the fewest points (matplotlib's 'best', simplified)."""
    if not curves:
        return
    row, pad = 18 * k, 6 * k
    w = 34 * k + max(draw.textlength(c[0], font=font) for c in curves) + 2 * pad
    h = row * len(curves) + 2 * pad
    corners = [
        (box[2] - w - pad, box[1] + pad),  # upper right first, as matplotlib tries
        (box[0] + pad, box[1] + pad),
        (box[0] + pad, box[3] - h - pad),
        (box[2] - w - pad, box[3] - h - pad),
    ]
    x0, y0 = min(corners, key=lambda c: sum(c[0] <= x <= c[0] + w and c[1] <= y <= c[1] + h for x, y in points))
    draw.rectangle((x0, y0, x0 + w, y0 + h), fill="white", outline=(204, 204, 204), width=k)
    for i, (key, colour, joined, marker) in enumerate(curves):
        y = y0 + pad + row * i + row / 2
        if joined:
            _segment(draw, (x0 + pad, y), (x0 + pad + 24 * k, y), colour, 2 * k)
        r, cx = (4 if joined else 5) * k, x0 + pad + 12 * k
        (draw.ellipse if marker == "o" else draw.rectangle)((cx - r, y - r, cx + r, y + r), fill=colour)
        draw.text((x0 + pad + 32 * k, y), key, fill="black", font=font, anchor="lm")


_SOURCE_CHUNK = "art-source"
_PNG_END = b"IEND\xaeB`\x82"  # the last chunk of a whole PNG
_POLICIES_IN_CODE = ("never-acts", "expert")  # art_core.evaluate.NEVER_ACTS, EXPERT: reports without a checkpoint


def reward_curve(storage: Storage, path: str, rows: list[dict[str, Any]], title: str = "reward per step") -> bytes:
    """The reward curve PNG at `path` in storage: the stored one when it shows exactly these points and this
    title, drawn by this code; otherwise drawn (`reward_curve_png`) and written there. Returns its bytes.

    A run that adds no step (a resumed or fully cached run) shows the same points: redrawing them cost a
    quarter of such a run when matplotlib drew them. The key is stored in the PNG itself: a PNG written by
    anything else, cut short, or drawn from other rows, title or code is drawn again.

    >>> png = reward_curve(Storage("/tmp/art"), "/tmp/art/demo/models/a/reports/reward_curve.png", rows)  # doctest: +SKIP
    """
    shown = [title, _curve_points(rows), _CURVES, _SIZE, _SCALE, _drawing_code()]
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
        drawing = (reward_curve_png, _curve_points, _axis, _tick_label, _segment, _along, _legend)
        return "".join(inspect.getsource(f) for f in drawing)
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


def eval_markdown(
    reports: list[Any], title: str = "Evaluation", baseline: Any | None = None, more_baselines: list[Any] = ()
) -> str:
    """A markdown report: one row per evaluated step (EvalReport objects or dicts), baselines first, best in bold.

    Where the environment has task categories (reports with `by_category`), the headline, pass^1 on tasks that
    need a write, leads the table and picks the best step, and a second table gives reward and pass^k per
    category for every row. The headline carries its standard error across tasks (± s.e.), and the last step's
    gain over the baseline a paired one. `more_baselines`: rows shown as baselines besides `baseline` (the
    never-acts policy, the floor; the domain's expert, the ceiling).
    """
    reports = [_as_dict(r) for r in reports]
    baselines = [_as_dict(b) for b in ([baseline] if baseline is not None else []) + list(more_baselines)]
    all_rows = baselines + reports
    if not all_rows:
        return f"# {title}\n\nNothing was evaluated.\n"
    ks = sorted({int(k) for r in all_rows for k in r.get("pass_k", {})})
    headline = next((_headline(r)["metric"] for r in all_rows if r.get("by_category")), None)

    def lead(r: dict[str, Any]) -> float | None:  # what the best step is picked by
        if headline is None:
            return r["reward"]
        h = _headline(r)
        return h["value"] if h["metric"] == headline else None

    best = max((v for r in reports if (v := lead(r)) is not None), default=None)
    head = "| model | step | split | scenarios x trials |" + (f" {headline} |" if headline else "") + " reward |"
    head += "".join(f" pass^{k} |" for k in ks)
    lines = [f"# {title}", ""]
    if headline:
        lines += [
            f"Headline: **{headline}**, the chance that one try at a task that needs a write succeeds (a policy that never acts scores 0 there).",
            "",
        ]
    lines += [head, "|" + "---|" * (5 + len(ks) + bool(headline))]
    for r in all_rows:
        is_baseline = any(r is b for b in baselines)
        figures = [lead(r)] if headline else []
        figures.append(r["reward"])
        cells = []
        for i, v in enumerate(figures):
            text = "-" if v is None else f"{v:.3f}"
            if i == 0 and not is_baseline and v is not None and v == best:
                text = f"**{text}**"
            if i == 0 and headline and v is not None and _headline(r).get("stderr") is not None:
                text += f" ± {_headline(r)['stderr']:.3f}"  # across the write tasks: how far apart two rows must be
            cells.append(f" {text} |")
        passes = "".join(f" {_pass(r['pass_k'], k):.3f} |" for k in ks)
        label = f"{r['model']} (baseline)" if is_baseline else r["model"]
        step = "-" if r["model"] in _POLICIES_IN_CODE else r["step"]  # a policy in code has no checkpoint
        lines.append(f"| {label} | {step} | {r['split']} | {r['scenarios']} x {r['trials']} |{''.join(cells)}{passes}")
    if baseline is not None and reports:
        delta = reports[-1]["reward"] - baselines[0]["reward"]
        if headline and lead(reports[-1]) is not None and lead(baselines[0]) is not None:
            gain = lead(reports[-1]) - lead(baselines[0])  # type: ignore[operator]
            lines += [
                "",
                f"Last step vs baseline: {gain:+.3f} {headline}{_paired(reports[-1], baselines[0])}, {delta:+.3f} mean reward.",
            ]
        else:
            lines += ["", f"Last step vs baseline: {delta:+.3f} mean reward."]
    if headline:
        lines += ["", *_category_table(all_rows, baselines, ks)]
    if any(r.get("by_kind") for r in all_rows):
        lines += ["", *kind_table(all_rows, baselines)]
    return "\n".join(lines) + "\n"


def _category_table(rows: list[dict[str, Any]], baselines: list[dict[str, Any]], ks: list[int]) -> list[str]:
    """Reward and pass^k per task category, one line per (row, category)."""
    lines = [
        "## Per task category",
        "",
        "write: the task needs a change to the database; refuse: nothing may change, the agent must decline; "
        "answer: nothing may change, the agent must say something. pass^k: the chance that k tries at a task "
        "all succeed, C(c, k) / C(n, k) with c of n tries right, averaged over the category's tasks.",
    ]
    if any(r["model"] == "never-acts" for r in rows):
        lines[-1] += " never-acts: a policy in code that never calls a tool and always declines."
    if any(r["model"] == "expert" for r in rows):
        lines[-1] += (
            " expert: the code that writes the demonstrations, under the same limits (max_turns): a task it fails"
            " here is out of reach for a model that imitates it."
        )
    consent = any((s.get("unasked") is not None) for r in rows for s in (r.get("by_category") or {}).values())
    if consent:
        lines[-1] += (
            " pass^1 with yes: pass^1 counting a try right only if every write it made followed the customer's yes"
            " (the task reward checks the database, not consent); unasked: the share of tries with a write the"
            " customer had not agreed to."
        )
    extra = " pass^1 with yes | unasked |" if consent else ""
    lines += [
        "",
        "| model | category | scenarios | reward |" + "".join(f" pass^{k} |" for k in ks) + extra,
        "|" + "---|" * (4 + len(ks) + 2 * consent),
    ]
    for r in rows:
        label = f"{r['model']} (baseline)" if any(r is b for b in baselines) else r["model"]
        for category, score in (r.get("by_category") or {}).items():
            passes = "".join(f" {_pass(score['pass_k'], k):.3f} |" for k in ks)
            if consent:
                passes += "".join(
                    " - |" if score.get(f) is None else f" {score[f]:.3f} |" for f in ("pass_1_with_yes", "unasked")
                )
            lines.append(f"| {label} | {category} | {score['scenarios']} | {score['reward']:.3f} |{passes}")
    return lines


def kind_table(rows: list[dict[str, Any]], baselines: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: tries right per kind of write task (`EvalReport.by_kind`), one line per kind and one column
    per report (`rows`: report dicts; those in `baselines` are labelled so)."""
    kinds = sorted({k for r in rows for k in r.get("by_kind") or {}})
    labels = [f"{r['model']} (baseline)" if any(r is b for b in baselines) else r["model"] for r in rows]
    lines = [
        "## Per kind of write task",
        "",
        "Tries right of all tries (pass^1 in parentheses), by the writes a task needs (its gold write tools).",
        "",
        "| kind | tasks |" + "".join(f" {label} |" for label in labels),
        "|" + "---|" * (2 + len(rows)),
    ]
    for kind in kinds:
        tasks = max((r["by_kind"][kind]["scenarios"] for r in rows if kind in (r.get("by_kind") or {})), default=0)
        cells = []
        for r in rows:
            score = (r.get("by_kind") or {}).get(kind)
            if score is None:
                cells.append(" - |")
                continue
            tries = score["scenarios"] * r["trials"]
            right = round(_pass(score["pass_k"], 1) * tries)
            cells.append(f" {right}/{tries} ({_pass(score['pass_k'], 1):.3f}) |")
        lines.append(f"| {kind} | {tasks} |{''.join(cells)}")
    return lines


def _paired(after: dict[str, Any], before: dict[str, Any]) -> str:
    """' (± 0.052 paired over 24 tasks)': the standard error of a headline's change, task by task; '' where the
    reports cannot be paired (another metric, no scenario ids kept, fewer than 2 tasks in common)."""
    from art_core.evaluate import EvalReport, paired_difference

    pair = paired_difference(EvalReport.model_validate(after), EvalReport.model_validate(before))
    if pair is None or pair[1] is None:
        return ""
    return f" (± {pair[1]:.3f} paired over {pair[2]} tasks)"


def _as_dict(report: Any) -> dict[str, Any]:
    return report if isinstance(report, dict) else report.model_dump()


def _headline(r: dict[str, Any]) -> dict[str, Any]:
    """A report's headline; a dict stored before reports had one leads with its reward."""
    return r.get("headline") or {"metric": "reward", "value": r["reward"]}


def _pass(pass_k: dict[Any, float], k: int) -> float:
    """pass^k from a dict read back from JSON (keys are strings there) or built here."""
    return pass_k.get(k, pass_k.get(str(k), float("nan")))


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
