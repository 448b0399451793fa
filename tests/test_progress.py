"""Progress fit for a log file: plain lines every few seconds where stderr is no terminal, tqdm's bar on one."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

from art_core.progress import LineProgress, progress_bar

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GATHER = """
import asyncio
from art_core import Trajectory, gather_trajectory_groups

async def rollout(i):
    await asyncio.sleep(0.01 * (i % 50))  # 200 rollouts finishing over half a second
    return Trajectory(reward=i % 2)

asyncio.run(gather_trajectory_groups([[rollout(g * 8 + i) for i in range(8)] for g in range(25)], max_concurrent=40))
"""


def test_a_gather_whose_stderr_is_a_file_logs_lines_not_carriage_returns(tmp_path):
    log = tmp_path / "run.log"
    env = {**os.environ, "ART_PROGRESS_EVERY_S": "0.2", "PYTHONPATH": REPO}
    t0 = time.monotonic()
    with open(log, "wb") as f:
        subprocess.run([sys.executable, "-c", GATHER], stderr=f, stdout=f, env=env, cwd=tmp_path, check=True)
    seconds = time.monotonic() - t0  # an upper bound on the gather's own time (a busy machine stretches it)
    text = log.read_text()
    assert "\r" not in text, text[:500]
    lines = [line for line in text.splitlines() if line.startswith("gather: ")]
    assert 1 <= len(lines) <= seconds / 0.2 + 1, text  # one every 0.2 s at most, and the last: not 225 redraws
    assert lines[-1].startswith("gather: 200/200 trajectory (100%)") and "groups=25/25" in lines[-1]
    assert "exceptions=0" in lines[-1] and "reward=0.5" in lines[-1]


def test_lines_come_at_most_every_interval_and_once_more_at_the_end():
    out = io.StringIO()
    bar = LineProgress(1000, "eval val", "trajectory", file=out, every=3600)
    for _ in range(1000):
        bar.set_postfix({"exceptions": 0}, refresh=False)
        bar.update(1)
    assert out.getvalue() == ""  # within the interval nothing is printed
    bar.close()
    bar.close()
    (line,) = out.getvalue().splitlines()
    assert line.startswith("eval val: 1000/1000 trajectory (100%) after 0s") and line.endswith("exceptions=0")


def test_a_terminal_still_gets_tqdms_bar():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    from tqdm import tqdm

    bar = progress_bar(3, "gather", "trajectory", file=Terminal())
    assert isinstance(bar, tqdm)
    bar.close()
    assert isinstance(progress_bar(3, "gather", file=io.StringIO()), LineProgress)


def test_a_line_says_how_long_is_left_at_the_rate_so_far(monkeypatch):
    import art_core.progress as progress

    now = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    bar = LineProgress(128, "SFT m step 1", "conversation", file=out, every=3600)
    bar.update(4)
    now[0] += 160  # 40 s a conversation: 124 more take 83 minutes
    bar.refresh()
    assert out.getvalue().splitlines()[-1] == "SFT m step 1: 4/128 conversation (3%) after 160s, about 83 min left"

    resumed = LineProgress(100, "gather", "trajectory", initial=50, file=out, every=3600)
    resumed.update(10)
    now[0] += 20  # the 50 counted before the start are not part of the rate: 40 more at 2 s each
    resumed.refresh()
    assert out.getvalue().splitlines()[-1].endswith("after 20s, about 80s left")

    resumed.update(40)
    resumed.close()  # done: nothing is left to estimate
    assert out.getvalue().splitlines()[-1] == "gather: 100/100 trajectory (100%) after 20s"


def test_concurrent_work_says_no_time_left(monkeypatch):
    """A gather's rollouts run at once and finish near the end: its count gives no rate, so its lines (and
    tqdm's bar) leave the time out, while a loop's keep it."""
    import art_core.progress as progress

    now = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    bar = progress_bar(64, "gather", "trajectory", file=out, eta=False)
    bar.update(7)
    now[0] += 390
    bar.refresh()
    assert out.getvalue().splitlines()[-1] == "gather: 7/64 trajectory (11%) after 390s"

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    drawn = progress_bar(64, "gather", "trajectory", file=screen, eta=False)
    drawn.update(7)
    drawn.close()
    assert "7/64" in screen.getvalue() and "<" not in screen.getvalue()  # tqdm draws the time left as "<mm:ss"
    looped = progress_bar(64, "SFT", "conversation", file=Terminal())
    looped.update(7)
    assert "<" in str(looped)
    looped.close()
