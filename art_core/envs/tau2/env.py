"""The tau2-bench environments: tau2's own tasks, database, policy and tools, scored by tau2's reward.

    >>> from art_core.envs import load_environment
    >>> env = load_environment("tau2-retail", user={"model": "openai/gpt-4.1-2025-04-14"},
    ...                        judge={"model": "openai/gpt-4.1-2025-04-14"})
    >>> scenario = env.scenarios("test")[0]                     # tau2's test split (40 retail tasks)
    >>> traj = await env.rollout(client, "agent@3", scenario, **env.protocol.sampling())   # doctest: +SKIP
    >>> traj.reward, traj.metrics["r_db"], traj.metadata["stop_reason"]                    # doctest: +SKIP

One episode, as tau2 plays it: the system prompt wraps tau2's policy.md in instructions; the agent's first
turn is tau2's fixed greeting (context, not trained on); the LLM customer (`user.Tau2User`) answers from the
task's scenario. Each agent turn is one model call with tau2's tool schemas: tool calls run on the episode's
own copy of the database (any failure comes back as `Error: ...`), plain text goes to the customer. It ends
when the customer writes ###STOP###, ###TRANSFER### or ###OUT-OF-SCOPE### (the only proper ends: tau2's
transfer tool is not terminal), or it is cut off: `max_steps` messages (tau2 counts agent turns, tool-result
batches and customer turns), `max_errors` failed tool calls, or an agent turn cut by max_tokens. A cut-off
run scores 0 (tau2's rule). The reward is `reward.score`; every component goes to `trajectory.metrics`.

Splits: "train" and "test" are tau2's `split_tasks.json`; tau2 has no validation split, so "val" is the test
split; `eval_tasks="base"` makes "test" (and "val") all tasks, as the leaderboard evaluates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from art_core.envs.base import Environment, Scenario, Split, turn_sampling, without_train_only_options
from art_core.envs.customer_service.domain import MadeCall
from art_core.envs.customer_service.users import LLMUserSettings
from art_core.envs.tau2.customer import ScriptedTau2User
from art_core.envs.tau2.data import Tau2Data, find_folder, load_tau2_data
from art_core.envs.tau2.reward import GoldReplay, gold_replay, needs_judge, progress, score
from art_core.envs.tau2.user import GREETING, STOP_SIGNALS, Tau2User, default_user_settings
from art_core.envs.tool_use.episode import Rules, run_episode
from art_core.envs.tool_use.forced_calls import tool_call_regex
from art_core.envs.tool_use.tools import ToolFn, fresh_copy, run_tool
from art_core.rewards.config import JudgeConfig
from art_core.trajectories import Trajectory

AGENT_INSTRUCTIONS = """You are a customer service agent. Help the customer by following the <policy> below.
Each turn, do exactly one of these: send the customer a message, or make a tool call. Never both in one turn.
Follow the policy at all times and be helpful. Tool arguments must be valid JSON."""


def agent_system_prompt(policy: str) -> str:
    """tau2's layout of the agent's system prompt: instructions, then the domain policy, each in its tags."""
    return f"<instructions>\n{AGENT_INSTRUCTIONS}\n</instructions>\n<policy>\n{policy}\n</policy>"


class Tau2Protocol(BaseModel):
    """How tau2-bench runs a model, for scores comparable with its leaderboard (see `published`)."""

    temperature: float = 0.0  # tau2's agent (and user, and judge) temperature
    max_tokens: int = 2048  # tau2 sets none; a book_reservation call alone is a few hundred tokens
    max_steps: int = 200  # tau2's DEFAULT_MAX_STEPS
    max_errors: int = 10  # tau2's DEFAULT_MAX_ERRORS
    trials: int = 4  # the leaderboard's pass^1..4
    user_model: str = "openai/gpt-4.1-2025-04-14"  # the v0.1.3 leaderboard's user (1.0.x rows use gpt-5.2)
    judge_model: str = "openai/gpt-4.1-2025-04-14"  # tau2's NL-assertion judge

    def sampling(self) -> dict[str, Any]:
        """The agent's sampling keywords for `rollout` / the pipeline's SamplingConfig."""
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}


# options that shape only the train rollouts' reward: an evaluation plays without them (Tau2Env.for_evaluation,
# art_core.envs.evaluation_options), so its cache is one for every choice
TRAIN_ONLY_OPTIONS = ("train_reward",)


class Tau2Options(BaseModel):
    """Options of `load_environment("tau2-retail" | "tau2-airline", **options)`."""

    model_config = ConfigDict(extra="forbid")

    data_dir: str | None = None  # a folder in tau2's layout (data/tau2/domains/<domain>/); None: the installed package
    # the customer's model (litellm), or "scripted": rules reading the scenario (`customer`; not tau2's protocol)
    user: Literal["scripted"] | LLMUserSettings = Field(default_factory=default_user_settings)
    judge: JudgeConfig | None = None  # NL-assertion judge; None: ART_JUDGE_MODEL at scoring time
    max_steps: int = Field(200, ge=2)  # messages before the run is cut off (scored 0)
    max_errors: int = Field(10, ge=1)  # failed tool calls before the run is cut off (scored 0)
    eval_tasks: Literal["test", "base"] = "test"  # what "test" (and "val") hold: tau2's test split or all tasks
    # leave out of every split the tasks whose reward asks the NL-assertion judge (an LLM): training or
    # evaluating where none can be reached (a run on such a task would end in a JudgeError)
    skip_judged: bool = False
    # the reward of train-split rollouts: tau2's own ("task"), or "progress", partial credit for finding the
    # customer, the gold writes and the facts said (art_core.envs.tau2.reward.progress); evaluation reads tau2's
    train_reward: Literal["task", "progress"] = "task"
    force_tool_calls: bool = False  # test models: constrain each agent turn with a vLLM structured-outputs regex
    forced_message_chars: int = Field(
        0, ge=0
    )  # with force_tool_calls: also admit a plain message this long (0: calls only)
    # ask the agent's server for logprobs and sampled token ids (vLLM; what training needs). False for a hosted
    # API that refuses vLLM's `return_tokens_as_token_ids` (OpenAI's does) or logprobs (reasoning models)
    sampler_extras: bool = True


@dataclass
class Tau2Tools:
    """One tau2 domain's toolset; `make_tools(policy)` when the domain reads its prices from the policy
    text (airline: the domain parses its own rules, so this generic env knows no domain)."""

    name: str
    domain: Literal["retail", "airline"]
    tools: dict[str, ToolFn] | None
    schemas: list[dict[str, Any]]
    write_tools: frozenset[str]
    make_tools: Callable[[str], dict[str, ToolFn]] | None = None


class Tau2Env(Environment):
    """tau2-bench's retail or airline domain as an environment (see the module docstring)."""

    protocol = Tau2Protocol()

    def __init__(self, toolset: Tau2Tools, **options: Any) -> None:
        self.toolset = toolset
        self.name = toolset.name
        self.options = Tau2Options(**options)
        find_folder(toolset.domain, self.options.data_dir)  # a missing folder fails here, with what to do
        self._gold: dict[str, GoldReplay] = {}

    def for_evaluation(self) -> "Tau2Env":
        """This environment without its TRAIN_ONLY_OPTIONS (tau2's reward on every split), its data shared."""
        rebuild = partial(type(self), self.toolset)
        return without_train_only_options(self, TRAIN_ONLY_OPTIONS, rebuild, ("data", "tools_by_name", "_gold"))

    @cached_property
    def data(self) -> Tau2Data:
        return load_tau2_data(self.toolset.domain, self.options.data_dir)

    @cached_property
    def tools_by_name(self) -> dict[str, ToolFn]:
        if self.toolset.make_tools is None:
            return dict(self.toolset.tools or {})
        return self.toolset.make_tools(self.data.policy)

    @property
    def constrains_sampling(self) -> bool:
        return self.options.force_tool_calls

    @property
    def system_prompt(self) -> str:
        return agent_system_prompt(self.data.policy)

    def tools(self) -> list[dict[str, Any]]:
        return self.toolset.schemas

    def scenarios(self, split: Split) -> list[Scenario]:
        split = self.check_split(split)
        key = "train" if split == "train" else self.options.eval_tasks
        ids = self.data.splits[key]
        if self.options.skip_judged:
            ids = [i for i in ids if not needs_judge(self.data.tasks[i])]
        return [Scenario(id=i, split=split, data={"task": self.data.tasks[i]}) for i in ids]

    def scenario_category(self, scenario: Scenario) -> str:
        """`write` when a gold action is one of the domain's write tools, else `answer` when the task wants
        information communicated, else `refuse` (nothing may change and nothing need be said)."""
        criteria = (scenario.data.get("task") or self.data.tasks[scenario.id]).get("evaluation_criteria") or {}
        if any(a.get("name") in self.toolset.write_tools for a in criteria.get("actions") or []):
            return "write"
        return "answer" if criteria.get("communicate_info") else "refuse"

    def scenario_kind(self, scenario: Scenario) -> str | None:
        """For a task that needs a write, its gold write tools in order; None for refusals and answers."""
        criteria = (scenario.data.get("task") or self.data.tasks[scenario.id]).get("evaluation_criteria") or {}
        writes = [a.get("name") for a in criteria.get("actions") or [] if a.get("name") in self.toolset.write_tools]
        return " + ".join(writes) or None

    def gold(self, task_id: str) -> GoldReplay:
        """The gold replay of one task (computed once per environment)."""
        if task_id not in self._gold:
            actions = (self.data.tasks[task_id].get("evaluation_criteria") or {}).get("actions")
            self._gold[task_id] = gold_replay(self.tools_by_name, self.data.db, actions)
        return self._gold[task_id]

    def call_tool(self, db: dict[str, Any], name: str, arguments: str | dict[str, Any]) -> tuple[str, bool]:
        """Run one agent tool call (arguments as the model sent them); returns (text, is_error)."""
        return run_tool(self.tools_by_name, db, name, arguments)

    def forced_regex(self) -> str:
        return tool_call_regex(self.tools(), message_chars=self.options.forced_message_chars)

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Play one tau2 episode of `scenario` with `model` served by `client` (an `openai.AsyncOpenAI`)."""
        sampling, extra_body = turn_sampling(sampling)
        task = scenario.data.get("task") or self.data.tasks[scenario.id]
        o = self.options
        if o.force_tool_calls:
            extra_body["structured_outputs"] = {"regex": self.forced_regex()}
        if not o.sampler_extras:
            extra_body.pop("return_tokens_as_token_ids", None)
            sampling["logprobs"] = False
        db = fresh_copy(self.data.db)
        user = ScriptedTau2User(task, self.toolset.write_tools) if o.user == "scripted" else Tau2User(task, o.user)
        traj = Trajectory(
            messages_and_choices=[
                {"role": "system", "content": self.system_prompt},
                {"role": "assistant", "content": GREETING},
                {"role": "user", "content": await user.reply(GREETING)},
            ],
            tools=self.tools(),
            metadata={"env": self.name, "task_id": str(task["id"]), "split": scenario.split},
        )

        calls: list[MadeCall] = []

        async def call_tool(name: str, arguments: str) -> tuple[str, bool]:
            text, error = self.call_tool(db, name, arguments)
            calls.append(MadeCall(name, arguments, text, error))
            return text, error

        # tau2 has no terminal tool (its transfer tool is not one) and stops at a reply cut by max_tokens too
        rules = Rules(
            stop_signals=STOP_SIGNALS,
            max_steps=o.max_steps,
            max_errors=o.max_errors,
            write_tools=self.toolset.write_tools,
        )
        episode = await run_episode(
            client, model, traj, sampling, extra_body, call_tool=call_tool, customer=user.reply, rules=rules
        )
        metrics, details = await score(
            task.get("evaluation_criteria"),
            self.gold(str(task["id"])),
            db,
            traj.messages(),
            terminated=episode.stop_reason == "user_stop",
            judge=o.judge,
        )
        # "task_reward", not "reward": a metric named reward would be averaged into the trajectory's own reward
        metrics["task_reward"] = metrics.pop("reward")
        criteria = task.get("evaluation_criteria") or {}
        metrics["progress"] = progress(
            criteria.get("actions"),
            self.toolset.write_tools,
            self.gold(str(task["id"])),
            calls,
            metrics["r_db"],
            details["communicate_checks"],
        )
        shaped = o.train_reward == "progress" and scenario.split == "train"
        traj.reward = metrics["progress"] if shaped else metrics["task_reward"]
        traj.metrics.update(metrics, turns=episode.turns, steps=episode.steps, **episode.counts())
        # metadata holds scalars only (it is stored in every rollout file): the checks behind the reward as JSON
        traj.metadata.update(stop_reason=episode.stop_reason, reward_details=json.dumps(details, default=str))
        return traj.finish()
