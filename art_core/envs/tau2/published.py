"""Published tau2-bench figures to read our pass^k next to, and the markdown section that shows them.

pass^1 and pass^4 in %, per domain, from tau2-bench's leaderboard submissions
(github.com/sierra-research/tau2-bench, web/leaderboard/public/submissions/*/submission.json, read at a2c0247).
They were measured on the `base` split (114 retail / 50 airline tasks), 4 trials, with the user model named;
the v0.1.3 rows on the first release's task files, which tau2 1.0 rewrote (gold actions changed in 10 retail
and 12 airline tasks), so they are a reference, not a target for the 1.0 files the `[tau2]` extra ships.

    >>> REFERENCE["retail"][0].model, REFERENCE["retail"][0].pass_1
    ('GPT-4.1', 74.0)
    >>> print(reference_markdown("tau2-retail", {}, {"temperature": 0.0, "max_tokens": 2048},
    ...                          split="test", scenarios=40, trials=4))
    ## Published tau2-bench retail figures (pass^k, %)
    <BLANKLINE>
    | model | pass^1 | pass^4 | user model | tau2 tasks |
    |---|---|---|---|---|
    | GPT-4.1 | 74.0 | 52.3 | gpt-4.1 | v0.1.3 |
    | GPT-4.1-mini | 61.4 | 36.9 | gpt-4.1 | v0.1.3 |
    | o4-mini | 68.3 | 46.8 | gpt-4.1 | v0.1.3 |
    | Claude-3.7-Sonnet | 72.1 | 59.7 | gpt-4.1 | v0.1.3 |
    | GPT-5 | 81.6 | 58.8 | gpt-4.1 | v0.1.3 |
    | Claude Opus 4.5 | 79.6 |  | gpt-5.2 (low reasoning) | 1.0.1 |
    | GPT-5.2 (reasoning none) | 75.0 |  | gpt-5.2 (low reasoning) | 1.0.1 |
    <BLANKLINE>
    Source: tau2-bench leaderboard, ... Measured on all tasks, 4 trials, temperature 0. This run uses tau2's 1.0 ...
    <BLANKLINE>
    This run departs from tau2's protocol: the test split, 40 tasks (the leaderboard: all 114).
    <BLANKLINE>
"""

from __future__ import annotations

from typing import Any, NamedTuple

SOURCE = (
    "tau2-bench leaderboard, web/leaderboard/public/submissions/*/submission.json (sierra-research/tau2-bench a2c0247)"
)


class Published(NamedTuple):
    model: str
    pass_1: float
    pass_4: float | None
    user_model: str
    tasks: str  # tau2 task-file version the figure was measured on


_V013 = ("gpt-4.1", "v0.1.3")
_V101 = ("gpt-5.2 (low reasoning)", "1.0.1")
REFERENCE: dict[str, list[Published]] = {
    "retail": [
        Published("GPT-4.1", 74.0, 52.3, *_V013),
        Published("GPT-4.1-mini", 61.4, 36.9, *_V013),
        Published("o4-mini", 68.3, 46.8, *_V013),
        Published("Claude-3.7-Sonnet", 72.1, 59.7, *_V013),
        Published("GPT-5", 81.6, 58.8, *_V013),
        Published("Claude Opus 4.5", 79.6, None, *_V101),
        Published("GPT-5.2 (reasoning none)", 75.0, None, *_V101),
    ],
    "airline": [
        Published("GPT-4.1", 56.0, 38.1, *_V013),
        Published("GPT-4.1-mini", 48.7, 27.8, *_V013),
        Published("o4-mini", 52.1, 34.7, *_V013),
        Published("Claude-3.7-Sonnet", 64.2, 52.1, *_V013),
        Published("GPT-5", 62.5, 48.0, *_V013),
        Published("Claude Opus 4.5", 84.0, None, *_V101),
        Published("GPT-5.2 (reasoning none)", 52.5, None, *_V101),
    ],
}
DOMAINS = {"tau2-retail": "retail", "tau2-airline": "airline"}


def reference_markdown(
    env_name: str, options: dict[str, Any], sampling: dict[str, Any], *, split: str, scenarios: int, trials: int
) -> str | None:
    """The "how does this compare" section of an evaluation report, or None for a non-tau2 environment.

    It lists the published rows and says where this run departs from tau2's protocol, so a reader knows
    whether the numbers above it may be put side by side with them.
    """
    domain = DOMAINS.get(env_name)
    if domain is None:
        return None
    from art_core.envs.tau2.env import Tau2Protocol

    p = Tau2Protocol()
    scripted = options.get("user") == "scripted"
    user = (options.get("user") or {}).get("model") if isinstance(options.get("user"), dict) else None
    judge = (options.get("judge") or {}).get("model") if isinstance(options.get("judge"), dict) else None
    tasks = "all" if options.get("eval_tasks") == "base" and split in ("test", "val") else split
    departures = []
    if sampling.get("temperature") != p.temperature:
        departures.append(f"agent temperature {sampling.get('temperature')} (tau2: {p.temperature})")
    if (sampling.get("max_tokens") or 0) < p.max_tokens:
        departures.append(
            f"max_tokens {sampling.get('max_tokens')} (recommended: {p.max_tokens}; fewer cuts tool calls, and a cut run scores 0)"
        )
    if options.get("max_steps", p.max_steps) != p.max_steps:
        departures.append(f"max_steps {options.get('max_steps')} (tau2: {p.max_steps})")
    if tasks != "all":
        departures.append(
            f"the {tasks} split, {scenarios} tasks (the leaderboard: all {114 if domain == 'retail' else 50})"
        )
    if trials != p.trials:
        departures.append(f"{trials} trials (the leaderboard: {p.trials})")
    if options.get("force_tool_calls"):
        departures.append("forced tool calls (a test setting)")
    if scripted:
        from art_core.envs.tau2.customer import DEVIATION

        departures.append(DEVIATION)
    if user is not None and user != p.user_model:
        departures.append(f"user model {user} (v0.1.3 rows: {p.user_model})")
    if domain == "retail" and judge is not None and judge != p.judge_model:
        departures.append(f"NL-assertion judge {judge} (tau2: {p.judge_model})")
    lines = [
        f"## Published tau2-bench {domain} figures (pass^k, %)",
        "",
        "| model | pass^1 | pass^4 | user model | tau2 tasks |",
        "|---|---|---|---|---|",
    ]
    for r in REFERENCE[domain]:
        lines.append(
            f"| {r.model} | {r.pass_1:.1f} | {'' if r.pass_4 is None else f'{r.pass_4:.1f}'} | {r.user_model} | {r.tasks} |"
        )
    lines += [
        "",
        f"Source: {SOURCE}. Measured on all tasks, 4 trials, temperature 0. This run uses tau2's 1.0 task files; "
        "the v0.1.3 rows predate them (scores on the two are not strictly comparable).",
        "",
        ("This run departs from tau2's protocol: " + "; ".join(departures) + ".")
        if departures
        else "This run follows tau2's protocol.",
    ]
    return "\n".join(lines) + "\n"
