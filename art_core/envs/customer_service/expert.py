"""Expert demonstrations for the customer-service domains, as SFT data: each scenario played by the domain's
expert policy (code, not an LLM; `art_core.envs.retail.expert`, `art_core.envs.airline.expert`) through the
environment's own rollout, its tools and its scripted customer, kept only where the environment scores it 1.0.

    python -m art_core.envs.customer_service.expert --domain retail --out demos.jsonl [--never-acts]
    >>> demos = build_demonstrations("retail", split="train", limit=30)   # all 600 kept, in about 30 s
    >>> len(demos.rows), demos.skip_counts()     # demonstrated, and why the others were skipped
    (30, {})
    >>> demos.write_jsonl("demos.jsonl")         # {"messages", "tools", "task_id", "category"} a line  # doctest: +SKIP
    >>> await backend.train_sft(model, read_sft_file("demos.jsonl"), config)   # doctest: +SKIP

Each line is one conversation in OpenAI chat format with the domain's tools, the format `art_core.sft` reads; the
customer's closing message (the one that ends the episode) is left off, so the last message is the agent's.

The expert may say or use only what the conversation has shown: `unrevealed_values` checks that every value of
every tool call, and every id the expert writes, appeared earlier in a customer message or a tool result (a
model trained on invented ids would learn to invent them). A demonstration that fails the check is a bug, and
building raises. A scenario the expert cannot play within its rules is skipped and counted with its reason.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from art_core.envs.base import Scenario, Split
from art_core.envs.customer_service.categories import scenario_category
from art_core.envs.customer_service.policies import (
    CannotDemonstrate,
    Policy,
    ReplayClient,
    never_acts,
    play_policy,
    rewards_by_category,
)
from art_core.trajectories import Trajectory

EXPERTS = {"retail": "art_core.envs.retail.expert", "airline": "art_core.envs.airline.expert"}
MAX_TURNS = 30  # the environment's default; the longest expert conversation takes 14 agent turns


def expert_policy(domain: str) -> Policy:
    """The expert of a shipped domain ("retail" or "airline")."""
    if domain not in EXPERTS:
        raise ValueError(f"no expert for {domain!r}: use one of {', '.join(EXPERTS)}")
    return importlib.import_module(EXPERTS[domain]).play


# what a domain's demonstrations depend on besides its own package: the episode loop, the scripted customer, tool
# plumbing, and tau2's calculator (the airline's `calculate`)
_SHARED_SOURCES = ("customer_service", "tool_use", "tau2/toolkit.py")


def expert_fingerprint(domain: str) -> str:
    """A digest of the code and text a domain's demonstrations come from (its package: expert, tools, scenarios,
    policy; the shared episode loop and customer). Another digest means other demonstrations: the pipeline's
    cached demonstrations are keyed on it, so editing an expert or a tool is never answered with the old file.
    (`art_core.envs.experts.expert_fingerprint` covers tau2's too.)

    >>> expert_fingerprint("airline")   # 12 hex digits  # doctest: +SKIP
    """
    if domain not in EXPERTS:
        raise ValueError(f"no expert for {domain!r}: use one of {', '.join(EXPERTS)}")
    return shared_digest(domain)


def shared_digest(package: str) -> str:
    """source_digest of art_core.envs' `package` folder with the sources every expert's episodes share."""
    from art_core.envs import source_digest

    envs = Path(__file__).resolve().parent.parent
    return source_digest([envs / part for part in (package, *_SHARED_SOURCES)], envs)


def load_env(domain: str, seed: int = 0) -> Any:
    """The domain's environment with the scripted customer, as the demonstrations are played."""
    from art_core.envs import load_environment

    return load_environment(domain, seed=seed, user="scripted", max_turns=MAX_TURNS)


# ---- what the conversation has shown ----

_ID = re.compile(r"#?[A-Za-z0-9_\-]*\d[A-Za-z0-9_\-]*")


def _id_like(token: str) -> bool:
    """Ids and dates: "#W1234567", "credit_card_1234567", "AX308", "2025-06-21", "6814982523"; not amounts."""
    has_letter = any(c.isalpha() or c in "#_" for c in token)
    return (
        (has_letter and len(token) >= 4)
        or (token.isdigit() and len(token) >= 7)
        or bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", token))
    )


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _enums(tools: list[dict[str, Any]]) -> set[str]:
    """Values a tool schema itself offers (cabin, flight_type, insurance, ...)."""
    out: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            out.update(str(v).lower() for v in node.get("enum", []))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(tools)
    return out


_MONTHS = "january february march april may june july august september october november december".split()


def spoken_date(value: str) -> str | None:
    """How a customer says an ISO date: '2024-05-20' -> 'may 20'; None for anything else."""
    m = re.fullmatch(r"\d{4}-(\d\d)-(\d\d)", value)
    return f"{_MONTHS[int(m.group(1)) - 1]} {int(m.group(2))}" if m and 1 <= int(m.group(1)) <= 12 else None


def unrevealed_values(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, free_text: tuple[str, ...] = ()
) -> list[str]:
    """What the assistant used before the conversation showed it; [] for an honest conversation.

    - each string argument of a tool call must appear in an earlier customer message or tool result (or be a value
      the tool's schema enumerates; an ISO date also counts as shown when its month and day were, "May 20": the
      year is the policy's); arguments named in `free_text` (a transfer's summary) are the agent's own words,
      checked like its messages;
    - each number argument must appear in an earlier message of any role: amounts the agent computes (a total, a
      bag count) are shown to the customer, with their sums, in the proposal they say yes to; so must each number
      of a `calculate` expression (the result then comes back as a tool result);
    - each id or date the assistant writes to the customer must appear in an earlier customer message or tool result.

    >>> unrevealed_values([{"role": "user", "content": "Order #W11 please"},
    ...                    {"role": "assistant", "content": "Order #W22 is pending."}])
    ["message 1 writes '#W22', never shown before"]
    """
    shown = ""  # what customers and tools said so far, lowercased
    everything = ""  # ... and what the assistant said
    enums = _enums(tools or [])
    problems = []
    for i, m in enumerate(messages):
        content = m.get("content") or ""
        if m["role"] == "assistant":
            for tc in m.get("tool_calls") or []:
                arguments = json.loads(tc["function"]["arguments"])
                if tc["function"]["name"] == "calculate":  # its operands, not the expression, come from before
                    for number in re.findall(r"\d+(?:\.\d+)?", str(arguments.pop("expression", ""))):
                        if number not in everything:
                            problems.append(f"message {i} calculates with {number}, never shown before")
                for key in free_text:
                    for token in _ID.findall(str(arguments.pop(key, "") or "")):
                        if _id_like(token) and token.lower() not in shown:
                            problems.append(f"message {i} writes {token!r} in {key}, never shown before")
                for v in _leaves(arguments):
                    if isinstance(v, bool) or v is None or v == "":
                        continue
                    if isinstance(v, (int, float)):
                        if not any(s in everything for s in {str(v), f"{v:g}", f"{v:.2f}"}):
                            problems.append(f"message {i} calls {tc['function']['name']} with {v}, never shown before")
                    elif str(v).lower() not in shown and str(v).lower() not in enums and not _spoken(v, shown):
                        problems.append(f"message {i} calls {tc['function']['name']} with {v!r}, never shown before")
            for token in _ID.findall(content):
                if _id_like(token) and token.lower() not in shown:
                    problems.append(f"message {i} writes {token!r}, never shown before")
        elif m["role"] in ("user", "tool"):
            shown += "\n" + content.lower()
        everything += "\n" + content.lower()
    return problems


def _spoken(value: Any, shown: str) -> bool:
    said = spoken_date(str(value))
    return said is not None and said in shown


# ---- building and replaying ----


@dataclass
class Demonstrations:
    """The demonstrations of one domain's split: one SFT row per scenario demonstrated, and why others were not."""

    domain: str
    split: str
    rows: list[dict[str, Any]] = field(default_factory=list)  # {"messages", "tools", "task_id", "category"}
    skipped: dict[str, str] = field(default_factory=dict)  # task id -> reason

    def skip_counts(self) -> dict[str, int]:
        """How many scenarios were skipped for each reason (the reason's first clause)."""
        return dict(Counter(reason.split(":")[0] for reason in self.skipped.values()).most_common())

    def write_jsonl(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(row) + "\n" for row in self.rows))
        return path

    def summary(self) -> str:
        total = len(self.rows) + len(self.skipped)
        by_cat = Counter(r["category"] for r in self.rows)
        lines = [
            f"{self.domain} {self.split}: {len(self.rows)} of {total} scenarios demonstrated "
            f"({', '.join(f'{c} {n}' for c, n in sorted(by_cat.items()))})"
        ]
        lines += [f"  skipped {n}: {reason}" for reason, n in self.skip_counts().items()]
        return "\n".join(lines)


