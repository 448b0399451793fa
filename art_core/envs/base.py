"""The environment contract: scenarios in splits, tools as OpenAI function schemas, one rollout.

An environment is anything with these four things; subclassing `Environment` is the easy way:

    class EchoEnv(Environment):
        name = "echo"
        def scenarios(self, split): return [Scenario(id=f"{split}-{i}", data={"word": w}) ...]
        async def rollout(self, client, model, scenario, **sampling) -> Trajectory: ...

`load_environment(name, **options)` in `art_core.envs` returns one by name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from art_core.trajectories import Trajectory

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")


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

    def tools(self) -> list[dict[str, Any]]:
        """OpenAI function schemas offered to the agent ([] when it has none)."""
        return []

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Run one episode against an `openai.AsyncOpenAI` client serving `model`; return it scored."""
        raise NotImplementedError

    def check_split(self, split: str) -> Split:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}: use one of {', '.join(SPLITS)}")
        return split  # type: ignore[return-value]
