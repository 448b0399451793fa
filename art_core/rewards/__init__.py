"""Rewards: RULER, an LLM judge that scores a group's trajectories relative to each other.

    from art_core.rewards import ruler_score_group
    scored = await ruler_score_group(group, "openai/o4-mini")

litellm is imported only when a judge is called, so importing this package stays light.
"""

from __future__ import annotations

from art_core.rewards.accounting import JudgeUsage
from art_core.rewards.config import DEFAULT_RUBRIC, JudgeConfig, ResolvedJudge, resolve_judge
from art_core.rewards.judge import JudgeError
from art_core.rewards.ruler import (
    RulerConfig,
    RulerResult,
    TrajectoryScore,
    combine_reward,
    judge_trajectories,
    ruler,
    ruler_score_group,
)

__all__ = [
    "DEFAULT_RUBRIC",
    "JudgeConfig",
    "JudgeError",
    "JudgeUsage",
    "RulerConfig",
    "ResolvedJudge",
    "RulerResult",
    "TrajectoryScore",
    "combine_reward",
    "judge_trajectories",
    "resolve_judge",
    "ruler",
    "ruler_score_group",
]
