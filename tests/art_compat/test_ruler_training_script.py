"""ART's RULER training scripts (2048 with RULER, ART 0.4; the MCP-RL `train.py` loop), ported line for line.

The loop: `iterate_dataset` over scenarios; `gather_trajectory_groups(..., after_each=lambda group:
ruler_score_group(group, judge, debug=True, swallow_exceptions=True))`; a validation gather logged
with `model.log(val_groups, split="val")`; `model.train(groups, config=art.TrainConfig(...),
_config={...})`; and `backend._experimental_push_to_s3(model)`. The model carries the T4 overrides of
the 2048 script in `model._internal_config`, and the rollout is the multi-turn 2048 game.

Departures for the test machine: the tiny random model on the session's vLLM server, groups of 4, a
learning rate for a 1M-parameter model, and as judge a stand-in endpoint on loopback that scores each
trajectory by a fixed rule of its text (conftest.RuleJudge), which makes the groups' rewards differ. The game helpers are our own code with the example's rules.
"""

from __future__ import annotations

import random
import warnings
import xml.etree.ElementTree as ET

import openai
import pytest
import requests
import weave
from pydantic import BaseModel

import art_core as art
from art_core.local import LocalBackend
from art_core.rewards import ruler_score_group
from art_core.utils import iterate_dataset

pytestmark = pytest.mark.vllm

WINNING_VALUE = 128


def generate_game() -> dict:
    game = {"id": "".join(random.choices("abcdef0123456789", k=6)), "board": [[None] * 4 for _ in range(4)]}
    populate_random_cell(game)
    populate_random_cell(game)
    return game


def populate_random_cell(game: dict) -> None:
    free = [(r, c) for r in range(4) for c in range(4) if game["board"][r][c] is None]
    r, c = random.choice(free)
    game["board"][r][c] = 2 if random.random() < 0.9 else 4


def render_board(game: dict) -> str:
    width = max(len(str(v)) for row in game["board"] for v in row if v is not None)
    return "".join("|".join(("_" if v is None else str(v)).rjust(width) for v in row) + "\n" for row in game["board"])


def condense(line: list) -> list:
    values, out = [v for v in line if v is not None], []
    while values:
        if len(values) > 1 and values[0] == values[1]:
            out.append(values[0] * 2)
            values = values[2:]
        else:
            out.append(values.pop(0))
    return out + [None] * (4 - len(out))


def apply_agent_move(game: dict, move_xml: str) -> None:
    try:
        direction = ET.fromstring(move_xml).text
    except ET.ParseError as exc:
        raise ValueError("Invalid xml") from exc
    if direction not in ("left", "right", "up", "down"):
        raise ValueError("Invalid direction")
    b = game["board"]
    lines = b if direction in ("left", "right") else [list(col) for col in zip(*b)]
    lines = [condense(line[::-1])[::-1] if direction in ("right", "down") else condense(line) for line in lines]
    game["board"] = lines if direction in ("left", "right") else [list(row) for row in zip(*lines)]
    populate_random_cell(game)


def max_cell_value(game: dict) -> int:
    return max(v for row in game["board"] for v in row if v is not None)


def check_game_finished(game: dict) -> bool:
    return max_cell_value(game) >= WINNING_VALUE or all(v is not None for row in game["board"] for v in row)


class Scenario2048(BaseModel):
    step: int


@weave.op
@art.retry(exceptions=(requests.ReadTimeout))
async def rollout(model: art.Model, scenario: Scenario2048) -> art.Trajectory:
    client = openai.AsyncOpenAI(base_url=model.inference_base_url, api_key=model.inference_api_key)
    game = generate_game()
    move_number = 0
    trajectory = art.Trajectory(
        messages_and_choices=[
            {
                "role": "system",
                "content": "You are an excellent 2048 player. Optional moves are "
                "'left', 'right', 'up', 'down'. Return your move as <move>left</move>",
            }
        ],
        metadata={"game_id": game["id"], "notebook-id": "2048", "step": scenario.step},
        reward=0,
    )
    while True:
        trajectory.messages_and_choices.append({"role": "user", "content": render_board(game)})
        messages = trajectory.messages()
        async with trajectory.track_duration("llm"):
            chat_completion = await client.chat.completions.create(
                max_completion_tokens=48, messages=messages, model=model.get_inference_name(), stream=False
            )
        choice = chat_completion.choices[0]
        content = choice.message.content
        assert isinstance(content, str)
        trajectory.messages_and_choices.append(choice)
        try:
            apply_agent_move(game, content)
            move_number += 1
        except ValueError:
            break
        if check_game_finished(game):
            trajectory.metrics["max_value"] = max_cell_value(game)
            trajectory.metrics["move_number"] = move_number
            break
    return trajectory


