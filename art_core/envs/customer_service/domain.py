"""What a tau-bench-style customer-service domain provides: a seeded database, tools, tasks, a policy.

The reward compares databases, not conversations: after the episode, the agent's database must equal
the database obtained by replaying the task's gold actions on a fresh copy (compared by the hash of a
canonical JSON form), and every required output must have been said to the user.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from pydantic import BaseModel, Field

from art_core.envs.tool_use.tools import ToolError, ToolFn, fresh_copy, run_tool

Database = dict[str, Any]


class Action(BaseModel):
    """One tool call: a name and its keyword arguments."""

    name: str
    kwargs: dict[str, Any] = Field(default_factory=dict)


class Followup(BaseModel):
    """A later request of a task with several: what the customer asks once the earlier ones are dealt with, the
    facts they give for it, and how many of the task's gold writes and which outputs are its own (the last ones)."""

    request: str
    known_info: dict[str, str] = Field(default_factory=dict)  # this request's facts, over the task's own
    actions: int = 0  # the next `actions` of Task.actions belong to this request
    outputs: list[str] = Field(default_factory=list)


class Task(BaseModel):
    """One customer's conversation to have: who they are, what they want, and what must happen.

    A customer with two requests opens with the first (saying a second will follow) and asks the second, a
    `Followup`, once the first is dealt with; `actions` and `outputs` hold both requests', in order, and the
    first request's `known_info` is the task's own."""

    id: str
    user_id: str
    request: str  # the customer's opening message, in plain words
    instruction: str  # the private instruction an LLM user simulator plays
    known_info: dict[str, str] = Field(default_factory=dict)  # facts the customer can reveal when asked
    actions: list[Action] = Field(default_factory=list)  # gold writes; [] where the policy says refuse
    outputs: list[str] = Field(default_factory=list)  # what the agent must say to the user
    followups: list[Followup] = Field(default_factory=list)  # the customer's later requests, in order

    def requests(self) -> list[tuple[range, list[str]]]:
        """Per request (the opening's, then each followup's): the indices of its gold actions in `actions` and the
        outputs it needs.

        >>> Task(id="t", user_id="u", request="Hi!", instruction="", actions=[Action(name="a"), Action(name="b")],
        ...      outputs=["7"], followups=[Followup(request="And...", actions=1)]).requests()
        [(range(0, 1), ['7']), (range(1, 2), [])]
        """
        first_actions = len(self.actions) - sum(f.actions for f in self.followups)
        first_outputs = len(self.outputs) - sum(len(f.outputs) for f in self.followups)
        out = [(range(first_actions), self.outputs[:first_outputs])]
        for f in self.followups:
            start = out[-1][0].stop
            out.append((range(start, start + f.actions), f.outputs))
        return out


@dataclass
class Domain:
    """Everything a customer-service environment needs, all of it deterministic given a seed."""

    name: str
    policy: str
    make_db: Callable[[int], Database]  # seed -> a fresh database
    tools: dict[str, ToolFn]  # name -> fn(db, **kwargs)
    tool_schemas: list[dict[str, Any]]  # OpenAI function schemas, one per tool
    make_tasks: Callable[
        [Database, int], dict[str, list[Task]]
    ]  # (db, seed) -> {"train": [...], "val": [...], "test": [...]}
    write_tools: frozenset[str] = field(default_factory=frozenset)  # tools that change the database
    terminal_tools: frozenset[str] = field(default_factory=lambda: frozenset({"transfer_to_human_agents"}))

    @classmethod
    def of_package(cls, name: str, package_file: str, tools: ModuleType, **parts: Any) -> Domain:
        """A generated domain laid out as retail and airline are: policy.md beside `package_file` (the package's
        __init__.py), `tools`' module-level TOOLS, TOOL_SCHEMAS and WRITE_TOOLS, and `parts` (make_db,
        make_tasks, terminal_tools)."""
        policy = (Path(package_file).parent / "policy.md").read_text()
        schemas, write = tools.TOOL_SCHEMAS, tools.WRITE_TOOLS
        return cls(name=name, policy=policy, tools=tools.TOOLS, tool_schemas=schemas, write_tools=write, **parts)

    def run(self, db: Database, name: str, arguments: str | dict[str, Any]) -> tuple[str, bool]:
        """Run one agent call on `db`: (what the agent reads, whether it was an error). Only a `ToolError` is a
        refusal; keywords the tool does not take read as `Error: bad arguments ...`, any other exception is a
        bug in the domain and propagates."""
        return run_tool(
            self.tools,
            db,
            name,
            arguments,
            refuse=(ToolError,),
            unknown="unknown tool {name!r}; available tools: {tools}",
            sort_keys=True,
        )


