"""2048 and tic-tac-toe: the rules as pure functions, scenarios and splits, and whole games played through
the OpenAI client against a fake chat server on 127.0.0.1 (a scripted peer that only exercises the loop).

`test_*_against_vllm` play one game each against the real vLLM server (marker `vllm`).
"""

from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest
from openai import AsyncOpenAI

from art_core.envs import game_2048 as g
from art_core.envs import load_environment
from art_core.envs import tictactoe as t
from art_core.envs.base import Scenario
from art_core.trajectories import Trajectory

SPLITS = ("train", "val", "test")


class FakeChat:
    """POST /v1/chat/completions answered by `answer(request body) -> content`; every request is kept."""

    def __init__(self, answer: Callable[[dict[str, Any]], str]) -> None:
        self.answer, self.requests = answer, []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                content = fake.answer(body)
                tokens = [
                    {
                        "token": f"token_id:{(len(fake.requests) * 7 + i) % 4000}",
                        "logprob": -1.0,
                        "bytes": None,
                        "top_logprobs": [],
                    }
                    for i in range(max(1, len(content) // 3))
                ]
                data = json.dumps(
                    {
                        "id": f"fake-{len(fake.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "logprobs": {"content": tokens},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 1,
                            "completion_tokens": len(tokens),
                            "total_tokens": 1 + len(tokens),
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.client = AsyncOpenAI(
            base_url=f"http://127.0.0.1:{self.httpd.server_address[1]}/v1", api_key="fake", max_retries=0
        )

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_chat():
    servers: list[FakeChat] = []

    def start(answer: Callable[[dict[str, Any]], str]) -> FakeChat:
        servers.append(FakeChat(answer))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def first_allowed(body: dict[str, Any]) -> str:
    """What a constrained random model can say: one of the allowed strings (here the first)."""
    return body["structured_outputs"]["choice"][0]


# ---- 2048 rules ---------------------------------------------------------------------------------


def test_2048_rows_merge_once_per_move_and_score_the_merges():
    assert g.slide_row_left((2, 2, 2, 2)) == ((4, 4, 0, 0), 8)
    assert g.slide_row_left((2, 2, 4, 0)) == ((4, 4, 0, 0), 4)  # the new 4 does not merge again
    assert g.slide_row_left((0, 2, 0, 2)) == ((4, 0, 0, 0), 4)
    assert g.slide_row_left((4, 4, 8, 16)) == ((8, 8, 16, 0), 8)
    assert g.slide_row_left((2, 4, 8, 16)) == ((2, 4, 8, 16), 0)


def test_2048_moves_in_every_direction():
    board = ((2, 0, 0, 2), (0, 4, 0, 4), (2, 0, 0, 0), (2, 0, 0, 0))
    assert g.move(board, "left") == (((4, 0, 0, 0), (8, 0, 0, 0), (2, 0, 0, 0), (2, 0, 0, 0)), 12)
    assert g.move(board, "right") == (((0, 0, 0, 4), (0, 0, 0, 8), (0, 0, 0, 2), (0, 0, 0, 2)), 12)
    assert g.move(board, "up") == (((4, 4, 0, 2), (2, 0, 0, 4), (0, 0, 0, 0), (0, 0, 0, 0)), 4)
    assert g.move(board, "down") == (((0, 0, 0, 0), (0, 0, 0, 0), (2, 0, 0, 2), (4, 4, 0, 4)), 4)
    with pytest.raises(ValueError, match="unknown move"):
        g.move(board, "sideways")


def test_2048_moves_that_change_nothing_are_not_legal_and_a_stuck_board_is_over():
    corner = ((2, 4, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0))
    assert g.legal_moves(corner) == ["right", "down"]
    stuck = ((2, 4, 2, 4), (4, 2, 4, 2), (2, 4, 2, 4), (4, 2, 4, 2))
    assert g.legal_moves(stuck) == []
    assert g.legal_moves(((2, 4, 2, 4), (4, 2, 4, 2), (2, 4, 2, 4), (4, 8, 8, 2))) == ["left", "right"]


def test_2048_new_tiles_are_seeded_and_land_on_empty_cells():
    a, b = g.new_board(random.Random(5)), g.new_board(random.Random(5))
    assert a == b and sorted(v for row in a for v in row if v) in ([2, 2], [2, 4], [4, 4])
    full = ((2, 4), (4, 2))
    assert g.add_tile(full, random.Random(0)) == full
    grown = g.add_tile(((2, 0), (4, 8)), random.Random(1))
    assert grown[0][1] in (2, 4) and grown[1] == (4, 8)


def test_2048_reward_gives_partial_credit_by_doublings_and_one_for_the_target():
    rewards = [g.score_game(2**k, 128) for k in range(1, 8)]
    assert rewards[0] == 0.0 and rewards[-1] == 1.0
    assert all(a < b for a, b in zip(rewards, rewards[1:])) and rewards[-2] == pytest.approx(0.9 * 5 / 6)
    assert g.parse_move("I think <move>UP</move>") == "up" and g.parse_move("no idea") is None


def test_2048_scenarios_are_seeded_and_splits_disjoint():
    env = load_environment("2048", seed=3)
    seeds = {s: [sc.data["game_seed"] for sc in env.scenarios(s)] for s in SPLITS}
    assert [len(seeds[s]) for s in SPLITS] == [1000, 100, 100]
    assert len(set().union(*seeds.values())) == 1200
    assert seeds == {s: [sc.data["game_seed"] for sc in load_environment("2048", seed=3).scenarios(s)] for s in SPLITS}
    assert seeds["val"] != [sc.data["game_seed"] for sc in load_environment("2048", seed=4).scenarios("val")]
    with pytest.raises(ValueError):
        load_environment("2048", targett=64)
    with pytest.raises(ValueError, match="power of two"):
        load_environment("2048", target=100)


# ---- 2048 games through the client --------------------------------------------------------------


async def test_2048_constrained_game_is_played_to_the_end_with_choices_kept(fake_chat):
    server = fake_chat(first_allowed)
    env = load_environment("2048", target=16, constrain_moves=True)
    scenario = env.scenarios("val")[0]
    traj = await env.rollout(server.client, "tiny@0", scenario, temperature=1.0, max_tokens=8)
    assert isinstance(traj, Trajectory) and traj.metrics["invalid_moves"] == 0
    assert traj.metrics["won"] or traj.metrics["game_over"]
    assert len(traj.choices()) == traj.metrics["moves"] == len(server.requests)
    assert traj.choices()[0].logprobs.content[0].token.startswith("token_id:")
    assert traj.reward == g.score_game(traj.metrics["max_tile"], 16) > 0
    first = server.requests[0]
    assert first["logprobs"] is True and first["return_tokens_as_token_ids"] is True and first["temperature"] == 1.0
    assert first["structured_outputs"]["choice"] == g.legal_moves(
        g.new_board(random.Random(scenario.data["game_seed"]))
    )
    # the same scenario and the same answers give the same game
    again = await env.rollout(fake_chat(first_allowed).client, "tiny@0", scenario)
    assert again.messages() == traj.messages() and again.reward == traj.reward
    assert Trajectory.model_validate_json(traj.model_dump_json()).reward == traj.reward


async def test_2048_invalid_answers_are_counted_and_end_the_game(fake_chat):
    env = load_environment("2048", max_invalid=3)
    # a game whose first board has a move that changes nothing (both tiles against a wall)
    scenario, stuck = next(
        (sc, m)
        for sc in env.scenarios("train")
        for m in g.MOVES
        if m not in g.legal_moves(g.new_board(random.Random(sc.data["game_seed"])))
    )
    answers = iter([stuck, "I'll go sideways", stuck])
    server = fake_chat(lambda body: next(answers))
    traj = await env.rollout(server.client, "tiny@0", scenario)
    assert "structured_outputs" not in server.requests[0]
    assert traj.metrics["invalid_moves"] == 3 and traj.metrics["moves"] == 0 and len(traj.choices()) == 3
    notes = [m["content"] for m in traj.messages() if m["role"] == "user" and m["content"].startswith("Invalid")]
    assert len(notes) == 3 and f"'{stuck}' does not change the board" in notes[0] and "names no move" in notes[1]
    assert traj.reward == g.score_game(g.max_tile(g.new_board(random.Random(scenario.data["game_seed"]))), 128)


# ---- tic-tac-toe rules ----------------------------------------------------------------------------


def test_tictactoe_winner_on_rows_columns_and_diagonals():
    assert t.winner({"A1": "X", "B1": "X", "C1": "X"}) == "X"
    assert t.winner({"B1": "O", "B2": "O", "B3": "O"}) == "O"
    assert t.winner({"C1": "X", "B2": "X", "A3": "X"}) == "X"
    assert t.winner({"A1": "X", "B1": "X", "C1": "O"}) is None
    assert t.parse_cell("I pick b 2.") == "B2" and t.parse_cell("the middle") is None


def test_tictactoe_opponent_wins_else_blocks_else_follows_its_order():
    assert t.opponent_move({"A1": "O", "B1": "O", "A2": "X", "B2": "X"}) == "C1"  # its own win first
    assert t.opponent_move({"A1": "X", "A2": "X", "B2": "O"}) == "A3"  # else block X
    assert t.opponent_move({"A1": "X"}) == "B2" and t.opponent_move({"B2": "X"}) == "A1"
    assert t.opponent_move({"B2": "X", "A1": "O", "C3": "X"}) == "C1"  # no threat: next in order


def test_tictactoe_rewards_and_openings():
    assert [t.outcome_reward(o, 3) for o in ("win", "draw", "illegal")] == [1.0, 0.5, 0.0]
    assert 0 < t.outcome_reward("loss", 1) < t.outcome_reward("loss", 3) <= 0.25
    assert len(t.openings()) == 586
    env = load_environment("tic-tac-toe", seed=1)
    ids = {s: [tuple(sc.data["opening"]) for sc in env.scenarios(s)] for s in SPLITS}
    assert [len(ids[s]) for s in SPLITS] == [386, 100, 100] and len(set().union(*ids.values())) == 586
    assert ids["test"] != [
        tuple(sc.data["opening"]) for sc in load_environment("tic-tac-toe", seed=2).scenarios("test")
    ]
    with pytest.raises(ValueError, match="only 586"):
        load_environment("tic-tac-toe", split_sizes={"train": 600})
    with pytest.raises(ValueError, match="split_sizes"):
        load_environment("tic-tac-toe", split_sizes={"training": 10})


# ---- tic-tac-toe games through the client ----------------------------------------------------------


async def test_tictactoe_constrained_games_end_with_a_result(fake_chat):
    server = fake_chat(first_allowed)
    env = load_environment("tic-tac-toe", constrain_moves=True)
    outcomes = set()
    for scenario in env.scenarios("val")[:20]:
        before = len(server.requests)
        traj = await env.rollout(
            server.client, "tiny@0", scenario, max_tokens=3, logprobs=True
        )  # logprobs is always on anyway
        outcome = traj.metadata["outcome"]
        outcomes.add(outcome)
        assert outcome in ("win", "draw", "loss") and traj.reward == t.outcome_reward(
            outcome, traj.metrics["agent_moves"]
        )
        assert len(traj.choices()) == traj.metrics["agent_moves"] == len(server.requests) - before
        assert server.requests[before]["structured_outputs"]["choice"] == [
            c for c in t.CELLS if c in traj.messages()[1]["content"].split("Free cells: ")[1]
        ]
    assert len(outcomes) >= 2  # the fixed opening moves lead to different ends


async def test_tictactoe_scripted_win_and_illegal_move(fake_chat):
    env = load_environment("tic-tac-toe")
    empty = Scenario(id="empty", split="test", data={"opening": []})
    # X A1, O takes B2 (its order); X C3, O takes C1; X blocks A3 and threatens A2 and B3; O blocks A2; X B3 wins
    answers = iter(["A1", "C3", "A3", "B3"])
    server = fake_chat(lambda body: next(answers))
    traj = await env.rollout(server.client, "tiny@0", empty)
    assert traj.metadata["outcome"] == "win" and traj.reward == 1.0
    # naming an occupied cell loses on the spot
    server = fake_chat(lambda body: "B2" if len(server.requests) > 1 else "A1")
    traj = await env.rollout(server.client, "tiny@0", empty)
    assert traj.metadata["outcome"] == "illegal" and traj.reward == 0.0 and traj.metrics["agent_moves"] == 1


# ---- against the real server ---------------------------------------------------------------------


@pytest.mark.vllm
async def test_2048_game_against_vllm(vllm_endpoint):
    env = load_environment("2048", target=32, max_moves=40, constrain_moves=True)
    client = AsyncOpenAI(base_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key)
    traj = await env.rollout(client, vllm_endpoint.model, env.scenarios("val")[0], temperature=1.0, max_tokens=8)
    assert traj.metrics["invalid_moves"] == 0 and traj.metrics["moves"] >= 1
    assert traj.choices()[0].logprobs is not None and 0.0 <= traj.reward <= 1.0


@pytest.mark.vllm
async def test_tictactoe_game_against_vllm(vllm_endpoint):
    env = load_environment("tic-tac-toe", constrain_moves=True)
    client = AsyncOpenAI(base_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key)
    traj = await env.rollout(client, vllm_endpoint.model, env.scenarios("val")[0], temperature=1.0, max_tokens=4)
    assert traj.metadata["outcome"] in ("win", "draw", "loss") and traj.choices()[0].logprobs is not None


async def test_2048_constrained_moves_refuse_a_max_tokens_that_cuts_moves_short(fake_chat):
    env = load_environment("2048", constrain_moves=True)
    with pytest.raises(ValueError, match="max_tokens >= 6"):
        await env.rollout(fake_chat(first_allowed).client, "tiny@0", env.scenarios("val")[0], max_tokens=4)