@pytest.mark.slow  # a minute or more on 2 cores (make test hands slow files out first)
async def test_the_ruler_script_trains_every_step_with_a_gradient_where_rewards_differ(
    vllm_server, tiny_model_path, tmp_path, s3_bucket, rule_judge, capsys, monkeypatch
):
    random.seed(42)
    # art_core warns once per setting per process: a test file run earlier in this worker (the MCP-RL notebook's
    # engine_args) must not have used up the warning this test looks for.
    monkeypatch.setattr("art_core.dev._warned", set())
    # The judge: the scripts name "openai/o4-mini"; here a stand-in endpoint on loopback (conftest.RuleJudge).
    judge = "openai/rule-judge"
    judge_options = dict(extra_litellm_params={"api_base": rule_judge.base_url, "api_key": "test"}, cache=False)

    model = art.TrainableModel(name="tutorial-001", project="2048", base_model=tiny_model_path)
    model._internal_config = art.dev.InternalModelConfig(
        init_args=art.dev.InitArgs(max_seq_length=4096),
        engine_args=art.dev.EngineArgs(enforce_eager=True, gpu_memory_utilization=0.8, num_scheduler_steps=1),
    )
    backend = LocalBackend(path=str(tmp_path / ".art"), server=vllm_server)  # script: LocalBackend()
    await backend._experimental_pull_from_s3(model, verbose=True)  # nothing there yet: a no-op, as in ART
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await model.register(backend)
    assert any("already running" in str(w.message) for w in caught)  # the engine args could not apply: said so

    train_scenarios = [Scenario2048(step=0) for _ in range(4)]
    results = []
    for batch in iterate_dataset(train_scenarios, groups_per_step=2, num_epochs=1, initial_step=await model.get_step()):
        groups = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(rollout(model, scenario) for _ in range(4)) for scenario in batch.items),
            pbar_desc=f"train gather step {batch.step}",
            after_each=lambda group: ruler_score_group(
                group, judge, debug=True, swallow_exceptions=True, **judge_options
            ),
        )
        val_groups = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(rollout(model, Scenario2048(step=batch.step)) for _ in range(2))], pbar_desc="val"
        )
        await model.log(val_groups, split="val")
        result = await model.train(
            groups, config=art.TrainConfig(learning_rate=1e-3), _config={"logprob_calculation_chunk_size": 8}
        )
        await backend._experimental_push_to_s3(model)
        results.append((batch.step, groups, result))

    assert [step for step, _, _ in results] == [0, 1] and await model.get_step() == 2
    assert rule_judge.calls == 4  # one judge call per group, two groups per step
    assert "[RULER] trajectory_1:" in capsys.readouterr().out  # debug=True shows the judge's verdicts
    for step, groups, result in results:
        assert groups, "RULER dropped every group"
        assert result.step == step + 1
        if any(len(set(g.rewards())) > 1 for g in groups):
            assert result.metrics["grad_norm"] > 0, result.metrics
        for g in groups:
            assert all("ruler_score" in t.metrics and "llm_duration" in t.metrics for t in g.trajectories)

    # The backup holds what a fresh machine needs to resume: pull it into a new backend's storage.
    fresh = LocalBackend(path=str(tmp_path / "elsewhere"), server=vllm_server)
    await fresh._experimental_pull_from_s3(model)
    assert await fresh.get_step(model) == 2
    from art_core.reporting import read_history

    assert any("val/reward" in r for r in read_history(fresh.storage, "2048", "tutorial-001"))
    await backend.close()
