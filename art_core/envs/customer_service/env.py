"""A customer-service episode on any tau-style `Domain`: agent <-> tools <-> simulated customer, then a reward.

    >>> from art_core.envs.retail import RETAIL
    >>> env = CustomerServiceEnv(RETAIL, seed=0, user="scripted", max_turns=30)
    >>> scenario = env.scenarios("train")[0]
    >>> trajectory = await env.rollout(client, "my-model@3", scenario,       # doctest: +SKIP
    ...                                temperature=1.0, max_tokens=256)
    >>> trajectory.reward, trajectory.metrics["r_actions"], trajectory.metadata["task_id"]   # doctest: +SKIP

One episode (played by `art_core.envs.tool_use.episode.run_episode`): the system prompt is the domain's policy;
the customer speaks first; then each turn the agent model is called with the tools. Its tool calls run against
the episode's own copy of the database (results come back as `tool` messages; bad calls come back as error
text), and a plain reply goes to the customer. It ends when the customer writes STOP, the agent calls a terminal
tool (a transfer to a human), after `max_turns` agent turns, or when the conversation outgrows the model's
context (both cut-offs count as `truncated`, and the reward reads what was done by then). Each agent turn is
kept as the returned `Choice` (with its sampled token ids and logprobs): that is what the trainer trains on. The
reward is `domain.reward`: the final database against the gold replay, and the task's outputs against the plain
replies the customer saw (text that comes with tool calls is not shown to the customer).

`force_tool_calls=True` is for random-weight test models, which never write a tool call on their own:
each request carries a vLLM structured-outputs regex (`extra_body={"structured_outputs": {"regex": ...}}`,
vLLM >= 0.12's name for what was `guided_regex`) that only admits one Hermes-style call,
`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, of one of the offered tools, with short
bounded strings and lists. A server started with `--enable-auto-tool-choice --tool-call-parser hermes`
turns that text into real `tool_calls`; without a parser the episode parses it from the content itself.
A regex rather than `{"json": schema}` because it also bounds lengths and whitespace, so a random model
cannot ramble until `max_tokens` and cut its JSON in half. Every agent turn is then a tool call, so such an
episode ends by a terminal tool or `max_turns`. The longest forced retail call is at most 172 tokens on the tiny
test model: pass max_tokens=256 or more.
"""

from __future__ import annotations

from functools import cached_property, partial
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from art_core.envs.base import Environment, Scenario, Split, turn_sampling, without_train_only_options
from art_core.envs.customer_service.categories import scenario_category
from art_core.envs.customer_service.domain import Database, Domain, MadeCall, Task, hash_db, progress, replay, reward
from art_core.envs.customer_service.users import STOP, LLMUser, LLMUserSettings, ScriptedUser, User
from art_core.envs.tool_use.episode import Rules, run_episode
from art_core.envs.tool_use.forced_calls import tool_call_regex
from art_core.envs.tool_use.tools import fresh_copy
from art_core.trajectories import Trajectory


# Options that shape only the reward of training rollouts: evaluations play without them (`for_evaluation`, and
# `art_core.envs.evaluation_options` for a pipeline's cache key), so one evaluation serves every reward choice.
TRAIN_ONLY_OPTIONS = ("train_reward",)


