"""ART's current tic-tac-toe notebook (OpenPipe/art-notebooks, examples/tic_tac_toe), ported line for line.

The notebook's loop is ART 2026's backend-first one: gather with `art.gather_trajectory_groups`, then
`await backend.train(model, groups, learning_rate=...)`, then `await model.log(groups, metrics=...,
step=..., split="train")`, then `await model.delete_checkpoints()`. Its rollout builds its own
`AsyncOpenAI` client and never asks for logprobs (our server's middleware adds them), is decorated
with `@weave.op` and `@art.retry`, and plays a multi-turn game.

Departures for the test machine: the tiny random model and the session's vLLM server (not Qwen2.5-3B
and a new server), 6 rollouts instead of 48, a learning rate for a 1M-parameter model. The game
helpers are our own code with the notebook's rules. The random model never writes a valid move, so
every game ends on its first turn with the notebook's invalid-move reward: these groups carry no
signal, and what is checked is that each step trains (a new checkpoint, served under the name the
model now reports) and that the next rollouts sample it.
"""

from __future__ import annotations

import math
import random
import xml.etree.ElementTree as ET

import openai
import pytest
import weave
from openai import AsyncOpenAI
from pydantic import BaseModel

import art_core as art
from art_core.local import LocalBackend

pytestmark = pytest.mark.vllm


def generate_game(size: int = 3) -> dict:
    agent = random.choice(["x", "o"])
    return {
        "board": [["_"] * size for _ in range(size)],
        "agent_symbol": agent,
        "opponent_symbol": "o" if agent == "x" else "x",
    }


def render_board(game: dict) -> str:
    rows = ["   " + "   ".join(str(c + 1) for c in range(len(game["board"])))]
    rows += [f"{chr(65 + r)}  " + " | ".join(row) for r, row in enumerate(game["board"])]
    return "\n".join(rows) + "\n"


def get_opponent_move(game: dict) -> tuple[int, int]:
    return random.choice([(r, c) for r, row in enumerate(game["board"]) for c, cell in enumerate(row) if cell == "_"])


def apply_agent_move(game: dict, move: str) -> None:
    try:
        square = ET.fromstring(move).text or ""
    except ET.ParseError as exc:
        raise ValueError("Invalid xml") from exc
    try:
        row, col = ord(square[0]) - 65, int(square[1]) - 1
    except (IndexError, ValueError) as exc:
        raise ValueError("Unable to parse square") from exc
    if not (0 <= row < len(game["board"]) and 0 <= col < len(game["board"])):
        raise ValueError("Invalid move, row or column out of bounds")
    if game["board"][row][col] != "_":
        raise ValueError("Square already occupied")
    game["board"][row][col] = game["agent_symbol"]


def check_winner(board: list[list[str]]):
    n = len(board)
    lines = [list(row) for row in board] + [[board[r][c] for r in range(n)] for c in range(n)]
    lines += [[board[i][i] for i in range(n)], [board[i][n - 1 - i] for i in range(n)]]
    for line in lines:
        if line[0] != "_" and line.count(line[0]) == n:
            return line[0]
    return "draw" if all(cell != "_" for row in board for cell in row) else None


class TicTacToeScenario(BaseModel):
    step: int


@weave.op
@art.retry(exceptions=(openai.LengthFinishReasonError,))
async def rollout(model: art.Model, scenario: TicTacToeScenario) -> art.Trajectory:
    game = generate_game()
    trajectory = art.Trajectory(
        messages_and_choices=[
            {
                "role": "system",
                "content": "You are a tic-tac-toe player. Return your move as an XML "
                f"object like <move>A1</move>. You are the {game['agent_symbol']} symbol.",
            }
        ],
        metadata={"notebook-id": "tic-tac-toe", "step": scenario.step},
        reward=0,
    )
    move_number = 0
    if game["agent_symbol"] == "o":
        first = get_opponent_move(game)
        game["board"][first[0]][first[1]] = game["opponent_symbol"]
    while check_winner(game["board"]) is None:
        trajectory.messages_and_choices.append({"role": "user", "content": render_board(game)})
        messages = trajectory.messages()
        client = AsyncOpenAI(base_url=model.inference_base_url, api_key=model.inference_api_key)
        chat_completion = await client.chat.completions.create(
            model=model.get_inference_name(), messages=messages, max_completion_tokens=128
        )
        choice = chat_completion.choices[0]
        content = choice.message.content
        assert isinstance(content, str)
        trajectory.messages_and_choices.append(choice)
        try:
            apply_agent_move(game, content)
        except ValueError:
            trajectory.reward = -1 + (math.log(move_number + 1) / math.log(100))
            break
        move_number += 1
        if check_winner(game["board"]) is not None:
            break
        opponent = get_opponent_move(game)
        game["board"][opponent[0]][opponent[1]] = game["opponent_symbol"]
    winner = check_winner(game["board"])
    if winner == game["agent_symbol"]:
        trajectory.reward, trajectory.metrics["win"] = 1, 1
    elif winner == game["opponent_symbol"]:
        trajectory.reward, trajectory.metrics["win"] = 0, 0
    elif winner == "draw":
        trajectory.reward, trajectory.metrics["win"] = 0.5, 0.5
    trajectory.metrics["num_moves"] = move_number
    return trajectory


async def test_the_notebook_trains_every_step_and_rollouts_follow_the_new_step(vllm_server, tiny_model_path, tmp_path):
    random.seed(42)
    backend = LocalBackend(path=str(tmp_path / ".art"), server=vllm_server)  # notebook: LocalBackend(path="./.art")
    model = art.TrainableModel(name="001-script", project="tic-tac-toe", base_model=tiny_model_path)
    await model.register(backend)

    TRAINING_STEPS = 2
    ROLLOUTS_PER_STEP = 6
    LEARNING_RATE = 1e-3
    served_names = []
    for i in range(await model.get_step(), TRAINING_STEPS):
        served_names.append(model.get_inference_name())
        train_groups = await art.gather_trajectory_groups(
            (
                art.TrajectoryGroup(rollout(model, TicTacToeScenario(step=i)) for _ in range(ROLLOUTS_PER_STEP))
                for _ in range(1)
            ),
            pbar_desc="gather",
        )
        train_result = await backend.train(model, train_groups, learning_rate=LEARNING_RATE)
        await model.log(train_groups, metrics=train_result.metrics, step=train_result.step, split="train")
        await model.delete_checkpoints()

        # What the notebook relies on without saying: the step advanced, and rollouts now sample it.
        assert train_result.step == i + 1 and await model.get_step() == i + 1
        assert model.get_inference_name() == f"001-script@{i + 1}"
        for t in train_groups[0].trajectories:  # logprobs and ids came back though the rollout never asked
            for c in t.choices():
                assert c.logprobs.content and c.logprobs.content[0].token.startswith("token_id:")
    assert served_names == ["001-script@0", "001-script@1"]

    from art_core.reporting import read_history

    history = read_history(backend.storage, "tic-tac-toe", "001-script")
    assert [r["step"] for r in history if "train/reward" in r][-2:] == [1, 2]
    assert (await backend.get_step(model)) == 2
    await backend.close()
