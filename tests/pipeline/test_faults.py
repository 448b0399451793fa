"""Faults injected into real runs of the train flow (tiny model, real vLLM, real Prefect, local storage): a dead
server is named, hostile rollout content never crashes the run, a damaged rollout file is named with its line.

The faults come from ART-style rollouts defined here (art_core.envs.art_rollout plays the color quiz through
them): one SIGKILLs the vLLM server the flow started for itself, one leaves a tool result whose text is not
valid UTF-8 and a NaN reward in every step.
"""

from __future__ import annotations

import math
import os
import signal

import pytest

from art_core.envs.art_rollout import color_quiz_rollout
from art_core.store import ModelStore
from tests.pipeline.test_train_flow import history, run_config

pytestmark = pytest.mark.vllm

KILLS: dict[str, int] = {}  # served name -> pid of the server the rollout killed (once per name)
NANS: set[str] = set()  # served names whose gather already got its NaN reward
KILL_SAMPLING_FROM = "faulty@1"


async def quiz_killing_its_server(model, scenario) -> None:
    """The color quiz; the first rollout sampling from checkpoint 1 first SIGKILLs the server it talks to (as
    the kernel's OOM killer would), so its own request and those in flight meet a dead server."""
    from art_core.serving import live_server_at

    name = model.get_inference_name()
    if name == KILL_SAMPLING_FROM and name not in KILLS:
        server = live_server_at(str(model.openai_client().base_url))
        assert server is not None, "the flow's own server is not this process's"
        KILLS[name] = server.pid
        os.kill(server.pid, signal.SIGKILL)
    await color_quiz_rollout(model, scenario)


async def quiz_with_hostile_content(model, scenario) -> None:
    """The color quiz, then a tool result naming a file whose name is not valid UTF-8 (what os.listdir gives for
    a stray byte); and one rollout per step scores NaN."""
    from art_core.capture import current_trajectory

    await color_quiz_rollout(model, scenario)
    trajectory = current_trajectory(required=True)
    trajectory.messages_and_choices.append({"role": "tool", "content": "answer saved to caf\udce9.txt"})
    if model.get_inference_name() not in NANS:
        NANS.add(model.get_inference_name())
        trajectory.reward = float("nan")


def faulty_config(model_path: str, root: str, inference_url: str | None, rollout: str, **update):
    return run_config(
        model_path,
        root,
        inference_url,
        name="faulty",
        environment={
            "name": "art_core.envs.art_rollout",
            "options": {"rollout": f"tests.pipeline.test_faults:{rollout}"},
        },
        steps=2,
        group_size=4,
        sampling={"max_tokens": 8, "temperature": 1.0},
        eval_every=0,
        **update,
    )


def stored_rollouts(cfg, step: int):
    store = ModelStore(cfg.storage_url, cfg.project, cfg.model)
    return store.read_groups(store.trajectories("train", step))


@pytest.mark.slow
def test_a_server_sigkilled_mid_gather_is_named_and_the_rerun_resumes_with_real_rewards(
    prefect_api, tiny_model_path, tmp_path
):
    from art_core.inference.server import ServerDied
    from art_core.serving import PROCESS_POOL
    from art_pipeline.flows.train import train

    cfg = faulty_config(tiny_model_path, str(tmp_path / "art"), None, "quiz_killing_its_server")  # its own server
    KILLS.clear()
    try:
        with pytest.raises(ServerDied) as info:
            train(cfg)
        pid = KILLS[KILL_SAMPLING_FROM]
        message = str(info.value)
        assert f"pid {pid})" in message and "died with exit code -9 (killed by SIGKILL, signal 9)" in message
        assert "during 'gather'" in message and "Last lines of " in message, message
        assert info.value.pid == pid
        store = ModelStore(cfg.storage_url, cfg.project, cfg.model)
        assert store.checkpoint_steps() == [1] and stored_rollouts(cfg, 1) is None  # nothing of step 2 stored

        summary = train(cfg)  # the re-run: the pool starts the server again, step 1 is kept, step 2 rolled out
        assert summary.trained_steps == [2] and store.checkpoint_steps() == [1, 2]
        (server,) = PROCESS_POOL.servers(tiny_model_path)
        assert server.pid != pid and server.is_alive()
        groups = stored_rollouts(cfg, 1)
        rewards = [t.reward for g in groups for t in g.trajectories]
        assert len(rewards) == cfg.groups_per_step * cfg.group_size and not any(g.exceptions for g in groups)
        for t in (t for g in groups for t in g.trajectories):  # real rewards: each says whether the answer is right
            question, answer = t.messages()
            assert answer["role"] == "assistant" and t.reward in (0.0, 1.0)
            assert {g.metadata["sampled_from"] for g in groups} == {"faulty@1"}
        records = [r for r in history(cfg.storage_url, cfg) if "train/reward" in r]
        assert [r["step"] for r in records] == [1, 2]
        assert records[1]["train/reward"] == pytest.approx(sum(rewards) / len(rewards))
    finally:
        PROCESS_POOL.close()  # the server this test's flow started, stopped by its pid


