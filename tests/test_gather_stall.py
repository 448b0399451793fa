"""A stuck gather says so: when no rollout progressed for the stall setting, a warning names each waiting rollout,
the server it waits on and what that server reported running and waiting (issue 37).

The server is a loopback stand-in for vLLM whose engine holds a request without progress (its /metrics reports it
running, as a wedged engine does, so the request watch does not cut it): the gather's report is what shows it.
"""

from __future__ import annotations

import asyncio
import logging

from art_core.gather import StallReport, gather_trajectories, gather_trajectory_groups, trajectory_group
from art_core.inference.server import openai_client
from art_core.trajectories import Trajectory
from tests.inference.test_stall import LoopbackServer, vllm_metrics


async def _ask(root: str) -> Trajectory:
    async with openai_client(f"{root}/v1", "key", timeout=1200) as client:
        await client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
    return Trajectory(reward=1.0)


async def _think(seconds: float) -> Trajectory:
    await asyncio.sleep(seconds)  # a rollout busy in its own code (a tool, a judge): no request in flight
    return Trajectory(reward=0.0)


def _reports(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "art_core.gather" and r.levelno == logging.WARNING]


async def test_a_stuck_gather_names_the_waiting_rollouts_their_server_and_its_counts(caplog):
    caplog.set_level(logging.WARNING, logger="art_core.gather")
    async with LoopbackServer(vllm_metrics(1, 2), answer_after_s=3.0) as wedged:
        groups = await gather_trajectory_groups(
            [
                [_ask(wedged.root), _think(3.0)],
                # A group's own metadata names its scenario in the report.
                trajectory_group([_ask(wedged.root)], metadata={"scenario_id": "train-7"}),
            ],
            pbar_desc="gather step 4",
            stall_report_s=1.0,
        )
    assert [len(g.trajectories) for g in groups] == [2, 1]  # it was stuck, not dead: everything finished
    reports = _reports(caplog)
    assert reports, "no stall report"
    first = reports[0].splitlines()
    assert first[0].startswith("gather 'gather step 4': no rollout progressed for 1 s; 3 of 3 rollouts unfinished:")
    assert f"  rollout 0 of group 0: waiting 1 s on POST /v1/chat/completions to {wedged.root}" in first
    assert "  rollout 1 of group 0: in its own code for 1 s, no request in flight" in first
    assert (
        f"  rollout 0 of group 1 (scenario train-7): waiting 1 s on POST /v1/chat/completions to {wedged.root}" in first
    )
    assert f"  server {wedged.root}: its /metrics reported 1 running and 2 waiting" in first[-1]
    assert len(first) == 5  # one line per rollout, one per server: the server is listed once


async def test_a_slow_server_still_generating_is_told_apart_from_a_wedged_one(caplog):
    """Both report their request running; only the slow one's token counter rises between reads, and the report
    says so, while the wedged one's count is reported standing still."""
    caplog.set_level(logging.WARNING, logger="art_core.gather")
    reads = iter(range(10**6))
    async with (
        LoopbackServer(lambda: vllm_metrics(1, generated=12 + 5 * next(reads)), answer_after_s=5.0) as slow,
        LoopbackServer(vllm_metrics(1), answer_after_s=5.0) as wedged,
    ):
        await gather_trajectory_groups([[_ask(slow.root), _ask(wedged.root)]], stall_report_s=1.0)
    text = "\n".join(_reports(caplog))
    server_lines = [line for line in text.splitlines() if line.startswith("  server ")]
    assert any(
        line.startswith(f"  server {slow.root}:") and "still generating: slow, not stuck" in line
        for line in server_lines
    )
    assert any(
        line.startswith(f"  server {wedged.root}:") and "token count has not moved" in line for line in server_lines
    )
    assert not any(line.startswith(f"  server {wedged.root}:") and "still generating" in line for line in server_lines)


async def test_a_gather_that_progresses_says_nothing(caplog):
    caplog.set_level(logging.WARNING, logger="art_core.gather")
    # Ten rollouts finishing one after another, each well within the setting: progress all along.
    await gather_trajectories([_think(0.3 * i) for i in range(10)], stall_report_s=1.0)
    assert _reports(caplog) == []


def test_the_setting_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("ART_GATHER_STALL_S", "45")
    assert StallReport("gather").after_s == 45.0
    monkeypatch.delenv("ART_GATHER_STALL_S")
    assert StallReport("gather").after_s == 120.0  # the default
    assert StallReport("gather", after_s=0).after_s == 0  # off


async def test_the_prefect_task_shows_the_report_in_its_log():
    from art_pipeline.tasks.gather import gather_warnings_to

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            shown.append(record.getMessage())

    shown: list[str] = []
    run_logger = logging.getLogger("test_gather_stall.run_logger")  # stands for get_run_logger() in the task
    run_logger.addHandler(Kept())
    with gather_warnings_to(run_logger):
        await gather_trajectories([_think(1.0)], pbar_desc="gather step 0", stall_report_s=0.5)
    assert shown and shown[0].startswith("gather 'gather step 0': no rollout progressed for")
    assert logging.getLogger("art_core.gather").handlers == []  # removed after the task
