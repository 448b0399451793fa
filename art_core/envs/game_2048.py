"""2048 as an environment: the model sees the board as text and answers with a move, until the game ends.

    >>> env = load_environment(target=128, constrain_moves=True)
    >>> trajectory = await env.rollout(client, "my-model@3", env.scenarios("train")[0],   # doctest: +SKIP
    ...                                temperature=1.0)
    >>> trajectory.reward, trajectory.metrics["max_tile"]                               # doctest: +SKIP

Rules (the usual ones): tiles slide as far as they go; two equal tiles that meet merge once per move
into their sum, which is added to the score; after every move that changes the board a new tile
appears on a random empty cell (2, or 4 one time in ten). A scenario is the seed of those new tiles,
so the same scenario always deals the same tiles for the same moves.

A move that does not change the board, or an answer that names no move, is invalid: the board stays,
the model is told why, and after `max_invalid` invalid answers the game ends. It also ends when no
move is possible, when a tile reaches `target` (a win), or after `max_moves` moves.

Reward, with partial credit: 1.0 for reaching `target`; otherwise 0.9 * (log2(max tile) - 1) /
(log2(target) - 1), so every doubling of the best tile counts the same. `constrain_moves=True` asks a
vLLM server to answer only with one of the legal moves (structured outputs, `choice`), which lets a
random-weight test model play whole games (give it max_tokens >= 6: a grammar can spell a move one
letter per token). The game logic is plain functions on tuples, for tests.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from art_core.envs.base import Environment, Scenario, Split, SplitSizes, split_part, turn_sampling
from art_core.trajectories import Trajectory

Board = tuple[tuple[int, ...], ...]
MOVES = ("left", "right", "up", "down")
_MOVE_RE = re.compile(r"\b(left|right|up|down)\b")


# ---- the game, as pure functions --------------------------------------------------------------


def slide_row_left(row: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """One row pushed left: (new row, points scored). A tile made by a merge does not merge again.

    >>> slide_row_left((2, 2, 2, 2)), slide_row_left((4, 0, 4, 8))
    (((4, 4, 0, 0), 8), ((8, 8, 0, 0), 8))
    """
    tiles = [t for t in row if t]
    out: list[int] = []
    points = 0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(2 * tiles[i])
            points += 2 * tiles[i]
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return tuple(out + [0] * (len(row) - len(out))), points


def _transpose(board: Board) -> Board:
    return tuple(zip(*board))


def move(board: Board, direction: str) -> tuple[Board, int]:
    """The board after sliding every tile towards `direction`, and the points scored (no new tile)."""
    if direction not in MOVES:
        raise ValueError(f"unknown move {direction!r}: use one of {', '.join(MOVES)}")
    rows = _transpose(board) if direction in ("up", "down") else board
    reverse = direction in ("right", "down")
    moved, points = [], 0
    for row in rows:
        new, p = slide_row_left(row[::-1] if reverse else row)
        moved.append(new[::-1] if reverse else new)
        points += p
    out = tuple(moved)
    return (_transpose(out) if direction in ("up", "down") else out), points


def legal_moves(board: Board) -> list[str]:
    """The moves that change the board (in MOVES order); [] means the game is over."""
    return [m for m in MOVES if move(board, m)[0] != board]


def add_tile(board: Board, rng: random.Random) -> Board:
    """The board with a new tile (2, or 4 one time in ten) on a random empty cell."""
    empty = [(r, c) for r, row in enumerate(board) for c, v in enumerate(row) if not v]
    if not empty:
        return board
    r, c = rng.choice(empty)
    value = 4 if rng.random() < 0.1 else 2
    return tuple(tuple(value if (i, j) == (r, c) else v for j, v in enumerate(row)) for i, row in enumerate(board))


def new_board(rng: random.Random, size: int = 4) -> Board:
    board: Board = tuple((0,) * size for _ in range(size))
    return add_tile(add_tile(board, rng), rng)


def max_tile(board: Board) -> int:
    return max(max(row) for row in board)


def render(board: Board) -> str:
    """The board as text, one row per line, "." for empty cells."""
    width = max(4, len(str(max_tile(board))) + 1)
    return "\n".join("".join((str(v) if v else ".").rjust(width) for v in row) for row in board)


def parse_move(text: str) -> str | None:
    """The first move named in an answer ("left", "<move>up</move>", "I'd go DOWN"), or None."""
    found = _MOVE_RE.search(text.lower())
    return found.group(1) if found else None


def score_game(best_tile: int, target: int) -> float:
    """1.0 at the target tile; below it 0.9 * (log2(best) - 1) / (log2(target) - 1).

    >>> score_game(128, 128), score_game(2, 128), round(score_game(16, 128), 2)
    (1.0, 0.0, 0.45)
    """
    if best_tile >= target:
        return 1.0
    return 0.9 * (math.log2(max(best_tile, 2)) - 1) / (math.log2(target) - 1)


# ---- the environment ---------------------------------------------------------------------------


class Game2048Options(BaseModel):
    """Options of `load_environment("2048", **options)`."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 0  # picks the scenarios of each split
    size: int = Field(default=4, ge=2, le=8)  # the board is size x size
    target: int = Field(default=128, ge=8)  # the tile that wins (2048 is the classic game: about 1000 moves)
    max_moves: int = Field(default=300, ge=1)  # moves that changed the board, before the game is cut off
    max_invalid: int = Field(default=3, ge=1)  # invalid answers before the game ends
    constrain_moves: bool = False  # vLLM structured outputs: answers limited to the legal moves
    split_sizes: SplitSizes = Field(default_factory=lambda: {"train": 1000, "val": 100, "test": 100})


