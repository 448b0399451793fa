"""ART's `art.mcp.types`: MCP tools and resources as ART describes them, and generated scenarios.

from art_core.mcp.types import GeneratedScenarioCollection, MCPTool
tool = MCPTool.from_dict({"name": "add", "description": "Adds.", "inputSchema": {"type": "object"}})
train, val = GeneratedScenarioCollection.from_dicts([{"task": "Add 2 and 3.", "difficulty": 1}] * 4).split(3)
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field

from art_core.rewards.accounting import JudgeUsage


@dataclass
class MCPTool:
    """One MCP tool as ART describes it: name, description, JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    @classmethod
    def from_dict(cls, data: Any) -> "MCPTool":
        """From a dict (`parameters`, or the MCP SDK's `input_schema` / 1.x `inputSchema`), or from an MCP SDK
        `Tool` object of either version as `session.list_tools()` returns it."""
        data = _fields(data, "name", "description", "parameters", "input_schema", "inputSchema")
        return cls(
            name=data.get("name", ""),
            description=data.get("description", ""),
            parameters=data.get("parameters") or data.get("input_schema") or data.get("inputSchema") or {},
        )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def _fields(data: Any, *names: str) -> dict[str, Any]:
    """A dict as is; an object (an MCP SDK model: mcp 1.x names `inputSchema`, 2.x `input_schema`) as the
    attributes of these names that it has."""
    if isinstance(data, dict):
        return data
    return {n: getattr(data, n) for n in names if getattr(data, n, None) is not None}


@dataclass
class MCPResource:
    """One MCP resource: URI, name, description, MIME type."""

    uri: str
    name: str
    description: str
    mime_type: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> "MCPResource":
        """From a dict (`mimeType` or `mime_type`), or from an MCP SDK `Resource` object of either version."""
        data = _fields(data, "uri", "name", "description", "mimeType", "mime_type")
        return cls(
            uri=str(data.get("uri") or ""),
            name=data.get("name", ""),
            description=data.get("description", ""),
            mime_type=data.get("mimeType") or data.get("mime_type"),
        )

    def to_dict(self) -> dict[str, Any]:
        out = {"uri": self.uri, "name": self.name, "description": self.description}
        if self.mime_type:
            out["mimeType"] = self.mime_type
        return out


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1)
    difficulty: int = Field(ge=1, le=5)


@dataclass
class GeneratedScenario:
    """One task for the agent, rated 1 (one tool call) to 5 (a long multi-step job)."""

    task: str
    difficulty: int

    def __post_init__(self) -> None:
        if not isinstance(self.difficulty, int) or not 1 <= self.difficulty <= 5:
            raise ValueError(f"difficulty must be an integer from 1 to 5, got {self.difficulty!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GeneratedScenario":
        return cls(task=data["task"], difficulty=data["difficulty"])

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "difficulty": self.difficulty}

    def preview(self, max_length: int = 120) -> str:
        return self.task if len(self.task) <= max_length else self.task[:max_length].strip() + "…"


@dataclass
class GeneratedScenarioCollection:
    """Scenarios with ART's helpers (split, filter, summary); `usage` is what generating them cost."""

    scenarios: list[GeneratedScenario]
    usage: JudgeUsage = field(default_factory=JudgeUsage)

    @classmethod
    def from_dicts(cls, data: list[dict[str, Any]]) -> "GeneratedScenarioCollection":
        return cls([GeneratedScenario.from_dict(d) for d in data])

    @classmethod
    def from_json(cls, text: str) -> "GeneratedScenarioCollection":
        data = json.loads(text)
        items = data["scenarios"] if isinstance(data, dict) else data
        usage = JudgeUsage(**data["usage"]) if isinstance(data, dict) and "usage" in data else JudgeUsage()
        return cls([GeneratedScenario.from_dict(d) for d in items], usage)

    def to_dicts(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.scenarios]

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps({"scenarios": self.to_dicts(), "usage": self.usage.model_dump()}, indent=indent)

    def __len__(self) -> int:
        return len(self.scenarios)

    def __iter__(self) -> Iterator[GeneratedScenario]:
        return iter(self.scenarios)

    def __getitem__(self, index: int) -> GeneratedScenario:
        return self.scenarios[index]

    def shuffle(self, seed: int | None = None) -> "GeneratedScenarioCollection":
        items = list(self.scenarios)
        random.Random(seed).shuffle(items)
        return GeneratedScenarioCollection(items, self.usage)

    def split(self, train_size: int) -> tuple["GeneratedScenarioCollection", "GeneratedScenarioCollection"]:
        if train_size > len(self.scenarios):
            raise ValueError(f"train_size ({train_size}) is larger than the {len(self.scenarios)} scenarios")
        return GeneratedScenarioCollection(self.scenarios[:train_size]), GeneratedScenarioCollection(
            self.scenarios[train_size:]
        )

    def filter_by_difficulty(self, min_difficulty: int = 1, max_difficulty: int = 5) -> "GeneratedScenarioCollection":
        return GeneratedScenarioCollection(
            [s for s in self.scenarios if min_difficulty <= s.difficulty <= max_difficulty]
        )

    def get_difficulty_distribution(self) -> Counter:
        return Counter(s.difficulty for s in self.scenarios)

    def get_summary(self) -> dict[str, Any]:
        n = len(self.scenarios) or 1
        return {
            "total_scenarios": len(self.scenarios),
            "difficulty_distribution": dict(self.get_difficulty_distribution()),
            "avg_difficulty": sum(s.difficulty for s in self.scenarios) / n if self.scenarios else 0,
            "avg_task_length": sum(len(s.task) for s in self.scenarios) / n if self.scenarios else 0,
        }


__all__ = ["GeneratedScenario", "GeneratedScenarioCollection", "MCPResource", "MCPTool"]
