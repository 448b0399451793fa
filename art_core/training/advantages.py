"""Group-relative advantages for GRPO: each trajectory's reward against its group's mean.

    >>> group_advantages([1.0, 0.0, 0.0, 1.0])                 # mean 0.5, population std 0.5
    [0.999998000004, -0.999998000004, -0.999998000004, 0.999998000004]
    >>> group_advantages([1.0, 0.0, 0.0, 1.0], scale_by_std=False)
    [0.5, -0.5, -0.5, 0.5]
    >>> group_advantages([0.7, 0.7, 0.7]) is None               # no signal: the group is skipped
    True

Defaults follow ART: (r - mean) / (std + 1e-6) with the population std; prime-rl and Dr.GRPO leave
out the division (`scale_rewards=False`). A group whose rewards span no more than `tolerance` carries
no signal (SkyRL's zero-variance filter, tolerance 1e-6, so float judge scores count as equal too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def group_advantages(
    rewards: list[float], *, scale_by_std: bool = True, std_epsilon: float = 1e-6, tolerance: float = 1e-6
) -> list[float] | None:
    """Advantages of one group, or None when its rewards are all equal within `tolerance`."""
    if not rewards:
        return None
    if max(rewards) - min(rewards) <= tolerance:
        return None
    mean = sum(rewards) / len(rewards)
    centred = [r - mean for r in rewards]
    if not scale_by_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / len(centred))
    return [c / (std + std_epsilon) for c in centred]


@dataclass
class StepAdvantages:
    """Advantages for a step's groups: per group a list (aligned with its trajectories) or None if skipped."""

    per_group: list[list[float] | None]
    skipped_groups: int = 0
    skipped_reasons: list[str] = field(default_factory=list)


def step_advantages(
    rewards_per_group: list[list[float]],
    *,
    scale_by_std: bool = True,
    std_epsilon: float = 1e-6,
    tolerance: float = 1e-6,
) -> StepAdvantages:
    """Advantages for every group of a step, counting (and saying why) groups that carry no signal.

    >>> out = step_advantages([[1.0, 0.0], [0.5, 0.5]], scale_by_std=False)
    >>> out.per_group, out.skipped_groups
    ([[0.5, -0.5], None], 1)
    """
    result = StepAdvantages(per_group=[])
    for gi, rewards in enumerate(rewards_per_group):
        adv = group_advantages(rewards, scale_by_std=scale_by_std, std_epsilon=std_epsilon, tolerance=tolerance)
        if adv is None:
            result.skipped_groups += 1
            if len(rewards) < 2:
                why = f"group {gi} has {len(rewards)} usable trajectory; GRPO compares at least 2"
            else:
                why = f"group {gi}: all {len(rewards)} rewards equal ({rewards[0]:.4g}) within {tolerance:g}"
            result.skipped_reasons.append(why)
        result.per_group.append(adv)
    return result


def balance_advantages(advantages: list[float] | None, balance: float) -> list[float] | None:
    """ART's advantage_balance in [-1, 1]: b > 0 scales negative advantages by 1 - b, b < 0 positive ones by 1 + b.

    >>> balance_advantages([1.0, -1.0], 0.75)
    [1.0, -0.25]
    >>> balance_advantages([1.0, -1.0], -1.0)     # only negative advantages remain
    [0.0, -1.0]
    """
    if advantages is None or balance == 0:
        return advantages
    if balance > 0:
        return [a if a > 0 else a * (1 - balance) for a in advantages]
    return [a if a < 0 else a * (1 + balance) for a in advantages]