class CustomerServiceOptions(BaseModel):
    """The options of `CustomerServiceEnv` (and of `load_environment("retail" | "airline", **options)`)."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 0  # picks the database and the tasks
    user: Literal["scripted", "llm"] | LLMUserSettings = "scripted"  # "llm" means LLMUserSettings() defaults
    max_turns: int = Field(default=30, ge=1)  # agent turns (model calls) before the episode is cut off
    force_tool_calls: bool = False  # constrain every agent turn to one well-formed tool call (vLLM only)
    user_patience: int = Field(default=3, ge=1)  # scripted user: unhelpful turns before it gives up
    # The reward of train-split rollouts: "task" (1 only when the task is done, what evaluation reads),
    # "progress" (partial credit, see `domain.progress`), "arguments" (progress with each write credited per
    # argument right), "safe_progress" (progress, but 0 for changing the database of a task that wants no
    # write) or "consented_progress" (safe_progress, with no write credit for an episode that wrote without the
    # customer's yes). Val and test rollouts always get the task reward.
    train_reward: Literal["task", "progress", "arguments", "safe_progress", "consented_progress"] = "task"


class CustomerServiceEnv(Environment):
    """The generic environment over a customer-service `Domain` (retail, airline, or your own)."""

    def __init__(self, domain: Domain, **options: Any) -> None:
        self.domain = domain
        self.name = domain.name
        self.options = CustomerServiceOptions(**options)
        self._gold_hashes: dict[str, str] = {}

    @cached_property
    def db(self) -> Database:
        """The initial database; every episode works on its own copy."""
        return self.domain.make_db(self.options.seed)

    @cached_property
    def tasks(self) -> dict[str, list[Task]]:
        return self.domain.make_tasks(self.db, self.options.seed)

    def gold_hash(self, task: Task) -> str:
        """`hash_db` of the task's gold replay on the initial database, computed once per task."""
        if task.id not in self._gold_hashes:
            self._gold_hashes[task.id] = hash_db(replay(self.domain, self.db, task.actions))
        return self._gold_hashes[task.id]

    @property
    def constrains_sampling(self) -> bool:
        return self.options.force_tool_calls

    def for_evaluation(self) -> CustomerServiceEnv:
        """This environment without its TRAIN_ONLY_OPTIONS (train_reward back to "task": the task reward on every
        split); it shares the database and tasks already built."""
        rebuild = partial(CustomerServiceEnv, self.domain)
        return without_train_only_options(self, TRAIN_ONLY_OPTIONS, rebuild, ("db", "tasks", "_gold_hashes"))

    def scenarios(self, split: Split) -> list[Scenario]:
        split = self.check_split(split)
        return [Scenario(id=t.id, split=split, data={"task": t.model_dump()}) for t in self.tasks[split]]

    def tools(self) -> list[dict[str, Any]]:
        return self.domain.tool_schemas

    def scenario_category(self, scenario: Scenario) -> str:
        """`write` / `refuse` / `answer` from the task's gold actions and outputs (see `categories`)."""
        return scenario_category(scenario)

    def scenario_kind(self, scenario: Scenario) -> str | None:
        """For a task that needs a write, its gold write tools in order ("return_delivered_order_items", or
        "cancel_pending_order + cancel_pending_order" for two requests); None for refusals and answers."""
        task = Task.model_validate(scenario.data["task"])
        writes = [a.name for a in task.actions if a.name in self.domain.write_tools]
        return " + ".join(writes) or None

    def make_user(self, task: Task) -> User:
        user = self.options.user
        if user == "scripted":
            return ScriptedUser(task, patience=self.options.user_patience)
        return LLMUser(task, LLMUserSettings() if user == "llm" else user)

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Play one episode of `scenario` with `model` served by `client` (an `openai.AsyncOpenAI`)."""
        sampling, extra_body = turn_sampling(sampling)
        task = Task.model_validate(scenario.data["task"])
        db = fresh_copy(self.db)
        user = self.make_user(task)
        tools = self.tools()
        if self.options.force_tool_calls:
            extra_body["structured_outputs"] = {"regex": tool_call_regex(tools)}
        traj = Trajectory(
            messages_and_choices=[
                {"role": "system", "content": self.domain.policy},
                {"role": "user", "content": await user.opening()},
            ],
            tools=tools,
            metadata={"env": self.name, "task_id": task.id, "split": scenario.split, "seed": self.options.seed},
        )

        calls: list[MadeCall] = []

        async def call_tool(name: str, arguments: str) -> tuple[str, bool]:
            text, error = self.domain.run(db, name, arguments)
            calls.append(MadeCall(name, arguments, text, error))
            return text, error

        rules = Rules(
            stop_signals=(STOP,),
            max_turns=self.options.max_turns,
            stop_at_length=False,  # a reply cut by max_tokens still goes to the customer (forced calls are bounded)
            terminal_tools=self.domain.terminal_tools,
            write_tools=self.domain.write_tools,
        )
        episode = await run_episode(
            client, model, traj, sampling, extra_body, call_tool=call_tool, customer=user.reply, rules=rules
        )
        scores = reward(self.domain, self.db, db, task, episode.said, gold_hash=self.gold_hash(task))
        # "task_reward", not "reward": a metric named reward would be averaged into the trajectory's own reward
        # by the gather's progress line and the history
        scores["task_reward"] = scores.pop("reward")
        exact = scores["r_actions"] == 1.0
        scores["progress"] = progress(self.domain, task, calls, episode.said, exact=exact)
        scores["argument_progress"] = progress(self.domain, task, calls, episode.said, exact=exact, per_argument=True)
        scores["safe_progress"] = progress(self.domain, task, calls, episode.said, exact=exact, no_harm=True)
        unasked = episode.writes_without_yes > 0
        scores["consented_progress"] = progress(
            self.domain, task, calls, episode.said, exact=exact, no_harm=True, unasked=unasked
        )
        shaped = {
            "progress": "progress",
            "arguments": "argument_progress",
            "safe_progress": "safe_progress",
            "consented_progress": "consented_progress",
        }.get(self.options.train_reward)
        traj.reward = scores[shaped] if shaped and scenario.split == "train" else scores["task_reward"]
        traj.metrics.update(
            scores,
            turns=episode.turns,
            truncated=episode.stop_reason in ("max_turns", "context_full"),
            **episode.counts(),
        )
        traj.metadata["stop_reason"] = episode.stop_reason
        return traj.finish()