def test_a_surrogate_in_a_tool_result_and_a_nan_reward_leave_the_run_going(
    prefect_api, tiny_model_path, vllm_endpoint, tmp_path, monkeypatch, caplog
):
    from art_pipeline.flows.train import train

    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    root = str(tmp_path / "art")
    NANS.clear()
    cfg = faulty_config(tiny_model_path, root, vllm_endpoint.base_url, "quiz_with_hostile_content", max_exceptions=1)
    summary = train(cfg)
    assert summary.trained_steps == [1, 2]
    for step in (0, 1):
        (nan_group,) = [g for g in stored_rollouts(cfg, step) if g.exceptions]
        (error,) = nan_group.exceptions
        assert error.type == "NonFiniteReward"
        assert f"(scenario {nan_group.metadata['scenario_id']}) returned reward nan" in error.message
        trajectories = [t for g in stored_rollouts(cfg, step) for t in g.trajectories]
        assert len(trajectories) == cfg.groups_per_step * cfg.group_size - 1  # the NaN one is never trained on
        for t in trajectories:
            assert t.messages()[-1] == {"role": "tool", "content": "answer saved to caf\\udce9.txt"}
            assert t.metrics["invalid_utf8_escaped"] == 1 and math.isfinite(t.reward)
    records = [r for r in history(root, cfg) if "train/reward" in r]
    assert [r["step"] for r in records] == [1, 2] and all(math.isfinite(r["train/reward"]) for r in records)

    # Tolerating none, the NaN fails the step, naming the rollout; nothing of it is stored.
    from art_core.gather import TooManyExceptions

    NANS.clear()
    strict = cfg.model_copy(update={"model": "strict", "max_exceptions": 0})
    with pytest.raises(
        TooManyExceptions, match=r"NonFiniteReward: rollout \d of group \d \(scenario .+\) returned reward nan"
    ):
        train(strict)
    assert stored_rollouts(strict, 0) is None


def test_a_damaged_rollout_file_fails_the_train_and_score_tasks_naming_its_line(prefect_api, tmp_path):
    from prefect import flow

    from art_core.rewards.config import JudgeConfig
    from art_core.store import ModelRef
    from art_core.training.config import TrainConfig
    from art_core.trajectories import DamagedRollouts, Trajectory, TrajectoryGroup
    from art_pipeline.tasks.score import score_groups
    from art_pipeline.tasks.train import train_step

    ref = ModelRef(storage_url=str(tmp_path / "art"), project="pipe", model="damaged", base_model="/models/tiny")
    store = ref.store()
    uri = store.trajectories("train", 0)
    store.write_groups(uri, [TrajectoryGroup([Trajectory(reward=1.0), Trajectory(reward=0.0)]) for _ in range(3)])
    with open(uri) as f:
        lines = f.read().splitlines()
    with open(uri, "w") as f:
        f.write("\n".join([lines[0], lines[1].replace('"reward":0.0', '"reward":null'), lines[2]]) + "\n")

    @flow
    def step_on_damaged_rollouts(task):
        return task(ref, uri, 0, TrainConfig()) if task is train_step else task(ref, uri, "fp", 0, JudgeConfig())

    for task in (train_step, score_groups):
        with pytest.raises(DamagedRollouts, match=f"rollout file {uri} is damaged at line 2: .*reward"):
            step_on_damaged_rollouts(task)
