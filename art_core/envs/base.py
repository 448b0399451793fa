"""The environment contract: scenarios in splits, tools as OpenAI function schemas, one rollout.

An environment is anything with these four things; subclassing `Environment` is the easy way:

    class EchoEnv(Environment):
        name = "echo"
        def scenarios(self, split): return [Scenario(id=f"{split}-{i}", data={"word": w}) ...]
        async def rollout(self, client, model, scenario, **sampling) -> Trajectory: ...

`load_environment(name, **options)` in `art_core.envs` returns one by name.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Literal, Sequence, TypeVar

from pydantic import AfterValidator, BaseModel, Field

from art_core.trajectories import Trajectory

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")


def _check_split_sizes(sizes: dict[str, int]) -> dict[str, int]:
    unknown = set(sizes) - set(SPLITS)
    if unknown or any(n < 0 for n in sizes.values()):
        raise ValueError(f"split_sizes takes sizes >= 0 for {', '.join(SPLITS)}; got {sizes}")
    return sizes


SplitSizes = Annotated[dict[str, int], AfterValidator(_check_split_sizes)]
"""How many scenarios each split holds, for environments whose options let a user choose."""


def turn_sampling(sampling: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a rollout's sampling options into (keyword arguments, extra_body) for one chat call a turn.

    `n` must be 1: a group is several rollouts, not several choices of one. Logprobs are always asked
    for, and vLLM is asked for the sampled token ids, because the trainer trains on exactly those.

    >>> turn_sampling({"temperature": 1.0, "logprobs": True})
    ({'temperature': 1.0}, {'return_tokens_as_token_ids': True})
    """
    sampling = dict(sampling)
    if sampling.pop("n", 1) != 1:
        raise ValueError("rollout samples one completion per turn; remove n (gather runs a group instead)")
    sampling.pop("logprobs", None)  # passed explicitly by every rollout
    extra_body = {"return_tokens_as_token_ids": True, **(sampling.pop("extra_body", None) or {})}
    return sampling, extra_body


def split_part(items: list, split: str, sizes: dict[str, int]) -> list:
    """The items of `split` when `items` hold the splits one after the other, train first, in `sizes`.

    >>> split_part(list("abcdef"), "val", {"train": 3, "val": 2, "test": 1})
    ['d', 'e']
    """
    start = 0
    for name in SPLITS:
        if name == split:
            return items[start : start + sizes.get(name, 0)]
        start += sizes.get(name, 0)
    raise ValueError(f"unknown split {split!r}: use one of {', '.join(SPLITS)}")


class Scenario(BaseModel):
    """One thing to do: an id unique within the environment and whatever the rollout needs."""

    id: str
    split: Split = "train"
    data: dict[str, Any] = Field(default_factory=dict)


class Environment:
    """Base class for environments. Override `scenarios` and `rollout`; `tools` if the agent has any."""

    name: str = "environment"

    def scenarios(self, split: Split) -> list[Scenario]:
        raise NotImplementedError

    @property
    def constrains_sampling(self) -> bool:
        """True when rollouts sample through a grammar (vLLM structured outputs). vLLM then reports
        logprobs after the grammar's mask, so such runs train with TrainConfig(old_logprobs="recompute")."""
        return False

    def tools(self) -> list[dict[str, Any]]:
        """OpenAI function schemas offered to the agent ([] when it has none)."""
        return []

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Run one episode against an `openai.AsyncOpenAI` client serving `model`; return it scored."""
        raise NotImplementedError

    def scenario_category(self, scenario: Scenario) -> str | None:
        """What a scenario asks of the agent, where the environment can tell: `write` (it must change the
        database), `refuse` (it must decline) or `answer` (it must only say something); None where it cannot.
        The evaluation reports reward and pass^k per category, since a do-nothing policy passes refusals."""
        return None

    def scenario_kind(self, scenario: Scenario) -> str | None:
        """A finer label than the category, where the environment can tell: for a task that needs a write, which
        writes (the customer-service environments: its gold write tools in order, "cancel_pending_order"). The
        evaluation reports pass^k per kind as well, so a model that gets returns right and exchanges never shows
        where it fails. None for scenarios without one (the default)."""
        return None

    def for_evaluation(self) -> "Environment":
        """The environment evaluations play: the same scenarios and rules, with any option that only shapes the
        training reward set back to its default, so an evaluation scores what it always scores (the library's
        `evaluate_model` and the pipeline's evaluate task both call it). Most environments return themselves."""
        return self

    def check_split(self, split: str) -> Split:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}: use one of {', '.join(SPLITS)}")
        return split  # type: ignore[return-value]


E = TypeVar("E", bound=Environment)


def without_train_only_options(env: E, train_only: Sequence[str], rebuild: Callable[..., E], share: Sequence[str]) -> E:
    """`env` as evaluations play it (`Environment.for_evaluation`): itself when none of the options `train_only`
    (those that shape only the training reward) was set, else `rebuild(**options)` without them, given the
    attributes named in `share` that `env` has built already (its data, tasks, gold replays)."""
    if not env.options.model_fields_set & set(train_only):
        return env
    evaluated = rebuild(**env.options.model_dump(exclude=set(train_only), exclude_unset=True))
    evaluated.__dict__.update({k: v for k, v in env.__dict__.items() if k in share})
    return evaluated
