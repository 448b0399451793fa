"""Tic-tac-toe as an environment: the model plays X against a fixed, deterministic opponent playing O.

    >>> env = load_environment(constrain_moves=True)
    >>> trajectory = await env.rollout(client, "my-model@3", env.scenarios("train")[0],   # doctest: +SKIP
    ...                                temperature=1.0)
    >>> trajectory.reward, trajectory.metadata["outcome"]                               # doctest: +SKIP

Cells are named by column and row, A1 (top left) to C3 (bottom right). A scenario is an opening: 0 to
3 moves already played (X first, alternating, nobody has won yet); then whoever is next plays,
the model as X and the opponent as O. The opponent wins if it can, else blocks a line X would
complete, else takes the first free cell of `OPPONENT_ORDER` (centre, corners, edges).

Reward: a win 1.0, a draw 0.5; a loss gives partial credit for resisting, 0.05 per move the model
made (at most 0.25). An illegal answer (an occupied cell, or no cell named) loses on the spot with
reward 0: that is the rule, stated in the prompt. `constrain_moves=True` asks a vLLM server to answer
with one of the free cells only (structured outputs, `choice`). The game logic is plain functions.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from art_core.envs.base import Environment, Scenario, Split, SplitSizes, split_part, turn_sampling
from art_core.trajectories import Trajectory

CELLS = tuple(f"{c}{r}" for r in "123" for c in "ABC")  # row by row: A1 B1 C1 / A2 B2 C2 / A3 B3 C3
LINES = tuple(
    tuple(CELLS[i] for i in line)
    for line in ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
)
OPPONENT_ORDER = ("B2", "A1", "C1", "A3", "C3", "B1", "A2", "C2", "B3")
_CELL_RE = re.compile(r"\b([abc])\s?([123])\b")
Board = dict[str, str]  # cell -> "X" | "O"; free cells are absent


# ---- the game, as pure functions --------------------------------------------------------------


def winner(board: Board) -> str | None:
    """ "X" or "O" if that mark fills a line, else None."""
    for line in LINES:
        marks = {board.get(c) for c in line}
        if len(marks) == 1 and None not in marks:
            return marks.pop()
    return None


def free_cells(board: Board) -> list[str]:
    return [c for c in CELLS if c not in board]


def next_mark(board: Board) -> str:
    return "X" if len(board) % 2 == 0 else "O"


def _completing(board: Board, mark: str) -> str | None:
    """A free cell that would complete a line of `mark`, the first in CELLS order, or None."""
    for cell in free_cells(board):
        if winner({**board, cell: mark}) == mark:
            return cell
    return None


def opponent_move(board: Board, me: str = "O") -> str:
    """The fixed opponent: win if possible, else block, else the first free cell of OPPONENT_ORDER.

    >>> opponent_move({"A1": "X", "B1": "X", "B2": "O"})   # X threatens C1: block it
    'C1'
    """
    other = "X" if me == "O" else "O"
    return _completing(board, me) or _completing(board, other) or next(c for c in OPPONENT_ORDER if c not in board)


def render(board: Board) -> str:
    """The board as text with column letters and row numbers, "." for free cells."""
    rows = ["   A B C"] + [f"{r}  " + " ".join(board.get(f"{c}{r}", ".") for c in "ABC") for r in "123"]
    return "\n".join(rows)


def parse_cell(text: str) -> str | None:
    """The first cell named in an answer ("B2", "b2", "<move>C 3</move>"), or None."""
    found = _CELL_RE.search(text.lower())
    return (found.group(1) + found.group(2)).upper() if found else None


def outcome_reward(outcome: str, agent_moves: int) -> float:
    """win 1.0, draw 0.5, loss 0.05 per model move (at most 0.25), illegal 0.0."""
    return {"win": 1.0, "draw": 0.5, "illegal": 0.0}.get(outcome, min(0.25, 0.05 * agent_moves))


@functools.cache  # computed once per process: each RunConfig's validation loads the environment (6 ms)
def openings(max_moves: int = 3) -> tuple[tuple[str, ...], ...]:
    """Every sequence of 0..max_moves moves in which nobody has won yet (586 for 3)."""
    out: list[tuple[str, ...]] = []
    for n in range(max_moves + 1):
        for seq in itertools.permutations(CELLS, n):
            board = {c: "XO"[i % 2] for i, c in enumerate(seq)}
            if winner(board) is None:
                out.append(seq)
    return tuple(out)


# ---- the environment ---------------------------------------------------------------------------


class TicTacToeOptions(BaseModel):
    """Options of `load_environment("tic-tac-toe", **options)`."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 0  # shuffles the openings into splits
    constrain_moves: bool = False  # vLLM structured outputs: answers limited to the free cells
    split_sizes: SplitSizes = Field(default_factory=lambda: {"train": 386, "val": 100, "test": 100})


