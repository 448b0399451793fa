"""What judging cost: calls, cache hits, retries, tokens and dollars, summed into a group's metrics.

Dollars come from litellm's price map, loaded from the copy inside the litellm package (never fetched):
a model the map does not know (a self-hosted vLLM judge) costs 0.0 and `cost_known` says so.

    >>> u = JudgeUsage(calls=1, prompt_tokens=900, completion_tokens=120, cost_usd=0.002)
    >>> (u + JudgeUsage(cache_hits=1)).as_metrics()["judge_cache_hits"]
    1.0
"""

from __future__ import annotations

import logging
import os
from typing import Any

from pydantic import BaseModel

log = logging.getLogger(__name__)


def import_litellm():
    """litellm, imported with the bundled price map so importing it never reaches for the network."""
    # litellm reads this once, at import time; a user who set it either way keeps their choice.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True  # our errors say what to fix; litellm's banner adds nothing
    return litellm


class JudgeUsage(BaseModel):
    """Judge calls behind one or more groups. Add two with `+`; `as_metrics()` for group.metrics."""

    calls: int = 0  # HTTP requests that returned a reply (retries included)
    cache_hits: int = 0  # judge calls answered from the cache, paying nothing
    retries: int = 0  # attempts beyond the first, whatever failed
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True  # False once any call's model was missing from litellm's price map

    def __add__(self, other: "JudgeUsage") -> "JudgeUsage":
        return JudgeUsage(
            calls=self.calls + other.calls,
            cache_hits=self.cache_hits + other.cache_hits,
            retries=self.retries + other.retries,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            cost_known=self.cost_known and other.cost_known,
        )

    def as_metrics(self, prefix: str = "judge_") -> dict[str, float]:
        """Float metrics, e.g. judge_prompt_tokens, judge_cost_usd (TrajectoryGroup.metrics holds floats)."""
        return {
            f"{prefix}calls": float(self.calls),
            f"{prefix}cache_hits": float(self.cache_hits),
            f"{prefix}retries": float(self.retries),
            f"{prefix}prompt_tokens": float(self.prompt_tokens),
            f"{prefix}completion_tokens": float(self.completion_tokens),
            f"{prefix}cost_usd": float(self.cost_usd),
        }


def usage_of(response: Any, judge_model: str) -> JudgeUsage:
    """Tokens and cost of one litellm response (a reply that was received, valid or not)."""
    litellm = import_litellm()
    usage = getattr(response, "usage", None)
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion = int(getattr(usage, "completion_tokens", 0) or 0)
    try:
        cost = float(litellm.completion_cost(completion_response=response, model=judge_model))
        known = True
    except Exception as exc:  # litellm raises for models missing from its price map
        log.debug("no price for judge model %s in litellm's map: %s", judge_model, exc)
        cost, known = 0.0, False
    return JudgeUsage(calls=1, prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost, cost_known=known)
