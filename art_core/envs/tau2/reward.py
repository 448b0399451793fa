"""tau2's reward: the product of the components a task's `reward_basis` names, 0 for a run cut off.

- DB: the agent's final database hashes equal to the database after replaying the task's gold actions on a
  fresh copy. Gold actions that fail are skipped, as tau2 skips them (task 64's exchange on a pending order,
  the lookups with a wrong email that the gold lists hold on purpose).
- COMMUNICATE: each `communicate_info` string, lowercased, is in some assistant text with its commas removed.
- NL_ASSERTION: an LLM judge (any litellm model, temperature 0 by default) decides per assertion whether the
  conversation meets it (asked only when the other components pass: the reward is their product). The call is RULER's (`art_core.rewards.judge.ask_judge`): a strict JSON schema with
  one entry per assertion, checked, retried, cached under the storage root, costed. A failed judge call raises
  `JudgeError`; it never becomes a score.

`progress` is not tau2's: partial credit for GRPO's train rollouts, where the reward above is all or nothing
(`Tau2Options.train_reward="progress"`); evaluations never read it.

    >>> from art_core.envs.tau2.data import load_tau2_data
    >>> from art_core.envs.tau2.retail import TOOLS
    >>> data = load_tau2_data("retail")
    >>> gold = gold_replay(TOOLS, data.db, data.tasks["64"]["evaluation_criteria"]["actions"])
    >>> gold.failed                               # skipped, as tau2 skips it
    [('exchange_delivered_order_items', 'Error: Non-delivered order cannot be exchanged')]
    >>> communicate(["1234"], ["Your total is $1,234."])
    (1.0, [{'info': '1234', 'met': True}])
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from art_core.envs.customer_service.domain import MadeCall, hash_db
from art_core.envs.tool_use.tools import ToolFn, fresh_copy, run_tool
from art_core.rewards.accounting import JudgeUsage
from art_core.rewards.config import JudgeConfig

log = logging.getLogger(__name__)


@dataclass
class GoldReplay:
    """The database after the gold actions, its hash, and the gold actions that failed (skipped)."""

    db: dict[str, Any]
    hash: str
    failed: list[tuple[str, str]] = field(default_factory=list)  # (action name, error text)
    user_ids: frozenset[str] = frozenset()  # the customer's ids the gold actions name or look up


def needs_judge(task: dict[str, Any]) -> bool:
    """Whether the task's reward asks tau2's NL-assertion judge (an LLM) about the conversation."""
    criteria = task.get("evaluation_criteria") or {}
    return "NL_ASSERTION" in (criteria.get("reward_basis") or []) and bool(criteria.get("nl_assertions"))


def gold_replay(
    tools: dict[str, ToolFn], initial_db: dict[str, Any], actions: list[dict[str, Any]] | None
) -> GoldReplay:
    """Replay tau2 gold actions ({"name", "arguments"}) on a copy of `initial_db`, tolerating failures."""
    db = fresh_copy(initial_db)
    failed = []
    users = set()
    for action in actions or []:
        arguments = action.get("arguments") or {}
        text, error = run_tool(tools, db, action["name"], arguments)
        if error:
            failed.append((action["name"], text))
        if isinstance(arguments.get("user_id"), str):
            users.add(arguments["user_id"])
        if action["name"].startswith("find_user_id") and not error:
            users.add(text.strip())
    return GoldReplay(db=db, hash=hash_db(db), failed=failed, user_ids=frozenset(users))


def communicate(infos: list[str] | None, assistant_texts: list[str]) -> tuple[float, list[dict[str, Any]]]:
    """tau2's check: each info, lowercased, inside some lowercased assistant text whose commas are removed
    (the info keeps its own commas, so "$1,234" can never match: tau2's behaviour, kept)."""
    said = [t.lower().replace(",", "") for t in assistant_texts]
    checks = [{"info": info, "met": any(info.lower() in s for s in said)} for info in infos or []]
    return float(all(c["met"] for c in checks)), checks


def progress(
    actions: list[dict[str, Any]] | None,
    write_tools: frozenset[str],
    gold: GoldReplay,
    calls: list[MadeCall],
    r_db: float,
    communicated: list[dict[str, Any]],
) -> float:
    """Partial credit in [0, 1] for how far a run got, for GRPO's train rollouts where tau2's reward is all or
    nothing (a small model's groups that all score 0 teach nothing). The mean of, where the task has them:

    - finding the customer: a successful call whose result names a user id the gold actions use or look up;
    - the writes: the mean over the gold writes of 1 for a successful call to the same tool with the same
      arguments (lists compared as sets), halved when the final database still differs from the gold replay's;
      where the task wants no write, 1 when the database matches (nothing changed that should not have);
    - the facts: the fraction of `communicate_info` said (tau2's check, item by item).

    NL assertions are not part of it (they need an LLM judge, which a train rollout on a machine without one
    cannot ask).

    A run cut off still gets its credit (tau2's reward is 0 there); evaluation always reads tau2's reward.

    >>> g = GoldReplay(db={}, hash="h", user_ids=frozenset({"ava_1"}))
    >>> gold = [{"name": "cancel_pending_order", "arguments": {"order_id": "#W1", "reason": "no longer needed"}}]
    >>> calls = [MadeCall("find_user_id_by_email", '{"email": "a@x"}', "ava_1", False),
    ...          MadeCall("cancel_pending_order", '{"order_id": "#W1", "reason": "ordered by mistake"}', "{}", False)]
    >>> round(progress(gold, frozenset({"cancel_pending_order"}), g, calls, 0.0, []), 3)   # found; wrong write; no facts
    0.5
    """
    parts = []
    if gold.user_ids:
        parts.append(float(any(not c.error and any(u in c.result for u in gold.user_ids) for c in calls)))
    writes = [a for a in actions or [] if a["name"] in write_tools]
    if writes:
        made = [(c.name, _canonical(c.arguments)) for c in calls if not c.error and c.name in write_tools]
        credit = [float((a["name"], _canonical(a.get("arguments") or {})) in made) for a in writes]
        parts.append(sum(credit) / len(writes) * (1.0 if r_db == 1.0 else 0.5))
    else:
        parts.append(r_db)
    if communicated:
        parts.append(sum(c["met"] for c in communicated) / len(communicated))
    return sum(parts) / len(parts)


def _canonical(arguments: str | dict[str, Any]) -> str | None:
    """Arguments as comparable text: JSON with sorted keys and lists of scalars sorted; None when unreadable."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None

    def norm(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            items = [norm(x) for x in v]
            return sorted(items, key=json.dumps) if all(not isinstance(x, (dict, list)) for x in items) else items
        return v

    return json.dumps(norm(arguments), sort_keys=True)


NL_PROMPT = """You grade a customer-service conversation against a list of expected outcomes.
The conversation was recorded in a test run between an agent and a customer (tool calls and their results
included). For each expected outcome, decide on its own whether the agent's behaviour in the conversation
satisfies it. Give a short explanation first, then `met`: true if the outcome is satisfied, false if not.
Answer with one JSON entry per outcome id."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def assertion_reply_model(n: int) -> type[BaseModel]:
    """{assertion_1: {explanation, met}, ...}: exactly one entry per assertion sent, in a strict schema."""
    entry = create_model("AssertionVerdict", __base__=_Strict, explanation=(str, Field()), met=(bool, ...))
    return create_model(
        "NLAssertionVerdicts", __base__=_Strict, **{f"assertion_{i + 1}": (entry, ...) for i in range(n)}
    )


def transcript(messages: list[dict[str, Any]]) -> str:
    """The conversation as the judge reads it: one `role: content` line per message, tool calls as JSON."""
    lines = []
    for m in messages:
        if m["role"] == "system":
            continue
        content = m.get("content") or ""
        calls = m.get("tool_calls") or []
        if calls:
            content = (content + " " if content else "") + json.dumps(
                [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls]
            )
        lines.append(f"{m['role']}: {content}")
    return "\n".join(lines)


async def judge_assertions(
    assertions: list[str], messages: list[dict[str, Any]], judge: JudgeConfig | None
) -> tuple[list[dict[str, Any]], JudgeUsage]:
    """Ask the judge about each assertion; returns ([{assertion, met, explanation}], usage). Raises JudgeError."""
    from art_core.rewards.config import resolve_judge
    from art_core.rewards.judge import ask_judge

    ids = [f"assertion_{i + 1}" for i in range(len(assertions))]
    outcomes = "\n".join(f"{i}: {a}" for i, a in zip(ids, assertions))
    messages_out = [
        {"role": "system", "content": NL_PROMPT},
        {
            "role": "user",
            "content": f"<conversation>\n{transcript(messages)}\n</conversation>\n\n<expected_outcomes>\n{outcomes}\n</expected_outcomes>",
        },
    ]
    verdicts, usage = await ask_judge(
        resolve_judge(judge),
        messages_out,
        assertion_reply_model(len(assertions)),
        instructions=NL_PROMPT,
        call_defaults={"temperature": 0.0},  # tau2 judges at temperature 0
    )
    return [{"assertion": a, **verdicts[i]} for i, a in zip(ids, assertions)], usage


async def score(
    criteria: dict[str, Any] | None,
    gold: GoldReplay,
    final_db: dict[str, Any],
    messages: list[dict[str, Any]],
    *,
    terminated: bool,
    judge: JudgeConfig | None,
) -> tuple[dict[str, float], dict[str, Any]]:
    """(metrics, details) of one finished run. metrics["reward"] is tau2's reward; each component is there
    as r_db / r_communicate / r_nl_assertion (1.0 when the task's reward_basis leaves it out, as in tau2's
    breakdown), plus judge usage. `terminated` is False for a run cut off by its turn or token limit: its
    reward is 0, r_db and r_communicate are still reported, and the judge is not asked."""
    criteria = criteria or {}
    basis = criteria.get("reward_basis") or ["DB", "COMMUNICATE"]
    texts = [m["content"] for m in messages if m["role"] == "assistant" and m.get("content")]
    r_db = float(hash_db(final_db) == gold.hash)
    r_comm, comm_checks = communicate(criteria.get("communicate_info"), texts)
    metrics = {"r_db": r_db, "r_communicate": r_comm, "truncated": float(not terminated)}
    details: dict[str, Any] = {"reward_basis": basis, "communicate_checks": comm_checks, "gold_failures": gold.failed}
    if not terminated:  # tau2 scores a cut-off run 0 without asking the judge (which would cost money for nothing)
        metrics["reward"] = 0.0
        details["note"] = "cut off before the customer ended the conversation: reward 0"
        return metrics, details
    assertions = criteria.get("nl_assertions") or []
    others = {"DB": r_db, "COMMUNICATE": r_comm}
    if "NL_ASSERTION" in basis and assertions and any(others.get(b) == 0.0 for b in basis):
        # the reward is a product and already 0: no judge is paid for it (as for a cut-off run)
        metrics["reward"] = 0.0
        details["note"] = "the database or the communicated facts already fail: reward 0, the judge not asked"
        return metrics, details
    metrics["r_nl_assertion"] = 1.0
    if "NL_ASSERTION" in basis and assertions:
        verdicts, usage = await judge_assertions(assertions, messages, judge)
        metrics["r_nl_assertion"] = float(all(v["met"] for v in verdicts))
        metrics.update(usage.as_metrics(prefix="nl_judge_"))  # apart from RULER's judge_* group metrics
        details["nl_assertions"] = verdicts
    unknown = set(basis) - {"DB", "COMMUNICATE", "NL_ASSERTION"}
    if unknown:  # ACTION / ENV_ASSERTION: no retail or airline task uses them; refuse rather than ignore
        raise ValueError(f"reward_basis {sorted(unknown)} is not supported by the tau2 environments")
    parts = {"DB": r_db, "COMMUNICATE": r_comm, "NL_ASSERTION": metrics["r_nl_assertion"]}
    reward = 1.0
    for b in basis:
        reward *= parts[b]
    metrics["reward"] = reward
    return metrics, details