SYSTEM_PROMPT = """You are playing 2048 on a {size}x{size} board. Each turn you see the board ("." is an empty \
cell) and answer with one move: left, right, up or down. All tiles slide that way; two equal tiles that meet \
merge into their sum. After each move a 2 or a 4 appears on an empty cell. A move that changes nothing is \
invalid. Reach a {target} tile to win. Answer with the move word only."""


class Game2048Env(Environment):
    """2048 against a seeded tile dealer; see the module docstring for rules and reward."""

    name = "2048"

    def __init__(self, **options: Any) -> None:
        self.options = Game2048Options(**options)
        if self.options.target & (self.options.target - 1):
            raise ValueError(f"target must be a power of two (like 128 or 2048), got {self.options.target}")

    @property
    def constrains_sampling(self) -> bool:
        return self.options.constrain_moves

    def scenarios(self, split: Split) -> list[Scenario]:
        split = self.check_split(split)
        sizes = self.options.split_sizes
        rng = random.Random(f"2048-scenarios-{self.options.seed}")
        seeds = rng.sample(range(2**31), sum(sizes.values()))  # distinct, so splits never share a game
        return [
            Scenario(id=f"2048-{split}-{i:04d}", split=split, data={"game_seed": s})
            for i, s in enumerate(split_part(seeds, split, sizes))
        ]

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Play one game of `scenario` with `model`; each model turn is kept as its Choice."""
        opts = self.options
        sampling, extra_body = turn_sampling(sampling)
        longest = max(len(m) for m in MOVES)
        if opts.constrain_moves and sampling.get("max_tokens", longest + 1) <= longest:
            # A grammar may spell a move one letter per token; cut short, "righ" names no move.
            raise ValueError(
                f"max_tokens={sampling['max_tokens']} is too small with constrain_moves: a move can take "
                f"{longest} tokens plus the end token; use max_tokens >= {longest + 1}"
            )
        rng = random.Random(scenario.data["game_seed"])
        board = new_board(rng, opts.size)
        traj = Trajectory(
            messages_and_choices=[
                {"role": "system", "content": SYSTEM_PROMPT.format(size=opts.size, target=opts.target)},
                {"role": "user", "content": render(board)},
            ],
            metadata={"env": self.name, "scenario_id": scenario.id, "split": scenario.split},
        )
        score = moves = invalid = 0
        while True:
            legal = legal_moves(board)
            if not legal or max_tile(board) >= opts.target or moves >= opts.max_moves or invalid >= opts.max_invalid:
                break
            if opts.constrain_moves:
                extra_body["structured_outputs"] = {"choice": legal}
            response = await client.chat.completions.create(
                model=model, messages=traj.messages(), logprobs=True, extra_body=extra_body, **sampling
            )
            choice = response.choices[0]
            traj.messages_and_choices.append(choice)
            answer = parse_move(choice.message.content or "")
            if answer not in legal:
                invalid += 1
                why = "names no move" if answer is None else f"'{answer}' does not change the board"
                note = f"Invalid: your answer {why}. Legal moves: {', '.join(legal)}."
                traj.messages_and_choices.append({"role": "user", "content": f"{note}\n{render(board)}"})
                continue
            board, points = move(board, answer)
            board = add_tile(board, rng)
            score, moves = score + points, moves + 1
            traj.messages_and_choices.append({"role": "user", "content": render(board)})
        best = max_tile(board)
        traj.reward = score_game(best, opts.target)
        traj.metrics.update(
            max_tile=best,
            score=score,
            moves=moves,
            invalid_moves=invalid,
            won=best >= opts.target,
            game_over=not legal_moves(board),
        )
        return traj.finish()


def load_environment(**options: Any) -> Game2048Env:
    """The 2048 environment (see `Game2048Options` for the options)."""
    return Game2048Env(**options)
