"""Run reports: history.jsonl per step, the metrics table, the reward curve, the eval markdown, W&B offline."""

import io
import math
import os

from art_core.evaluate import EvalReport
from art_core.reporting import (
    eval_markdown,
    log_wandb,
    metrics_table,
    read_history,
    reward_curve,
    reward_curve_png,
)
from art_core.storage import Storage
from art_core.store import ModelStore


def test_history_records_merge_into_one_row_per_step(tmp_path):
    s = Storage(str(tmp_path))
    store = ModelStore(s, "p", "m")
    assert store.record(1, {"reward": 0.25, "train/loss": 1.5}) == {"train/reward": 0.25, "train/loss": 1.5}
    store.record(2, {"reward": 0.5})
    store.record(2, {"reward": 0.4, "pass^1": 0.3}, prefix="val/")
    assert [r["step"] for r in read_history(s, "p", "m")] == [1, 2, 2]
    rows = metrics_table(read_history(s, "p", "m"))
    assert rows == [
        {"step": 1, "train/reward": 0.25, "train/loss": 1.5},
        {"step": 2, "train/reward": 0.5, "val/reward": 0.4, "val/pass^1": 0.3},
    ]
    assert store.step_metrics(2, prefix="val/") == {"val/reward": 0.4, "val/pass^1": 0.3}


def test_reward_curve_is_a_png_of_each_measured_reward():
    from PIL import Image

    png = reward_curve_png([{"step": 1, "train/reward": 0.1}, {"step": 2, "train/reward": 0.3, "val/reward": 0.2}])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    img = Image.open(io.BytesIO(png)).convert("RGB")
    assert img.size == (600, 350)
    train, val = (31, 119, 180), (255, 127, 14)  # the markers' colours
    assert {train, val} <= set(img.getdata())
    only_train = Image.open(io.BytesIO(reward_curve_png([{"step": 1, "train/reward": 0.1, "val/reward": math.nan}])))
    assert train in set(only_train.convert("RGB").getdata()) and val not in set(only_train.convert("RGB").getdata())
    assert reward_curve_png([])[:8] == b"\x89PNG\r\n\x1a\n"  # before the first step: empty axes


def test_reward_curve_is_drawn_again_only_when_what_it_shows_changed(tmp_path):
    """A resumed or fully cached run adds no reward: its report keeps the stored PNG instead of redrawing it."""
    s = Storage(str(tmp_path))
    path = s.join("p", "models", "m", "reports", "reward_curve.png")
    rows = [{"step": 1, "train/reward": 0.1, "train/loss": 2.0}, {"step": 2, "train/reward": 0.3}]

    def drawn(rows, title="p/m") -> bool:
        """Whether reward_curve wrote a new file (a drawn PNG replaces the old one: a new inode)."""
        before = os.stat(path).st_ino if os.path.exists(path) else None
        png = reward_curve(s, path, rows, title=title)
        with open(path, "rb") as f:
            assert f.read() == png and png[:8] == b"\x89PNG\r\n\x1a\n"
        return os.stat(path).st_ino != before

    assert drawn(rows)
    assert not drawn(rows)  # the same rewards: the stored PNG is returned as is
    assert not drawn([{**rows[0], "train/loss": 1.0}, rows[1]])  # the loss is not on the curve
    assert drawn([*rows, {"step": 2, "val/reward": 0.2}])  # a new point
    assert drawn([*rows, {"step": 2, "val/reward": 0.2}], title="another title")
    with open(path, "rb") as f:
        png = f.read()
    with open(path, "wb") as f:  # cut short (its key is near the start): drawn again
        f.write(png[:-12])
    assert drawn([*rows, {"step": 2, "val/reward": 0.2}], title="another title")
    with open(path, "wb") as f:  # a PNG that does not say what it was drawn from
        f.write(reward_curve_png(rows, title="p/m"))
    assert drawn(rows)


def test_eval_markdown_shows_baseline_pass_k_and_best_step():
    base = EvalReport(model="tiny", step=0, split="val", scenarios=4, trials=2, reward=0.1, pass_k={1: 0.0, 2: 0.0})
    r1 = EvalReport(model="a@1", step=1, split="val", scenarios=4, trials=2, reward=0.3, pass_k={1: 0.25, 2: 0.1})
    r2 = EvalReport(model="a@2", step=2, split="val", scenarios=4, trials=2, reward=0.2, pass_k={1: 0.2, 2: 0.0})
    md = eval_markdown([r1, r2], baseline=base)
    assert "| tiny (baseline) | 0 |" in md and "pass^2" in md
    assert "**0.300**" in md and "**0.200**" not in md
    assert "+0.100" in md  # last step vs baseline


def test_eval_markdown_leads_with_write_pass_1_and_shows_each_category_and_never_acts():
    from art_core.evaluate import CategoryScore

    def report(model, step, write, refuse, reward):
        by_category = {
            "write": CategoryScore(scenarios=3, reward=write, pass_k={1: write, 2: write / 2}),
            "refuse": CategoryScore(scenarios=1, reward=refuse, pass_k={1: refuse, 2: refuse}),
        }
        return EvalReport(
            model=model,
            step=step,
            split="val",
            scenarios=4,
            trials=2,
            reward=reward,
            pass_k={1: reward, 2: reward},
            by_category=by_category,
        )

    base, never = report("tiny", 0, 0.0, 0.5, 0.125), report("never-acts", 0, 0.0, 1.0, 0.25)
    steps = [report("a@1", 1, 1 / 3, 0.0, 0.25), report("a@2", 2, 0.0, 1.0, 0.5)]  # a@2: best reward, no writes
    md = eval_markdown(steps, baseline=base, more_baselines=[never])
    assert "Headline: **write pass^1**" in md
    assert "| model | step | split | scenarios x trials | write pass^1 | reward | pass^1 | pass^2 |" in md
    assert "| never-acts (baseline) | - | val | 4 x 2 | 0.000 | 0.250 |" in md
    assert "| a@1 | 1 | val | 4 x 2 | **0.333** | 0.250 |" in md  # the best step by the headline, not the reward
    assert "| a@2 | 2 | val | 4 x 2 | 0.000 | 0.500 |" in md
    assert "+0.000 write pass^1, +0.375 mean reward" in md  # last step vs the base model
    assert "## Per task category" in md and "never-acts: a policy in code" in md
    assert "| a@1 | write | 3 | 0.333 | 0.333 | 0.167 |" in md and "| never-acts (baseline) | refuse | 1 |" in md
    assert "write pass^1" not in eval_markdown([EvalReport(**{**steps[0].model_dump(), "by_category": {}})])


def test_wandb_logs_offline_without_a_key(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    from art_core.trajectories import Trajectory, TrajectoryGroup

    sample = TrajectoryGroup(
        [Trajectory(messages_and_choices=[{"role": "user", "content": "B2"}], reward=1.0)],
        metadata={"scenario_id": "s1"},
    )
    run_dir = log_wandb(
        "p",
        "m",
        [{"step": 1, "train/reward": 0.2}, {"step": 2, "train/reward": 0.4}],
        sample_groups=[(2, sample)],
        directory=str(tmp_path),
    )
    assert run_dir.startswith(str(tmp_path)) and "offline-run" in run_dir
    assert os.path.exists(run_dir)