def demonstration_row(trajectory: Trajectory, scenario: Scenario, category: str | None = None) -> dict[str, Any]:
    """One SFT row from a scored expert episode: the conversation without the customer's closing message.
    `category`: the environment's `scenario_category` (default: the generated domains' categories)."""
    messages = trajectory.messages()
    while messages and messages[-1]["role"] != "assistant":
        messages = messages[:-1]
    return {
        "messages": messages,
        "tools": trajectory.tools,
        "task_id": scenario.id,
        "category": category or scenario_category(scenario),
    }


def build_demonstrations(
    domain: str, split: Split = "train", *, seed: int = 0, limit: int | None = None, out: str | Path | None = None
) -> Demonstrations:
    """Play every scenario of `split` (the first `limit`) with the domain's expert; keep the ones scored 1.0.

    Raises if a kept demonstration uses a value the conversation had not shown (a bug in the expert). A scenario
    the expert declines (`CannotDemonstrate`) or plays to a reward below 1.0 is skipped with its reason.

    >>> demos = build_demonstrations("airline", limit=20, out="airline.jsonl")     # doctest: +SKIP
    >>> print(demos.summary())                                                     # doctest: +SKIP
    """
    env = load_env(domain, seed)
    scenarios = env.scenarios(split)[:limit]
    demos = Demonstrations(domain, split)
    for scenario, result in zip(scenarios, play_policy(env, scenarios, expert_policy(domain))):
        if isinstance(result, CannotDemonstrate):
            demos.skipped[scenario.id] = str(result)
            continue
        if result.reward != 1.0:
            demos.skipped[scenario.id] = (
                f"the environment scored the expert {result.reward} (r_actions {result.metrics['r_actions']}, "
                f"r_outputs {result.metrics['r_outputs']}, ended by {result.metadata['stop_reason']})"
            )
            continue
        row = demonstration_row(result, scenario)
        if problems := unrevealed_values(row["messages"], row["tools"]):
            raise AssertionError(f"the expert used values the conversation had not shown in {scenario.id}: {problems}")
        demos.rows.append(row)
    if out is not None:
        demos.write_jsonl(out)
    return demos


def replay_demonstration(env: Any, scenario: Scenario, messages: list[dict[str, Any]]) -> Trajectory:
    """Play a recorded demonstration's agent turns again through `env.rollout`; the scored trajectory.
    Raises `ValueError` where the tools or the customer answer differently from the recording."""
    return asyncio.run(env.rollout(ReplayClient(messages), "replay", scenario))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", choices=sorted(EXPERTS), required=True)
    parser.add_argument("--split", default="train", choices=["train", "val", "test"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None, help="only the first N scenarios")
    parser.add_argument("--out", required=True, help="the JSONL file to write")
    parser.add_argument("--never-acts", action="store_true", help="also print the never-acts baseline per category")
    args = parser.parse_args(argv)
    demos = build_demonstrations(args.domain, args.split, seed=args.seed, limit=args.limit, out=args.out)
    print(demos.summary())
    print(f"wrote {len(demos.rows)} conversations to {args.out}")
    if args.never_acts:
        env = load_env(args.domain, args.seed)
        rewards = rewards_by_category(env, env.scenarios(args.split)[: args.limit], never_acts)
        print("never-acts reward per category: " + ", ".join(f"{c} {r:.3f}" for c, r in rewards.items()))


if __name__ == "__main__":
    main()