SYSTEM_PROMPT = """You play tic-tac-toe as X against an opponent playing O. Cells are named by column (A, B, C) \
and row (1, 2, 3): A1 is top left, C3 bottom right. Get three X in a row, column or diagonal to win. Each turn \
answer with one free cell, like B2, and nothing else. Naming an occupied cell, or no cell, loses the game."""


class TicTacToeEnv(Environment):
    """Tic-tac-toe against the fixed opponent; see the module docstring for rules and reward."""

    name = "tic-tac-toe"

    def __init__(self, **options: Any) -> None:
        self.options = TicTacToeOptions(**options)
        total, available = sum(self.options.split_sizes.values()), len(openings())
        if total > available:
            raise ValueError(
                f"split_sizes ask for {total} openings but only {available} exist; make the splits smaller"
            )

    @property
    def constrains_sampling(self) -> bool:
        return self.options.constrain_moves

    def scenarios(self, split: Split) -> list[Scenario]:
        split = self.check_split(split)
        every = list(openings())
        random.Random(f"tictactoe-scenarios-{self.options.seed}").shuffle(every)
        return [
            Scenario(id=f"tictactoe-{split}-{i:04d}", split=split, data={"opening": list(seq)})
            for i, seq in enumerate(split_part(every, split, self.options.split_sizes))
        ]

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Play one game from the scenario's opening; each model turn is kept as its Choice."""
        sampling, extra_body = turn_sampling(sampling)
        board: Board = {c: "XO"[i % 2] for i, c in enumerate(scenario.data["opening"])}
        if next_mark(board) == "O":
            board[opponent_move(board)] = "O"
        traj = Trajectory(
            messages_and_choices=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": self._prompt(board)},
            ],
            metadata={"env": self.name, "scenario_id": scenario.id, "split": scenario.split},
        )
        agent_moves = 0
        outcome = _result(board)
        while outcome is None:
            free = free_cells(board)
            if self.options.constrain_moves:
                extra_body["structured_outputs"] = {"choice": free}
            response = await client.chat.completions.create(
                model=model, messages=traj.messages(), logprobs=True, extra_body=extra_body, **sampling
            )
            choice = response.choices[0]
            traj.messages_and_choices.append(choice)
            cell = parse_cell(choice.message.content or "")
            if cell not in free:
                outcome = "illegal"
                break
            board[cell] = "X"
            agent_moves += 1
            outcome = _result(board)
            if outcome is None:
                board[opponent_move(board)] = "O"
                outcome = _result(board)
            if outcome is None:
                traj.messages_and_choices.append({"role": "user", "content": self._prompt(board)})
        traj.reward = outcome_reward(outcome, agent_moves)
        traj.metadata["outcome"] = outcome
        traj.metrics.update(
            win=outcome == "win",
            draw=outcome == "draw",
            loss=outcome in ("loss", "illegal"),
            illegal=outcome == "illegal",
            agent_moves=agent_moves,
        )
        return traj.finish()

    @staticmethod
    def _prompt(board: Board) -> str:
        return f"{render(board)}\nYour move (X). Free cells: {', '.join(free_cells(board))}."


def _result(board: Board) -> str | None:
    """ "win" / "loss" / "draw" from X's side once the game is decided, else None."""
    w = winner(board)
    if w:
        return "win" if w == "X" else "loss"
    return "draw" if not free_cells(board) else None


def load_environment(**options: Any) -> TicTacToeEnv:
    """The tic-tac-toe environment (see `TicTacToeOptions` for the options)."""
    return TicTacToeEnv(**options)