def hash_db(db: Database) -> str:
    """SHA-256 of a canonical JSON form (sorted keys): equal databases hash equal."""
    return hashlib.sha256(json.dumps(db, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def call_tool(domain: Domain, db: Database, name: str, kwargs: dict[str, Any]) -> str:
    """Run one tool and return what the agent sees; bad names or arguments come back as an error text."""
    return domain.run(db, name, kwargs)[0]


def replay(domain: Domain, db: Database, actions: list[Action]) -> Database:
    """A copy of `db` with the actions applied in order (a gold action that errors is a generator bug)."""
    out = fresh_copy(db)
    for a in actions:
        if a.name in domain.terminal_tools:
            continue
        domain.tools[a.name](out, **a.kwargs)
    return out


def _normalize(text: str) -> str:
    return text.lower().replace(",", "")


def reward(
    domain: Domain,
    initial_db: Database,
    final_db: Database,
    task: Task,
    said_to_user: list[str],
    gold_hash: str | None = None,
) -> dict[str, float]:
    """1.0 only if the final database equals the gold replay and every required output was said. `gold_hash`:
    `hash_db` of the gold replay, where the caller keeps it (an environment computes it once per task)."""
    gold = gold_hash or hash_db(replay(domain, initial_db, task.actions))
    r_actions = float(hash_db(final_db) == gold)
    r_outputs = float(all(outputs_said(task, said_to_user)))
    return {"reward": r_actions * r_outputs, "r_actions": r_actions, "r_outputs": r_outputs}


@dataclass(frozen=True)
class MadeCall:
    """One tool call the agent made in an episode, as the environment ran it."""

    name: str
    arguments: str  # the JSON text the model wrote
    result: str  # what the agent read back
    error: bool


def progress(
    domain: Domain,
    task: Task,
    calls: list[MadeCall],
    said_to_user: list[str],
    exact: bool,
    per_argument: bool = False,
    no_harm: bool = False,
    unasked: bool = False,
) -> float:
    """Partial credit in [0, 1] for how far an episode got, a training signal where `reward` is all or nothing
    (a small model's group of rollouts that all score 0 teaches GRPO nothing). A third each for:

    - finding the customer: a successful call whose result names the task's user id;
    - the writes: the mean credit of the task's gold writes, halved when the final database still differs from
      the gold replay's (a wrong or extra write); where the task wants no write, 1 when the database is
      unchanged, else 0. A gold write's credit is 1 when a successful call made it exactly (name and arguments),
      else 0; with `per_argument`, it is the best `argument_credit` of any call to the same tool, refused ones
      included, so a group whose rollouts all reach the right write with different arguments still differs;
    - the outputs: the fraction of the task's required outputs said to the customer (1 when there are none).

    With `no_harm`, an episode that changed the database of a task that wants no write (a request the policy
    forbids, or a question only) scores 0 instead of up to 2/3: a forbidden write then earns less than doing
    nothing, so GRPO cannot buy write credit with refusals. `unasked`: the episode made a successful write the
    customer had not agreed to (`Episode.writes_without_yes`); the writes' third is then 0, so a write made
    without asking earns less than the same write after a yes.

    `exact`: whether the final database equals the gold replay's (`reward`'s r_actions). Only an environment's
    train-split rollouts use it, and only when asked (`train_reward="progress"`, `"arguments"` for
    `per_argument`, `"safe_progress"` for `no_harm`, `"consented_progress"` for `no_harm` and `unasked`); its
    evaluation always reads `reward`.
    """
    found = any(not c.error and task.user_id in c.result for c in calls)
    gold = [a for a in task.actions if a.name not in domain.terminal_tools]
    if no_harm and not gold and not exact:
        return 0.0
    if gold:
        if per_argument:
            tried = [(c.name, _arguments(c.arguments)) for c in calls if c.name in domain.write_tools]
            credit = [max((argument_credit(a.kwargs, k) for n, k in tried if n == a.name), default=0.0) for a in gold]
        else:
            made = [(c.name, _arguments(c.arguments)) for c in calls if not c.error and c.name in domain.write_tools]
            credit = [float((a.name, a.kwargs) in made) for a in gold]
        writes = sum(credit) / len(gold) * (1.0 if exact else 0.5)
    else:
        writes = float(exact)
    if unasked:
        writes = 0.0
    said = outputs_said(task, said_to_user)
    outputs = sum(said) / len(said) if said else 1.0
    return (found + writes + outputs) / 3


def argument_credit(gold: dict[str, Any], made: dict[str, Any] | None) -> float:
    """The fraction of a gold write's arguments that a call got right: each argument counts 1 when equal, a list
    (item ids) by the overlap of the two sets (intersection over union). Arguments the gold write lacks are not
    counted; unparseable arguments score 0.

    >>> argument_credit({"order_id": "#W1", "item_ids": ["a", "b"]}, {"order_id": "#W1", "item_ids": ["a"]})
    0.75
    """
    if not gold:
        return 1.0
    if made is None:
        return 0.0
    return sum(_value_credit(v, made.get(k)) for k, v in gold.items()) / len(gold)


def _value_credit(gold: Any, made: Any) -> float:
    if isinstance(gold, list):
        if not isinstance(made, list):
            return 0.0
        want, got = ({json.dumps(v, sort_keys=True) for v in vs} for vs in (gold, made))
        return len(want & got) / len(want | got) if want | got else 1.0
    return float(made == gold)


def outputs_said(task: Task, said_to_user: list[str]) -> list[bool]:
    """For each of the task's required outputs, whether one of the agent's plain replies said it (case and
    thousands separators ignored)."""
    said = [_normalize(s) for s in said_to_user]
    return [any(_normalize(o) in s for s in said) for o in task.outputs]


def _arguments(text: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(text or "{}")
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None
